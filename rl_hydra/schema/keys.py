"""How a config key is declared, and the one validator that reads the declarations.

A schema is a dataclass whose fields are the keys of one config node, each made with `key(...)`:
its type (OmegaConf enforces it when Hydra composes), its range or choices and one line of help
(`validate` checks those, `describe` shows them). The YAML files stay the home of the values: a
field's default is MISSING unless every file that uses the schema would set the same value.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from rl_hydra.errors import ConfigError

# no integer key of a run needs more: a budget, a capacity or a size past this is a typo (1e100)
LARGEST_INT = 10**12
# sizes that memory scales with, refused while composing (before a run directory is taken), far
# above what a run uses: a layer's width (two layers of it are 268M weights, 1 GB, 4 GB with
# Adam's moments; a wide run's is 4096), a batch (each update holds a few tensors of it per layer)
# and the count of quantiles, atoms, fractions or critics each row of a batch is widened by
LARGEST_WIDTH = 16_384
LARGEST_BATCH = 65_536
LARGEST_COUNT = 4_096


@dataclass(frozen=True)
class Range:
    """What a key allows: an integer or number in [minimum, maximum] (an end left out is open;
    `above`/`below` make it strict), or one of `choices`. `nullable`: null is allowed too."""

    kind: str = "number"  # integer | number | choice | any
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False  # minimum excluded
    below: bool = False  # maximum excluded
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    each: bool = False  # the range holds for each item of a list
    also: tuple[Any, ...] = ()  # words allowed beside the numbers (target_entropy: auto)
    pattern: tuple[str, str] | None = None  # text matching a regular expression, and how to say it

    def allowed(self, brief: bool = False) -> str:
        """`expected an integer >= 1 and <= 1000000000000`, `choose one of: huber, mse`; `brief`
        leaves out the bound every integer key has (LARGEST_INT)."""
        if self.choices is not None:
            return f"choose one of: {', '.join(_word(c) for c in self.choices)}"
        if self.pattern is not None:
            words = [self.pattern[1], *(_word(word) for word in self.also), *(["null"] if self.nullable else [])]
            return f"expected {', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else f"expected {words[0]}"
        low = None if self.minimum is None else f"{'>' if self.above else '>='} {_number(self.minimum)}"
        high = (
            None
            if self.maximum is None or (brief and self.maximum == LARGEST_INT)
            else f"{'<' if self.below else '<='} {_number(self.maximum)}"
        )
        bounds = " and ".join(part for part in (low, high) if part)
        what = {"integer": "an integer", "number": "a number"}.get(self.kind, "a value")
        return (
            f"expected {'each item ' if self.each else ''}{what}"
            + (f" {bounds}" if bounds else "")
            + "".join(f" or {_word(word)}" for word in self.also)
            + (" or null" if self.nullable else "")
        )

    def refuses(self, value: Any) -> str | None:
        """Why `value` is refused ("is not an integer", "is out of range", ...), or None."""
        if value is None:
            return None if self.nullable or self.kind == "any" else "is not set"
        if any(value == word and type(value) is type(word) for word in self.also):
            return None
        if self.choices is not None:
            return None if any(value == c and type(value) is type(c) for c in self.choices) else "is not allowed"
        if self.pattern is not None:
            return None if isinstance(value, str) and re.fullmatch(self.pattern[0], value) else "is not allowed"
        if self.kind == "integer" and not is_int(value):
            return "is not an integer"
        if self.kind == "number" and not is_number(value):
            return "is not a finite number"
        if self.kind == "any":
            return None
        too_low = self.minimum is not None and (value <= self.minimum if self.above else value < self.minimum)
        too_high = self.maximum is not None and (value >= self.maximum if self.below else value > self.maximum)
        return "is out of range" if too_low or too_high else None


@dataclass(frozen=True)
class Rule:
    """A rule across keys, declared on the schema of the node that holds them all (`rules`, a ClassVar):
    `holds(*values)` of `keys` (dotted below the node: `algo.burn_in`), `allowed` says it in words.
    The launch checks it once (`check_rules`); a node lacking one of the keys is left alone."""

    keys: tuple[str, ...]
    holds: Callable[..., bool]
    allowed: str


ABSENT = object()


def rules_of(schema: type) -> list[Rule]:
    """The rules a schema declares, its parents' included."""
    found: list[Rule] = []
    for klass in reversed(schema.__mro__):
        found += [rule for rule in klass.__dict__.get("rules", ()) if rule not in found]
    return found


def check_rules(node: DictConfig, schema: type, prefix: str) -> None:
    """Raise ConfigError for a rule `node` breaks, one line naming its first key as out of range, what
    is allowed, and the other keys' values."""
    for rule in rules_of(schema):
        values = [OmegaConf.select(node, name, default=ABSENT) for name in rule.keys]
        if any(value is ABSENT for value in values):  # absent or ??? (select gives the default for both)
            continue
        if not rule.holds(*values):
            others = " and ".join(f"{prefix}{name}={shown(value)}" for name, value in zip(rule.keys[1:], values[1:]))
            raise ConfigError(
                f"{prefix}{rule.keys[0]}={shown(values[0])} is out of range; expected {rule.allowed}"
                + (f", here {others}" if others else "")
            )


