"""One update's cost against its floor: the update's own matmuls alone, on the CPU, one thread.

    python scripts/benchmarks/update_floor.py [--presets dqn_cartpole sac_pendulum ...] [--updates 100]
        [--rounds 9] [--peers sb3 sbx] [--no-compile] [--record results/update_floor_cpu.json]

For each preset (default: DQN on CartPole, the Zoo's values; SAC, TD3, TQC and CrossQ on Pendulum)
it builds our agent from the composed config, fills its buffer with random transitions drawn from
the env's spaces, and times, in rounds that alternate the sides (the order rotating each round):

- ours: `agent.update(batch)` on batches sampled before the clock starts, in the run's process settings
  (rl_hydra/build.py: one thread, denormals flushed, the speed layer's fast paths); and, where the agent
  compiles, the same with `compile=true` (its pure losses torch.compile'd), its compiling seconds apart;
- the floor: every Linear layer's matmuls the update runs, forward and backward (the gradients of
  the weights and of the layer's input), at the update's shapes, as bare `torch.addmm`/`mm` calls
  (`baddbmm`/`bmm` for the critics' stacked ensembles) on tensors allocated once. Which passes an
  update makes is counted per algorithm below (`PASSES`), from its update's code;
- the peers, where installed (the `bench` extra): SB3 / sb3-contrib's and SBX's `model.train(
  gradient_steps=1, batch_size=B)` on the same hyperparameters (scripts/benchmarks/zoo.py), after
  filling their replay buffer with random transitions; SBX's JAX compile (its first call) apart.

Each side's figure is the median over the rounds of the mean ms of a block of `--updates` updates;
a ratio is the median of the rounds' ratios. A delayed actor update (TD3, CrossQ: every 2nd) is
averaged in: a block is a multiple of the delay, and the floor times one cycle of `policy_delay`
updates. `--check` compares the floor's matmul count with torch.profiler's count of mm, addmm,
bmm and baddbmm calls in `policy_delay` of our updates (see `matmul_count`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PRESETS = {  # preset -> the overrides that compose it
    "dqn_cartpole": ["algo=dqn", "env=cartpole"],
    "sac_pendulum": ["algo=sac", "env=pendulum"],
    "td3_pendulum": ["algo=td3", "env=pendulum"],
    "tqc_pendulum": ["algo=tqc", "env=pendulum"],
    "crossq_pendulum": ["algo=crossq", "env=pendulum"],
}
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
SBX_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


# --- the floor: the update's matmuls -------------------------------------------------------
@dataclass(frozen=True)
class Layer:
    """A Linear layer's weight: `members` stacked copies (1: a plain nn.Linear) of (fan_in, fan_out).
    `matmul` False: a critic ensemble's 1-unit output layer, which ours runs as a multiply-and-sum
    (networks/actor_critic.py: a bmm with one column is several times slower on the CPU)."""

    members: int
    fan_in: int
    fan_out: int
    matmul: bool = True


@dataclass(frozen=True)
class Gemm:
    """One matmul (members, rows, inner) @ (members, inner, cols), plus a bias where `bias`."""

    members: int
    rows: int
    inner: int
    cols: int
    bias: bool
    what: str
    matmul: bool = True


def linear_layers(network) -> list[Layer]:
    """The network's Linear layers in the order its forward runs them: nn.Linear's, and each weight of a
    stacked critic ensemble (EnsembleMLP: (N, fan_in, fan_out))."""
    from torch import nn

    from rl_hydra.networks.actor_critic import CriticEnsemble, EnsembleMLP

    layers = []
    for module in network.modules():
        if isinstance(module, nn.Linear):
            layers.append(Layer(1, module.in_features, module.out_features))
        elif isinstance(module, EnsembleMLP):
            # CriticEnsemble's 1-unit output: a multiply-and-sum (QuantileCriticEnsemble's M units: a baddbmm)
            mul_sum = isinstance(module, CriticEnsemble)
            layers += [Layer(*w.shape, matmul=not (mul_sum and w.shape[2] == 1)) for w in module.weights]
    return layers


def members_of(layers: list[Layer], members: int) -> list[Layer]:
    """The same layers for a pass over `members` of the ensemble only (REDQ's subset, TD3's first critic)."""
    return [Layer(members, la.fan_in, la.fan_out, la.matmul) for la in layers]


def forward(layers: list[Layer], rows: int, what: str) -> list[Gemm]:
    """y = x W + b per layer: (rows, in) @ (in, out)."""
    return [Gemm(la.members, rows, la.fan_in, la.fan_out, True, f"{what} forward", la.matmul) for la in layers]


def backward(layers: list[Layer], rows: int, what: str, weights: bool = True, first_input: bool = False) -> list[Gemm]:
    """Per layer, last first: dW = x^T dy, (in, rows) @ (rows, out), where the weights learn (`weights`);
    dx = dy W^T, (rows, out) @ (out, in), for every layer whose input needs a gradient: all but the
    first, and the first too where its input does (`first_input`: actions into a critic, a learnable
    normalization before it)."""
    gemms = []
    for i, la in reversed(list(enumerate(layers))):
        if weights:
            gemms.append(Gemm(la.members, la.fan_in, rows, la.fan_out, False, f"{what} grad weight", la.matmul))
        if i > 0 or first_input:
            gemms.append(Gemm(la.members, rows, la.fan_out, la.fan_in, False, f"{what} grad input", la.matmul))
    return gemms


def dqn_gemms(agent, rows: int) -> list[Gemm]:
    """DQN, per update: the target network forward on s' (no grad); with double Q, the online network on
    s' too (no grad); the online network forward on s and its backward (weights; inputs but the first)."""
    layers = linear_layers(agent.q_net)
    gemms = forward(layers, rows, "target Q(s')")
    if agent.double_q:
        gemms += forward(layers, rows, "online Q(s')")
    return gemms + forward(layers, rows, "Q(s)") + backward(layers, rows, "Q(s)")


