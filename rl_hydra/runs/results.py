"""A published result as a record: results/<name>.json (its fields: results/README.md), read and
checked, its medians, written back, and rendered into the docs pages.

A record that was adopted lives in results/, one that was not in results/tried/; the pages link
each where it lives. A docs page marks where a record goes, between `<!-- results:SPEC -->` and
`<!-- /results:SPEC -->`, SPEC being one of

    NAME              the record's table: one line per row (its `columns`)
    NAME/ROW          one line per seed of row ROW and a line of medians (its `seed_columns`)
    plot:NAME         the record's plot, docs/img/NAME.png (drawn by scripts/render_results.py)
    tried:TOPIC       the records of TOPIC that were not adopted, each with its reason
    index:TOPIC       the adopted records of TOPIC that no table or plot shows, with their commands
    claims:NAME       a table of claims (results/claims/NAME.json), each cell counted from a record's seeds

A record made by scripts/seeds_table.py carries the code's `fingerprint` (rl_hydra/verify/fingerprint.py);
one whose fingerprint no longer matches today's code is marked `stale` (the date it was found so,
by scripts/render_results.py --fingerprints) and renders as stale until it is re-made.

A block whose record does not exist yet is left as it is. scripts/render_results.py renders the
pages; scripts/seeds_table.py and scripts/benchmarks/ measure and write records.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import string
from pathlib import Path

from rl_hydra.runs.aggregate import interquartile_mean, median_interval
from rl_hydra.runs.provenance import git_state

TRIED = "tried"  # the subfolder of the records that were not adopted
BLOCK = re.compile(r"(<!-- results:(?P<spec>\S+) -->\n)(?P<body>.*?)(<!-- /results:(?P=spec) -->)", re.S)
REQUIRED = (
    "name",
    "title",
    "topic",
    "status",
    "reason",
    "command",
    "overrides",
    "seeds",
    "commit",
    "date",
    "machine",
    "peer",
    "rows",
)


# --- records -----------------------------------------------------------------------------------
def load_records(folder: Path) -> dict[str, dict]:
    """Every record of `folder` (a results/ folder) by name, checked and where its status puts it,
    with each row's `from` references filled in."""
    records = {}
    for path in sorted([*folder.glob("*.json"), *(folder / TRIED).glob("*.json")], key=lambda p: p.stem):
        record = json.loads(path.read_text())
        problems = check_record(record, path.stem)
        if not problems and (path.parent != folder) != tried(record):
            problems.append(f"a record whose status is {record['status']!r} lives in {record_path(record)}")
        if record.get("name") in records:
            problems.append(f"results/{TRIED}/ and results/ both have {path.name}")
        if problems:
            raise ValueError(f"{path}: " + "; ".join(problems))
        records[record["name"]] = record
    for _ in range(2):  # a row may take from a row that takes from another
        for record in records.values():
            for row in record["rows"]:
                for key, source in row.get("from", {}).items():  # "record/row:key"
                    name, rest = source.split("/", 1)
                    row_id, other = rest.split(":")
                    origin = next(r for r in records[name]["rows"] if r["id"] == row_id)
                    for part in ("per_seed", "summary"):
                        if other in (origin.get(part) or {}):
                            row.setdefault(part, {})[key] = origin[part][other]
    return records


def tried(record: dict) -> bool:
    """Whether the record was tried and not adopted."""
    return record["status"] == "not adopted"


def record_path(record: dict) -> str:
    """Where the record lives, from the repository's root: results/tried/ for one not adopted."""
    folder = f"results/{TRIED}" if tried(record) else "results"
    return f"{folder}/{record['name']}.json"


def check_record(record: dict, stem: str) -> list[str]:
    problems = [f"no {key!r}" for key in REQUIRED if key not in record]
    if problems:
        return problems
    if record["name"] != stem:
        problems.append(f"name {record['name']!r} is not the file's name")
    if record["status"] not in ("adopted", "not adopted"):
        problems.append(f"status {record['status']!r}: adopted or not adopted")
    reason = record["reason"]
    if (record["status"] == "not adopted") != bool(reason) or (reason and "\n" in reason):
        problems.append("a record that was not adopted has a one-line reason, and only such a record")
    if not {"cpu", "cores", "load"} <= set(record["machine"]):
        problems.append("machine needs cpu, cores and load")
    if record["peer"] is not None and set(record["peer"]) != {"name", "version"}:
        problems.append("peer is null or {name, version}")
    ids = [row.get("id") for row in record["rows"]]
    if not ids or None in ids or len(set(ids)) != len(ids):
        problems.append("rows need unique ids")
    for row in record["rows"]:
        seeds = row.get("seeds", record["seeds"])
        for key, values in (row.get("per_seed") or {}).items():
            if not isinstance(values, list) or len(values) != len(seeds):
                problems.append(f"row {row.get('id')}: per_seed {key} has not one value per seed ({len(seeds)})")
    return problems


