"""An agent's gradient step replayed as one CUDA graph.

On a GPU, a small network's update is bound by the host: a Nature-CNN DQN update at batch 32
launches about 150 kernels, one at a time from Python, and the GPU waits between them. A CUDA
graph records those launches once and replays them with one call. What it records must read
only tensors that stay where they are and change nothing on the host. Nothing is declared by the
agent: the layer reads it off the agent's class and checks it at run time, so:

- the step is the `gradient_step(batch)` of the agent's class, which `update` calls. Its code, and
  that of every method it calls on `self` (a subclass's overrides included, `super()` calls too),
  is read once per class (`step_code`): a step that sets an attribute of `self` or hands `self`
  on whole runs plainly, said in one log line;
- what the step reads on `self` must be tensors, modules of the package or torch.nn, optimizers,
  CUDA generators or plain values (`fingerprint`); anything else (a compiled or patched method
  on the instance, a numpy generator, a network class from outside the package) runs plainly;
- each batch is copied into the graph's own input tensors (a batch of tensors only: a recurrent
  state tuple or a dict of observation parts runs plainly); the outputs (loss, priorities,
  metrics) are the graph's tensors, rewritten by the next replay;
- it records only after WARMUP calls in a row that found, and left, alike everything the step
  reads: the same parameter, buffer and optimizer-state tensors, the same plain values (learning
  rates, a subclass's own settings), the same batch shapes. Anything that moves (a loaded
  checkpoint, a learning rate that decays) drops the graph and runs the plain step, and a
  recording that fails runs the plain step from then on, said in one log line;
- random draws inside the step (IQN's fractions, the noisy layers' noise) come from generators
  registered with the graph (the agent's own, and torch's default one, which torch registers),
  which advance at every replay as they do when the step runs eagerly.
"""

from __future__ import annotations

import dis
import inspect
import logging
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

WARMUP = 3  # plain calls in a row before recording: lazy state (optimizer moments, cuBLAS) is made by then
KNOWN_MODULES = ("rl_hydra.", "torch.nn.")  # network code whose forward changes no Python value
PLAIN_VALUES = (type(None), bool, int, float, str, torch.dtype, torch.device)
SELF_LOADS = ("LOAD_FAST", "LOAD_DEREF")
ATTRIBUTE_READS = ("LOAD_ATTR", "LOAD_METHOD")


class NotReplayable(Exception):
    """Why a step runs plainly."""


@dataclass(frozen=True)
class StepCode:
    """What the code of a class's gradient step reads on `self` (names, sorted), which of those the class
    defines as methods or properties (read through), or why it cannot be replayed."""

    reads: tuple[str, ...]
    methods: frozenset[str] = frozenset()
    why_not: str | None = None


def step_code(agent_class: type) -> StepCode:
    """`agent_class.gradient_step` and every method it calls on `self`, read off their bytecode."""
    if agent_class not in _step_codes:
        _step_codes[agent_class] = read_step_code(agent_class)
    return _step_codes[agent_class]


_step_codes: weakref.WeakKeyDictionary[type, StepCode] = weakref.WeakKeyDictionary()


def read_step_code(agent_class: type) -> StepCode:
    if not callable(getattr(agent_class, "gradient_step", None)):
        return StepCode((), why_not=f"{agent_class.__name__} has no gradient_step")
    reads: set[str] = set()
    pending, done = [("gradient_step", False)], set()
    while pending:
        name, through_super = pending.pop()
        if (name, through_super) in done:
            continue
        done.add((name, through_super))
        reads.add(name)
        # a super() call may reach any definition up the MRO: all are read
        owners = agent_class.__mro__ if through_super else (agent_class,)
        for code in (c for owner in owners for c in codes_of(inspect.getattr_static(owner, name, None))):
            try:
                pending += attributes_of_self(code, agent_class.__name__)
            except NotReplayable as error:
                return StepCode(tuple(sorted(reads)), why_not=str(error))
    methods = frozenset(name for name in reads if codes_of(inspect.getattr_static(agent_class, name, None)))
    return StepCode(tuple(sorted(reads)), methods)


def codes_of(attribute: Any) -> list[types.CodeType]:
    """The code a method, property or nested function runs (none for data or static/class methods)."""
    if isinstance(attribute, property):
        return codes_of(attribute.fget)
    if isinstance(attribute, types.FunctionType):
        return [attribute.__code__]
    return []


