"""The fuzzer's harness catches what it is there to catch: each invariant broken on purpose by a
probe (code the worker's guarded child runs in place of an entry point) is named."""

from __future__ import annotations

import pytest

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
