"""A record's files read as plain data: dicts, lists, strings, numbers, booleans and null, and
nothing that computes.

- YAML: no aliases or anchors (a 2 KB alias bomb expands to gigabytes), no tags beyond YAML's
  plain types, no duplicate keys; numbers as OmegaConf reads them (`1e-3` is a float).
- JSON: objects, lists and plain values.
- Both: at most MAX_BYTES a file and MAX_DEPTH levels of nesting.
- `resolve_references` replaces `${a.b}` (and relative `${.b}`) by the value it names, and
  refuses every other interpolation: a resolver call (`${oc.env:HOME}`, `${rl_hydra.x:...}`),
  a nested one, a cycle. What comes out holds no `${` at all, so a config made from it cannot
  compute anything later either.

Every failure is a RunError, one line naming the file and, where there is one, the key.
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from rl_hydra.runs.errors import RunError

MAX_BYTES = 4 * 1024 * 1024  # a run's YAML and JSON files are kilobytes; provenance grows ~1 KB a resume
MAX_DEPTH = 32  # a run's config nests about 6 deep
MAX_NODES = 100_000  # values in a config with its references resolved (a run's has a few hundred)

Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RecordLoader(Loader):
    """YAML's safe loader with OmegaConf's reading of numbers and duplicate keys refused."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key {key!r} that is not text", key_node.start_mark
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.2's floats, as OmegaConf reads them (`1e-3`, `.5`, `1_000.0`), not only YAML 1.1's `1.0e-03`
RecordLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def read_bytes(path: Path, directory: Any = None) -> bytes:
    """A record file's bytes, refusing one over MAX_BYTES before reading it. The file is opened
    without following a link and must be a regular file (a FIFO is not waited on); in a run's
    `directory` (a RunDirectory) it is reached from the run's handle (runs/files.py)."""
    from rl_hydra.runs.files import Folder

    try:
        folder = directory.folder(path.parent) if directory is not None else Folder.open(path.parent)
        with folder, folder.read(path.name) as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_BYTES:
                raise RunError(f"{path} is {size:,} bytes, more than a run writes there (at most {MAX_BYTES:,})")
            data = f.read(MAX_BYTES + 1)
    except OSError as error:
        why = "a symbolic link" if error.errno == errno.ELOOP else error.strerror or type(error).__name__
        raise RunError(f"{path} cannot be read ({why})") from None
    if len(data) > MAX_BYTES:  # grew while being read
        raise RunError(f"{path} is more than {MAX_BYTES:,} bytes, more than a run writes there")
    return data


def load_yaml(path: Path, directory: Any = None) -> Any:
    """A YAML file of a record as plain data, or one RunError line (`directory`: read_bytes)."""
    data = read_bytes(path, directory)
    try:
        text = data.decode("utf-8")
        check_events(text)
        value = yaml.load(text, Loader=RecordLoader)  # noqa: S506 - a safe loader, aliases refused above
    except UnicodeDecodeError as error:
        raise RunError(f"{path} cannot be read as a config (not UTF-8 text: {error.reason})") from None
    except yaml.YAMLError as error:
        raise RunError(f"{path} cannot be read as a config ({one_line(error)})") from None
    except RecursionError:
        raise RunError(f"{path} cannot be read as a config (nested more than {MAX_DEPTH} deep)") from None
    except ValueError as error:  # an integer of over 4,300 digits
        raise RunError(f"{path} cannot be read as a config ({one_line(error)})") from None
    check_depth(value, path)
    return value


