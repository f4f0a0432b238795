"""An agent's gradient step replayed as one CUDA graph.

On a GPU, a small network's update is bound by the host: a Nature-CNN DQN update at batch 32
launches about 150 kernels, one at a time from Python, and the GPU waits between them. A CUDA
graph records those launches once and replays them with one call. What it records must read
only tensors that stay where they are and change nothing on the host, so:

- it replays only a step its agent's class declares tensor-only (`tensor_only_step`: the methods
  `gradient_step` runs), in an agent whose class, instance and networks override none of them. A
  subclass with its own loss, a compiled loss, or a network class from outside the package gets
  the plain step;
- each batch is copied into the graph's own input tensors; the outputs (loss, priorities,
  metrics) are the graph's tensors, rewritten by the next replay;
- it records only after WARMUP calls in a row in which nothing it reads has moved: the same
  parameter, buffer and optimizer-state tensors, learning rates and batch shapes. Anything that
  moves (a loaded checkpoint, a learning rate that decays) drops the graph and runs the plain step;
- random draws inside the step (IQN's fractions, the noisy layers' noise) come from generators
  registered with the graph (the agent's own, and torch's default one, which torch registers),
  which advance at every replay as they do when the step runs eagerly.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

WARMUP = 3  # plain calls in a row before recording: lazy state (optimizer moments, cuBLAS) is made by then


def declared_base(agent: Any) -> type | None:
    """The nearest class in the agent's MRO that declares a `tensor_only_step`, if the agent runs that
    very step (no method it lists overridden in its class or instance, no network class of its own)."""
    base: type[Any] | None = next((cls for cls in type(agent).__mro__ if "tensor_only_step" in vars(cls)), None)
    if base is None or not base.tensor_only_step:
        return None
    own = {name: value for name, value in vars(agent).items() if not isinstance(value, Step)}
    if any(name in own or getattr(type(agent), name) is not getattr(base, name) for name in base.tensor_only_step):
        return None
    modules = [m for value in own.values() if isinstance(value, nn.Module) for m in value.modules()]
    if not all(type(m).__module__.startswith(("rl_hydra.", "torch.nn.")) for m in modules):
        return None
    return base


def replayable(agent: Any) -> bool:
    """Whether the agent is on CUDA and declares a tensor-only gradient step that it runs as declared."""
    return getattr(agent, "device", torch.device("cpu")).type == "cuda" and declared_base(agent) is not None


def generators(agent: Any) -> list[torch.Generator]:
    """The agent's own CUDA generators (its default generator is registered by torch itself)."""
    return [
        value for value in vars(agent).values() if isinstance(value, torch.Generator) and value.device.type == "cuda"
    ]


class GraphedStep:
    """`agent.gradient_step(batch)`, replayed from a CUDA graph once it has run WARMUP times alike."""

    def __init__(self, agent: Any):
        self.agent = weakref.proxy(agent)
        self.plain = functools.partial(type(agent).gradient_step, self.agent)  # not the attached Step
        self.stream = torch.cuda.Stream(device=agent.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: Any = None
        self.outputs: Any = None
        self.recorded: tuple | None = None
        self.seen: tuple | None = None
        self.alike = 0
        self.failed: str | None = None

    def fingerprint(self, batch) -> tuple:
        """What the recorded kernels depend on: where every tensor they read lives, and the batch's shapes."""
        agent = self.agent
        tensors = [
            t
            for value in vars(agent).values()
            if isinstance(value, nn.Module)
            for t in (*value.parameters(), *value.buffers())
        ]
        tensors += [t for state in agent.optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
        lrs = tuple(group["lr"] for group in agent.optimizer.param_groups)
        shapes = tuple(
            None if value is None else (tuple(value.shape), value.dtype, value.device)
            for value in batch
            if torch.is_tensor(value) or value is None
        )
        return tuple(t.data_ptr() for t in tensors), lrs, shapes

    def __call__(self, batch):
        if self.failed:
            return self.plain(batch)
        seen = self.fingerprint(batch)
        if self.graph is not None and seen == self.recorded:
            return self.replay(batch)
        self.graph, self.recorded = None, None  # something moved: record again once it settles
        self.alike = self.alike + 1 if seen == self.seen else 1
        self.seen = seen
        if self.alike <= WARMUP:
            return self.on_side_stream(lambda: self.plain(batch))
        try:
            self.record(batch)
        except Exception as error:  # a step that cannot be recorded runs plainly from now on
            self.graph, self.failed = None, f"{type(error).__name__}: {error}".splitlines()[0]
            log.info("speed: cuda_graph falls back to the plain gradient step (%s)", self.failed)
            torch.cuda.synchronize(self.agent.device)
            return self.plain(batch)
        self.recorded = seen
        return self.replay(batch)

    def on_side_stream(self, run: Callable[[], Any]) -> Any:
        """Run on the recording stream, ordered after and before the work on the current one (the
        warm-up runs where the recording will, so lazy per-stream state exists by then)."""
        current = torch.cuda.current_stream(self.agent.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            result = run()
        current.wait_stream(self.stream)
        return result

    def record(self, batch) -> None:
        self.inputs = type(batch)(
            *(value.clone() if torch.is_tensor(value) and value.is_cuda else None for value in batch)
        )
        graph = torch.cuda.CUDAGraph()
        for generator in generators(self.agent):
            graph.register_generator_state(generator)
        self.stream.wait_stream(torch.cuda.current_stream(self.agent.device))
        with torch.cuda.graph(graph, stream=self.stream):
            self.outputs = self.plain(self.inputs)
        torch.cuda.current_stream(self.agent.device).wait_stream(self.stream)
        self.graph = graph

    def replay(self, batch):
        for static, value in zip(self.inputs, batch):
            if static is not None:
                static.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.outputs


_steps: weakref.WeakKeyDictionary[Any, GraphedStep] = weakref.WeakKeyDictionary()


class Step:
    """What `agent.gradient_step` is on an agent `attach` chose: the GraphedStep while `on()` and the
    agent still runs its declared step, else its class's gradient step."""

    def __init__(self, agent: Any, on: Callable[[], bool]):
        self.agent, self.on = weakref.ref(agent), on  # the agent holds its Step: no cycle

    def __call__(self, batch):
        agent = self.agent()
        if self.on() and declared_base(agent) is not None:
            return graphed_step(agent)(batch)
        return type(agent).gradient_step(agent, batch)


def graphed_step(agent: Any) -> GraphedStep:
    """The agent's GraphedStep, made on first use."""
    if agent not in _steps:
        _steps[agent] = GraphedStep(agent)
    return _steps[agent]


def probe() -> None:
    """Raises unless the CUDA graph API the replay uses is here; what only a CUDA build has is
    checked where CUDA is (tests/speed/test_cuda.py compares the replay with the plain step there)."""
    for name in ("capture_begin", "capture_end", "replay"):
        getattr(torch.cuda.CUDAGraph, name)
    torch.cuda.graph  # noqa: B018 (its presence is what is checked)
    if torch.cuda.is_available():
        torch.cuda.CUDAGraph.register_generator_state  # noqa: B018
