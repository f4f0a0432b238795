"""Build everything a run needs from a composed config and hand it to a loop."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
from omegaconf import DictConfig

from rl_hydra.build import build_runner, check_widths_fit, process_settings
from rl_hydra.config import resolve_device
from rl_hydra.distributed.settings import requested as distributed_requested
from rl_hydra.loops import off_policy, recurrent, session
from rl_hydra.loops.runner import Runner
from rl_hydra.loops.steps import Steps, drive
from rl_hydra.protocols import Agent
from rl_hydra.runs.run_dir import RunDirectory

log = logging.getLogger(__name__)


class UpdateSchedule(Protocol):
    """What `first_update_step` reads: an agent, or the two keys of its config (rl_hydra/verify)."""

    @property
    def learning_starts(self) -> int: ...

    @property
    def train_every(self) -> int: ...


def first_update_step(agent: UpdateSchedule) -> int:
    """The env step of the first update: the first multiple of `train_every` at or after
    `learning_starts` (a vector step of n envs may reach it up to n - 1 steps later)."""
    return -(-max(agent.learning_starts, 1) // agent.train_every) * agent.train_every


FEW_UPDATES = 100  # below this many updates a run has barely begun to learn


def update_count(agent: Agent, total_steps: int) -> int:
    """How many updates a run of `total_steps` env steps makes (one vector env)."""
    first = first_update_step(agent)
    return 0 if first > total_steps else ((total_steps - first) // agent.train_every + 1) * agent.gradient_steps


def warn_if_few_updates(agent: Agent, total_steps: int, step: int = 0) -> None:
    """A run whose budget leaves no or almost no updates says so before it starts (a warning, not
    an error: a run that only collects experience or tests the loop is legitimate); its steps/s
    then measures acting alone."""
    updates, first = update_count(agent, total_steps), first_update_step(agent)
    if updates >= FEW_UPDATES or step >= total_steps:
        return
    what = "no update" if updates == 0 else f"only {updates} update{'s' if updates > 1 else ''}"
    log.warning(
        "this run makes %s: with algo.learning_starts=%d and algo.train_every=%d the first update falls at "
        "step %d of train.total_steps=%d; lower algo.learning_starts or raise train.total_steps",
        what,
        agent.learning_starts,
        agent.train_every,
        first,
        total_steps,
    )


def pick_loop(agent: Agent) -> Callable[[Runner], Steps[None]]:
    """The recurrent loop for agents that carry state between steps, else the off-policy loop."""
    return recurrent.loop if agent.capabilities.recurrent else off_policy.loop


def run(
    cfg: DictConfig,
    run_dir: str | Path | RunDirectory,
    resume: bool = False,
    *,
    on_ready: Callable[[int, torch.device], None] | None = None,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train one run into `run_dir`; returns the summary (also written to summary.json). `running`'s
    steps, driven alone (loops/steps.py).

    With `resume`, continue from `run_dir/checkpoints/last.pt`. Raises ConfigError
    before any step runs when the config cannot work, TrainingDiverged when a loss
    goes non-finite, StopRequested after Ctrl-C/SIGTERM; in the last two cases the
    run directory keeps a good checkpoint and its metrics. The caller's process
    settings (threads, denormals, global RNGs) are as they were when it returns.

    `cfg` is validated already (rl_hydra.commands.launch, rl-hydra-verify: rl_hydra.config.validate_run_config).
    Nothing is written into `run_dir` before `on_ready(step, device)` is called: by then the
    config is validated, the run built and a resumed checkpoint loaded (`step` is where training
    starts), so a caller that refuses there (rl_hydra.commands.launch: the directory's lock) leaves the
    directory as it was. `stop_after`: end after that many env steps, as if the run were
    interrupted there, with the run's own config unchanged (rl-hydra-verify re-runs a prefix).
    """
    return drive(running(cfg, run_dir, resume, on_ready=on_ready, stop_after=stop_after))


def running(
    cfg: DictConfig,
    run_dir: str | Path | RunDirectory,
    resume: bool = False,
    *,
    on_ready: Callable[[int, torch.device], None] | None = None,
    stop_after: int | None = None,
) -> Steps[dict[str, Any]]:
    """`run` as steps, for whoever drives them (one run, or a pack's members)."""
    device = resolve_device(cfg.device)
    directory = RunDirectory.of(run_dir)  # a launch's own object: what it read before the lock is not read again
    if distributed_requested(cfg):  # distributed=apex: actors and replay in Ray, this process learns
        if resume:  # widths the checkpoint cannot hold are refused before the learner builds them
            check_widths_fit(cfg, directory.load_checkpoint("last")["agent"], directory.checkpoints / "last.pt")
        from rl_hydra.distributed.learner import run as learn  # Ray and the learner only for such a run

        return learn(cfg, directory, device, resume, on_ready, stop_after)
    with process_settings(cfg):
        return (yield from _run(cfg, directory, device, resume, on_ready, stop_after))


def _run(
    cfg: DictConfig, run_dir: RunDirectory, device: torch.device, resume: bool, on_ready, stop_after
) -> Steps[dict[str, Any]]:
    checkpoint = run_dir.load_checkpoint("last") if resume else None
    if checkpoint is not None:  # widths the checkpoint cannot hold are refused before they are built
        check_widths_fit(cfg, checkpoint["agent"], run_dir.checkpoints / "last.pt")
    runner = build_runner(cfg, run_dir, device, stop_after)
    agent = runner.agent
    if checkpoint is not None:
        session.restore(runner, checkpoint, run_dir.checkpoints / "last.pt")
    if on_ready is not None:
        on_ready(runner.global_step, device)
    if checkpoint is not None:
        log.info("resuming %s at step %d", run_dir.path, runner.global_step)
    warn_if_few_updates(agent, cfg.train.total_steps, runner.global_step)
    loop = pick_loop(agent)
    summary = yield from session.training(runner, lambda: loop(runner))
    eval_return = summary["eval_return_mean"]
    log.info(
        "finished: eval return %s, %d steps in %.1f s (%.0f steps/s); run directory: %s",
        "none" if eval_return is None else f"{eval_return:.1f}",
        summary["global_step"],
        summary["wall_time_s"],
        summary["steps_per_second"],
        run_dir.path,
    )
    return summary
