"""A run's greedy policy as one self-contained file: ONNX, TorchScript or torch.export (`rl-hydra-export`).

The file holds the network and all that `Run.predict` does around it, so that a program without
this package (onnxruntime, libtorch, torch.export.load) acts as predict does: the observation goes in as the run's
env gives it (its own dtype: float32 vectors, uint8 frame stacks, int64 indices; one input per
part of a Dict or Tuple observation), the run's encoders scale and one-hot it inside the file, and
the action comes out in the env's scale. Per algorithm (the modules below):

- DQN, Rainbow, QR-DQN, C51: the argmax of Q, the mean over quantiles or atoms (noisy layers with
  their mean weights, as predict acts);
- IQN: the mean over predict's K fixed fractions, the midpoints of K equal bins (no sampling, so
  one observation always gets one action);
- SAC, REDQ, DroQ, TQC, CrossQ, TD3: the deterministic action, tanh of the actor's mean (TD3's mu)
  rescaled to the action bounds;
- DRQN: the recurrent state in and out beside the observation, zeros at an episode's start.

Every input and output has a leading batch axis. Before anything is written the file is loaded
back (onnxruntime, torch.jit.load, torch.export.load) and its actions compared with predict's on
a batch drawn from the run's observation space; the inputs, outputs and where the policy came from
are kept inside it (ONNX metadata; for torch, an extra file `policy.json`). TorchScript is traced,
not scripted, so the numpy fast path (speed/numpy_mirror.py), which torch.jit.script cannot read,
is never met: outside acting the networks run their torch forward. The run directory is read as data
(load_run); the file is written atomically, by default to `<run>/export/policy_<checkpoint>.<ext>`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra.errors import BadArgument, NotInstalled
from rl_hydra.runs.run_dir import RunError, atomic_write_bytes
from rl_hydra.spaces import shape_of

if TYPE_CHECKING:
    from rl_hydra.commands.run import Run

# --format -> the file's suffix; the writers and loaders of each are below (FORMAT_CODE)
FORMATS = {"onnx": ".onnx", "torchscript": ".pt", "torch_export": ".pt2"}
ONNX_MODULES = ("onnx", "onnxruntime")  # the export extra: writing an ONNX file and checking it
OPSET = 17
CHECK_ROWS = 16  # observations the exported file is compared with predict on
RECURRENT_CHECK_STEPS = 3  # steps a recurrent policy's state is threaded through in that check
ACTION_ATOL = 1e-5  # continuous actions: ONNX runtimes round differently from torch


@dataclass(frozen=True)
class Port:
    """One input or output of the exported policy: its name, shape after the batch axis, dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


Acting = Callable[[list[np.ndarray]], list[np.ndarray]]  # a loaded file: its inputs in, its outputs out


# --- the policies as modules: what predict computes, observation in, action out --------------------
def network_input(tensors: Sequence[torch.Tensor], keys: Sequence[str] | None):
    """The observation as predict hands it to the agent (observation_tensor): uint8 frames and bool
    grids kept (the encoders scale them), anything else float32; a dict of parts for a Dict space."""
    cast = [t if t.dtype in (torch.uint8, torch.bool) else t.float() for t in tensors]
    return cast[0] if keys is None else dict(zip(keys, cast))


class GreedyQPolicy(nn.Module):
    """DQN and its kin (QR-DQN, C51, Rainbow): argmax_a of the agent's own `action_values`."""

    def __init__(self, agent: Any, keys: Sequence[str] | None):
        super().__init__()
        self.q_net, self.keys, self.action_values = agent.q_net, keys, agent.action_values

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        return self.action_values(network_input(obs, self.keys)).argmax(dim=1)


class FixedFractionsPolicy(GreedyQPolicy):
    """IQN: the argmax of the mean over predict's K fixed fractions (`greedy_taus`), for every row."""

    taus: torch.Tensor  # the buffer registered below, (1, K)

    def __init__(self, agent: Any, keys: Sequence[str] | None):
        super().__init__(agent, keys)
        self.register_buffer("taus", agent.greedy_taus.detach().clone())  # (1, K)

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        taus = self.taus.expand(obs[0].shape[0], -1)  # (B, K)
        return self.action_values(network_input(obs, self.keys), taus=taus).argmax(dim=1)


