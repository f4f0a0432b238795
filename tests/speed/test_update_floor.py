"""scripts/benchmarks/update_floor.py at tiny sizes: the floor's counting of an update's matmuls against
torch.profiler's count in our update, and a record the docs can render. No timing is asserted."""

from __future__ import annotations

import sys

import pytest

from rl_hydra.runs.results import check_record, median_problems, rows_table
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))  # the scripts' folder, as Python puts it first running one
import update_floor  # noqa: E402

TINY = {
    "dqn_cartpole": ["network.hidden_sizes=[16,16]", "algo.batch_size=8"],
    **{
        preset: ["network.actor.hidden_sizes=[16,16]", "network.critic.hidden_sizes=[16,16]", "algo.batch_size=8"]
        for preset in ("sac_pendulum", "td3_pendulum", "tqc_pendulum", "crossq_pendulum")
    },
}


def floor_and_profiler(preset: str, *extra: str) -> tuple[int, int, int]:
    """(the floor's matmuls in one cycle of updates, the profiler's count in as many of ours, the cycle)."""
    case = update_floor.build_case(preset, [*TINY[preset], *extra], fill=64)
    gemms, cycle = update_floor.update_gemms(case.agent)
    floor = [gemm for gemm in gemms if gemm.matmul]
    assert update_floor.matmul_count(update_floor.floor_block(floor)) == len(floor)  # the floor runs what it counts
    return len(floor), update_floor.matmul_count(update_floor.ours_block(case, cycle)), cycle


def test_dqn_floor_counts_the_matmuls_the_profiler_counts_in_one_update():
    # target forward (3 addmm), online forward (3 addmm), backward: 3 grads of weights, 2 of inputs (mm)
    assert floor_and_profiler("dqn_cartpole") == (11, 11, 1)
    # double Q: the online network on s' too
    assert floor_and_profiler("dqn_cartpole", "algo.double_q=true") == (14, 14, 1)


@pytest.mark.parametrize("preset", ["sac_pendulum", "td3_pendulum", "tqc_pendulum", "crossq_pendulum"])
def test_actor_critic_floor_counts_what_the_profiler_counts(preset):
    floor, profiled, cycle = floor_and_profiler(preset)
    assert floor == profiled
    assert cycle == {"td3_pendulum": 2, "crossq_pendulum": 2}.get(preset, 1)


def test_counting_follows_the_layers_and_leaves_out_only_the_critics_one_unit_outputs():
    case = update_floor.build_case("sac_pendulum", TINY["sac_pendulum"], fill=64)
    assert [(la.members, la.fan_in, la.fan_out) for la in update_floor.linear_layers(case.agent.critic)] == [
        (2, 4, 16),  # (s, a): 3 + 1
        (2, 16, 16),
        (2, 16, 1),
    ]
    gemms, _ = update_floor.update_gemms(case.agent)
    left_out = [gemm for gemm in gemms if not gemm.matmul]
    # the 1-unit output layer: target and online forward, grad weight and input, frozen forward and grad input
    assert len(left_out) == 6
    assert all(gemm.members == 2 and 1 in (gemm.cols, gemm.inner) for gemm in left_out)


def test_a_measured_row_makes_a_record_that_renders():
    row = update_floor.measure(
        "dqn_cartpole", updates=3, rounds=3, peers=[], extra=TINY["dqn_cartpole"], compiled=False
    )
    assert len(row["per_seed"]["ours_ms"]) == len(row["per_seed"]["floor_ms"]) == 3
    assert row["floor_matmuls"] == row["profiled_matmuls"] == 11
    record = update_floor.record([row], "python scripts/benchmarks/update_floor.py", rounds=3)
    assert check_record(record, "update_floor_cpu") == []
    assert median_problems(record) == []
    table = rows_table(record)
    assert "dqn_cartpole" in table and "| - |" in table  # no peer asked for: its cells are empty


def test_crossq_has_no_compile_side_and_its_cells_say_so():
    row = update_floor.measure("crossq_pendulum", updates=2, rounds=1, peers=[], extra=TINY["crossq_pendulum"])
    assert "compiled_ms" not in row["per_seed"] and row["compile_s"] is None  # CrossQ does not compile
    record = update_floor.record([row], "python scripts/benchmarks/update_floor.py", rounds=1)
    assert check_record(record, "update_floor_cpu") == [] and "| - |" in rows_table(record)


@pytest.mark.slow  # torch.compile of a tiny SAC's losses: ~20 s
def test_the_compile_side_times_the_same_agent_compiled_and_its_compiling_apart():
    row = update_floor.measure("sac_pendulum", updates=2, rounds=2, peers=[], extra=TINY["sac_pendulum"])
    assert len(row["per_seed"]["compiled_ms"]) == len(row["per_seed"]["compiled_floor"]) == 2
    assert row["compile_s"] > 0
    record = update_floor.record([row], "python scripts/benchmarks/update_floor.py", rounds=2)
    assert check_record(record, "update_floor_cpu") == [] and median_problems(record) == []
