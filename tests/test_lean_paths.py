"""The hot-path shortcuts give the numbers of the plain torch code they replace:
LeanAdam against torch.optim.Adam, MLP's gathered steps against nn.Sequential."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from rl_hydra.networks.mlp import MLP, mlp
from rl_hydra.optim import LeanAdam


def make_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3))


def train(net: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int = 1) -> None:
    generator = torch.Generator().manual_seed(seed)
    for i in range(steps):
        x = torch.randn(16, 4, generator=generator)
        loss = net(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if i == steps // 2:  # a learning-rate schedule changes the group's lr between steps
            for group in optimizer.param_groups:
                group["lr"] *= 0.5
        optimizer.step()


@pytest.mark.parametrize("options", [{}, {"weight_decay": 0.01, "betas": (0.8, 0.99), "eps": 1e-6}])
def test_lean_adam_steps_exactly_like_torch_fused_adam(options):
    ours, theirs = make_net(), make_net()
    lean = LeanAdam(ours.parameters(), lr=1e-2, **options)
    torch_adam = torch.optim.Adam(theirs.parameters(), lr=1e-2, fused=True, **options)
    train(ours, lean, 20)
    train(theirs, torch_adam, 20)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(p, q)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(lean.state[p]["exp_avg_sq"], torch_adam.state[q]["exp_avg_sq"])
        assert torch.equal(lean.state[p]["step"], torch_adam.state[q]["step"])


def test_lean_adam_state_dict_loads_into_torch_adam_and_back():
    ours, theirs = make_net(), make_net()
    lean = LeanAdam(ours.parameters(), lr=1e-2)
    train(ours, lean, 5)
    buffer = io.BytesIO()
    torch.save({"net": ours.state_dict(), "optimizer": lean.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    theirs.load_state_dict(saved["net"])
    torch_adam = torch.optim.Adam(theirs.parameters(), lr=1e-2, fused=True)
    torch_adam.load_state_dict(saved["optimizer"])
    resumed = make_net()
    resumed.load_state_dict(saved["net"])
    lean_again = LeanAdam(resumed.parameters(), lr=1e-2)
    lean_again.load_state_dict(copy.deepcopy(torch_adam.state_dict()))  # state_dict() shares tensors
    train(theirs, torch_adam, 5, seed=2)
    train(resumed, lean_again, 5, seed=2)
    for p, q in zip(resumed.parameters(), theirs.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("options", [{"amsgrad": True}, {"maximize": True}, {"fused": False}])
def test_lean_adam_options_outside_the_fast_path_still_match_torch(options):
    ours, theirs = make_net(), make_net()
    train(ours, LeanAdam(ours.parameters(), lr=1e-2, **options), 6)
    train(theirs, torch.optim.Adam(theirs.parameters(), lr=1e-2, **{"fused": True, **options}), 6)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.allclose(p, q)


def test_lean_adam_skips_a_parameter_without_gradient_like_torch():
    net, frozen = make_net(), nn.Linear(2, 2)
    params = [*net.parameters(), *frozen.parameters()]  # the frozen layer never gets a gradient
    before = [p.detach().clone() for p in frozen.parameters()]
    optimizer = LeanAdam(params, lr=1e-2)
    train(net, optimizer, 3)
    assert all(torch.equal(p, b) for p, b in zip(frozen.parameters(), before))


def sequential_twin(net: MLP) -> nn.Sequential:
    return nn.Sequential(*[copy.deepcopy(layer) for layer in net])


def test_mlp_forward_equals_the_plain_sequential_and_keeps_its_state_dict_keys():
    torch.manual_seed(0)
    net = mlp(4, 3, [32, 16], "elu")
    plain = sequential_twin(net)
    x = torch.randn(8, 4)
    assert torch.equal(net(x), plain(x))
    assert list(net.state_dict()) == list(plain.state_dict())


def test_mlp_steps_follow_deepcopy_load_state_dict_and_dtype_moves():
    torch.manual_seed(0)
    net = mlp(4, 2, [16], "relu")
    twin = copy.deepcopy(net)
    with torch.no_grad():
        twin[0].weight.add_(1.0)  # the copy's steps must point at the copy's own parameters
    x = torch.randn(5, 4)
    assert not torch.equal(net(x), twin(x))
    assert torch.equal(twin(x), sequential_twin(twin)(x))

    other = mlp(4, 2, [16], "relu")
    other.load_state_dict(twin.state_dict(), assign=True)  # assign replaces the Parameter objects
    assert torch.equal(other(x), twin(x))

    as_double = other.double()
    assert as_double(x.double()).dtype == torch.float64


def test_mlp_refuses_a_layer_it_cannot_gather():
    with pytest.raises(ValueError, match=r"MLP layer 1 \(Dropout\) must be a Linear"):
        MLP(nn.Linear(2, 2), nn.Dropout())