class RecurrentQPolicy(nn.Module):
    """DRQN: (observation, state) -> (argmax_a Q, the next state), through the step predict takes."""

    def __init__(self, agent: Any, keys: Sequence[str] | None):
        super().__init__()
        self.q_net, self.keys, self.step = agent.q_net, keys, agent.q_net.act  # q_net: its weights in the file

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        parts = 1 if self.keys is None else len(self.keys)
        values, state = self.step(network_input(inputs[:parts], self.keys), tuple(inputs[parts:]))
        return (values.argmax(dim=1), *state)


class DeterministicActorPolicy(nn.Module):
    """SAC, REDQ, DroQ, TQC, CrossQ, TD3: the actor's deterministic action (`mode`) in the env's bounds."""

    def __init__(self, agent: Any, keys: Sequence[str] | None):
        super().__init__()
        self.actor, self.keys, self.observation_encoder = agent.actor, keys, agent.observation_encoder

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        features = network_input(obs, self.keys)
        if self.observation_encoder is not None:  # indices one-hot, bits as floats, side by side
            features = self.observation_encoder(features)
        return self.actor.to_env(self.actor.mode(features))


def policy_module(agent: Any, keys: Sequence[str] | None) -> nn.Module:
    """The module of the agent's family (the module docstring); one RunError line for another agent."""
    from rl_hydra.algos.actor_critic import ActorCritic
    from rl_hydra.algos.dqn import DQN
    from rl_hydra.algos.drqn import DRQN
    from rl_hydra.algos.iqn import IQN

    families: list[tuple[type, Callable[..., nn.Module]]] = [
        (DRQN, RecurrentQPolicy),
        (IQN, FixedFractionsPolicy),
        (DQN, GreedyQPolicy),
        (ActorCritic, DeterministicActorPolicy),
    ]
    for family, module in families:
        if isinstance(agent, family):
            return module(agent, keys)
    raise RunError(
        f"{type(agent).__name__} has no export: rl-hydra-export knows the DQN family, IQN, DRQN and the "
        f"actor-critics (SAC, REDQ, DroQ, TQC, CrossQ, TD3)"
    )


# --- ports and the check against predict ------------------------------------------------------------
def observation_ports(space: gym.Space) -> list[Port]:
    """One input for the observation, or one per part of a Dict space (`obs.<part>`), in its order."""
    spaces = dict(space.spaces) if isinstance(space, gym.spaces.Dict) else {"": space}
    return [
        Port(f"obs.{key}" if key else "obs", shape_of(part), np.dtype(part.dtype).name) for key, part in spaces.items()
    ]


def ports(run: Run, module: nn.Module) -> tuple[list[Port], list[Port]]:
    """(inputs, outputs) of the run's exported policy: the observation (and a recurrent state) in,
    the action (and the next state) out; the outputs' shapes and dtypes are those `module` gives."""
    inputs = observation_ports(run.observation_space)
    if run.recurrent:
        inputs += [Port(name, tuple(s.shape[1:]), "float32") for name, s in zip(("h", "c"), initial_state(run, 1))]
    with torch.no_grad():
        out = module(*example_inputs(inputs))
    out = out if isinstance(out, tuple) else (out,)
    names = ["action", *(f"next_{p.name}" for p in inputs[len(inputs) - len(out) + 1 :])]
    return inputs, [Port(name, tuple(t.shape[1:]), str(t.dtype).removeprefix("torch.")) for name, t in zip(names, out)]


def initial_state(run: Run, rows: int) -> tuple[torch.Tensor, ...]:
    """A recurrent agent's state before an episode's first observation, for `rows` of them."""
    agent: Any = run.agent  # the Agent protocol leaves the recurrent methods out
    return agent.initial_state(rows)


def observation_batch(space: gym.Space, rows: int, seed: int = 0) -> list[np.ndarray]:
    """`rows` observations drawn from `space` (seeded), one array per input port."""
    space.seed(seed)
    samples = [space.sample() for _ in range(rows)]
    if isinstance(space, gym.spaces.Dict):
        return [np.stack([np.asarray(s[key]) for s in samples]) for key in space.spaces]
    return [np.stack([np.asarray(s) for s in samples]).astype(space.dtype, copy=False)]


