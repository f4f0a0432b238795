"""docs/extending.md's promise: a new algorithm is two files, its class and conf/algo/<name>.yaml,
both outside the package (a module on the path, a config directory on hydra.searchpath)."""

from __future__ import annotations

import json

from tests.conftest import TINY
from tests.runs.test_run_record import cli

ALGORITHM = '''
from rl_hydra.algos.dqn import DQN


class ScaledRewardDQN(DQN):
    """DQN on rewards times `reward_scale`: its capabilities, network and buffer are DQN's."""

    name = "scaled_dqn"

    def __init__(self, *args, reward_scale: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.reward_scale = reward_scale

    def loss(self, batch):
        return super().loss(batch._replace(rewards=batch.rewards * self.reward_scale))
'''

CONFIG = """
defaults:
  - base/dqn@_here_                    # DQN's schedule, exploration and optimizer
  - /buffer@_global_.buffer: replay
  - /network@_global_.network: dqn     # DQN's network: no network file of its own
  - _self_

_target_: my_algos.scaled.ScaledRewardDQN
loss: huber                            # DQN's TD loss, which it keeps
reward_scale: 0.1
"""


def test_a_new_algorithm_is_its_class_and_one_config_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_algos").mkdir()
    (tmp_path / "my_algos" / "__init__.py").write_text("")
    (tmp_path / "my_algos" / "scaled.py").write_text(ALGORITHM)
    (tmp_path / "conf" / "algo").mkdir(parents=True)
    (tmp_path / "conf" / "algo" / "scaled_dqn.yaml").write_text(CONFIG)
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "algo=scaled_dqn", *TINY]

    code, _, err = cli(monkeypatch, capsys, *mine, "algo.reward_scale=0.5", f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["algo"], summary["global_step"]) == ("completed", "scaled_dqn", 300)
    # its keys are checked like any other's, and its capabilities are DQN's
    code, _, err = cli(monkeypatch, capsys, *mine, "algo.reward_scal=0.5", f"hydra.run.dir={tmp_path / 'typo'}")
    assert code == 2 and "did you mean algo.reward_scale?" in err[0]
    code, _, err = cli(monkeypatch, capsys, *mine, "env=pendulum", f"hydra.run.dir={tmp_path / 'box'}")
    assert code == 2 and len(err) == 1 and "algo=scaled_dqn needs a discrete action space" in err[0]
