"""Build everything a run needs from a composed config and hand it to a loop."""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from torch import nn

from rl_hydra import distributed, speed
from rl_hydra.algos.common import compile_pure_methods
from rl_hydra.buffers.device import build_on_device
from rl_hydra.config import ConfigError, resolve_device, run_updates
from rl_hydra.envs import make_env
from rl_hydra.fit import algo_options, check_fit, import_class
from rl_hydra.loops import off_policy, recurrent
from rl_hydra.loops.runner import Runner, StopRequested, TrainingDiverged
from rl_hydra.loops.settings import RunSettings
from rl_hydra.protocols import Agent
from rl_hydra.runs.run_dir import RunDirectory, RunError, check_fits, check_optimizer_state, misfit

log = logging.getLogger(__name__)


def build(node: DictConfig, key: str, **kwargs: Any) -> Any:
    """`instantiate` with its errors turned into one ConfigError line naming the group."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        detail = str(cause) if cause is not None else str(error).splitlines()[-1]
        raise ConfigError(f"cannot build {key} ({node.get('_target_')}): {detail}") from error


@contextlib.contextmanager
def process_settings(cfg: DictConfig) -> Iterator[None]:
    """A run's process-wide settings, undone when it ends, also on error: its torch CPU threads,
    whether denormal numbers are flushed to zero, and the seeds of Python's, numpy's and torch's
    global generators; and whether the speed layer's fast paths run (rl_hydra/speed).

    Flushing: Adam's moving averages of weights whose gradient is (nearly) always zero, e.g.
    behind dead ReLUs, decay into the denormal range, and every update then pays for the slow
    arithmetic on them (docs/benchmark.md)."""
    threads, flushing = torch.get_num_threads(), flushes_denormals()
    rng = (
        random.getstate(),
        np.random.get_state(),
        torch.get_rng_state(),
        torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
    )
    try:
        with speed.enabled(bool(cfg.get("fast_paths", True))):
            speed.log_fallbacks()
            torch.set_num_threads(cfg.torch_threads)
            torch.set_flush_denormal(bool(cfg.get("flush_denormal", True)))
            seed_everything(cfg.seed)
            yield
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(flushing)
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.set_rng_state(rng[2])
        if rng[3] is not None:
            torch.cuda.set_rng_state_all(rng[3])


def flushes_denormals() -> bool:
    """Whether CPU float math flushes denormals now (torch has a setter, no getter)."""
    return float(torch.tensor(1e-39, dtype=torch.float32) * 1.0) == 0.0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_agent(cfg: DictConfig, observation_space, action_space, device: torch.device) -> Agent:
    agent = build(
        agent_node(cfg),
        "algo",
        observation_space=observation_space,
        action_space=action_space,
        network=build(cfg.network, "network"),
        device=device,
        total_steps=cfg.train.total_steps,
        seed=cfg.seed,
    )
    # on the CPU, the networks' weights in huge pages, where the update finds them after a step's sampling
    speed.relocate(value for value in vars(agent).values() if isinstance(value, nn.Module))
    speed.attach(agent)  # on CUDA, a declared tensor-only gradient step replayed from a CUDA graph
    return agent


RETURN_KEYS = ("n_step", "gamma")  # what discounted n-step returns are built from: one home per run


def agent_node(cfg: DictConfig) -> DictConfig:
    """cfg.algo as the agent is built from it: without `n_step` and `gamma` for a feed-forward agent,
    whose transition buffer builds the discounted returns (it gets both; the agent bootstraps with
    each batch's `discounts`). A recurrent agent gets them: it sums the returns over its sequences."""
    returns = [key for key in RETURN_KEYS if key in cfg.algo]
    if not returns or import_class(cfg.algo._target_, "algo._target_").capabilities.recurrent:
        return cfg.algo
    trimmed = cfg.copy()  # the whole config: interpolations in the algo node still resolve
    with open_dict(trimmed.algo):
        for key in returns:
            del trimmed.algo[key]
    return trimmed.algo


def build_components(cfg: DictConfig, device: torch.device):
    """(agent, env, buffer) for a validated config, once the groups are known to fit (rl_hydra/fit.py)."""
    env = make_env(cfg.env, seed=cfg.seed)
    spaces = {"observation_space": env.single_observation_space, "action_space": env.single_action_space}
    capabilities = check_fit(cfg, env.single_action_space, lambda group: cfg_choice(cfg, group))
    agent = build_agent(cfg, **spaces, device=device)
    # a transition buffer builds the discounted n-step returns; a recurrent agent sums them over its sequences
    returns = {} if capabilities.recurrent else {"n_step": cfg.algo.get("n_step", 1), "gamma": cfg.algo.gamma}
    if cfg.buffer.get("beta_steps") == "auto":  # prioritized replay anneals beta over the run's updates
        returns["beta_steps"] = run_updates(
            cfg.train.total_steps, cfg.algo.learning_starts, cfg.algo.train_every, cfg.algo.gradient_steps
        )
    buffer = build_on_device(
        lambda storage: build(
            cfg.buffer, "buffer", **spaces, num_envs=env.num_envs, device=storage, seed=cfg.seed, **returns
        ),
        cfg.buffer.get("device", "auto"),
        device,
    )
    return agent, env, buffer


def cfg_choice(cfg: DictConfig, group: str) -> str:
    """The group's option name as chosen (`prioritized`), else (a config composed outside Hydra's
    app) the algorithm's `name`, or the class name of the group's _target_."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_class

    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get(group)
        if choice:
            return str(choice)
    target = OmegaConf.select(cfg, f"{group}._target_")
    if target is None:
        return f"<{group}>"
    with contextlib.suppress(Exception):
        if group == "algo":
            agent_class: Any = get_class(target)
            return str(agent_class.name)  # an agent class's ClassVar, if it has one
    return str(target).rsplit(".", 1)[-1]


def run_settings(cfg: DictConfig, agent: Agent) -> RunSettings:
    """What the loop is told of the run (the config stops here): its schedule, evaluation and loggers."""
    make_eval_env = functools.partial(make_env, cfg.env, say_time_limit=False)  # the training env's build said it
    return RunSettings.from_config(cfg, make_eval_env=make_eval_env, algo_name=agent.name)


def compiles(agent_or_class) -> bool:
    """Whether `compile=true` applies: the agent declares pure `compiled_methods` and is not
    recurrent (torch.compile would leave the LSTM of a recurrent loss eager)."""
    return bool(getattr(agent_or_class, "compiled_methods", ())) and not agent_or_class.capabilities.recurrent


def compile_agent(agent: Agent) -> None:
    """`compile=true`: torch.compile the agent's pure loss functions (see compile_pure_methods)."""
    if not compiles(agent):
        raise ConfigError(
            f"compile=true is not supported by algo={agent.name}; it works with algo={', '.join(algos_that_compile())}"
        )
    compile_pure_methods(agent)


def algos_that_compile() -> list[str]:
    """The algo options (conf/algo/*.yaml) whose agent class compiles."""
    return [name for name, agent_class in algo_options().items() if compiles(agent_class)]


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


def pick_loop(agent: Agent) -> Callable[[Runner], None]:
    """The recurrent loop for agents that carry state between steps, else the off-policy loop."""
    return recurrent.loop if agent.capabilities.recurrent else off_policy.loop


def log_through_progress_bar(progress: bool):
    """While the progress bar is shown, console log lines are written above it (tqdm.write)
    instead of onto its line; the handlers are put back afterwards."""
    if not progress:
        return contextlib.nullcontext()
    from tqdm.contrib.logging import logging_redirect_tqdm

    return logging_redirect_tqdm()


@contextlib.contextmanager
def stop_at_step_boundary(runner: Runner) -> Iterator[None]:
    """Ctrl-C / SIGTERM ask the loop to stop after the current step (a second Ctrl-C stops at once)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request_stop(signum, frame):  # noqa: ARG001
        if runner.stop_requested:
            raise KeyboardInterrupt
        runner.stop_requested = True

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(
    cfg: DictConfig,
    run_dir: str | Path,
    resume: bool = False,
    *,
    on_ready: Callable[[int, torch.device], None] | None = None,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train one run into `run_dir`; returns the summary (also written to summary.json).

    With `resume`, continue from `run_dir/checkpoints/last.pt`. Raises ConfigError
    before any step runs when the config cannot work, TrainingDiverged when a loss
    goes non-finite, StopRequested after Ctrl-C/SIGTERM; in the last two cases the
    run directory keeps a good checkpoint and its metrics. The caller's process
    settings (threads, denormals, global RNGs) are as they were when it returns.

    `cfg` is validated already (rl_hydra.launch, rl-hydra-verify: rl_hydra.config.validate_run_config).
    Nothing is written into `run_dir` before `on_ready(step, device)` is called: by then the
    config is validated, the run built and a resumed checkpoint loaded (`step` is where training
    starts), so a caller that refuses there (rl_hydra.launch: the directory's lock) leaves the
    directory as it was. `stop_after`: end after that many env steps, as if the run were
    interrupted there, with the run's own config unchanged (rl-hydra-verify re-runs a prefix).
    """
    device = resolve_device(cfg.device)
    if distributed.requested(cfg):  # distributed=apex: actors and replay in Ray, this process learns
        return distributed.run(cfg, RunDirectory(run_dir), device, resume, on_ready, stop_after)
    with process_settings(cfg):
        return _run(cfg, RunDirectory(run_dir), device, resume, on_ready, stop_after)


def _run(
    cfg: DictConfig, run_dir: RunDirectory, device: torch.device, resume: bool, on_ready, stop_after
) -> dict[str, Any]:
    checkpoint = run_dir.load_checkpoint("last") if resume else None
    agent, env, buffer = build_components(cfg, device)
    if cfg.get("compile", False):
        compile_agent(agent)
    runner = Runner(run_settings(cfg, agent), agent, env, buffer, run_dir.path, stop_after=stop_after)
    if checkpoint is not None:
        path = run_dir.checkpoints / "last.pt"
        fresh = runner.state_dict(with_buffer="buffer" in checkpoint)  # the env's state is checked as it is restored
        check_fits({**fresh, "env": None}, {**checkpoint, "env": None}, path)
        try:
            runner.load_state_dict(checkpoint)
        except (KeyError, RuntimeError, ValueError, TypeError, IndexError, AttributeError) as error:
            raise RunError(f"checkpoint {path} does not fit this config ({misfit(error)})") from None
        check_optimizer_state(agent, path)
        if runner.global_step > cfg.train.total_steps:
            raise ConfigError(
                f"train.total_steps={cfg.train.total_steps} is below the step this run has reached "
                f"({runner.global_step}); give train.total_steps >= {runner.global_step}"
            )
    if on_ready is not None:
        on_ready(runner.global_step, device)
    if checkpoint is not None:
        log.info("resuming %s at step %d", run_dir.path, runner.global_step)
    warn_if_few_updates(agent, cfg.train.total_steps, runner.global_step)
    loop = pick_loop(agent)
    status = "failed"  # unless the loop ends or is stopped; the loggers end with summary.json's status
    with log_through_progress_bar(runner.reporter.show_progress):
        try:
            with stop_at_step_boundary(runner):
                runner.start()
                loop(runner)
            runner.save_checkpoint("last")
            summary = runner.summary("completed")
            run_dir.write_summary(summary)
            status = "completed"
        except TrainingDiverged as error:
            run_dir.write_summary(runner.summary("failed", reason=str(error)))
            raise
        except StopRequested:
            runner.save_checkpoint("last")
            run_dir.write_summary(runner.summary("interrupted", reason="stopped by signal"))
            status = "interrupted"
            raise
        except KeyboardInterrupt:  # a second Ctrl-C: stop mid-step, keeping the last checkpoint as it is
            run_dir.write_summary(
                runner.summary(
                    "interrupted",
                    reason="stopped at once by a second signal; the last checkpoint is older than this step",
                )
            )
            status = "interrupted"
            raise StopRequested from None
        finally:
            runner.close(status)
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