def soft_actor_critic_gemms(agent, rows: int) -> list[Gemm]:
    """SAC (REDQ's update with N = M = 2) and TQC, per `policy_delay` updates: each update, the actor
    forward on s' for a' (no grad), the target critics on (s', a') (REDQ: the M of the subset; TQC: all
    N), the critics on (s, a) and their backward (weights; inputs but the first); on one update in
    `policy_delay`, the actor forward on s and the critics (frozen) on (s, pi(s)), then the backward
    through the critics (inputs only, the first too: the actions) and through the actor (weights;
    inputs but the first)."""
    actor, critic = linear_layers(agent.actor), linear_layers(agent.critic)
    target = members_of(critic, getattr(agent, "subset_size", agent.ensemble_size))
    per_update = (
        forward(actor, rows, "actor(s')")
        + forward(target, rows, "target critics(s', a')")
        + forward(critic, rows, "critics(s, a)")
        + backward(critic, rows, "critics(s, a)")
    )
    actor_update = (
        forward(actor, rows, "actor(s)")
        + forward(critic, rows, "frozen critics(s, pi(s))")
        + backward(critic, rows, "frozen critics(s, pi(s))", weights=False, first_input=True)
        + backward(actor, rows, "actor(s)")
    )
    return per_update * agent.policy_delay + actor_update


