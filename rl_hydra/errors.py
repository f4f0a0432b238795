"""The package's one error for a value that cannot work (a leaf module: importing it loads nothing else)."""


class ConfigError(ValueError):
    """A config value, command argument or recorded value that cannot work; the message is one
    user-facing line naming it and what is allowed (the CLI prints it and exits with status 2).

    A key's type, range, choices and rules across keys are the schema's (rl_hydra/schema), checked once
    at the launch. Elsewhere it is raised only by a check that needs what the schema cannot see: an
    env's spaces (the algorithms, networks, wrappers), the classes a config names (fit.py), an
    installed package or a registered env id (envs/make.py), the machine or a Ray cluster, a command's
    own arguments (commands/)."""
