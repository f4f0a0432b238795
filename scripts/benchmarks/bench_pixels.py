"""Pixel DQN speed and replay memory: the update floor, and Atari throughput against Stable-Baselines3.

    python scripts/benchmarks/bench_pixels.py --only floor                 # update costs only, a minute
    python scripts/benchmarks/bench_pixels.py --steps 5000 --repeats 1     # a quick Atari comparison
    python scripts/benchmarks/bench_pixels.py                              # floor + 20k steps x 2 repeats
    python scripts/benchmarks/bench_pixels.py --game ALE/Breakout-v5 --out pixels.json
    python scripts/benchmarks/bench_pixels.py --report pixels.json        # print its figures again

Floor: one update of the Nature CNN Q-network (4x84x84 uint8 -> 512 -> 6) and of the MinAtar
network (4x10x10 bool -> 16 3x3 filters -> 128 -> 6) at batch 32, one torch thread: target
forward on the next observations, online forward, Huber loss, backward, Adam step (our Adam,
torch's fused kernel; no gradient clipping), on one fixed random batch. The figure is the
median over --floor-repeats blocks of the per-update mean (the fastest block is printed too).

Atari: DQN with the Nature CNN, batch 32, one update every 4 env steps, --warmup random steps
then --steps timed steps, buffer --capacity, on ours (`rl_hydra.train`) and SB3 (`DQN("CnnPolicy")`
on make_atari_env + VecFrameStack(4), optimize_memory_usage=True), each side in its own process
with one torch thread, ours and SB3 alternating over --repeats. The timed window is the --steps
env steps after the warm-up (both sides make --steps / 4 updates in it); building, the warm-up
and our one final evaluation episode fall outside it. Memory: the replay buffer's bytes per
transition as allocated, and the process's resident memory (RSS) grown per transition stored:
the least-squares slope of RSS against steps over the window, sampled every 500 steps (pages of
a preallocated buffer become resident as rows are written; single samples move by +-20 MB with
the update's temporaries), next to its peak RSS. The Nature CNN floor is timed again in its own
process before each run and after the last, and each run is set against the blocks just before
and just after it (the machine's speed drifts); the env step alone of each side's preprocessed
env gives the combined floor: steps/s = 1 / (update / 4 + env step).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from self_workers import add_worker_arguments, run_worker, serve_worker  # noqa: E402

LR, GAMMA, TARGET_SYNC_STEPS, EPS_END, EPS_FRACTION = 1e-4, 0.99, 1000, 0.01, 0.1


# --- the update floor (in this process) -----------------------------------------------------
def update_seconds(encoder: str, obs_shape: tuple, dtype, hidden: int, batch: int, updates: int,
                   repeats: int, num_actions: int = 6) -> list[float]:
    """Per-update seconds of `repeats` blocks of `updates` updates each, at one torch thread."""
    import gymnasium as gym
    import torch
    import torch.nn.functional as F

    from rl_hydra.networks.mlp import QNetwork
    from rl_hydra.speed.lean_adam import LeanAdam

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        high = 255 if dtype == np.uint8 else 1
        space = gym.spaces.Box(0, high, obs_shape, dtype)
        net = QNetwork(space, num_actions, hidden_sizes=[hidden], encoder=encoder)
        target = copy.deepcopy(net).requires_grad_(False)
        optimizer = LeanAdam(net.parameters(), lr=LR)
        gen = torch.Generator().manual_seed(0)
        torch_dtype = torch.from_numpy(np.zeros(0, dtype)).dtype
        obs = torch.randint(0, high + 1, (batch, *obs_shape), generator=gen).to(torch_dtype)
        next_obs = torch.randint(0, high + 1, (batch, *obs_shape), generator=gen).to(obs.dtype)
        actions = torch.randint(0, num_actions, (batch,), generator=gen)
        rewards, terminated = torch.rand(batch, generator=gen), torch.zeros(batch)

        def update() -> None:
            with torch.no_grad():
                targets = rewards + GAMMA * (1 - terminated) * target(next_obs).max(dim=1).values
            q_taken = net(obs).gather(1, actions[:, None]).squeeze(1)
            loss = F.smooth_l1_loss(q_taken, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        for _ in range(max(2, updates // 4)):   # warm-up: allocator, Adam state
            update()
        blocks = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(updates):
                update()
            blocks.append((time.perf_counter() - start) / updates)
        return blocks
    finally:
        torch.set_num_threads(threads)


def measure_floor(args) -> dict:
    nature = update_seconds("nature_cnn", (4, 84, 84), np.uint8, 512, 32, args.floor_updates, args.floor_repeats)
    minatar = update_seconds("minatar_cnn", (4, 10, 10), np.bool_, 128, 32, args.floor_updates * 10,
                             args.floor_repeats)
    floor = {"nature_cnn_update_s": statistics.median(nature), "nature_cnn_blocks_s": nature,
             "minatar_cnn_update_s": statistics.median(minatar), "minatar_cnn_blocks_s": minatar}
    print(f"floor, batch 32, 1 torch thread, median of {args.floor_repeats} blocks (fastest): "
          f"Nature CNN update {floor['nature_cnn_update_s'] * 1e3:.1f} ms ({min(nature) * 1e3:.1f}; "
          f"blocks {', '.join(f'{s * 1e3:.1f}' for s in nature)}); "
          f"MinAtar CNN update {floor['minatar_cnn_update_s'] * 1e3:.2f} ms ({min(minatar) * 1e3:.2f}; "
          f"blocks {', '.join(f'{s * 1e3:.2f}' for s in minatar)})", flush=True)
    return floor


def run_floor(job: dict) -> dict:
    """The Nature CNN update floor in a process of its own, next to a run."""
    return {"blocks_s": update_seconds("nature_cnn", (4, 84, 84), np.uint8, 512, 32, job["floor_updates"], 3)}


# --- workers: one side per process --------------------------------------------------------
def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # Linux reports KiB


def our_overrides(job: dict, total: int, log_every: int) -> list[str]:
    return ["algo=dqn", "env=atari", f"env.id={job['game']}", "network.encoder=nature_cnn",
            "network.hidden_sizes=[512]", "algo.batch_size=32", "algo.train_every=4", "algo.gradient_steps=1",
            f"algo.learning_starts={job['warmup']}", f"algo.optimizer.lr={LR}", f"algo.gamma={GAMMA}",
            f"algo.target_update_every={TARGET_SYNC_STEPS // 4}", "algo.exploration.start=1.0",
            f"algo.exploration.end={EPS_END}", f"algo.exploration.fraction={EPS_FRACTION}",
            f"buffer.capacity={job['capacity']}", f"train.total_steps={total}", f"train.eval_every={total}",
            "train.eval_episodes=1", f"train.checkpoint_every={total}", f"train.log_every={log_every}",
            "train.progress=false", "logger=[]", "checkpoint.save_buffer=false", f"seed={job['seed']}",
            f"device={job['device']}", "torch_threads=1"]


def window(marks: dict[int, tuple[float, int]], job: dict) -> dict:
    """Steps/s over the timed window, and RSS growth per transition: the least-squares slope of
    RSS against the step over the window's marks."""
    start, end = job["warmup"], job["warmup"] + job["steps"]
    seconds = marks[end][0] - marks[start][0]
    steps = sorted(step for step in marks if start <= step <= end)
    slope = np.polyfit(steps, [marks[step][1] for step in steps], 1)[0]
    return {"seconds": seconds, "steps_per_s": job["steps"] / seconds, "rss_per_transition": float(slope),
            "rss_at_start": marks[start][1], "rss_at_end": marks[end][1]}