def check_against_predict(run: Run, act: Acting, fmt: str) -> None:
    """The exported file (`act`: its inputs -> its outputs) gives predict's actions on a drawn batch
    (a recurrent policy: over a few steps, each with the state the step before gave), or RunError."""
    obs = observation_batch(run.observation_space, CHECK_ROWS)
    keys = list(run.observation_space.spaces) if isinstance(run.observation_space, gym.spaces.Dict) else None
    predict_obs: Any = obs[0] if keys is None else dict(zip(keys, obs))
    state: Any = None
    exported_state = [np.asarray(s, np.float32) for s in initial_state(run, CHECK_ROWS)] if run.recurrent else []
    for _ in range(RECURRENT_CHECK_STEPS if run.recurrent else 1):
        expected = run.predict(predict_obs, state)
        if run.recurrent:
            expected, state = expected
        outputs = act(obs + exported_state)
        actions, exported_state = outputs[0], list(outputs[1:])
        discrete = np.issubdtype(np.asarray(expected).dtype, np.integer)
        same = np.array_equal(actions, expected) if discrete else np.allclose(actions, expected, atol=ACTION_ATOL)
        if not same:
            raise RunError(
                f"the {fmt} export of {run.path} does not act as predict does on {CHECK_ROWS} observations "
                f"(largest difference {np.max(np.abs(np.asarray(actions, float) - expected)):.3g}); nothing written"
            )


# --- the three formats: each a writer and a loader (FORMAT_CODE) -----------------------------------------
def require_onnx() -> None:
    """onnx and onnxruntime are installed (the export extra), or one ConfigError line with the pip command."""
    for module in ONNX_MODULES:
        if importlib.util.find_spec(module) is None:
            raise NotInstalled(
                f'--format onnx needs the export extra ({module} is not installed): pip install -e ".[export]"'
            )


def example_inputs(inputs: list[Port], rows: int = 2) -> tuple[torch.Tensor, ...]:
    """Zeros of each input's shape and dtype, `rows` of them: what tracing runs the policy on."""
    return tuple(torch.zeros((rows, *port.shape), dtype=getattr(torch, port.dtype)) for port in inputs)


@contextlib.contextmanager
def saved_without_gradients(module: nn.Module) -> Iterator[None]:
    """Inside the block the module's weights need no gradient, so a file written there holds them so
    (its outputs are plain tensors wherever it is loaded); after it, each has its flag back (the
    agent's own parameters, which the file's trace shares)."""
    flags = [(param, param.requires_grad) for param in module.parameters()]
    for param, _ in flags:
        param.requires_grad_(False)
    try:
        yield
    finally:
        for param, flag in flags:
            param.requires_grad_(flag)


@contextlib.contextmanager
def modes_kept(module: nn.Module) -> Iterator[None]:
    """Every submodule's training flag as it was before the block: torch.onnx.export sets the whole
    tree to its root's mode afterwards, which would put CrossQ's batch renormalization (resting in
    inference mode) into training mode, and predict would then normalize with each batch's statistics."""
    modes = [(m, m.training) for m in module.modules()]
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def onnx_bytes(module: nn.Module, inputs: list[Port], outputs: list[Port], metadata: dict[str, str]) -> bytes:
    """The module as an ONNX model with a dynamic batch axis, its metadata in metadata_props."""
    import onnx

    buffer = io.BytesIO()
    # the TorchScript-based exporter: no onnxscript needed, but it is deprecated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            example_inputs(inputs),
            buffer,  # type: ignore[arg-type]  # the TorchScript-based exporter writes to a file object too
            input_names=[p.name for p in inputs],
            output_names=[p.name for p in outputs],
            dynamic_axes={p.name: {0: "batch"} for p in inputs + outputs},
            opset_version=OPSET,
            dynamo=False,
        )
    model = onnx.load_from_string(buffer.getvalue())
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=value)
    return model.SerializeToString()


def onnx_runner(data: bytes, inputs: list[Port]) -> Acting:
    import onnxruntime  # type: ignore[import-untyped]

    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    return lambda arrays: session.run(None, {p.name: a for p, a in zip(inputs, arrays)})


def torchscript_bytes(
    module: nn.Module,
    inputs: list[Port],
    outputs: list[Port],  # noqa: ARG001 - the Writer signature: ONNX names its outputs, torch does not
    metadata: dict[str, str],
) -> bytes:
    """The module traced to TorchScript (the agent's torch code, not the numpy fast path), with
    `policy.json` as an extra file."""
    # TracerWarnings about the constants a trace keeps, and torch.jit's notice that torch.export follows it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(module, example_inputs(inputs), check_trace=False)
        buffer = io.BytesIO()
        torch.jit.save(traced, buffer, _extra_files={"policy.json": json.dumps(metadata, indent=2)})
    return buffer.getvalue()


