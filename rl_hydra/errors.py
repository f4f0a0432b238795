"""The package's one error for a value that cannot work (a leaf module: importing it loads nothing else)."""


class ConfigError(ValueError):
    """A config value, command argument or recorded value that cannot work; the message is one
    user-facing line naming it and what is allowed (the CLI prints it and exits with status 2).

    A key's type, range, choices and rules across keys are the schema's (rl_hydra/schema), checked once
    at the launch. Elsewhere only its kinds below are raised, each by a check that needs what the schema
    cannot see: the env as made (EnvMismatch), the classes a config names (ClassMismatch), what is
    installed or registered (NotInstalled), the machine or a Ray cluster (MachineLimit), a command's
    own arguments (BadArgument). tests/config/test_error_kinds.py keeps it so."""


class EnvMismatch(ConfigError):
    """The env as made (its spaces, constructor, info or time limit) does not fit an algo, network, buffer, wrapper."""


class ClassMismatch(ConfigError):
    """A class the config names (a `_target_`) cannot be imported or built, or does not fit the others named."""


class NotInstalled(ConfigError):
    """A package, an install extra, or an env id's module or registration is not installed in this environment."""


class MachineLimit(ConfigError):
    """The machine does not hold what the config asks: its device, memory or CPUs, or a Ray cluster."""


class BadArgument(ConfigError):
    """A command's own arguments (flags, overrides, the run directory or file it is given) do not parse or fit it."""