def run_ours(job: dict) -> dict:
    from rl_hydra import train
    from rl_hydra.loops.runner import Runner

    total = job["warmup"] + job["steps"] + 1   # the final step's evaluation falls after the window
    marks: dict[int, tuple[float, int]] = {}
    buffer_info: dict = {}
    write_row = Runner.write_row

    def marking_write_row(runner, with_eval: bool) -> None:   # a log row every log_every steps
        marks[runner.global_step] = (time.perf_counter(), rss_bytes())
        frames = runner.buffer.frames
        buffer_info.update(bytes_per_row=runner.buffer.bytes_per_row, capacity=runner.buffer.capacity,
                           stored=runner.buffer.size,
                           whole_stacks=0 if frames is None else len(frames.first_stacks) + len(frames.final_stacks),
                           stack_bytes=0 if frames is None else int(np.prod(runner.buffer.frames.frame_shape))
                           * runner.buffer.frames.stack)
        write_row(runner, with_eval)

    Runner.write_row = marking_write_row
    with tempfile.TemporaryDirectory() as run_dir:
        train(*our_overrides(job, total, job["log_every"]), run_dir=run_dir)
    info = buffer_info
    extra = info["whole_stacks"] * info["stack_bytes"] / max(info["stored"], 1)   # episode starts and ends
    return {**window(marks, job), "buffer_bytes_per_transition": info["bytes_per_row"],
            "buffer_whole_stacks": info["whole_stacks"], "buffer_stack_bytes_per_transition": extra,
            "peak_rss": peak_rss_bytes()}