def attributes_of_self(code: types.CodeType, where: str) -> list[tuple[str, bool]]:
    """(name, read through super()) for each attribute of `self` the code (and code nested in it)
    reads; NotReplayable where it sets one or hands `self` on."""
    if not code.co_argcount:
        return []
    return list(self_reads(code, code.co_varnames[0], where))


def self_reads(code: types.CodeType, self_name: str, where: str) -> Iterator[tuple[str, bool]]:
    instructions = list(dis.get_instructions(code))
    after_super = False
    for this, following in zip(instructions, [*instructions[1:], None]):
        if this.opname == "LOAD_GLOBAL" and this.argval == "super":
            after_super = True
        elif this.opname in ATTRIBUTE_READS and after_super:
            after_super = False
            yield this.argval, True
        elif isinstance(this.argval, tuple) and self_name in this.argval:  # 3.13's LOAD_FAST_LOAD_FAST
            raise NotReplayable(f"{where}.{code.co_name} hands self on whole")
        elif this.opname in SELF_LOADS and this.argval == self_name:
            if following is not None and following.opname == "LOAD_SUPER_ATTR":  # 3.12's super().name
                after_super = False
                yield following.argval, True
            elif following is not None and following.opname in ATTRIBUTE_READS:
                yield following.argval, False
            elif following is not None and following.opname == "STORE_ATTR":
                raise NotReplayable(f"{where}.{code.co_name} sets self.{following.argval}")
            else:
                raise NotReplayable(f"{where}.{code.co_name} hands self on whole")
    for nested in code.co_consts:  # comprehensions, lambdas, inner functions: self is a free variable there
        if isinstance(nested, types.CodeType):
            yield from self_reads(nested, self_name, where)


def fingerprint(agent: Any, batch: Any) -> tuple:
    """What the recorded kernels depend on: the agent's class (whose code they came from), where each
    tensor the step reads lives, each plain value it reads, and the batch's shapes; NotReplayable where
    it reads something else."""
    agent_class = agent.__class__  # agent may be a weakref.proxy
    code = step_code(agent_class)
    if code.why_not:
        raise NotReplayable(code.why_not)
    own = vars(agent)
    values = []
    for name in code.reads:
        if name in own and not isinstance(own[name], Step):  # an instance's own value, or a method it shadows
            values.append((name, value_key(own[name], name, agent.device)))
        elif name not in own and name not in code.methods:
            values.append((name, value_key(getattr(agent, name, None), name, agent.device)))
    if not all(torch.is_tensor(value) or value is None for value in batch):
        raise NotReplayable(f"its batch holds more than tensors ({type(batch).__name__})")
    shapes = tuple(None if value is None else (tuple(value.shape), value.dtype, value.device) for value in batch)
    return agent_class, tuple(values), shapes


def value_key(value: Any, name: str, device: torch.device) -> Any:
    """What of `value` a replay depends on: a tensor's address and shape, a plain value itself (a
    generator on another device than the agent's would draw on the host, once, at the recording)."""
    if isinstance(value, PLAIN_VALUES):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(value_key(item, name, device) for item in value)
    if torch.is_tensor(value):
        return value.data_ptr(), tuple(value.shape), value.dtype
    if isinstance(value, torch.Generator) and value.device.type == device.type:
        return id(value)
    if isinstance(value, nn.Module):
        return module_key(value, name)
    if isinstance(value, torch.optim.Optimizer):
        groups = tuple(
            value_key({k: v for k, v in g.items() if k != "params"}, name, device) for g in value.param_groups
        )
        state = tuple(t.data_ptr() for s in value.state.values() for t in s.values() if torch.is_tensor(t))
        return groups, state
    if isinstance(value, dict):
        return tuple((key, value_key(item, name, device)) for key, item in value.items())
    raise NotReplayable(f"it reads self.{name}, a {type(value).__name__}")


def module_key(module: nn.Module, name: str) -> tuple:
    """Each submodule's plain values (flags a forward may branch on) and where its tensors live."""
    keys = []
    for part in module.modules():
        if not type(part).__module__.startswith(KNOWN_MODULES):
            raise NotReplayable(f"self.{name} holds a {type(part).__name__} from outside rl_hydra and torch.nn")
        plain = tuple((k, v) for k, v in vars(part).items() if isinstance(v, PLAIN_VALUES))
        tensors = tuple(t.data_ptr() for t in (*part.parameters(recurse=False), *part.buffers(recurse=False)))
        keys.append((plain, tensors))
    return tuple(keys)


