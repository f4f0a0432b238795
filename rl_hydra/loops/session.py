"""A Runner's session, from a resumed checkpoint to summary.json: the same for one process
(rl_hydra/training.py), a member of a pack (rl_hydra/pack) and a distributed run's learner
(rl_hydra/distributed/learner.py)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rl_hydra.errors import BadArgument
from rl_hydra.loops.runner import Runner, StopRequested, TrainingDiverged
from rl_hydra.loops.steps import Steps, at_once, drive
from rl_hydra.runs.run_dir import RunError, check_fits, check_optimizer_state, misfit

# the top-level checkpoint parts that a fresh Runner cannot show the shape of before it starts
UNCHECKED = ("env", "replay")


def restore(runner: Runner, checkpoint: dict[str, Any], path: Path) -> None:
    """Load a checkpoint into a freshly built Runner: one RunError line where it does not fit the config
    (checked before anything loads), one ConfigError where train.total_steps is below its step."""
    fresh = runner.state_dict(with_buffer="buffer" in checkpoint)  # the env's state is checked as it is restored
    unchecked = dict.fromkeys(UNCHECKED)
    check_fits({**fresh, **unchecked}, {**checkpoint, **unchecked}, path)
    try:
        runner.load_state_dict(checkpoint)
    except (KeyError, RuntimeError, ValueError, TypeError, IndexError, AttributeError) as error:
        raise RunError(f"checkpoint {path} does not fit this config ({misfit(error)})") from None
    check_optimizer_state(runner.agent, path)
    total = runner.schedule.total_steps
    if runner.global_step > total:
        raise BadArgument(
            f"train.total_steps={total} is below the step this run has reached "
            f"({runner.global_step}); give train.total_steps >= {runner.global_step}"
        )


def train(runner: Runner, loop: Callable[[], None], failures: tuple[type[Exception], ...] = ()) -> dict[str, Any]:
    """`training` for a loop that is no steps (a distributed learner's, which updates by itself)."""
    return drive(training(runner, lambda: at_once(loop), failures))


def training(
    runner: Runner, steps: Callable[[], Steps[None]], failures: tuple[type[Exception], ...] = ()
) -> Steps[dict[str, Any]]:
    """Run the loop's `steps()` on a started Runner to its end, with the last checkpoint and summary.json
    written as the run ended: completed; failed (a loss went non-finite, or one of `failures`);
    interrupted (Ctrl-C or SIGTERM at a step's end, a second one at once). The loggers end with the
    summary's status. Returns the summary."""
    run_dir, status = runner.run_dir, "failed"
    failing: tuple[type[Exception], ...] = (TrainingDiverged, *failures)
    with log_through_progress_bar(runner.reporter.show_progress):
        try:
            with stop_at_step_boundary(runner):
                mark_running(runner)
                runner.start()
                yield from steps()
            runner.save_checkpoint("last")
            summary = runner.summary("completed")
            run_dir.write_summary(summary)
            status = "completed"
        except failing as error:
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
    return summary


def mark_running(runner: Runner) -> None:
    """A session that follows an ended one (a resume; an extension of a completed run) first rewrites
    summary.json as `running` at the step it starts from, before its first step and its first
    checkpoint: a kill -9 or a full disk later in the session then leaves a summary that no longer
    says the run ended at an older step than checkpoints/last.pt's, and the record resumes and
    verifies. A first session writes none until it ends, as before."""
    if runner.run_dir.summary_json.is_file():
        why = f"training on from step {runner.global_step}; if no process is, it was killed: resume it"
        runner.run_dir.write_summary(runner.summary("running", reason=why))


def log_through_progress_bar(progress: bool):
    """While the progress bar is shown, console log lines are written above it (tqdm.write)
    instead of onto its line; the handlers are put back afterwards."""
    if not progress:
        return contextlib.nullcontext()
    from tqdm.contrib.logging import logging_redirect_tqdm

    return logging_redirect_tqdm()


class Stopping:
    """The runners training in this process, and the signal handlers that were there before the first."""

    runners: list[Runner] = []
    previous: dict[int, Any] = {}


@contextlib.contextmanager
def stop_at_step_boundary(runner: Runner) -> Iterator[None]:
    """Ctrl-C / SIGTERM ask every run training in this process (one, or a pack's members) to stop after
    its current step (a second Ctrl-C stops at once). The handlers are put back when the last run ends,
    in whatever order the runs end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request_stop(signum, frame):  # noqa: ARG001
        if any(each.stop_requested for each in Stopping.runners):
            raise KeyboardInterrupt
        for each in Stopping.runners:
            each.stop_requested = True

    if not Stopping.runners:
        Stopping.previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    Stopping.runners.append(runner)
    try:
        yield
    finally:
        Stopping.runners.remove(runner)
        if not Stopping.runners:
            for sig, handler in Stopping.previous.items():
                signal.signal(sig, handler)