def sb3_env(job: dict, seed: int):
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage

    gym.register_envs(ale_py)
    # ALE emits every frame (the wrapper skips 4), sticky actions and the episode limit as ours
    env = make_atari_env(job["game"], n_envs=1, seed=seed,
                         env_kwargs={"frameskip": 1, "repeat_action_probability": 0.25,
                                     "full_action_space": False, "max_num_frames_per_episode": 108000},
                         wrapper_kwargs={"noop_max": 30, "frame_skip": 4, "screen_size": 84,
                                         "terminal_on_life_loss": False, "clip_reward": True})
    return VecTransposeImage(VecFrameStack(env, n_stack=4))


def run_sb3(job: dict) -> dict:
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    start, end = job["warmup"], job["warmup"] + job["steps"]
    marks: dict[int, tuple[float, int]] = {}

    class Marks(BaseCallback):
        # _on_step runs after each env step, before that step's training phase: mark one step
        # later so that the window holds the same steps and updates as ours
        def _on_step(self) -> bool:
            if start <= self.num_timesteps - 1 <= end and (self.num_timesteps - 1) % job["log_every"] == 0:
                marks[self.num_timesteps - 1] = (time.perf_counter(), rss_bytes())
            return True

    env = sb3_env(job, job["seed"])
    model = DQN("CnnPolicy", env, learning_rate=LR, buffer_size=job["capacity"], learning_starts=job["warmup"],
                batch_size=32, tau=1.0, gamma=GAMMA, train_freq=4, gradient_steps=1,
                target_update_interval=TARGET_SYNC_STEPS, exploration_fraction=EPS_FRACTION,
                exploration_initial_eps=1.0, exploration_final_eps=EPS_END, max_grad_norm=10,
                optimize_memory_usage=True, replay_buffer_kwargs={"handle_timeout_termination": False},
                seed=job["seed"], device=job["device"], verbose=0)
    model.learn(total_timesteps=end + 1, callback=Marks())
    buffer = model.replay_buffer
    arrays = [getattr(buffer, name, None) for name in ("observations", "next_observations", "actions", "rewards",
                                                 "dones", "timeouts")]
    nbytes = sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
    return {**window(marks, job), "buffer_bytes_per_transition": nbytes / buffer.buffer_size,
            "peak_rss": peak_rss_bytes()}


def run_env_steps(job: dict) -> dict:
    """Seconds per step of each side's preprocessed env alone, random actions."""
    from rl_hydra.api import compose_train_config
    from rl_hydra.envs import make_env

    cfg = compose_train_config("env=atari", f"env.id={job['game']}")
    ours = make_env(cfg.env, seed=job["seed"])
    sb3 = sb3_env(job, job["seed"])
    sb3.reset()
    result = {}
    for name, env, sample in (("ours", ours, ours.action_space.sample),
                              ("sb3", sb3, lambda: np.array([sb3.action_space.sample()]))):
        for _ in range(100):
            env.step(sample())
        start = time.perf_counter()
        for _ in range(job["env_steps"]):
            env.step(sample())
        result[f"{name}_env_step_s"] = (time.perf_counter() - start) / job["env_steps"]
    return result


WORKERS = {"ours": run_ours, "sb3": run_sb3, "env": run_env_steps, "floor": run_floor}


# --- the comparison -----------------------------------------------------------------------
DIFFERENCES = """remaining differences between the two sides (everything else is set equal: ALE v5 with
frameskip 1 under a 4-frame skip with a max over the last two frames, sticky actions 0.25 per
frame, 108,000-frame limit, 1-30 no-op starts, 84x84 grayscale (INTER_AREA), 4-frame stacks,
clipped rewards, no life loss as terminal, Nature CNN + 512, Huber loss, grad norm 10, Adam
lr 1e-4 eps 1e-8, batch 32, one update per 4 steps, target sync every 1,000 steps = 250
updates, epsilon 1 -> 0.01 over 10% of the run):
  - SB3's AtariWrapper presses FIRE (then action 2) at every reset (FireResetEnv: Pong and Breakout
    have FIRE); ours does not.
  - SB3 makes grayscale from ALE's RGB screen with cv2.cvtColor; ours asks ALE for grayscale
    (gymnasium's AtariPreprocessing): pixel values may differ by a level, and SB3 pays the conversion.
  - SB3's buffer keeps a whole 4-frame stack per transition (optimize_memory_usage: next obs
    from the next row); ours keeps one frame per transition, whole stacks only at episode starts
    and ends.
  - SB3 with optimize_memory_usage needs handle_timeout_termination=False: a truncated episode
    (the 108k-frame limit) is stored as terminal; ours bootstraps from the real last observation.
  - Adam: SB3 runs torch's CPU default, the single-tensor loop (foreach and fused are defaults on
    CUDA only); ours LeanAdam (torch's fused kernel).
  - Ours flushes denormals (flush_denormal=true); SB3 does not.
  - Ours evaluates one greedy episode at the final step (outside the timed window); SB3 none."""