PLAIN_TAGS = ("!", *(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq")))


def check_events(text: str) -> None:
    """Refuse aliases, anchors, tags and nesting past MAX_DEPTH, from the parser's events alone
    (nothing is built yet, so a bomb costs no more than its own text)."""
    depth = 0
    for event in yaml.parse(text, Loader=Loader):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.YAMLError(f"an alias (*{event.anchor}), which a run's files never hold, at {where(event)}")
        if getattr(event, "anchor", None) is not None:
            raise yaml.YAMLError(f"an anchor (&{event.anchor}), which a run's files never hold, at {where(event)}")
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in PLAIN_TAGS:
            raise yaml.YAMLError(f"the tag {tag}, which a run's files never hold, at {where(event)}")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nesting more than {MAX_DEPTH} deep at {where(event)}")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def where(event: yaml.Event) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


def load_json(path: Path, directory: Any = None) -> Any:
    """A JSON file of a record as plain data, or one RunError line (`directory`: read_bytes)."""
    data = read_bytes(path, directory)
    try:
        value = json.loads(data)
    except RecursionError:
        raise RunError(f"{path} cannot be read (JSON nested more than {MAX_DEPTH} deep)") from None
    except ValueError as error:  # not JSON, not UTF-8, or an integer of over 4,300 digits
        raise RunError(f"{path} cannot be read ({type(error).__name__}: {one_line(error)})") from None
    check_depth(value, path)
    return value


def load_json_object(path: Path, directory: Any = None) -> dict[str, Any]:
    value = load_json(path, directory)
    if not isinstance(value, dict):
        raise RunError(f"{path} holds a JSON {type(value).__name__}, not the object a run writes there")
    return value


def check_depth(value: Any, path: Path) -> None:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                raise RunError(f"{path} cannot be read (nested more than {MAX_DEPTH} deep)")
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return (text[:200] + "...") if len(text) > 200 else text or type(error).__name__


# ${a.b.c}, ${a[0].b}, ${.sibling}, ${..uncle}: a reference to another key, and nothing else
REFERENCE = re.compile(r"\$\{(\.*)([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*|\[\d+\])*)\}")
PART = re.compile(r"\.?([A-Za-z_][\w-]*)|\[(\d+)\]")


def resolve_references(tree: dict[str, Any], source: Path) -> dict[str, Any]:
    """`tree` with every `${reference}` replaced by the value it names; RunError for any other
    interpolation, a reference to no key, or a cycle."""

    def value_at(path: tuple[Any, ...], chain: tuple[tuple[Any, ...], ...]) -> Any:
        node: Any = tree
        for part in path:
            node = node[part]
        return resolve(node, path, chain)

    count = [0]

    def resolve(node: Any, path: tuple[Any, ...], chain: tuple[tuple[Any, ...], ...]) -> Any:
        count[0] += 1
        if count[0] > MAX_NODES:
            raise RunError(
                f"{source}'s references expand to more than {MAX_NODES:,} values; a run's config holds hundreds"
            )
        if isinstance(node, dict):
            return {k: resolve(v, (*path, k), chain) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v, (*path, i), chain) for i, v in enumerate(node)]
        if not isinstance(node, str) or "${" not in node:
            return node
        if path in chain:
            raise RunError(f"{source} has {dotted(path)}={shown(node)}, a reference that leads back to itself")
        if len(chain) >= MAX_DEPTH:
            raise RunError(f"{source} has {dotted(path)}={shown(node)}, in a chain of references over {MAX_DEPTH} long")
        chain = (*chain, path)
        pieces: list[Any] = []
        at = 0
        for found in re.finditer(r"\$\{", node):
            if found.start() < at:
                continue
            match = REFERENCE.match(node, found.start())
            if match is None:
                raise RunError(
                    f"{source} has {dotted(path)}={shown(node)}, an interpolation that is not a reference to "
                    f"another key (a record's values are data: no resolver is evaluated)"
                )
            pieces += [node[at : match.start()], value_at(target(path, match, source, node, tree), chain)]
            at = match.end()
        pieces.append(node[at:])
        pieces = [piece for piece in pieces if piece != ""]
        if len(pieces) == 1:
            return pieces[0]
        if any(isinstance(piece, (dict, list)) for piece in pieces):
            raise RunError(f"{source} has {dotted(path)}={shown(node)}, which puts a whole node inside text")
        return "".join(str(piece) for piece in pieces)  # as OmegaConf puts a value inside text

    return resolve(tree, (), ())


def target(path: tuple[Any, ...], match: re.Match, source: Path, text: str, tree: Any) -> tuple[Any, ...]:
    """The path a reference in the value at `path` names: from the root, or from the node holding
    the value for `${.x}` (one level up for each dot after the first)."""
    dots, name = match.group(1), match.group(2)
    base: tuple[Any, ...] = path[: len(path) - len(dots)] if dots else ()
    if len(dots) > len(path):
        raise RunError(f"{source} has {dotted(path)}={shown(text)}, a reference above the config's root")
    parts = tuple(key if key is not None else int(index) for key, index in PART.findall(name))
    node: Any = tree
    for part in (*base, *parts):
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            raise RunError(f"{source} has {dotted(path)}={shown(text)}, a reference to no key of the config")
    return (*base, *parts)


def dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the config"


def shown(text: str) -> str:
    return repr(text) if len(text) <= 120 else repr(text[:100]) + f"...({len(text)} characters)"


def check_no_interpolation(tree: Any, source: Path, path: tuple[Any, ...] = ()) -> None:
    """Refuse any `${` left in resolved data (a literal one would be read as an interpolation again)."""
    stack = [(tree, path)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, (*at, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*at, i)) for i, v in enumerate(node))
        elif isinstance(node, str) and "${" in node:
            raise RunError(f"{source} has {dotted(at)}={shown(node)}, an interpolation a record may not hold")
