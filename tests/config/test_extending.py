"""docs/extending.md's promise: a new algorithm is its class, its keys' schema and conf/algo/<name>.yaml,
all outside the package (a module on the path, a hydra_plugins module, a config directory on
hydra.searchpath); without the schema, its class and its config file."""

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


# its keys' schema, in a module of the hydra_plugins namespace (Hydra imports those before it composes)
SCHEMA = """
from dataclasses import dataclass
from typing import ClassVar

from rl_hydra.schema import register
from rl_hydra.schema.algos import DQNKeys
from rl_hydra.schema.keys import Rule, key


@dataclass
class ScaledRewardKeys(DQNKeys):
    stored_as: ClassVar[str] = "algo/scaled_dqn"
    targets: ClassVar[tuple[str, ...]] = ("my_algos.scaled.ScaledRewardDQN",)
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(("reward_scale", "gamma"), lambda scale, gamma: scale * gamma < 10, "reward_scale * gamma < 10"),
    )
    reward_scale: float = key(help="each reward is multiplied by this", minimum=0.0, above=True)


register(ScaledRewardKeys)
"""


def test_a_new_algorithm_with_its_schema_is_the_three_places_extending_md_names(tmp_path):
    """The class's module, its config file (naming its schema first) and its schema registered from a
    hydra_plugins module: no table in the package to edit. A subprocess: Hydra scans plugins once."""
    from tests.conftest import run_cli

    (tmp_path / "my_algos").mkdir()
    (tmp_path / "my_algos" / "__init__.py").write_text("")
    (tmp_path / "my_algos" / "scaled.py").write_text(ALGORITHM)
    (tmp_path / "hydra_plugins" / "my_algos_schema").mkdir(parents=True)
    (tmp_path / "hydra_plugins" / "my_algos_schema" / "__init__.py").write_text(SCHEMA)
    (tmp_path / "conf" / "algo").mkdir(parents=True)
    config = CONFIG.replace("defaults:\n", "defaults:\n  - /schema/algo/scaled_dqn@_here_\n")
    (tmp_path / "conf" / "algo" / "scaled_dqn.yaml").write_text(config)
    mine = [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "algo=scaled_dqn", *TINY]
    env = {"PYTHONPATH": str(tmp_path)}

    done = run_cli(*mine, f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["algo"], summary["global_step"]) == ("completed", "scaled_dqn", 300)
    # its schema's range, type and rule are checked at launch, each in one line
    for given, refusal in [
        ("algo.reward_scale=0", "algo.reward_scale=0.0 is out of range; expected a number > 0.0"),
        ("algo.reward_scale=abc", "algo.reward_scale='abc' is not a number"),
        ("algo.reward_scale=20", "algo.reward_scale=20.0 is out of range; expected reward_scale * gamma < 10"),
    ]:
        refused = run_cli(*mine, given, f"hydra.run.dir={tmp_path / 'refused'}", env=env)
        assert refused.returncode == 2 and refusal in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "refused").exists()
