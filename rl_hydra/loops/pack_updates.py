"""One batched update for a pack's members (rl_hydra/loops/pack.py): the per-op overhead of K small
updates paid once, a fast path of the pack beside its plain one (`each_alone`).

The DQN family (DQN, QR-DQN, C51, IQN and their double-Q, n-step and prioritized options, and any
subclass that keeps DQN's `update` and `gradient_step`) is updated with its networks stacked along a
leading member dimension: each member's `loss_draws` from its own generators (IQN's fractions, the same
draws it makes alone), the agent's own `pure_loss` vmapped over each member's parameters, batch and
draws, autograd's backward through it, each member's clipping, Adam on the stacked tensors with each
member's learning rate and moments, and each member's target update. The speed layer's stand-ins serve
it as they serve an update alone (build.py pack_updates; the quantile Huber loss's closed form takes the
K members' rows as one batch). A member's modules hold views into the stacked parameters and its
optimizer's state views into the stacked moments, so its acting, evaluation and checkpoints
(runs/run_dir.py saves a view as the tensor it shows) read what the batched update wrote.

Anything else is updated by each agent alone (`each_alone`), with one log line saying why: another
algorithm, noisy layers, a compiled loss, a CUDA-graphed step, an optimizer other than plain Adam, a
loss that draws random numbers of its own (vmap refuses it, the first time), IQN on the CPU (faster alone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import nn
from torch.func import functional_call, vmap

from rl_hydra.algos.dqn import DQN
from rl_hydra.algos.iqn import IQN
from rl_hydra.loops.pack import each_alone
from rl_hydra.loops.steps import UpdateWanted
from rl_hydra.protocols import Update
from rl_hydra.speed.lean_adam import FUSED_ADAM

log = logging.getLogger(__name__)


class PackedUpdates:
    """A pack's `updates` (rl_hydra/loops/pack.py): each round's wanted updates batched where the agents
    allow it, else answered by `alone` (the pack's each_alone)."""

    # below this many members one update after another is the faster (packed_sweep.py --updates: a
    # batched round costs a few ms of its own on the CPU)
    min_members = 4
    # on the CPU these update faster alone: IQN's (B, N, width) activations are large enough that K members'
    # stacked outrun the cache (packed_sweep.py --updates --presets iqn_cartpole: batched / alone 1.2-1.7)
    alone_on_cpu: tuple[type, ...] = (IQN,)

    def __init__(
        self, alone: Callable[[Sequence[UpdateWanted]], list[Any]] = each_alone, min_members: int | None = None
    ) -> None:
        self.alone = alone
        self.min_members = self.min_members if min_members is None else min_members
        self.stacks: dict[tuple[int, ...], StackedQ | None] = {}

    def __call__(self, wanted: Sequence[UpdateWanted]) -> list[Any]:
        agents = [want.agent for want in wanted]
        key = tuple(id(agent) for agent in agents)
        if key not in self.stacks:
            why = refusal(agents)
            if why is None and isinstance(agents[0], self.alone_on_cpu) and agents[0].device.type == "cpu":
                why = f"{type(agents[0]).__name__} on the CPU updates faster alone"
            if why is None and len(agents) < self.min_members:
                why = f"{len(agents)} members, fewer than {self.min_members} (one after another is faster)"
            if why is not None and len(agents) > 1:
                log.info("pack: each member updates alone: %s", why)
            elif why is None:
                log.info("pack: %d members' %s updates batched as one", len(agents), type(agents[0]).__name__)
            self.stacks[key] = StackedQ(cast(list[DQN], agents)) if why is None else None
        stack = self.stacks[key]
        if stack is not None:
            try:
                return stack.update([want.batch for want in wanted])
            except RuntimeError as error:  # vmap cannot batch this loss (a random draw, a data-dependent branch)
                if "vmap" not in str(error):
                    raise
                log.info(
                    "pack: each member updates alone: vmap cannot batch %s.loss (%s)",
                    type(agents[0]).__name__,
                    str(error).splitlines()[0],
                )
                stack.unstack()  # each member as it was before: its update alone is the one it makes alone
                self.stacks[key] = None
        return self.alone(wanted)


def refusal(agents: list[Any]) -> str | None:
    """Why these agents cannot take one batched update, or None."""
    if len(agents) < 2:
        return "a pack of one"
    first = agents[0]
    kind = type(first)
    if not isinstance(first, DQN) or kind.update is not DQN.update or kind.gradient_step is not DQN.gradient_step:
        return f"algo {kind.__name__} has no batched update"
    if any(type(agent) is not kind for agent in agents):
        return "the members' algorithms differ"
    for agent in agents:
        if agent.noisy:
            return "noisy layers draw their noise per member"
        if any(name in vars(agent) for name in ("loss", "gradient_step", *kind.compiled_methods)):
            return "a compiled loss or a CUDA-graphed step"
        if list(agent.q_net.buffers()):
            return "the network has buffers"
        if (agent.max_grad_norm is None) != (first.max_grad_norm is None):
            return "some members clip their gradients and some do not"
        why = adam_refusal(agent.optimizer, first.optimizer)
        if why is not None:
            return why
    shapes = [[p.shape for p in agent.params] for agent in agents]
    if any(shape != shapes[0] for shape in shapes) or any(a.device != first.device for a in agents):
        return "the members' networks differ in shape or device"
    return None


def adam_refusal(optimizer: torch.optim.Optimizer, first: torch.optim.Optimizer) -> str | None:
    if not isinstance(optimizer, torch.optim.Adam) or len(optimizer.param_groups) != 1:
        return f"optimizer {type(optimizer).__name__} is not plain Adam with one group"
    group, theirs = optimizer.param_groups[0], first.param_groups[0]
    if group["weight_decay"] or group["amsgrad"] or group["maximize"] or torch.is_tensor(group["lr"]):
        return "Adam with weight decay, amsgrad, maximize or a tensor learning rate"
    if (group["betas"], group["eps"]) != (theirs["betas"], theirs["eps"]):
        return "the members' Adam betas or eps differ"
    return None


class Both(nn.Module):
    """An agent's online and target networks as one module, whose forward is the agent's loss: what
    functional_call reparametrizes with one member's weights."""

    def __init__(self, agent: DQN):
        super().__init__()
        self.q_net, self.target_net = agent.q_net, agent.target_net
        self.agent = [agent]  # in a list: not a submodule

    def forward(self, batch: Any, draws: tuple) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        agent = self.agent[0]
        return getattr(agent, agent.pure_loss)(batch, *draws)


class StackedQ:
    """K agents of one DQN-family class, their parameters and Adam moments stacked: (K, *shape) each."""

    def __init__(self, agents: list[DQN]):
        self.agents, template = agents, agents[0]
        self.both = Both(template)
        self.names = [name for name, _ in template.q_net.named_parameters()]
        self.online = stack_into(agents, "q_net", self.names)
        self.target = stack_into(agents, "target_net", self.names)
        # what each optimizer held before its state became views into the stacked moments
        self.own_states = [dict(agent.optimizer.state) for agent in agents]
        self.exp_avg, self.exp_avg_sq, self.steps = stack_moments(agents, self.names, self.online)
        group = template.optimizer.param_groups[0]
        (self.beta1, self.beta2), self.eps = group["betas"], group["eps"]
        clips = [agent.max_grad_norm for agent in agents]
        self.max_norm = None if clips[0] is None else torch.tensor(clips, dtype=torch.float32, device=template.device)
        for stacked in self.online.values():  # leaves of autograd: a backward through the vmapped loss fills .grad
            stacked.requires_grad_(True)
        # the forward vmapped, the backward autograd's own: half the cost of vmap(grad(...)) at these sizes
        self.member_losses = vmap(self.member_loss, randomness="error")

    def member_loss(self, online: dict[str, torch.Tensor], target: dict[str, torch.Tensor], batch: Any, draws: tuple):
        weights = {**{f"q_net.{n}": p for n, p in online.items()}, **{f"target_net.{n}": p for n, p in target.items()}}
        return functional_call(self.both, weights, (batch, draws))

    def unstack(self) -> None:
        """Each agent given back tensors of its own, with the values they hold, and its optimizer the
        state it held before the stack (a batched update that failed in its forward changed neither)."""
        for agent, state in zip(self.agents, self.own_states, strict=True):
            for module in (agent.q_net, agent.target_net):
                for param in module.parameters():
                    param.data = param.data.clone()
            agent.optimizer.state.clear()
            agent.optimizer.state.update(state)

    def update(self, batches: list[Any]) -> list[Update]:
        """What each agent's own `update` would do and return, for all at once."""
        lrs = []
        for agent in self.agents:  # DQN.update's learning-rate schedule, each member's own
            factor = agent.lr_factor(agent.explore_steps) if agent.lr_factor.start != agent.lr_factor.end else 1.0
            lrs.append(agent.base_lrs[0] * factor)
            agent.optimizer.param_groups[0]["lr"] = lrs[-1]
        batch = stack_batches(batches)
        draws = stack_batches([agent.loss_draws(b) for agent, b in zip(self.agents, batches, strict=True)])
        for stacked in self.online.values():
            stacked.grad = None
        loss, priorities, metrics = self.member_losses(self.online, self.target, batch, draws)  # (K,), (K, B), {(K,)}
        loss.sum().backward()  # each member's loss reaches its own slice only
        grads = {name: cast(torch.Tensor, stacked.grad) for name, stacked in self.online.items()}  # every one has one
        loss = loss.detach()
        with torch.no_grad():
            self.clip(grads)
            self.adam(grads, lrs)
            self.update_targets()
        return [
            Update(
                {"loss": loss[k], **{name: value[k] for name, value in metrics.items()}, "epsilon": agent.epsilon},
                priorities[k],
            )
            for k, agent in enumerate(self.agents)
        ]

    def clip(self, grads: dict[str, torch.Tensor]) -> None:
        """Each member's gradient scaled to its max_grad_norm (common.clip_grad_norm's math, per member)."""
        if self.max_norm is None:
            return
        norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()], dim=1).norm(dim=1)  # (K,)
        scale = torch.clamp(self.max_norm / (norms + 1e-6), max=1.0)
        for g in grads.values():
            g.mul_(member_view(scale, g))

    def adam(self, grads: dict[str, torch.Tensor], lrs: list[float]) -> None:
        """torch.optim.Adam's step (no weight decay, no amsgrad) on the stacked tensors, with each
        member's learning rate and step count: torch's fused kernel where they are the same for all."""
        self.steps += 1
        if FUSED_ADAM is not None and len(set(lrs)) == 1 and bool((self.steps == self.steps[0]).all()):
            names = list(grads)
            FUSED_ADAM(
                [self.online[name] for name in names],
                [grads[name] for name in names],
                [self.exp_avg[name] for name in names],
                [self.exp_avg_sq[name] for name in names],
                [],
                [self.steps[0]] * len(names),  # read, not counted, by the kernel
                amsgrad=False,
                lr=lrs[0],
                beta1=self.beta1,
                beta2=self.beta2,
                weight_decay=0.0,
                eps=self.eps,
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )
            return
        correction1 = 1 - self.beta1**self.steps  # (K,)
        correction2_sqrt = (1 - self.beta2**self.steps).sqrt()
        step_size = torch.tensor(lrs, dtype=torch.float32, device=self.steps.device) / correction1
        for name, g in grads.items():
            m, v, p = self.exp_avg[name], self.exp_avg_sq[name], self.online[name]
            m.lerp_(g, 1 - self.beta1)
            v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
            denom = (v.sqrt() / member_view(correction2_sqrt, v)).add_(self.eps)
            p.sub_(member_view(step_size, p) * m / denom)

    def update_targets(self) -> None:
        """DQN.update's count and target update, each member's own."""
        for k, agent in enumerate(self.agents):
            agent.updates += 1
            if agent.updates % agent.target_update_every == 0:
                for name in self.names:
                    if agent.tau >= 1.0:
                        self.target[name][k].copy_(self.online[name][k])
                    else:
                        self.target[name][k].lerp_(self.online[name][k], agent.tau)