def _word(choice: Any) -> str:
    if isinstance(choice, bool) or choice is None:
        return {True: "true", False: "false", None: "null"}[choice]
    return str(choice)


def _number(value: float) -> str:
    return str(value)  # as declared: 1 for an integer key's bound, 0.0 for a number's


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def shown(value: Any) -> str:
    """A value for a message: a huge integer as its size (Python refuses to print one past 4,300 digits)."""
    if is_int(value) and value.bit_length() > 64:
        digits = int(math.log10(abs(value))) + 1
        digits += (abs(value) >= 10**digits) - (abs(value) < 10 ** (digits - 1))  # log10's rounding at a power of 10
        return f"<{'a negative' if value < 0 else 'an'} integer of {digits} digits>"
    if isinstance(value, bool) or value is None:
        return _word(value)
    return repr(value)


def key(
    default: Any = MISSING,
    help: str = "",
    *,
    integer: bool = False,
    number: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    above: bool = False,
    below: bool = False,
    choices: tuple[Any, ...] | None = None,
    nullable: bool = False,
    each: bool = False,
    also: tuple[Any, ...] = (),
    pattern: tuple[str, str] | None = None,
    schema: type | None = None,
) -> Any:
    """A schema field: `batch_size: int = key(help="samples per update", integer=True, minimum=1)`.
    An integer's maximum is LARGEST_INT unless given; a list default is copied for each instance.
    `schema`: the keys of a node left untyped, so that it may hold more (an optimizer's keyword
    arguments), which `validate` still checks. `pattern`: (regular expression, how to say it) for text."""
    nullable = nullable or (choices is not None and None in choices)
    if choices is not None:
        kind = "choice"
    elif integer:
        kind, maximum = "integer", LARGEST_INT if maximum is None else maximum
    elif number or minimum is not None or maximum is not None:
        kind = "number"
    else:
        kind = "any"
    metadata = {
        "help": help,
        "range": Range(kind, minimum, maximum, above, below, choices, nullable, each, also, pattern),
        "schema": schema,
    }
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def fields(schema: type) -> Iterator[tuple[str, Range | None, str]]:
    """(name, range, help) of each key a schema declares."""
    for field in dataclasses.fields(schema):
        yield field.name, field.metadata.get("range"), field.metadata.get("help", "")


def schema_of(node: Any) -> type | None:
    """The schema dataclass a composed node was typed with (None for a plain node)."""
    if not isinstance(node, DictConfig):
        return None
    node_type = OmegaConf.get_type(node)
    return node_type if node_type is not None and dataclasses.is_dataclass(node_type) else None


def check(value: Any, full_key: str, rule: Range) -> None:
    """Raise ConfigError (one line: key, value, what is allowed) unless `value` keeps `rule`."""
    items = list(value) if rule.each and isinstance(value, (list, tuple, ListConfig)) else None
    if items is None and rule.each and value is not None:
        raise ConfigError(not_a_list(full_key, value, rule))
    if items is None:
        why = rule.refuses(value)
        if why is not None:
            if (
                rule.kind == "integer"
                and isinstance(value, float)
                and value.is_integer()
                and rule.refuses(int(value)) is None
            ):
                why += f" (give {int(value)})"  # 6e2, as a run read back from YAML may hold it
            raise ConfigError(f"{full_key}={shown(value)} {why}; {rule.allowed()}")
        return
    for index, item in enumerate(items):
        why = rule.refuses(item)
        if why is not None:
            raise ConfigError(f"{full_key}[{index}]={shown(item)} {why}; {rule.allowed()}")


def not_a_list(full_key: str, value: Any, rule: Range) -> str:
    """`network.hidden_sizes=64 is not a list; expected a list, each item ..., e.g. network.hidden_sizes=[64,64]`:
    a key whose range holds for each item of a list, given one value (an item it allows is the example's)."""
    allowed = rule.allowed(brief=True).replace("expected each item", "expected a list, each item")
    example = f", e.g. {full_key}=[{value},{value}]" if rule.refuses(value) is None else ""
    return f"{full_key}={shown(value)} is not a list; {allowed}{example}"


def validate(node: DictConfig, schema: type, prefix: str) -> None:
    """Check every declared key of `node` that it holds against its range (resolved: an
    interpolation is checked for what it gives); keys it lacks and keys without a range are left alone."""
    for name, rule, _ in fields(schema):
        if rule is None or name not in node or OmegaConf.is_missing(node, name):
            continue
        check(node[name], f"{prefix}{name}", rule)