def td3_gemms(agent, rows: int) -> list[Gemm]:
    """TD3, per `policy_delay` updates: each update, the target actor on s' (no grad), both target
    critics on (s', a~'), both critics on (s, a) and their backward (weights; inputs but the first); on
    every `policy_delay`-th, the actor on s, the first critic (frozen) on (s, mu(s)), the backward through
    it (inputs only, the first too) and through the actor (weights; inputs but the first)."""
    actor, critic = linear_layers(agent.actor), linear_layers(agent.critic)
    per_update = (
        forward(actor, rows, "target actor(s')")
        + forward(critic, rows, "target critics(s', a')")
        + forward(critic, rows, "critics(s, a)")
        + backward(critic, rows, "critics(s, a)")
    )
    first = members_of(critic, 1)
    actor_update = (
        forward(actor, rows, "actor(s)")
        + forward(first, rows, "frozen Q_1(s, mu(s))")
        + backward(first, rows, "frozen Q_1(s, mu(s))", weights=False, first_input=True)
        + backward(actor, rows, "actor(s)")
    )
    return per_update * agent.policy_delay + actor_update


def crossq_gemms(agent, rows: int) -> list[Gemm]:
    """CrossQ, per `policy_delay` updates: each update, the actor on s' (no grad), then ONE critic pass over
    the 2B rows of (s, a) and (s', a') and its backward (weights; every input, the first too: a learnable
    batch renormalization reads it); on every `policy_delay`-th, the actor on s, the critics (frozen) on
    (s, pi(s)), the backward through them (inputs only) and through the actor (weights; every input: its
    body starts with a learnable renormalization too)."""
    actor, critic = linear_layers(agent.actor), linear_layers(agent.critic)
    per_update = (
        forward(actor, rows, "actor(s')")
        + forward(critic, 2 * rows, "critics(s, a; s', a')")
        + backward(critic, 2 * rows, "critics(s, a; s', a')", first_input=True)
    )
    actor_update = (
        forward(actor, rows, "actor(s)")
        + forward(critic, rows, "frozen critics(s, pi(s))")
        + backward(critic, rows, "frozen critics(s, pi(s))", weights=False, first_input=True)
        + backward(actor, rows, "actor(s)", first_input=True)
    )
    return per_update * agent.policy_delay + actor_update


# the counting per algorithm, by the agent's `name` (SAC shares REDQ's update, TQC the same passes)
PASSES: dict[str, Callable[..., list[Gemm]]] = {
    "dqn": dqn_gemms,
    "sac": soft_actor_critic_gemms,
    "redq": soft_actor_critic_gemms,
    "tqc": soft_actor_critic_gemms,
    "td3": td3_gemms,
    "crossq": crossq_gemms,
}


def update_gemms(agent) -> tuple[list[Gemm], int]:
    """Every Linear layer's products in `cycle` consecutive updates, and `cycle` (the actor's delay; 1 for
    DQN). The floor times those with `matmul` (what ours runs as matmuls; the critics' 1-unit output layers,
    a multiply-and-sum in ours and under 1% of the flops, are left out)."""
    return PASSES[agent.name](agent, agent.batch_size), getattr(agent, "policy_delay", 1)


def floor_block(gemms: Sequence[Gemm]) -> Callable[[], None]:
    """A function that runs the matmuls on tensors allocated once (out= each result's own)."""
    import torch

    g = torch.Generator().manual_seed(0)
    calls = []
    for gemm in gemms:
        stacked = gemm.members > 1
        lead = (gemm.members,) if stacked else ()
        a = torch.randn(*lead, gemm.rows, gemm.inner, generator=g)
        b = torch.randn(*lead, gemm.inner, gemm.cols, generator=g)
        out = torch.empty(*lead, gemm.rows, gemm.cols)
        bias = torch.randn(*lead, *((1,) if stacked else ()), gemm.cols, generator=g)
        if gemm.bias:
            op = torch.baddbmm if stacked else torch.addmm
            calls.append((op, (bias, a, b), out))
        else:
            calls.append((torch.bmm if stacked else torch.mm, (a, b), out))

    def run() -> None:
        for op, args, out in calls:
            op(*args, out=out)

    return run


