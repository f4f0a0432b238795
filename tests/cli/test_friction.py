"""What a new user hit (round 2), each with the behaviour they expected: refused configs print one
line, Ctrl-C stops at once (an evaluation under way is abandoned and repeated on resume), a budget
that leaves almost no updates is named, `--help` lists what a user picks, resume's typos get a hint."""

from __future__ import annotations

import pytest

from rl_hydra.commands.launch import RunFailed, launch
from rl_hydra.loops.runner import Runner
from rl_hydra.runs.run_dir import RunDirectory
from tests.conftest import TINY, compose_config, metric_rows, run_cli
from tests.runs.test_run_record import RECORD, cli


@pytest.mark.parametrize(
    "args",
    [
        ["train.total_steps=abc"],
        ["train.total_steps=-5"],
        ["train.total_steps=1.5"],
        ["algo.optimizer.lr=-0.1"],
        ["seed=-1"],
        ["train.eval_every=0"],
        ["env=gym", "env.id=NoSuchEnv-v0"],
        ["device=cuda:7"],
        ["algo=dqn", "env=pendulum"],
    ],
)
def test_a_refused_config_prints_its_error_line_and_nothing_else(tmp_path, monkeypatch, capsys, args):
    code, out, err = cli(monkeypatch, capsys, *TINY, f"hydra.run.dir={tmp_path / 'run'}", *args)
    assert code == 2 and out == [] and len(err) == 1 and err[0].startswith("error: "), (out, err)
    assert not (tmp_path / "run").exists()


def test_ctrl_c_during_an_evaluation_abandons_it_and_the_resumed_run_repeats_it_exactly(tmp_path, monkeypatch):
    """IQN's greedy actions draw quantile fractions from its own generator: the abandoned
    evaluation's draws must not leak into the resumed run."""
    from rl_hydra.loops.evaluate import Evaluator

    args = [*RECORD, "algo=iqn"]
    uninterrupted = launch(compose_config(*args), tmp_path / "a")
    on_due, run, polls = Runner._on_due, Evaluator.run, []

    def ctrl_c_as_the_evaluation_at_200_starts(self, due):
        if due.evaluate and self.global_step == 200 and not self.stop_requested:
            self.stop_requested = True
        on_due(self, due)

    def polled_run(self, agent, step, elapsed, should_stop=None):  # asked once per env step
        return run(self, agent, step, elapsed, lambda: polls.append(step) or should_stop())

    with monkeypatch.context() as patch:
        patch.setattr(Runner, "_on_due", ctrl_c_as_the_evaluation_at_200_starts)
        patch.setattr(Evaluator, "run", polled_run)
        with pytest.raises(RunFailed) as stopped:
            launch(compose_config(*args), tmp_path / "b")
    assert stopped.value.code == 130 and f"resume with: python train.py resume={tmp_path / 'b'}" in str(stopped.value)
    assert polls == [200]  # the evaluation stopped after its first env step
    saved = RunDirectory(tmp_path / "b").load_checkpoint("last")
    assert saved["runner"]["global_step"] == 200 and saved["runner"]["pending"] == [True, True, True]
    assert "stopped; the last checkpoint is in" in (tmp_path / "b" / "train.log").read_text()  # the log has it too
    resumed = launch(compose_config(*args), tmp_path / "b", resume=True)
    assert resumed["eval_return_mean"] == uninterrupted["eval_return_mean"]
    assert metric_rows(tmp_path / "a") == metric_rows(tmp_path / "b")


@pytest.mark.parametrize(
    "learning_starts,updates", [(401, "no update"), (400, "only 1 update"), (300, "only 26 updates")]
)
def test_a_budget_that_leaves_almost_no_updates_is_named(tmp_path, caplog, learning_starts, updates):
    with caplog.at_level("WARNING", logger="rl_hydra"):
        launch(compose_config(*RECORD, f"algo.learning_starts={learning_starts}"), tmp_path)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and f"this run makes {updates}" in warnings[0], warnings
    assert f"algo.learning_starts={learning_starts}" in warnings[0] and "train.total_steps=400" in warnings[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="rl_hydra"):
        launch(compose_config(*RECORD, "algo.train_every=1"), tmp_path / "enough")  # 351 updates
    assert not [r for r in caplog.records if "this run makes" in r.getMessage()]


def test_help_lists_the_groups_a_user_picks_and_no_building_blocks():
    result = run_cli("--help")
    assert result.returncode == 0
    groups = result.stdout.split("== What you pick (group=option) ==")[1].split("== Config ==")[0]
    assert "algo: c51, " in groups and " dqn, " in groups and "env: acrobot" in groups and "logger: csv" in groups
    for internal in ("algo/base", "algo_env/base", "cartpole_novel", "optimizer:", "suite:"):
        assert internal not in groups


def test_help_lists_the_options_of_config_dirs_on_the_searchpath(tmp_path):
    (tmp_path / "conf" / "env").mkdir(parents=True)
    (tmp_path / "conf" / "env" / "mine.yaml").write_text("defaults:\n  - cartpole\n  - _self_\n")
    result = run_cli("--help", f"hydra.searchpath=[file://{tmp_path / 'conf'},pkg://not_installed.conf]")
    env_line = next(line for line in result.stdout.splitlines() if line.startswith("env: "))
    assert result.returncode == 0 and ", mine, " in env_line and ", cartpole, " in env_line


def test_a_mistyped_resume_key_gets_the_closest_one(tmp_path, monkeypatch, capsys):
    launch(compose_config(*RECORD), tmp_path)
    code, _, err = cli(monkeypatch, capsys, f"resume={tmp_path}", "train.total_stepz=500")
    assert code == 2 and len(err) == 1 and "did you mean train.total_steps?" in err[0]


def test_a_failed_sweep_job_says_its_error_once(tmp_path):
    result = run_cli("-m", *TINY, "algo.gamma=0.9,2", f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 1
    said = (result.stdout + result.stderr).splitlines()
    assert len([line for line in said if "algo.gamma=2.0 is out of range" in line]) == 1, said
    assert "error: 1 of 2 jobs failed" in result.stderr


def test_the_python_api_composes_inside_a_running_hydra_app():
    """A notebook or a Hydra app of one's own may call rl_hydra.commands.api.compose_train_config; Hydra's
    global state is the caller's again afterwards."""
    from hydra import compose, initialize_config_dir

    from rl_hydra.commands.api import compose_train_config
    from tests.conftest import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        assert compose_train_config("algo=iqn").algo._target_ == "rl_hydra.algos.iqn.IQN"
        assert compose(config_name="train").algo._target_ == "rl_hydra.algos.dqn.DQN"