def why_plain(agent: Any, batch: Any) -> str | None:
    """Why the agent's gradient step on `batch` may not be replayed; None where it may."""
    try:
        fingerprint(agent, batch)
    except NotReplayable as error:
        return str(error)
    return None


def on_cuda(agent: Any) -> bool:
    return getattr(agent, "device", torch.device("cpu")).type == "cuda"


def generators(agent: Any) -> list[torch.Generator]:
    """The agent's own CUDA generators (its default generator is registered by torch itself)."""
    return [
        value for value in vars(agent).values() if isinstance(value, torch.Generator) and value.device.type == "cuda"
    ]


class GraphedStep:
    """`agent.gradient_step(batch)`, replayed from a CUDA graph once it has run WARMUP times alike."""

    def __init__(self, agent: Any):
        self.agent = weakref.proxy(agent)
        self.stream: Any = None  # the recording stream, made on first use
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: Any = None
        self.outputs: Any = None
        self.recorded: tuple | None = None
        self.seen: tuple | None = None
        self.alike = 0
        self.failed: str | None = None

    def __call__(self, batch):
        """The step on `batch`; NotReplayable, before anything ran, where it may not be replayed."""
        if self.failed:
            return self.plain(batch)
        seen = fingerprint(self.agent, batch)
        if self.graph is not None and seen == self.recorded:
            return self.replay(batch)
        self.graph, self.recorded = None, None  # something moved: record again once it settles
        self.alike = self.alike + 1 if seen == self.seen else 1
        self.seen = seen
        if self.alike <= WARMUP:
            result = self.on_side_stream(lambda: self.plain(batch))
            if not self.unmoved(seen, batch):  # the step itself moves what it reads: a replay would not
                self.alike, self.seen = 0, None
            return result
        try:
            self.record(batch)
        except Exception as error:  # a step that cannot be recorded runs plainly from now on
            self.graph, self.failed = None, f"{type(error).__name__}: {error}".splitlines()[0]
            log.info("speed: cuda_graph falls back to the plain gradient step (%s)", self.failed)
            torch.cuda.synchronize(self.agent.device)
            return self.plain(batch)
        self.recorded = seen
        return self.replay(batch)

    def plain(self, batch):
        """The class's gradient step (not the attached Step), looked up at each call."""
        return self.agent.__class__.gradient_step(self.agent, batch)

    def unmoved(self, seen: tuple, batch) -> bool:
        try:
            return fingerprint(self.agent, batch) == seen
        except NotReplayable:
            return False

    def side_stream(self) -> torch.cuda.Stream:
        if self.stream is None:
            self.stream = torch.cuda.Stream(device=self.agent.device)
        return self.stream

    def on_side_stream(self, run: Callable[[], Any]) -> Any:
        """Run on the recording stream, ordered after and before the work on the current one (the
        warm-up runs where the recording will, so lazy per-stream state exists by then)."""
        current, stream = torch.cuda.current_stream(self.agent.device), self.side_stream()
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            result = run()
        current.wait_stream(stream)
        return result

    def record(self, batch) -> None:
        self.inputs = type(batch)(
            *(value.clone() if torch.is_tensor(value) and value.is_cuda else None for value in batch)
        )
        graph, stream = torch.cuda.CUDAGraph(), self.side_stream()
        for generator in generators(self.agent):
            graph.register_generator_state(generator)
        stream.wait_stream(torch.cuda.current_stream(self.agent.device))
        with torch.cuda.graph(graph, stream=stream):
            self.outputs = self.plain(self.inputs)
        torch.cuda.current_stream(self.agent.device).wait_stream(stream)
        self.graph = graph

    def replay(self, batch):
        for static, value in zip(self.inputs, batch):
            if static is not None:
                static.copy_(value, non_blocking=True)
        self.graph.replay()
        return self.outputs


_steps: weakref.WeakKeyDictionary[Any, GraphedStep] = weakref.WeakKeyDictionary()


class Step:
    """What `agent.gradient_step` is on a CUDA agent (speed.attach): the GraphedStep while `on()` and
    the step may be replayed, else its class's gradient step, the first time said in one log line."""

    def __init__(self, agent: Any, on: Callable[[], bool]):
        self.agent, self.on = weakref.ref(agent), on  # the agent holds its Step: no cycle
        self.said = False

    def __call__(self, batch):
        agent = self.agent()
        if self.on():
            try:
                return graphed_step(agent)(batch)
            except NotReplayable as why:
                if not self.said:
                    log.info("speed: cuda_graph runs %s's gradient step plainly (%s)", type(agent).__name__, why)
                    self.said = True
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
