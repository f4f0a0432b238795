"""The fuzzer's harness catches what it is there to catch: each invariant broken on purpose by a
probe (code the worker's guarded child runs in place of an entry point) is named."""

from __future__ import annotations

import resource
import shutil
import zipfile

import pytest

from tests.fuzz.archive import HOWS, PADDING, Archive
from tests.fuzz.harness import Outcome, address_space, judge, network_namespace, remove_tree, snapshot
from tests.fuzz.mutations import BOMB, CONFIG, LAST, HardLink, Nest, Set, Swap, key

# a connection made in C, past the audit hook (as pygame's X11 one): to the display $DISPLAY names
X11_IN_C = """import ctypes, os, socket, struct
libc = ctypes.CDLL(None)
port = 6000 + int(os.environ["DISPLAY"].rpartition(":")[2])
address = struct.pack("<HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton("127.0.0.1"))
fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
libc.connect(fd, address, len(address))
"""
FORKS = """import os, time
for _ in range(os.cpu_count() + 8):
    if os.fork() == 0:
        time.sleep(10)
        os._exit(0)
time.sleep(10)
"""

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
    "connection": X11_IN_C,
    "processes": FORKS,
    # made and removed by the handle of a folder outside: only the guard sees it
    "outside ": "import os\nfd = os.open(run_dir + '/../outside', os.O_RDONLY)\n"
    "os.close(os.open('x', os.O_WRONLY | os.O_CREAT, dir_fd=fd))\nos.unlink('x', dir_fd=fd)",
}


def test_a_probe_that_breaks_nothing_passes(fuzzer):
    outcome = fuzzer.run("probe", source="import json, sys\nprint('error: refused', file=sys.stderr)\ncode = 2")
    assert outcome.problems == [] and outcome.code == 2


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_invariant_is_named(fuzzer, kind):
    outcome = fuzzer.run("probe", source=BROKEN[kind], timeout=3)
    assert any(problem.startswith(f"{kind.strip()}:") for problem in outcome.problems), outcome.describe()


def test_a_write_by_the_run_s_handle_passes(fuzzer):
    """A file made relative to the run directory's handle, then renamed, and the handle's folder named by
    /proc/self/fd (as a library given it makes it): the guard places both in the run."""
    source = ("import os\nfd = os.open(run_dir, os.O_RDONLY)\nos.close(os.open('.x.tmp', os.O_WRONLY | os.O_CREAT, "
              "dir_fd=fd))\nos.replace('.x.tmp', 'x', src_dir_fd=fd, dst_dir_fd=fd)\n"
              "os.makedirs(f'/proc/self/fd/{fd}', exist_ok=True)")  # fmt: skip
    outcome = fuzzer.run("probe", source=source, timeout=5)
    assert outcome.problems == [] and outcome.changed == ["+x"], outcome.describe()


def test_an_append_through_a_hard_link_is_a_write_outside(fuzzer):
    source = "open(run_dir + '/train.log', 'a').write('appended')"
    outcome = fuzzer.run("probe", [HardLink("train.log", "in")], source=source, timeout=5)
    assert any(problem.startswith("outside:") for problem in outcome.problems), outcome.describe()


def test_a_write_by_path_during_a_swap_lands_outside_and_the_folder_is_put_back(fuzzer):
    source = (
        "import time\nfor n in range(400):\n    open(f'{run_dir}/checkpoints/x{n}', 'w').close()\n    time.sleep(1e-3)"
    )
    outcome = fuzzer.run("probe", [Swap("checkpoints"), Swap("checkpoints")], source=source, timeout=10)
    assert any(problem.startswith("outside:") for problem in outcome.problems), outcome.describe()
    assert all(name.startswith("+checkpoints/x") for name in outcome.changed), outcome.changed


def test_the_network_namespace_is_left_out_where_it_is_not_wanted_or_not_there(monkeypatch):
    monkeypatch.setenv("RL_HYDRA_FUZZ_NETNS", "0")
    assert network_namespace() == []
    monkeypatch.delenv("RL_HYDRA_FUZZ_NETNS")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert network_namespace() == []


@pytest.mark.skipif(not network_namespace(), reason="unshare -rn does not work here")
def test_the_worker_runs_in_a_network_namespace_of_its_own(fuzzer):
    source = "import socket\ncode = 0 if [name for _, name in socket.if_nameindex()] == ['lo'] else 3"
    outcome = fuzzer.run("probe", source=source, timeout=5)
    assert fuzzer.worker.ready["netns"] and outcome.code == 0, outcome.describe()


def test_evaluate_may_change_eval_alone():
    answer, ended = {"status": 0, "timed_out": False, "wall_s": 1}, [{"kind": "end", "detail": {"code": 0}}]
    outcome = Outcome(
        "evaluate", "finished", [], answer, "", "", ended, ["+eval/x.json", "~checkpoints/last.pt"], [], ""
    )
    assert judge(outcome, {}) == ["changed: evaluate changed more than eval/: ~checkpoints/last.pt"]


@pytest.mark.parametrize("how", HOWS)
def test_an_archive_rewrite_is_a_zip_of_the_shape_it_names(fuzzer, tmp_path, how):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / LAST).write_bytes((fuzzer.bases["finished"] / LAST).read_bytes())
    assert Archive(LAST, how).apply(run, tmp_path)
    with zipfile.ZipFile(run / LAST) as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    if how == "bomb":
        assert infos[0].file_size > PADDING and (run / LAST).stat().st_size < 8 << 20
    assert (len(names) != len(set(names))) == how.startswith("duplicate_")
    assert any("../" in name for name in names) == how.startswith("dotdot")
    assert all(info.compress_type == zipfile.ZIP_DEFLATED for info in infos) == (how == "deflated")


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


def test_a_snapshot_and_a_sandbox_s_removal_take_1200_nested_folders(tmp_path):
    (tmp_path / "tb").mkdir()
    Nest("tb", 1200).apply(tmp_path, tmp_path)
    assert len(snapshot(tmp_path)) == 1201
    remove_tree(tmp_path / "tb")
    assert not (tmp_path / "tb").exists()


def test_the_harness_memory_bound_fails_a_case_and_is_lifted_after():
    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(MemoryError), address_space(256 << 20):
        bytearray(1 << 30)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