def matmul_count(block: Callable[[], None]) -> int:
    """How many mm, addmm, bmm and baddbmm calls torch.profiler sees in one call of `block`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        block()
    return sum(event.count for event in prof.key_averages() if event.key in MATMULS)


# --- ours -----------------------------------------------------------------------------------
def fill_spaces(observation_space, action_space, rows: int, seed: int):
    """`rows` random transitions of one env's spaces: (obs, actions, rewards, next_obs, terminated, truncated)."""
    import numpy as np

    observation_space.seed(seed)
    action_space.seed(seed + 1)
    rng = np.random.default_rng(seed)
    obs = np.stack([observation_space.sample() for _ in range(rows + 1)])
    actions = np.stack([action_space.sample() for _ in range(rows)])
    rewards = rng.standard_normal(rows).astype(np.float32)
    terminated = rng.random(rows) < 0.05
    return obs[:-1], actions, rewards, obs[1:], terminated, np.zeros(rows, dtype=bool)


@dataclass
class Case:
    preset: str
    overrides: list[str]
    cfg: object
    agent: object
    batches: list
    spaces: tuple


def build_case(preset: str, extra: Sequence[str] = (), fill: int = 2_000, seed: int = 0) -> Case:
    """Our agent and its buffer from the preset's composed config (plus `extra` overrides), the buffer
    filled with `fill` random transitions, and 16 batches sampled from it."""
    import torch

    from rl_hydra.build import build_components, process_settings
    from rl_hydra.commands.api import compose_train_config
    from rl_hydra.config import validate_run_config

    overrides = [*PRESETS.get(preset, []), *extra]
    cfg = compose_train_config(*overrides)
    validate_run_config(cfg)
    with process_settings(cfg):  # as a run builds them: seeded, the speed layer's fast paths on
        agent, env, buffer = build_components(cfg, torch.device("cpu"))
        spaces = (env.single_observation_space, env.single_action_space)
        env.close()
        transitions = fill_spaces(*spaces, fill, seed)
        for i in range(fill):  # one env's row at a time, as a vector step of one env adds it
            buffer.add(*(part[i : i + 1] for part in transitions))
        batches = [buffer.sample(agent.batch_size) for _ in range(16)]
    return Case(preset, overrides, cfg, agent, batches, spaces)


def ours_block(case: Case, updates: int) -> Callable[[], None]:
    """`updates` of our updates in the run's process settings (as a run updates: its threads, denormals
    flushed, the speed layer's fast paths; all undone after the block)."""
    from rl_hydra.build import process_settings

    def run() -> None:
        with process_settings(case.cfg):
            for i in range(updates):
                case.agent.update(case.batches[i % len(case.batches)])

    return run


