"""A pack's batched update (rl_hydra/loops/pack_updates.py) is each member's own update, up to float rounding:
the same losses, priorities, weights, Adam moments, target networks and learning-rate schedule, from
the same initial weights and batches, over several updates and past target updates; members with their
own learning rates, gammas and clipping; checkpoints that hold each member's tensors only; and the
agents it cannot batch are updated alone."""

from __future__ import annotations

import copy
import io

import pytest
import torch

from rl_hydra.algos.dqn import DQN
from rl_hydra.build import build_components, process_settings
from rl_hydra.loops.pack import each_alone
from rl_hydra.loops.pack_updates import PackedUpdates, refusal
from rl_hydra.loops.steps import UpdateWanted
from rl_hydra.runs.run_dir import own_storages
from tests.conftest import compose_config, play_at_random

SMALL = ["network.hidden_sizes=[32,32]", "algo.batch_size=16", "algo.target_update_every=3"]


def members(algo: str, *overrides_each: list[str]):
    """One agent and a filled buffer per member, each built from its seed as a run builds it."""
    built = []
    for k, overrides in enumerate(overrides_each):
        cfg = compose_config(f"algo={algo}", f"seed={k}", *SMALL, *overrides)
        with process_settings(cfg):
            agent, env, buffer = build_components(cfg, torch.device("cpu"))
            play_at_random(env, buffer, 64, seed=k)
            env.close()
        built.append((agent, buffer))
    return built


def assert_close(a, b, what):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize(
    ("algo", "extra"),
    [
        ("dqn", [[], [], []]),
        ("dqn", [["algo.double_q=true", "algo.optimizer.lr=1e-3"], ["algo.double_q=true", "algo.optimizer.lr=3e-3"]]),
        ("qr_dqn", [[], ["algo.max_grad_norm=0.1"]]),
        ("c51", [["algo.final_lr_fraction=0.1"], ["algo.final_lr_fraction=0.1"]]),
        ("iqn", [["network.head_hidden_sizes=[]"], ["network.head_hidden_sizes=[]"], ["algo.double_q=true"]]),
    ],
)
def test_the_batched_update_is_each_members_own(algo, extra):
    built = members(algo, *extra)
    alone = [copy.deepcopy(agent) for agent, _ in built]
    packed = [agent for agent, _ in built]
    updates = PackedUpdates(each_alone, min_members=2)
    updates.alone_on_cpu = ()  # IQN too: its batched update is the one a GPU pack takes
    for step in range(7):
        batches = [next(iter(buffer.sample_batches(agent.batch_size, 1))) for agent, buffer in built]
        for agent in (*alone, *packed):
            agent.explore_steps = 100 * step  # the learning-rate schedule moves
        theirs = each_alone([UpdateWanted(a, b) for a, b in zip(alone, batches, strict=True)])
        ours = updates([UpdateWanted(a, b) for a, b in zip(packed, batches, strict=True)])
        assert updates.stacks and all(stack is not None for stack in updates.stacks.values()), "batched"
        for k, (mine, own) in enumerate(zip(ours, theirs, strict=True)):
            assert_close(mine.metrics["loss"], own.metrics["loss"], f"member {k} loss at update {step}")
            if own.priorities is not None:
                assert_close(mine.priorities, own.priorities, f"member {k} priorities")
    for k, (mine, own) in enumerate(zip(packed, alone, strict=True)):
        assert mine.updates == own.updates == 7
        for name in ("q_net", "target_net"):
            for key, value in own.state_dict()[name].items():
                assert_close(mine.state_dict()[name][key], value, f"member {k} {name}.{key}")
        ours_state, theirs_state = mine.optimizer.state_dict()["state"], own.optimizer.state_dict()["state"]
        for index, state in theirs_state.items():
            for key in ("exp_avg", "exp_avg_sq", "step"):
                assert_close(ours_state[index][key].float(), state[key].float(), f"member {k} adam {key}")
        assert mine.optimizer.param_groups[0]["lr"] == pytest.approx(own.optimizer.param_groups[0]["lr"])


def saved_bytes(state) -> bytes:
    file = io.BytesIO()
    torch.save(state, file)
    return file.getvalue()


def test_a_members_checkpoint_holds_its_own_tensors_only():
    built = members("dqn", [], [])
    solo = copy.deepcopy(built[0][0])
    batches = [next(iter(buffer.sample_batches(agent.batch_size, 1))) for agent, buffer in built]
    each_alone([UpdateWanted(solo, batches[0])])
    PackedUpdates(each_alone, min_members=2)(
        [UpdateWanted(agent, batch) for (agent, _), batch in zip(built, batches, strict=True)]
    )
    agent = built[0][0]
    assert agent.params[0].untyped_storage().nbytes() > agent.params[0].nbytes  # a view of the stack
    as_views = saved_bytes(agent.state_dict())  # torch.save writes each view's whole storage: both members
    owned = saved_bytes(own_storages(agent.state_dict()))  # what the run directory writes
    assert len(as_views) > 1.5 * len(saved_bytes(solo.state_dict()))
    assert abs(len(owned) - len(saved_bytes(solo.state_dict()))) < 1024
    loaded = torch.load(io.BytesIO(owned), weights_only=True)
    assert torch.equal(loaded["q_net"]["net.0.weight"], agent.params[0].detach())


