"""The package's one error for a value that cannot work (a leaf module: importing it loads nothing else)."""


class ConfigError(ValueError):
    """A config value, command argument or recorded value that cannot work; the message is one
    user-facing line naming it and what is allowed (the CLI prints it and exits with status 2)."""
