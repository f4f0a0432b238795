"""Outside the schema a ConfigError is raised only as one of its kinds (rl_hydra/errors.py, issue #75):
the check that only its raiser can make says which, by type."""

import inspect
from pathlib import Path

from rl_hydra import errors

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {ROOT / "rl_hydra/config.py", ROOT / "rl_hydra/errors.py"}


def plain_raises() -> dict[str, str]:
    """{file:line: the raise and its next line} for each `raise ConfigError(` outside the schema."""
    found = {}
    for path in sorted([*ROOT.glob("rl_hydra/**/*.py"), *ROOT.glob("hydra_plugins/**/*.py")]):
        if path in SCHEMA or (ROOT / "rl_hydra/schema") in path.parents:
            continue
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if "raise ConfigError(" in line:
                found[f"{path.relative_to(ROOT)}:{n + 1}"] = line + " ".join(lines[n + 1 : n + 2])
    return found


def test_no_plain_config_error_outside_the_schema():
    # a range, choice or cross-key check of config keys belongs in rl_hydra/schema; any other check raises
    # the kind of errors.py that says what only its raiser can see (an env's spaces, a class, the machine)
    assert plain_raises() == {}, "raise a kind of rl_hydra/errors.py, not ConfigError"


def test_each_kind_is_a_config_error_with_a_docstring():
    kinds = [k for _, k in inspect.getmembers(errors, inspect.isclass) if k is not errors.ConfigError]
    assert kinds
    for kind in kinds:
        assert issubclass(kind, errors.ConfigError) and kind.__module__ == errors.__name__, kind
        assert kind.__doc__ and kind.__doc__.strip(), f"{kind.__name__} says what only its raiser can see"