def median(values):
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("floor", "atari"), help="one part only (default: both)")
    parser.add_argument("--game", default="ALE/Pong-v5")
    parser.add_argument("--steps", type=int, default=20000, help="timed env steps after the warm-up")
    parser.add_argument("--warmup", type=int, default=1000, help="random steps before learning (learning_starts)")
    parser.add_argument("--capacity", type=int, default=50000, help="replay buffer size, both sides")
    parser.add_argument("--repeats", type=int, default=2, help="ours/SB3 pairs, alternating which goes first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--floor-updates", type=int, default=20, help="Nature CNN updates per block (MinAtar: 10x)")
    parser.add_argument("--floor-repeats", type=int, default=7)
    parser.add_argument("--env-steps", type=int, default=2000, help="env steps timed for the env-step floor")
    parser.add_argument("--out", type=Path, help="write every figure to this json file")
    parser.add_argument("--report", type=Path, help="print the figures of an --out json again; run nothing")
    add_worker_arguments(parser, WORKERS)
    args = parser.parse_args()
    if serve_worker(args, WORKERS):
        return
    if args.report:
        report(args.report)
        return

    results: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "load_before": os.getloadavg()}
    if args.only != "atari":
        results["floor"] = measure_floor(args)
    if args.only != "floor":
        results["atari"] = compare_atari(args)
    results["load_after"] = os.getloadavg()
    print(f"load average (1, 5, 15 min): before {fmt_load(results['load_before'])}, after "
          f"{fmt_load(results['load_after'])}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
        print(f"wrote {args.out}")


def fmt_load(load) -> str:
    return ", ".join(f"{x:.2f}" for x in load)


FLOOR_BLOCKS = 3   # blocks of each floor timed next to the runs (run_floor)


def run_order(repeat: int) -> tuple[str, str]:
    return ("ours", "sb3") if repeat % 2 == 0 else ("sb3", "ours")


def floor_next_to_runs(job: dict, blocks: list[float]) -> None:
    blocks += run_worker(__file__, "floor", job)["blocks_s"]
    print(f"  Nature CNN update floor: {', '.join(f'{s * 1e3:.1f}' for s in blocks[-FLOOR_BLOCKS:])} ms", flush=True)


def compare_atari(args) -> dict:
    if args.warmup <= 0 or args.steps <= 0:
        sys.exit("--steps and --warmup must be positive")
    log_every = math.gcd(args.warmup, args.steps, 500)   # RSS and time marks
    job = {"game": args.game, "steps": args.steps, "warmup": args.warmup, "capacity": args.capacity,
           "seed": args.seed, "device": args.device, "log_every": log_every, "env_steps": args.env_steps,
           "floor_updates": args.floor_updates}
    env = run_worker(__file__, "env", job)
    print(f"env step alone ({args.game}, random actions, {args.env_steps} steps): ours "
          f"{env['ours_env_step_s'] * 1e3:.2f} ms, SB3 {env['sb3_env_step_s'] * 1e3:.2f} ms", flush=True)
    runs, floor_blocks = {"ours": [], "sb3": []}, []
    for repeat in range(args.repeats):
        for side in run_order(repeat):
            floor_next_to_runs(job, floor_blocks)
            result = run_worker(__file__, side, {**job, "seed": args.seed + repeat})
            runs[side].append(result)
            print(f"repeat {repeat} {side}: {result['steps_per_s']:.1f} steps/s over {args.steps} steps "
                  f"({result['seconds']:.1f} s), buffer {result['buffer_bytes_per_transition']:,.0f} B/transition, "
                  f"RSS +{result['rss_per_transition']:,.0f} B/transition stored, peak RSS "
                  f"{result['peak_rss'] / 1e6:,.0f} MB", flush=True)
    floor_next_to_runs(job, floor_blocks)
    return summarize(vars(args), env, runs, floor_blocks)


def summarize(settings: dict, env: dict, runs: dict, floor_blocks: list[float]) -> dict:
    """Print and return the comparison. Each run is set against the update floor timed just
    before and just after it (the median of those blocks): the machine's speed drifts."""
    steps, repeats = int(settings["steps"]), int(settings["repeats"])
    slots = [floor_blocks[i:i + FLOOR_BLOCKS] for i in range(0, len(floor_blocks), FLOOR_BLOCKS)]
    run_floors, position = {"ours": [], "sb3": []}, 0
    for repeat in range(repeats):
        for side in run_order(repeat):
            run_floors[side].append(median(slots[position] + slots[position + 1]))
            position += 1
    ratios = [o["steps_per_s"] / s["steps_per_s"] for o, s in zip(runs["ours"], runs["sb3"])]
    summary = {"ratio_ours_over_sb3": median(ratios), "ratios": ratios, "env": env,
               "update_floor_blocks_s": floor_blocks}
    print(f"\n{settings['game']}, {steps} steps after {settings['warmup']} warm-up, batch 32, 1 update / 4 steps, "
          f"buffer {settings['capacity']}, medians over {repeats} repeats; update floor timed next to each run "
          f"(all {len(floor_blocks)} blocks: median {median(floor_blocks) * 1e3:.1f} ms, fastest "
          f"{min(floor_blocks) * 1e3:.1f} ms):")
    for side in ("ours", "sb3"):
        side_runs, floors = runs[side], run_floors[side]
        update_floor = [4 / f for f in floors]                                       # steps/s, updates alone
        combined = [1 / (f / 4 + env[f"{side}_env_step_s"]) for f in floors]         # + the env step alone
        s = summary[side] = {
            "steps_per_s": median([r["steps_per_s"] for r in side_runs]), "update_floor_s": floors,
            "of_update_floor": median([r["steps_per_s"] / f for r, f in zip(side_runs, update_floor)]),
            "of_combined_floor": median([r["steps_per_s"] / f for r, f in zip(side_runs, combined)]),
            "buffer_bytes_per_transition": median([r["buffer_bytes_per_transition"] for r in side_runs]),
            "rss_per_transition": median([r["rss_per_transition"] for r in side_runs]),
            "peak_rss": median([r["peak_rss"] for r in side_runs]), "runs": side_runs}
        extra = (f" (+{median([r['buffer_stack_bytes_per_transition'] for r in side_runs]):,.0f} B in whole "
                 f"stacks at episode starts/ends)" if side == "ours" else "")
        print(f"  {side:4}: {s['steps_per_s']:5.1f} steps/s (floor next to each run: "
              f"{', '.join(f'{f * 1e3:.1f}' for f in floors)} ms per update = "
              f"{', '.join(f'{f:.1f}' for f in update_floor)} steps/s, with the env step "
              f"{', '.join(f'{f:.1f}' for f in combined)}); of the update floor {s['of_update_floor']:.2f}, of "
              f"update + env floor {s['of_combined_floor']:.2f}; buffer {s['buffer_bytes_per_transition']:,.0f} "
              f"B/transition{extra}, RSS growth {s['rss_per_transition']:,.0f} B per transition stored, peak RSS "
              f"{s['peak_rss'] / 1e6:,.0f} MB")
    print(f"  ours / SB3 steps/s: {summary['ratio_ours_over_sb3']:.2f} (per repeat: "
          f"{', '.join(f'{r:.2f}' for r in ratios)})\n\n{DIFFERENCES}\n")
    return summary


def report(path: Path) -> None:
    """Print the comparison again from a --out json, running nothing."""
    saved = json.loads(path.read_text())
    if "floor" in saved:
        print(f"floor (in this process): Nature CNN {saved['floor']['nature_cnn_update_s'] * 1e3:.1f} ms, "
              f"MinAtar CNN {saved['floor']['minatar_cnn_update_s'] * 1e3:.2f} ms per update")
    if "atari" in saved:
        atari = saved["atari"]
        summarize(saved["args"], atari["env"], {side: atari[side]["runs"] for side in ("ours", "sb3")},
                  atari["update_floor_blocks_s"])
    print(f"load average (1, 5, 15 min): before {fmt_load(saved['load_before'])}, after "
          f"{fmt_load(saved['load_after'])}")


if __name__ == "__main__":
    main()