def member_view(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(K,) values shaped to broadcast over a stacked (K, ...) tensor."""
    return values.view(-1, *([1] * (like.dim() - 1)))


def stack_into(agents: list[Any], attribute: str, names: list[str]) -> dict[str, torch.Tensor]:
    """Each named parameter of every agent's `attribute` module stacked, and the agents' parameters
    made views into the stack (same Parameter objects: their optimizers and the acting mirror follow)."""
    stacked = {}
    for name in names:
        params = [dict(getattr(agent, attribute).named_parameters())[name] for agent in agents]
        stacked[name] = torch.stack([p.detach() for p in params])
        for k, param in enumerate(params):
            param.data = stacked[name].detach()[k]
    return stacked


def stack_moments(agents: list[Any], names: list[str], online: dict[str, torch.Tensor]):
    """Adam's moments and step counts stacked from the agents' optimizers (zeros for a fresh one), and
    each optimizer's state made views into them, in torch's own layout (its state_dict is the solo one)."""
    exp_avg = {name: torch.zeros_like(online[name]) for name in names}
    exp_avg_sq = {name: torch.zeros_like(online[name]) for name in names}
    steps = torch.zeros(len(agents), dtype=torch.float32, device=next(iter(online.values())).device)
    for k, agent in enumerate(agents):
        params = dict(agent.q_net.named_parameters())
        for name in names:
            state = agent.optimizer.state.get(params[name], {})
            if "exp_avg" in state:
                exp_avg[name][k].copy_(state["exp_avg"])
                exp_avg_sq[name][k].copy_(state["exp_avg_sq"])
                steps[k] = float(state["step"])
    for k, agent in enumerate(agents):
        params = dict(agent.q_net.named_parameters())
        for name in names:
            agent.optimizer.state[params[name]] = {
                "step": steps[k],
                "exp_avg": exp_avg[name][k],
                "exp_avg_sq": exp_avg_sq[name][k],
            }
    return exp_avg, exp_avg_sq, steps


def stack_batches(batches: list[Any]) -> Any:
    """Batches of one type (named tuples of tensors, a dict of parts for an observation) stacked: (K, ...)."""
    first = batches[0]
    if torch.is_tensor(first):
        return torch.stack(batches)
    if isinstance(first, dict):
        return {key: stack_batches([batch[key] for batch in batches]) for key in first}
    if isinstance(first, tuple):
        stacked = [stack_batches(list(parts)) for parts in zip(*batches, strict=True)]
        return type(first)(*stacked) if hasattr(first, "_fields") else tuple(stacked)  # a named tuple, or a plain one
    return first  # None, or a value every member shares