def median_problems(record: dict) -> list[str]:
    """Where a row's summary is not what its seeds give, to the summary's rounding: the summary value
    of a per-seed key is their median, `iqm` (or `<key prefix>iqm`) the interquartile mean, and
    `<key>_low`, `<key>_high` the median's 95% bootstrap interval."""
    problems = []
    for row in record["rows"]:
        summary = row.get("summary") or {}
        for key, values in (row.get("per_seed") or {}).items():
            # a seed without a value (not run, or unsolved where the median ranks it last) or curves: not checked
            if not values or not all(isinstance(v, (int, float)) for v in values):
                continue
            prefix = key[: -len("return")] if key.endswith("return") else None
            checks = [(key, statistics.median(values), "median")]
            if prefix is not None:
                checks.append((prefix + "iqm", interquartile_mean(values), "IQM"))
            if f"{key}_low" in summary:
                low, high = median_interval(values)
                checks += [(f"{key}_low", low, "interval's low end"), (f"{key}_high", high, "interval's high end")]
            for name, value, what in checks:
                stated = summary.get(name)
                if not isinstance(stated, (int, float)):
                    continue
                decimals = len(repr(stated).split(".")[1]) if isinstance(stated, float) else 0
                if abs(value - stated) > 0.5 * 10**-decimals + (0.05 if what == "IQM" else 0) + 1e-9:
                    problems.append(
                        f"{record['name']}/{row['id']}: the {what} of {key} is {value:g}, the summary says {stated:g}"
                    )
    return problems


def dump(record: dict) -> str:
    """A record as JSON, lists of values and small flat objects on one line each."""

    def flat(v) -> bool:
        return not isinstance(v, (dict, list)) or (isinstance(v, list) and all(map(flat, v)))

    def text(value, indent: int) -> str:
        pad, inner = " " * indent, " " * (indent + 1)
        if (
            isinstance(value, list)
            and all(flat(v) and not isinstance(v, list) for v in value)
            or (
                isinstance(value, dict)
                and all(map(flat, value.values()))
                and len(json.dumps(value, ensure_ascii=False)) + indent < 110
            )
        ):
            return json.dumps(value, ensure_ascii=False)
        if isinstance(value, list):
            return "[\n" + ",\n".join(inner + text(v, indent + 1) for v in value) + "\n" + pad + "]"
        if isinstance(value, dict):
            return (
                "{\n"
                + ",\n".join(f"{inner}{json.dumps(k)}: {text(v, indent + 1)}" for k, v in value.items())
                + ("\n" + pad + "}")
            )
        return json.dumps(value, ensure_ascii=False)

    return text(record, 0) + "\n"


def commit() -> str | None:
    """The record's `commit`: the checkout's short commit, `+dirty` with uncommitted changes; None outside git."""
    head, dirty = git_state()
    return None if head is None else head[:7] + ("+dirty" if dirty else "")


