"""What the README and the docs pages say is what the tree holds: installing as CI and pyproject.toml
do, the Layout, the scripts and env groups they name, and pages short and narrow enough to read."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import ROOT

README = " ".join((ROOT / "README.md").read_text().split())  # line breaks as spaces


def test_the_torch_version_the_readme_says_ci_tests_is_the_one_ci_installs():
    ci_pin = re.search(r"pip install --quiet torch==([\d.]+)", (ROOT / ".ci" / "run").read_text()).group(1)
    said = re.search(r"CI tests torch ([\d.]+) \(the CPU build\) on Python ([\d.]+)", README)
    assert said and said.group(1) == ci_pin


def test_the_torch_range_the_readme_gives_is_pyprojects():
    low, high = re.search(r'"torch>=([\d.]+),<([\d.]+)"', (ROOT / "pyproject.toml").read_text()).groups()
    assert f"accepts torch {low} or newer, below {high}" in README


def test_every_installed_command_the_readme_names_is_declared():
    scripts = re.findall(r"^(rl-hydra-[a-z]+) = ", (ROOT / "pyproject.toml").read_text(), flags=re.M)
    named = set(re.findall(r"`(rl-hydra-[a-z]+)", README))
    assert named and named <= set(scripts)


# --- the README's Layout names what is in the tree --------------------------------------------

README_LINES = (ROOT / "README.md").read_text().splitlines()
NOT_IN_LAYOUT = {"README.md", ".gitignore"}  # tracked top-level files the Layout need not name


def layout_names() -> set[str]:
    """The paths the README's Layout block names, from the repository root (directories end in /).

    A line is its names, separated by single spaces, then two or more spaces and what they are;
    a line indented under a directory names paths inside it (the first name of the nearest
    less-indented line)."""
    text = "\n".join(README_LINES) + "\n"
    block = re.search(r"^## Layout\n.*?^```\n(.*?)^```", text, flags=re.M | re.S)
    assert block, "README.md has no ``` block under ## Layout"
    names, parents = set(), []  # parents: (indent, directory) of the lines above
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        while parents and parents[-1][0] >= indent:
            parents.pop()
        base = parents[-1][1] if parents else ""
        named = [base + name for name in re.split(r" {2,}", line.strip())[0].split(" ")]
        names.update(named)
        if named[0].endswith("/"):
            parents.append((indent, named[0]))
    return names


def tracked_tree() -> tuple[set[str], set[str]]:
    """(files, directories ending in /) that git tracks and that are on disk: untracked junk never counts."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the Layout is checked against git's list of files")
    files = {path for path in listed.split("\0") if path and (ROOT / path).exists()}
    dirs = {"/".join(parts[:i]) + "/" for parts in (f.split("/") for f in files) for i in range(1, len(parts))}
    return files, dirs


def test_the_readme_layout_names_only_what_is_in_the_tree():
    files, dirs = tracked_tree()
    missing = sorted(name for name in layout_names() if name not in (dirs if name.endswith("/") else files))
    assert not missing, f"README.md's Layout names what the tree does not hold: {missing}"


def test_the_readme_layout_names_every_top_level_entry_conf_group_script_and_package_module():
    files, dirs = tracked_tree()
    wanted = {path.split("/")[0] + ("/" if "/" in path else "") for path in files} - NOT_IN_LAYOUT
    wanted |= {d for d in dirs if d.startswith("conf/") and d.count("/") == 2}  # conf's groups
    wanted |= {p for p in files | dirs if re.fullmatch(r"scripts/[^/]+(\.py|/)", p)}  # scripts, their folders
    wanted |= {p for p in files if re.fullmatch(r"rl_hydra/[^/]+\.py", p)} - {"rl_hydra/__init__.py"}
    wanted |= {d for d in dirs if d.count("/") == 2 and d.startswith("rl_hydra/") and d + "__init__.py" in files}
    unnamed = sorted(wanted - layout_names())
    assert not unnamed, f"README.md's Layout does not name: {unnamed}"


def test_the_readme_links_every_docs_page_and_only_pages_that_exist():
    files, _ = tracked_tree()
    linked = set(re.findall(r"\]\((docs/[^)#]+)", "\n".join(README_LINES)))
    pages = {path for path in files if re.fullmatch(r"docs/[^/]+\.md", path)}
    assert linked == pages, f"not linked: {sorted(pages - linked)}, no such page: {sorted(linked - pages)}"


def test_the_readme_is_at_most_150_lines():
    assert len(README_LINES) <= 150, f"README.md has {len(README_LINES)} lines; move detail into docs/"


# --- the docs name what exists -----------------------------------------------------------------