class DrawingDQN(DQN):
    """A loss that draws a random number of its own, not through `loss_draws`: what vmap cannot batch."""

    def loss(self, batch):
        loss, priorities, metrics = super().loss(batch)
        return loss * (1 + 1e-3 * torch.rand(())), priorities, metrics


def test_agents_it_cannot_batch_are_updated_alone(caplog):
    built = members("dqn", [], [])
    agents = [agent for agent, _ in built]
    for agent in agents:
        agent.__class__ = DrawingDQN
    assert refusal(agents) is None
    alone = [copy.deepcopy(agent) for agent in agents]
    updates = PackedUpdates(each_alone, min_members=2)
    for step in range(4):  # the first round tries vmap and falls back; each is the update alone, bit for bit
        batches = [next(iter(buffer.sample_batches(agent.batch_size, 1))) for agent, buffer in built]
        torch.manual_seed(step)  # the loss's draw, the same on both sides
        with caplog.at_level("INFO", logger="rl_hydra.loops.pack_updates"):
            ours = updates([UpdateWanted(agent, batch) for agent, batch in zip(agents, batches, strict=True)])
        torch.manual_seed(step)
        theirs = each_alone([UpdateWanted(agent, batch) for agent, batch in zip(alone, batches, strict=True)])
        assert [a.metrics["loss"] for a in ours] == [a.metrics["loss"] for a in theirs], step
    assert "each member updates alone: vmap cannot batch DrawingDQN.loss" in caplog.text
    for mine, own in zip(agents, alone, strict=True):
        assert mine.updates == own.updates == 4
        assert all(torch.equal(a, b) for a, b in zip(mine.params, own.params, strict=True))
    assert refusal([agents[0]]) == "a pack of one"


def test_iqn_members_draw_the_fractions_they_draw_alone():
    """The batched update takes each member's fractions from its own generator, as its update alone does."""
    built = members("iqn", [], [])
    alone = [copy.deepcopy(agent) for agent, _ in built]
    batches = [next(iter(buffer.sample_batches(agent.batch_size, 1))) for agent, buffer in built]
    updates = PackedUpdates(each_alone, min_members=2)
    updates.alone_on_cpu = ()
    updates([UpdateWanted(a, b) for (a, _), b in zip(built, batches, strict=True)])
    assert all(stack is not None for stack in updates.stacks.values()), "batched"
    each_alone([UpdateWanted(a, b) for a, b in zip(alone, batches, strict=True)])
    for (mine, _), own in zip(built, alone, strict=True):
        assert torch.equal(mine.tau_generator.get_state(), own.tau_generator.get_state())
    assert not torch.equal(built[0][0].tau_generator.get_state(), built[1][0].tau_generator.get_state())


def test_iqn_on_the_cpu_updates_alone(caplog):
    built = members("iqn", [], [])
    with caplog.at_level("INFO", logger="rl_hydra.loops.pack_updates"):
        PackedUpdates(each_alone, min_members=2)([UpdateWanted(a, b.sample(a.batch_size)) for a, b in built])
    assert "each member updates alone: IQN on the CPU updates faster alone" in caplog.text


def test_the_packs_update_has_the_speed_layers_stand_ins_in_place():
    """build.pack_updates: the batched update's quantile loss is the closed form, the plain one after it."""
    from rl_hydra import losses
    from rl_hydra.build import pack_updates

    built = members("qr_dqn", [], [])
    seen = []
    plain = losses.quantile_huber_per_sample
    for agent, _ in built:
        agent.loss_draws = lambda batch: seen.append(losses.quantile_huber_per_sample) or ()
    update = pack_updates(fast_paths=True, min_members=2)
    update([UpdateWanted(a, next(iter(b.sample_batches(a.batch_size, 1)))) for a, b in built])
    assert seen and all(chosen is not plain for chosen in seen)
    assert losses.quantile_huber_per_sample is plain


def test_a_deep_copy_of_a_built_agent_updates_its_own_weights():
    """The speed layer's update wrapper goes with the copy (a closure would step the original's weights)."""
    ((agent, buffer),) = members("dqn", [])
    twin, before = copy.deepcopy(agent), agent.params[0].detach().clone()
    twin.update(next(iter(buffer.sample_batches(agent.batch_size, 1))))
    assert torch.equal(agent.params[0], before) and not torch.equal(twin.params[0], before)


def test_the_benchmark_times_a_round_alone_and_batched():
    import subprocess
    import sys

    from tests.conftest import ROOT

    script = ROOT / "scripts" / "benchmarks" / "packed_sweep.py"
    done = subprocess.run(
        [sys.executable, str(script), "network.hidden_sizes=[8]", "algo.batch_size=8", "--updates", "--seeds", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dqn_cartpole network.hidden_sizes=[8] algo.batch_size=8 x2: alone " in done.stdout
    assert "batched / alone" in done.stdout
