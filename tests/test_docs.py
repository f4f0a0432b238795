"""What the README says about installing is what CI and pyproject.toml do."""

from __future__ import annotations

import re

from tests.conftest import ROOT

README = " ".join((ROOT / "README.md").read_text().split())   # line breaks as spaces


def test_the_torch_version_the_readme_says_ci_tests_is_the_one_ci_installs():
    ci_pin = re.search(r"pip install --quiet torch==([\d.]+)", (ROOT / ".ci" / "run").read_text()).group(1)
    said = re.search(r"CI tests torch ([\d.]+) \(the CPU build\) on Python ([\d.]+)", README)
    assert said and said.group(1) == ci_pin


def test_the_torch_range_the_readme_gives_is_pyprojects():
    low, high = re.search(r'"torch>=([\d.]+),<([\d.]+)"', (ROOT / "pyproject.toml").read_text()).groups()
    assert f"accepts torch {low} or newer, below {high}" in README


def test_every_installed_command_the_readme_names_is_declared():
    scripts = re.findall(r'^(rl-hydra-[a-z]+) = ', (ROOT / "pyproject.toml").read_text(), flags=re.M)
    named = set(re.findall(r"`(rl-hydra-[a-z]+)", README))
    assert named and named <= set(scripts)
