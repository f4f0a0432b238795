"""rl-hydra-export and Run.export: the exported file, loaded by onnxruntime or torch.jit.load alone,
gives predict's actions on a batch, for every algorithm family and observation kind."""

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_hydra import load_run, train
from rl_hydra.commands import policy_export as export
from rl_hydra.commands.export import main
from rl_hydra.runs.run_dir import RunError
from tests.conftest import TINY, skip_without_env_extra

QUICK = [*TINY, "train.total_steps=200", "algo.learning_starts=100"]
ROWS = 5
try:
    import onnxruntime
except ImportError:  # the torch formats are still tested
    onnxruntime = None
NEEDS_ONNX = pytest.mark.skipif(onnxruntime is None, reason="the export extra (onnxruntime) is not installed")
EVERY_FORMAT = [pytest.param(fmt, marks=NEEDS_ONNX) if fmt == "onnx" else fmt for fmt in export.FORMATS]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tiny run per override set, trained on first use."""
    made = {}

    def run_of(*overrides: str):
        if overrides not in made:
            skip_without_env_extra(*overrides)
            made[overrides] = train(*overrides, *QUICK, run_dir=tmp_path_factory.mktemp("export") / "run")
        return made[overrides]

    return run_of


def drawn(space: gym.Space, rows: int = ROWS, seed: int = 1) -> list[np.ndarray]:
    """`rows` observations of `space`, one array per input of the exported file."""
    return export.observation_batch(space, rows, seed)


def as_predict_takes(run, arrays: list[np.ndarray]):
    space = run.observation_space
    return dict(zip(space.spaces, arrays)) if isinstance(space, gym.spaces.Dict) else arrays[0]


def loaded(path, fmt: str):
    """The exported file as a function of its inputs, loaded with nothing of this package."""
    if fmt == "onnx":
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return lambda arrays: session.run(None, dict(zip(names, arrays)))
    with warnings.catch_warnings():  # torch.jit's notice that torch.export follows it
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path)) if fmt == "torchscript" else torch.export.load(str(path)).module()

    def act(arrays):
        out = module(*map(torch.from_numpy, arrays))
        return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]

    return act


def assert_acts_as_predict(run, path, fmt: str, rows: int = ROWS) -> None:
    act, arrays = loaded(path, fmt), drawn(run.observation_space, rows)
    if run.recurrent:  # the state in and out: three steps, each from the state the one before gave
        state, exported = None, [np.zeros((rows, *s.shape[1:]), np.float32) for s in run.agent.initial_state(1)]
        for _ in range(3):
            expected, state = run.predict(as_predict_takes(run, arrays), state)
            actions, *exported = act(arrays + exported)
            np.testing.assert_array_equal(actions, expected)
            np.testing.assert_allclose(exported, [s.numpy() for s in state], atol=1e-5)
        return
    expected = run.predict(as_predict_takes(run, arrays))
    (actions,) = act(arrays)
    if expected.dtype.kind == "f":
        assert actions.shape == expected.shape and actions.dtype == np.float32
        np.testing.assert_allclose(actions, expected, atol=1e-5)
    else:
        np.testing.assert_array_equal(actions, expected)


FAMILIES = [
    ("algo=dqn",),
    ("algo=qr_dqn",),
    ("algo=c51",),
    ("algo=rainbow",),  # noisy layers: their mean weights
    ("algo=iqn",),  # the fixed fractions
    ("algo=drqn",),  # the recurrent state in and out
    ("algo=sac", "env=pendulum"),
    ("algo=td3", "env=pendulum"),
    ("algo=tqc", "env=pendulum"),
    ("algo=crossq", "env=pendulum"),
    ("algo=redq", "env=pendulum"),
    ("algo=droq", "env=pendulum"),
]


@pytest.mark.parametrize("overrides", FAMILIES, ids=lambda o: " ".join(o))
@pytest.mark.parametrize("fmt", EVERY_FORMAT)
def test_the_exported_file_acts_as_predict_for_every_family(runs, overrides, fmt, tmp_path):
    run = runs(*overrides)
    path = run.export(tmp_path / f"policy{export.FORMATS[fmt]}", format=fmt)
    assert_acts_as_predict(run, path, fmt)
    assert_acts_as_predict(run, path, fmt, rows=1)  # the batch axis is free


OBSERVATIONS = [
    ("env=frozen_lake",),  # a Discrete index, one-hot inside the file
    ("env=minatar",),  # bool grids
    ("env=minigrid",),  # a Dict of parts: one input each
    ("algo=drqn", "env=minigrid"),
    ("env=atari", "env.num_envs=1"),  # uint8 frame stacks, scaled inside the file
]


@NEEDS_ONNX
@pytest.mark.parametrize("overrides", OBSERVATIONS, ids=lambda o: " ".join(o))
def test_the_file_takes_the_observation_as_the_env_gives_it(runs, overrides, tmp_path):
    run = runs(*overrides)
    path = run.export(tmp_path / "policy.onnx")
    inputs = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).get_inputs()
    spaces = run.observation_space.spaces if isinstance(run.observation_space, gym.spaces.Dict) else {"": None}
    assert [i.name for i in inputs][: len(spaces)] == [f"obs.{key}" if key else "obs" for key in spaces]
    assert_acts_as_predict(run, path, "onnx")


@pytest.mark.parametrize("fmt", EVERY_FORMAT)
def test_exporting_leaves_the_agent_as_it_was(runs, fmt):
    """torch.onnx.export sets every submodule to its root's mode after: CrossQ's batch
    renormalization, resting in inference mode, was left normalizing with each batch's statistics.
    The weights are written needing no gradient, and get theirs back for training."""
    run = runs("algo=crossq", "env=pendulum")
    obs = drawn(run.observation_space)[0]
    before = run.predict(obs)
    modes = [m.training for m in run.agent.actor.modules()]
    run.export(format=fmt)
    assert [m.training for m in run.agent.actor.modules()] == modes
    assert all(p.requires_grad for p in run.agent.actor.parameters())
    np.testing.assert_array_equal(run.predict(obs), before)


def test_a_file_that_does_not_act_as_predict_is_refused_and_not_written(runs, monkeypatch, tmp_path):
    run = runs("algo=dqn")

    class Argmin(export.GreedyQPolicy):
        def forward(self, *obs):
            return self.action_values(export.network_input(obs, self.keys)).argmin(dim=1)

    monkeypatch.setattr(export, "policy_module", lambda agent, keys: Argmin(agent, keys))
    with pytest.raises(RunError, match=r"the torchscript export of .* does not act as predict does .*nothing written"):
        run.export(tmp_path / "policy.pt", format="torchscript")
    assert not (tmp_path / "policy.pt").exists()


def metadata_of(path, fmt: str) -> dict[str, str]:
    """What the file says about itself: ONNX's metadata_props, torch's extra file policy.json."""
    if fmt == "onnx":
        import onnx

        return {prop.key: prop.value for prop in onnx.load(str(path)).metadata_props}
    extra = {"policy.json": ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if fmt == "torchscript":
            torch.jit.load(str(path), _extra_files=extra)
        else:
            torch.export.load(str(path), extra_files=extra)
    return json.loads(extra["policy.json"])


@pytest.mark.parametrize("fmt", EVERY_FORMAT)
def test_the_file_says_what_goes_in_and_out_and_where_it_came_from(runs, fmt):
    run = runs("algo=drqn")
    path = export.export_run(run, fmt)
    assert path == run.path / "export" / f"policy_best{export.FORMATS[fmt]}"
    said = metadata_of(path, fmt)
    assert json.loads(said["rl_hydra.inputs"]) == [
        {"name": "obs", "shape": [4], "dtype": "float32"},
        *({"name": name, "shape": [run.agent.q_net.lstm_size], "dtype": "float32"} for name in ("h", "c")),
    ]
    assert [p["name"] for p in json.loads(said["rl_hydra.outputs"])] == ["action", "next_h", "next_c"]
    assert said["rl_hydra.checkpoint"] == "best" and said["rl_hydra.step"] == str(run.step)


# --- the command ----------------------------------------------------------------------------------------
def tree(path) -> dict:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@NEEDS_ONNX
def test_the_command_writes_into_the_run_directory(runs, capsys):
    run = runs("algo=dqn")
    assert main([str(run.path), "--checkpoint", "last"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {run.path / 'export' / 'policy_last.onnx'} (onnx, last.pt at step 200" in out
    assert_acts_as_predict(load_run(run.path, checkpoint="last"), run.path / "export" / "policy_last.onnx", "onnx")


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--format", "tflite"],
            "error: --format=tflite is not allowed; choose one of: onnx, torchscript, torch_export",
        ),
        (
            ["--checkpoint", "newest", "--format", "torchscript"],
            "error: --checkpoint=newest is not allowed; choose one of: best, last",
        ),
    ],
)
def test_bad_arguments_are_one_line_and_change_nothing(runs, capsys, args, message):
    run = runs("algo=dqn")
    before = tree(run.path)
    assert main([str(run.path), *args]) == 2
    assert capsys.readouterr().err == message + "\n"
    assert tree(run.path) == before


def test_a_missing_run_directory_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere"), "--format", "torchscript"]) == 2  # torchscript: no extra needed
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "does not exist" in err and err.count("\n") == 1


def test_onnx_without_the_export_extra_names_the_pip_command(runs, monkeypatch, capsys):
    run = runs("algo=dqn")
    real = export.importlib.util.find_spec
    hidden = set(export.ONNX_MODULES)  # both hidden: the message names the first, installed or not here
    monkeypatch.setattr(export.importlib.util, "find_spec", lambda name: None if name in hidden else real(name))
    assert main([str(run.path)]) == 2
    assert capsys.readouterr().err == (
        f"error: --format onnx needs the export extra ({export.ONNX_MODULES[0]} is not installed): "
        'pip install -e ".[export]"\n'
    )
    assert main([str(run.path), "--format", "torchscript"]) == 0  # which needs neither