# --- the peers --------------------------------------------------------------------------------
def peer_block(case: Case, lib: str, updates: int, fill: int = 2_000) -> tuple[Callable[[], None], dict]:
    """(a block of `updates` calls of the peer's train(gradient_steps=1, batch_size=B), what it is);
    SB3 / sb3-contrib (`sb3`) or SBX (`sbx`) on the preset's hyperparameters (scripts/benchmarks/zoo.py)."""
    import gymnasium as gym
    from stable_baselines3.common.logger import Logger

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sb3_peer
    import zoo

    table = zoo.ZOO if lib == "sb3" else {**zoo.ZOO, **zoo.SBX}
    spec = zoo.sb3_spec(table[case.preset], case.cfg.env.id, 1)
    kwargs = {**spec["kwargs"], "learning_starts": 0}
    algo_class = sb3_peer.classes(lib)[spec["algo"]]
    env = gym.make(case.cfg.env.id)
    model = algo_class(
        "MlpPolicy", env, seed=0, device="cpu", verbose=0, policy_kwargs=dict(spec["policy_kwargs"]), **kwargs
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    obs, actions, rewards, next_obs, terminated, _ = fill_spaces(*case.spaces, fill, 0)
    if isinstance(case.spaces[1], gym.spaces.Box):  # SB3's replay holds actions scaled to [-1, 1]
        low, high = case.spaces[1].low, case.spaces[1].high
        actions = 2.0 * (actions - low) / (high - low) - 1.0
    for i in range(fill):
        model.replay_buffer.add(
            obs[i : i + 1], next_obs[i : i + 1], actions[i : i + 1], rewards[i : i + 1], terminated[i : i + 1], [{}]
        )
    batch_size = case.agent.batch_size
    info = {"class": f"{algo_class.__module__.split('.')[0]}.{algo_class.__name__}", "batch_size": batch_size}
    if lib == "sbx":  # JAX compiles on the first call: timed apart
        start = time.perf_counter()
        model.train(gradient_steps=1, batch_size=batch_size)
        info["compile_s"] = round(time.perf_counter() - start, 2)

    def run() -> None:
        for _ in range(updates):
            model.train(gradient_steps=1, batch_size=batch_size)

    return run, info


def peer_version(lib: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sbx-rl" if lib == "sbx" else "stable-baselines3")
    except PackageNotFoundError:
        return None


# --- timing -----------------------------------------------------------------------------------
def interleaved(blocks: dict[str, Callable[[], None]], per_block: dict[str, int], rounds: int) -> dict[str, list]:
    """ms per update of each side in each round: the sides alternate, the order rotating each round."""
    names = list(blocks)
    times: dict[str, list] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            blocks[name]()
            times[name].append((time.perf_counter() - start) * 1e3 / per_block[name])
    return times


def measure(
    preset: str, updates: int, rounds: int, peers: Sequence[str], extra: Sequence[str] = (), compiled: bool = True
) -> dict:
    """One row: each side's per-round ms per update, their medians and their ratios to the floor."""
    import torch

    from rl_hydra.build import compile_agent, compiles

    case = build_case(preset, extra)
    every, cycle = update_gemms(case.agent)
    gemms = [gemm for gemm in every if gemm.matmul]
    updates = -(-updates // cycle) * cycle  # whole cycles of the delayed actor update
    floor_cycle = floor_block(gemms)
    counted = matmul_count(ours_block(case, cycle))

    def floor() -> None:
        for _ in range(updates // cycle):
            floor_cycle()

    blocks, per_block = {"ours": ours_block(case, updates), "floor": floor}, {"ours": updates, "floor": updates}
    if compiled and compiles(case.agent):  # compile=true: the same agent with its pure losses torch.compile'd
        compiled = dataclasses.replace(case, agent=copy.deepcopy(case.agent))
        compile_agent(compiled.agent)
        blocks["compiled"], per_block["compiled"] = ours_block(compiled, updates), updates
    peer_info, missing = {}, []
    for lib in peers:
        if peer_version(lib) is None:
            missing.append(f"{lib}: not installed")
            continue
        try:
            blocks[lib], peer_info[lib] = peer_block(case, lib, updates)
        except (KeyError, ImportError) as error:  # a preset the peer's table lacks
            missing.append(f"{lib}: {type(error).__name__} {error}")
            continue
        per_block[lib] = updates
    first_block_s = {}
    for side, block in blocks.items():  # warm-up: lazy optimizer state, allocator, caches, compiling
        start = time.perf_counter()
        block()
        first_block_s[side] = round(time.perf_counter() - start, 2)
    load = [os.getloadavg()[0]]
    ms = interleaved(blocks, per_block, rounds)
    load.append(os.getloadavg()[0])
    per_seed = {f"{side}_ms": [round(v, 4) for v in values] for side, values in ms.items()}
    for side in ms:
        if side != "floor":
            per_seed[f"{side}_floor"] = [round(a / f, 3) for a, f in zip(ms[side], ms["floor"])]
    summary = {key: round(statistics.median(values), 4) for key, values in per_seed.items()}
    return {
        "id": preset,
        "label": f"{type(case.agent).__name__}, {case.cfg.env.id} ({preset})",
        "plot_label": type(case.agent).__name__,
        "overrides": case.overrides,
        "batch_size": case.agent.batch_size,
        "policy_delay": cycle,
        "updates_per_block": updates,
        "floor_matmuls": round(len(gemms) / cycle, 2),
        "left_out_per_update": round((len(every) - len(gemms)) / cycle, 2),
        "floor_gflop_per_update": round(sum(2 * g.members * g.rows * g.inner * g.cols for g in gemms) / cycle / 1e9, 4),
        "profiled_matmuls": round(counted / cycle, 2),
        "layers": {
            name: [list(vars(la).values()) for la in linear_layers(getattr(case.agent, name))]
            for name in ("q_net", "actor", "critic")
            if hasattr(case.agent, name)
        },
        "peers": {**peer_info, **{m.split(":")[0]: m for m in missing}},
        # compile=true's first block of updates, torch.compile's tracing and code generation included
        "compile_s": first_block_s.get("compiled"),
        "load": [round(v, 2) for v in load],
        "load_before": round(load[0], 2),
        "load_after": round(load[1], 2),
        "torch_threads": torch.get_num_threads(),
        "per_seed": per_seed,
        "summary": summary,
    }


def record(rows: list[dict], command: str, rounds: int) -> dict:
    import gymnasium
    import torch

    return {
        "name": "update_floor_cpu",
        "title": "One update against its floor (its own matmuls alone), ms per update, CPU, one thread",
        "topic": "benchmark",
        "status": "adopted",
        "reason": None,
        "command": command,
        "overrides": [],
        "seeds": list(range(rounds)),
        "per": "round",
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {
            "cpu": cpu_name(),
            "cores": os.cpu_count(),
            "device": "cpu",
            "torch_threads": 1,
            "load": "loadavg (1 min) {:.1f} to {:.1f}".format(
                min(v for r in rows for v in r["load"]), max(v for r in rows for v in r["load"])
            ),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "gymnasium": gymnasium.__version__,
        },
        "peer": {
            "name": "stable-baselines3 / sb3-contrib; SBX",
            "version": f"{peer_version('sb3')}; sbx-rl {peer_version('sbx')}",
        },
        "source": None,
        "notes": [
            "ours: agent.update(batch) on batches sampled beforehand, in the run's process settings (denormals "
            "flushed, the speed layer's fast paths); SB3 / SBX: model.train(gradient_steps=1, batch_size=B), which "
            "samples its batch from its replay inside (ours does not).",
            "floor: every Linear layer's matmuls of the update (forward; backward: grad of the weights and of "
            "the input), at the update's shapes, as bare addmm / mm (baddbmm / bmm for the stacked critic "
            "ensembles) on preallocated tensors; the passes per algorithm: scripts/benchmarks/update_floor.py. "
            "Left out of the floor: the critics' 1-unit output layers (SAC, TD3, CrossQ), which ours runs as a "
            "multiply-and-sum (a bmm of one column is several times slower on the CPU), under 1% of the flops; "
            "so the floor's matmul count is torch.profiler's count of mm, addmm, bmm and baddbmm in our update.",
            "SBX's DQN has no gradient clipping (ours and SB3's clip at norm 10).",
            "Each side: the median over rounds of a block's mean; sides alternate, order rotating; a ratio is the "
            "median of the rounds' ratios. The delayed actor updates (TD3, CrossQ: every 2nd) are averaged in.",
            "SBX: JAX on one core (XLA_FLAGS), its compile (first call) apart, in the row's peers.",
            "compile=true: the same agent with its pure loss functions torch.compile'd (forward and backward; the "
            "optimizer step stays LeanAdam's fused kernel); its compiling seconds are its first block's, apart. "
            "CrossQ does not compile (its losses update the normalization statistics in place).",
            "Each row's `load`: the 1-minute load average before and after its rounds (2 cores). A loaded machine "
            "slows the small updates (DQN's: many small ops) more than their floor: read the ratios with it.",
        ],
        "columns": [
            {"header": "preset", "format": "{label}", "align": "left"},
            {"header": "batch", "format": "{batch_size}"},
            {"header": "ours (ms)", "format": "{ours_ms:.3f}"},
            {"header": "SB3 / sb3-contrib (ms)", "format": "{sb3_ms:.3f}"},
            {"header": "SBX (ms)", "format": "{sbx_ms:.3f}"},
            {"header": "ours, compile=true (ms)", "format": "{compiled_ms:.3f}"},
            {"header": "floor (ms)", "format": "{floor_ms:.3f}"},
            {"header": "ours / floor", "format": "{ours_floor:.2f}"},
            {"header": "SB3 / floor", "format": "{sb3_floor:.2f}"},
            {"header": "SBX / floor", "format": "{sbx_floor:.2f}"},
            {"header": "compile=true / floor", "format": "{compiled_floor:.2f}"},
            {"header": "compiling (s)", "format": "{compile_s:.1f}"},
            {
                "header": "matmuls an update: floor, profiler",
                "format": "{floor_matmuls:g}, {profiled_matmuls:g}",
            },
            {
                "header": "load before, after",
                "format": "{load_before:.1f}, {load_after:.1f}",
            },
        ],
        "rows": rows,
        "plot": {
            "keys": ["ours_floor", "compiled_floor", "sb3_floor", "sbx_floor"],
            "names": ["ours", "ours, compile=true", "SB3 / sb3-contrib", "SBX"],
            "ylabel": "ms per update / floor's ms",
            "log": True,  # DQN's small updates sit several times further from their floor than the rest
            "lines": [[1.0, "the floor"], [1.5, "1.5x the floor"]],
            "caption": "Each side's ms per update over its floor's (its own matmuls alone), a point per round, "
            "a black bar at the median, on a log scale. CrossQ has no compile=true points: it does not compile.",
        },
    }


def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def table(rows: list[dict]) -> str:
    def cell(row: dict, key: str, spec: str = ".3f") -> str:
        value = row["summary"].get(key)
        return "-" if value is None else format(value, spec)

    head = f"{'preset':<16} {'ours':>8} {'SB3':>8} {'SBX':>8} {'floor':>8} {'ours/fl':>8} {'SB3/fl':>8} {'SBX/fl':>8}"
    lines = [head + "   (ms per update; matmuls floor/profiled)"]
    for r in rows:
        lines.append(
            f"{r['id']:<16} {cell(r, 'ours_ms'):>8} {cell(r, 'sb3_ms'):>8} {cell(r, 'sbx_ms'):>8} "
            f"{cell(r, 'floor_ms'):>8} {cell(r, 'ours_floor', '.2f'):>8} {cell(r, 'sb3_floor', '.2f'):>8} "
            f"{cell(r, 'sbx_floor', '.2f'):>8}   {r['floor_matmuls']:g}/{r['profiled_matmuls']:g}"
        )
        for note in r["peers"].values():
            if isinstance(note, str):
                lines.append(f"{'':<16} {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--updates", type=int, default=100, help="updates per timed block")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--peers", nargs="*", default=["sb3", "sbx"], choices=["sb3", "sbx"])
    parser.add_argument("--record", type=Path, help="write the rows as a results/ record")
    parser.add_argument("--no-compile", action="store_true", help="leave out the compile=true side")
    args = parser.parse_args(argv)
    os.environ.setdefault("XLA_FLAGS", SBX_XLA_FLAGS)  # before JAX is imported: SBX on one core
    import torch

    from rl_hydra.runs.results import dump

    torch.set_num_threads(1)
    rows = [
        measure(preset, args.updates, args.rounds, args.peers, compiled=not args.no_compile) for preset in args.presets
    ]
    print(table(rows))
    if args.record:
        command = "python scripts/benchmarks/update_floor.py " + " ".join(argv if argv is not None else sys.argv[1:])
        args.record.write_text(dump(record(rows, command.strip(), args.rounds)))
        print(f"wrote {args.record}")


if __name__ == "__main__":
    main()
