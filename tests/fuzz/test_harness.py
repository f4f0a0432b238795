"""The fuzzer's harness catches what it is there to catch: each invariant broken on purpose by a
probe (code the worker's guarded child runs in place of an entry point) is named."""

from __future__ import annotations

import resource

import pytest

from tests.fuzz.harness import address_space
from tests.fuzz.mutations import BOMB, CONFIG, Set, key

BROKEN = {
    "import": "import tests.fuzz.planted",
    "network": "import socket\nsocket.create_connection(('127.0.0.1', 1), timeout=1)",
    "outside": "open(run_dir + '/../outside/x', 'w').write('x')",
    "changed": "import sys\nopen(run_dir + '/summary.json', 'a').write(' ')\nprint('error: no', file=sys.stderr)\n"
    "code = 2",
    "stderr": "import sys\nprint('error: one\\nerror: two', file=sys.stderr)\ncode = 2",
    "exit": "import sys\nprint('error: three', file=sys.stderr)\ncode = 3",
    "traceback": "raise KeyError('x')",
    "time": "import time\ntime.sleep(30)",
    "memory": "bytearray(3 << 30)",
    "spawn": "import os\nos.system('true')",
}


def test_a_probe_that_breaks_nothing_passes(fuzzer):
    outcome = fuzzer.run("probe", source="import json, sys\nprint('error: refused', file=sys.stderr)\ncode = 2")
    assert outcome.problems == [] and outcome.code == 2


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_invariant_is_named(fuzzer, kind):
    outcome = fuzzer.run("probe", source=BROKEN[kind], timeout=3)
    assert any(problem.startswith(f"{kind}:") for problem in outcome.problems), outcome.describe()


def test_a_second_edit_of_an_alias_bomb_keeps_it_a_bomb(tmp_path):
    """The harness reads a file back to edit it: a bomb planted earlier in the case must not be expanded
    (9**9 strings: it once took pytest's worker to 24 GB and the kernel's OOM killer)."""
    (tmp_path / ".hydra").mkdir()
    (tmp_path / CONFIG).write_text("seed: 0\nlogger: {csv: {}}\n")
    Set(CONFIG, key("logger/csv/note"), BOMB).apply(tmp_path, tmp_path)
    with address_space(1 << 30):
        Set(CONFIG, key("seed"), 1).apply(tmp_path, tmp_path)
    text = (tmp_path / CONFIG).read_text()
    assert len(text) < 10_000 and "seed: 1" in text and "*" in text


def test_the_harness_memory_bound_fails_a_case_and_is_lifted_after():
    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(MemoryError), address_space(256 << 20):
        bytearray(1 << 30)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
