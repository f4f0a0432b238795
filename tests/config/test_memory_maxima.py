"""Sizes that memory scales with have a maximum in the schema (issue #74, finding 16): a width, a
batch or a count past it is one line naming the key and the limit, while composing, before a run
directory is taken; the sizes of real runs (4096-wide layers, a 10M-row buffer) still pass."""

import subprocess
import sys

import pytest

from rl_hydra.errors import ConfigError
from rl_hydra.schema import validate_config
from tests.conftest import ROOT, TINY, compose_config

TOO_LARGE = [
    (["network.hidden_sizes=[100000000]"], "network.hidden_sizes[0]=100000000 is out of range", "<= 16384"),
    (["algo.batch_size=1000000000000"], "algo.batch_size=1000000000000 is out of range", "<= 65536"),
    (["algo=drqn", "network.lstm_size=1000000"], "network.lstm_size=1000000 is out of range", "<= 16384"),
    (["algo=qr_dqn", "algo.num_quantiles=100000"], "algo.num_quantiles=100000 is out of range", "<= 4096"),
    (["algo=iqn", "network.embedding_dim=100000"], "network.embedding_dim=100000 is out of range", "<= 16384"),
]


@pytest.mark.parametrize("overrides, refusal, limit", TOO_LARGE, ids=[o[-1] for o, _, _ in TOO_LARGE])
def test_a_size_past_what_memory_holds_is_one_line_naming_the_limit(overrides, refusal, limit):
    with pytest.raises(ConfigError) as error:
        validate_config(compose_config(*overrides))
    message = str(error.value)
    assert message.startswith(refusal) and limit in message and "\n" not in message, message


def test_the_sizes_of_real_runs_pass():
    validate_config(
        compose_config("network.hidden_sizes=[4096,4096]", "algo.batch_size=4096", "buffer.capacity=10000000")
    )


@pytest.mark.parametrize(
    "override, refusal",
    [
        ("network.hidden_sizes=[100000000]", "network.hidden_sizes[0]=100000000 is out of range"),
        ("algo.batch_size=1e12", "algo.batch_size=1000000000000 is out of range"),
    ],
)
def test_a_launch_past_a_limit_under_an_address_space_limit_is_one_line_and_no_directory(tmp_path, override, refusal):
    command = f"ulimit -v 8000000; exec {sys.executable} train.py '{override}' "
    command += " ".join(TINY) + f" hydra.run.dir={tmp_path / 'run'}"
    result = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert refusal in lines[0] and not (tmp_path / "run").exists()