def torch_acting(loaded: Callable[..., Any]) -> Acting:
    """A loaded torch policy as a function of arrays: its inputs in, its outputs out."""

    def act(arrays: list[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = loaded(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays))
        return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]

    return act


def torchscript_runner(data: bytes, inputs: list[Port]) -> Acting:  # noqa: ARG001
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's notice that torch.export follows it
        return torch_acting(torch.jit.load(io.BytesIO(data)))


def torch_export_bytes(
    module: nn.Module,
    inputs: list[Port],
    outputs: list[Port],  # noqa: ARG001 - the Writer signature: ONNX names its outputs, torch does not
    metadata: dict[str, str],
) -> bytes:
    """The module as a torch.export program (TorchScript's successor) with a dynamic batch axis, and
    `policy.json` as an extra file: torch.export.load(path).module() acts."""
    batch = torch.export.Dim("batch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(
            module,
            example_inputs(inputs),
            dynamic_shapes=(tuple({0: batch} for _ in inputs),),  # forward(*inputs)
        )
    buffer = io.BytesIO()
    torch.export.save(program, buffer, extra_files={"policy.json": json.dumps(metadata, indent=2)})
    return buffer.getvalue()


def torch_export_runner(data: bytes, inputs: list[Port]) -> Acting:  # noqa: ARG001
    return torch_acting(torch.export.load(io.BytesIO(data)).module())


Writer = Callable[[nn.Module, list[Port], list[Port], dict[str, str]], bytes]
Loader = Callable[[bytes, list[Port]], Acting]
FORMAT_CODE: dict[str, tuple[Writer, Loader]] = {
    "onnx": (onnx_bytes, onnx_runner),
    "torchscript": (torchscript_bytes, torchscript_runner),
    "torch_export": (torch_export_bytes, torch_export_runner),
}


# --- exporting a run -----------------------------------------------------------------------------------
def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise BadArgument(f"--format={fmt} is not allowed; choose one of: {', '.join(FORMATS)}")
    if fmt == "onnx":
        require_onnx()
    return fmt


def metadata(run: Run, inputs: list[Port], outputs: list[Port]) -> dict[str, str]:
    """What the file says about itself: its ports and the run, checkpoint and step it came from."""
    return {
        "rl_hydra.inputs": json.dumps([asdict(p) for p in inputs]),
        "rl_hydra.outputs": json.dumps([asdict(p) for p in outputs]),
        "rl_hydra.algo": type(run.agent).__name__,
        "rl_hydra.env_id": str(run.cfg.env.id),
        "rl_hydra.run": str(run.path),
        "rl_hydra.checkpoint": run.checkpoint,
        "rl_hydra.step": str(run.step),
    }


def exported_bytes(run: Run, fmt: str) -> bytes:
    """The run's greedy policy in `fmt`, checked against predict."""
    from rl_hydra.networks.noisy import noise_disabled

    check_format(fmt)
    keys = list(run.observation_space.spaces) if isinstance(run.observation_space, gym.spaces.Dict) else None
    module = policy_module(run.agent, keys)
    # noisy layers with their mean weights, as predict acts; each submodule's mode as predict finds it
    with noise_disabled(module), saved_without_gradients(module), modes_kept(module), torch.no_grad():
        inputs, outputs = ports(run, module)
        info = metadata(run, inputs, outputs)
        write, load = FORMAT_CODE[fmt]
        data = write(module, inputs, outputs, info)
        act = load(data, inputs)
    check_against_predict(run, act, fmt)
    return data


def default_out(run: Run, fmt: str) -> Path:
    return run.path / "export" / f"policy_{run.checkpoint}{FORMATS[fmt]}"


def export_run(run: Run, fmt: str = "onnx", out: str | Path | None = None) -> Path:
    """Write the run's greedy policy as one file (`out`, default `<run>/export/policy_<checkpoint>.<ext>`),
    atomically; inside the run directory through its handle. Returns the path written."""
    data = exported_bytes(run, fmt)
    path = default_out(run, fmt) if out is None else Path(out)
    run_path, target = (Path(os.path.normpath(p.absolute())) for p in (run.path, path))  # by name: no link followed
    if target.is_relative_to(run_path):  # the run's own file: through its handle
        run.directory.write_bytes(run.path / target.relative_to(run_path), lambda f: f.write(data))
    else:
        atomic_write_bytes(path, lambda f: f.write(data))
    return path