PAGES = {
    path.relative_to(ROOT).as_posix(): path.read_text()
    for path in [ROOT / "README.md", ROOT / "results" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
}


def test_every_script_a_page_names_exists():
    missing = sorted(
        {
            f"{page}: {path}"
            for page, text in PAGES.items()
            for path in re.findall(r"(?<![\w.-])scripts/[\w./-]*\w", text)
            if not (ROOT / path).exists()
        }
    )
    assert not missing, f"pages name scripts that do not exist: {missing}"


def env_groups() -> set[str]:
    """The env groups a user can pick: conf/env/'s files, less the old names kept as hidden aliases."""
    from rl_hydra.config import ENV_ALIASES

    return {path.stem for path in (ROOT / "conf" / "env").glob("*.yaml")} - set(ENV_ALIASES)


def test_suite_md_s_env_table_lists_every_env_group_and_no_other():
    section = re.search(r"^## Env groups\n(.*?)^## ", PAGES["docs/suite.md"], flags=re.M | re.S)
    assert section, "docs/suite.md has no ## Env groups section"
    first_cells = re.findall(r"^\| ([^|]*)\|", section.group(1), flags=re.M)
    listed = {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}
    assert listed == env_groups(), (
        f"docs/suite.md's env table lacks {sorted(env_groups() - listed)}, "
        f"names no such group: {sorted(listed - env_groups())}"
    )


def test_the_readme_s_env_list_names_every_env_group():
    paragraph = re.search(r"^Env groups \(`env=`(.*?)\n\n", PAGES["README.md"], flags=re.M | re.S)
    assert paragraph, "README.md has no paragraph starting 'Env groups (`env=`'"
    listed = set(re.findall(r"`(\w+)`", paragraph.group(1)))
    assert env_groups() <= listed, f"README.md's env list lacks {sorted(env_groups() - listed)}"


def test_the_readme_s_opening_names_every_algorithm_and_no_other():
    opening = re.search(r"^rl-hydra trains off-policy deep RL agents \((.*?)\)", PAGES["README.md"], flags=re.M | re.S)
    assert opening, "README.md's first paragraph does not list the algorithms in parentheses"
    named = {re.sub(r"[^a-z0-9]+", "_", name.strip().lower()) for name in re.split(r"[,;]", opening.group(1))}
    options = {path.stem for path in (ROOT / "conf" / "algo").glob("*.yaml")}
    assert named == options, f"the opening lacks {sorted(options - named)}, names no algo= {sorted(named - options)}"


@pytest.mark.parametrize("page", sorted(name for name in PAGES if name.startswith("docs/")))
def test_every_docs_page_is_at_most_200_lines(page):
    lines = len(PAGES[page].splitlines())
    assert lines <= 200, f"{page} has {lines} lines; a page is a reference: move detail to a page of its own"


def test_the_readme_s_python_snippet_trains_what_its_runnable_version_trains():
    snippet = re.search(r"^run = train\((.*?)\)", PAGES["README.md"], flags=re.M).group(1)
    example = (ROOT / "examples" / "train_and_predict.py").read_text()
    called = re.search(r"^run = train\((.*?)\)", example, flags=re.M).group(1)
    default_steps = re.search(r"else ([\d_]+)", example).group(1).replace("_", "")
    overrides = re.findall(r'"([^"]+)"', snippet)
    assert overrides[:-1] == re.findall(r'"([^"{}]+)"', called)[: len(overrides) - 1], (snippet, called)
    assert overrides[-1] == f"train.total_steps={default_steps}", (snippet, default_steps)


# --- the docs are written to be read --------------------------------------------------------------

PROSE_WIDTH = 120
LINK_ONLY = re.compile(r"^\s*([-*]\s+)?(\[[^\]]*\]\([^)]*\)[\s,;.:]*)+$")  # a line of links and nothing else


def long_prose_lines(text: str) -> list[tuple[int, int]]:
    """(line number, length) of the prose lines wider than PROSE_WIDTH. Not prose: code blocks
    (fenced or indented), the blocks scripts/render_results.py renders (`<!-- results:... -->` to
    `<!-- /results:... -->`), table rows and lines that hold only links."""
    found, fence, rendered, indented = [], False, False, False
    previous = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
            continue
        # an indented code block: four spaces in, after a blank line or more of the block
        indented = line.startswith("    ") and (indented or not previous.strip())
        previous = line
        if indented:
            continue
        if stripped.startswith("<!-- results:"):
            rendered = True
        if stripped.startswith("<!-- /results:"):
            rendered = False
            continue
        if fence or rendered or stripped.startswith("|") or LINK_ONLY.match(line):
            continue
        if len(line) > PROSE_WIDTH:
            found.append((number, len(line)))
    return found


@pytest.mark.parametrize("page", sorted(name for name in PAGES if name.startswith("docs/")))
def test_every_docs_page_s_prose_lines_are_at_most_120_characters(page):
    long = long_prose_lines(PAGES[page])
    assert not long, f"{page}: prose lines over {PROSE_WIDTH} characters (line, length): {long}; wrap at 100-110"


def test_only_prose_counts_against_the_width():
    wide = "x" * (PROSE_WIDTH + 1)
    page = "\n".join(
        [
            f"| {wide} |",  # a table row
            "```",
            wide,  # a fenced code block
            "```",
            "",
            f"    {wide}",  # an indented code block
            "",
            "<!-- results:toy -->",
            wide,  # a rendered block
            "<!-- /results:toy -->",
            f"- [{wide}](../results/toy.json)",  # links only
            "x" * PROSE_WIDTH,  # prose at the width
            wide,  # prose past it
            f"  {wide}",  # a list item's continuation is prose too
        ]
    )
    assert long_prose_lines(page) == [(13, PROSE_WIDTH + 1), (14, PROSE_WIDTH + 3)]