def machine(load_before: float, device: str) -> dict:
    """The record's `machine` for a measurement run on one torch thread: the CPU, cores, the
    1-minute load before and after, the device, Python and torch."""
    import torch

    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").is_file():
        names = [
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load": f"{load_before:.2f} -> {os.getloadavg()[0]:.2f} (1 min)",
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
        "torch_threads": 1,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


# --- cells and tables ----------------------------------------------------------------------------
def cell(fmt: str | list[str], context: dict, per_seed: dict) -> str:
    """`fmt` filled from `context`; `{key*:spec}` is the row's per-seed values of key, joined, and
    `{key>=level}` how many of them reach the level ("4 of 5").
    A field with no value makes the whole cell "-"; a list of formats takes the first that fills."""
    if isinstance(fmt, list):
        filled = [cell(f, context, per_seed) for f in fmt]
        return next((text for text in filled if text != "-"), "-")
    out = []
    for literal, field, spec, _ in string.Formatter().parse(fmt):
        out.append(literal)
        if field is None:
            continue
        if ">=" in field:  # `{key>=level}`: how many of the row's seeds reached the level, "k of n"
            key, level = field.split(">=")
            values = per_seed.get(key)
            if not values:
                return "-"
            out.append(reached(values, float(level)))
            continue
        if field.endswith("*"):
            values = per_seed.get(field[:-1])
            if not values:
                return "-"
            out.append(", ".join("-" if v is None else format(v, spec or "") for v in values))
            continue
        value = context.get(field)
        if value is None:
            return "-"
        out.append(format(value, spec or ""))
    return "".join(out)


def reached(values: list, level: float) -> str:
    """How many of a row's per-seed values reach `level`: "4 of 5" (a seed without a value does not)."""
    return f"{sum(1 for v in values if v is not None and v >= level)} of {len(values)}"


def plain(row: dict) -> dict:
    return {k: v for k, v in row.items() if not isinstance(v, (dict, list))}


def markdown(columns: list[dict], lines: list[list[str]]) -> str:
    head = "| " + " | ".join(c["header"] for c in columns) + " |"
    rule = "|" + "|".join("---" if c.get("align") == "left" else "---:" for c in columns) + "|"
    return "\n".join([head, rule, *("| " + " | ".join(line) + " |" for line in lines)])


def no_longer_made(record: dict) -> bool:
    """Whether the current scripts no longer make the record (`rerun` null): a page then links the
    record, which names the command and the commit that still has its script, and not the command."""
    return "rerun" in record and record["rerun"] is None


def footer(record: dict, command: str | None = None) -> str:
    """How to make the table again: `rerun` where the scripts have changed since, else the command
    that made it; where the current scripts no longer make it, the record alone."""
    link = f"[record](../{record_path(record)})"
    if no_longer_made(record):
        return f"Made by a script since changed or removed: the {link} names the command and its commit."
    command = record.get("rerun") or command or record["command"]
    made = f"`{command}` ({link})" if command else f"The {link} names each row's command."
    return made + code_note(record)


def fingerprints(record: dict) -> list[dict]:
    """The record's code fingerprints (rl_hydra/verify/fingerprint.py): the record's own, or its rows'
    where each row ran its own config."""
    return [r["fingerprint"] for r in [record, *record["rows"]] if "fingerprint" in r]


def code_note(record: dict) -> str:
    """What a fingerprinted record says of the code it describes: still today's, or stale since when."""
    if not fingerprints(record):
        return ""
    if "stale" in record:
        return (
            f"\n\n**Stale:** made on {record['date']} by code that no longer trains this config the same way "
            f"(its fingerprint moved; found on {record['stale']}): these figures wait to be made again."
        )
    return f" Made on {record['date']}; today's code trains it the same way (its fingerprint matches)."


def rows_table(record: dict) -> str:
    columns = record["columns"]
    lines = [
        [cell(c["format"], {**plain(r), **(r.get("summary") or {})}, r.get("per_seed") or {}) for c in columns]
        for r in record["rows"]
    ]
    return markdown(columns, lines) + "\n\n" + footer(record)


def seeds_table(record: dict, row_id: str) -> str:
    row = next(r for r in record["rows"] if r["id"] == row_id)
    columns = [
        {"header": record.get("per", "seed"), "format": "{seed}"},
        *row.get("seed_columns", record["seed_columns"]),
    ]
    per_seed = row.get("per_seed") or {}
    lines = []
    for i, seed in enumerate(row.get("seeds", record["seeds"])):
        context = {**plain(row), **{k: v[i] for k, v in per_seed.items()}, "seed": seed}
        lines.append([cell(c["format"], context, {}) for c in columns])
    summary = {**plain(row), **(row.get("summary") or {})}
    medians = [cell(c["format"], summary, {}) for c in columns[1:]]
    lines.append(["median", *("" if m == "-" else m for m in medians)])
    return markdown(columns, lines) + "\n\n" + footer(record, row.get("command"))


def headline(record: dict) -> str:
    row = record["rows"][0]
    return cell(record.get("headline", "-"), {**plain(row), **(row.get("summary") or {})}, row.get("per_seed") or {})


def tried_table(records: dict, topic: str) -> str:
    lines = [
        [f"[{r['title']}](../{record_path(r)})", headline(r), r["reason"]]
        for r in records.values()
        if r["topic"] == topic and tried(r)
    ]
    columns = [{"header": h, "align": "left"} for h in ("tried", "result", "why it was not adopted")]
    return markdown(columns, lines)


def index_list(records: dict, topic: str, shown: set[str]) -> str:
    """The adopted records of `topic` that no table or plot shows (the others are in its tried table)."""

    def how(r: dict) -> str:
        if no_longer_made(r):
            return ": made by a script since changed or removed (the record names the command)"
        command = r.get("rerun") or r["command"]
        return f": `{command}`" if command else ""

    return (
        "\n".join(
            f"- [{r['title']}](../{record_path(r)}){how(r)}"
            for r in records.values()
            if r["topic"] == topic and r["status"] == "adopted" and r["name"] not in shown
        )
        or "(none)"
    )


# --- claims --------------------------------------------------------------------------------------
def load_claims(folder: Path) -> dict[str, dict]:
    """The claims tables of `folder` (a results/ folder): results/claims/NAME.json by NAME."""
    return {path.stem: json.loads(path.read_text()) for path in sorted((folder / "claims").glob("*.json"))}


def claim_cell(claim: dict, records: dict) -> str:
    """One claim, counted from its record's seeds: "{label}: {text} on {hits} of {seeds}" where the
    claim names a per-seed `key` and the level `at_least` that counts, else its `text` alone; linked
    to the record, and saying so where the record is stale or was made before records carried the
    code's fingerprint."""
    record = records[claim["record"]]
    text = f"{claim['label']}: {claim['text']}" if claim.get("label") else claim["text"]
    if "key" in claim:
        row = next(r for r in record["rows"] if r["id"] == claim.get("row", record["rows"][0]["id"]))
        text += " on " + reached(row["per_seed"][claim["key"]], claim["at_least"])
    status = "stale" if "stale" in record else None if fingerprints(record) else "not yet re-checked"
    return f"[{text}]({record_path(record)})" + (f" ({status})" if status else "")


def claims_table(table: dict, records: dict) -> str:
    """A claims table: a line per row, each column its row's `field`, the field `claims` filled by `claim_cell`s."""

    def value(row: dict, field: str) -> str:
        return "; ".join(claim_cell(c, records) for c in row["claims"]) if field == "claims" else row[field]

    lines = [[value(row, column["field"]) for column in table["columns"]] for row in table["rows"]]
    columns = [{"header": column["header"], "align": "left"} for column in table["columns"]]
    return markdown(columns, lines) + ("\n\n" + table["footer"] if table.get("footer") else "")


# --- pages ---------------------------------------------------------------------------------------
def block(spec: str, records: dict, shown: set[str], claims: dict) -> str | None:
    """What goes between a block's markers; None where its record does not exist yet."""
    kind, _, arg = spec.partition(":") if spec.startswith(("plot:", "tried:", "index:", "claims:")) else ("", "", spec)
    if kind == "claims":
        return claims_table(claims[arg], records) if arg in claims else None
    if kind == "tried":
        return tried_table(records, arg)
    if kind == "index":
        return index_list(records, arg, shown)
    name, _, row = arg.partition("/")
    if name not in records:
        return None
    if kind == "plot":
        return (f"![{records[name]['title']}](img/{name}.png)\n\n{records[name]['plot'].get('caption', '')}").rstrip()
    return seeds_table(records[name], row) if row else rows_table(records[name])


def shown_records(pages: dict[Path, str]) -> set[str]:
    return {
        m["spec"].split(":")[-1].split("/")[0]
        for text in pages.values()
        for m in BLOCK.finditer(text)
        if not m["spec"].startswith(("tried:", "index:"))
    }


def render_pages(records: dict, pages: dict[Path, str], claims: dict | None = None) -> dict[Path, str]:
    shown = shown_records(pages)

    def fill(match: re.Match) -> str:
        body = block(match["spec"], records, shown, claims or {})
        return match.group(0) if body is None else f"{match.group(1)}{body}\n{match.group(4)}"

    return {path: BLOCK.sub(fill, text) for path, text in pages.items()}


def differences(records: dict, pages: dict[Path, str], claims: dict | None = None) -> list[str]:
    """'page: block' for each block whose text is not what its record renders."""
    rendered = render_pages(records, pages, claims)
    found = []
    for path, text in pages.items():
        ours, theirs = dict(blocks(text)), dict(blocks(rendered[path]))
        found += [f"{path.name}: <!-- results:{spec} -->" for spec in ours if ours[spec] != theirs[spec]]
    return found


def read_pages(root: Path) -> dict[Path, str]:
    """The pages of the repository at `root` by path: README.md and docs/*.md."""
    return {path: path.read_text() for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]}


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m["spec"], m["body"]) for m in BLOCK.finditer(text)]
