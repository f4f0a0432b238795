"""Rules across keys live in the schema (a `rules` ClassVar) and the launch's validation runs them:
each refusal is one line naming the key, its value, what is allowed and the other keys' values."""

import pytest

from rl_hydra.errors import ConfigError
from rl_hydra.schema import validate_config
from tests.conftest import compose_config

BROKEN = [
    (["algo=c51", "algo.v_max=-20"], "algo.v_max=-20.0 is out of range; expected v_max > v_min", "algo.v_min="),
    (["algo=redq", "env=pendulum", "algo.subset_size=11"], "algo.subset_size=11 is out of range", "ensemble_size=10"),
    (
        ["algo=tqc", "env=pendulum", "algo.top_quantiles_to_drop_per_critic=25"],
        "algo.top_quantiles_to_drop_per_critic=25 is out of range",
        "algo.num_quantiles=25",
    ),
    (["algo=drqn", "buffer.stride=20"], "buffer.stride=20 is out of range", "buffer.sequence_length=16"),
    (["algo=drqn", "algo.burn_in=12"], "algo.burn_in=12 is out of range", "buffer.stride=8"),
    (["algo=dqn", "network.noisy=true", "network.bias=false"], "network.bias=false is out of range", "noisy=true"),
    (["algo=iqn", "network.hidden_sizes=[]"], "network.hidden_sizes=[] is out of range", "at least one width"),
    # 0 has no meaning (every step? never?): -1 or a period, as REDQ and CrossQ always required
    (["algo=redq", "env=pendulum", "algo.gsde_resample_every=0"], "algo.gsde_resample_every=0 is out of range", "-1"),
]


@pytest.mark.parametrize("overrides, refusal, names", BROKEN, ids=[o[-1] for o, _, _ in BROKEN])
def test_the_schema_refuses_keys_that_do_not_fit_together(overrides, refusal, names):
    with pytest.raises(ConfigError) as error:
        validate_config(compose_config(*overrides))
    message = str(error.value)
    assert message.startswith(refusal) and names in message and "\n" not in message, message


@pytest.mark.parametrize("algo", ["c51", "drqn", "dqn", "iqn", "redq", "tqc"])
def test_the_shipped_configs_keep_every_rule(algo):
    validate_config(compose_config(f"algo={algo}", *(["env=pendulum"] if algo in ("redq", "tqc") else [])))
