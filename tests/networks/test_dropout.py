"""Dropout drawn from the gaps between dropped units (networks/layers.py): the positions are those
of independent Bernoulli(p) trials, the layer is dropout's (scale, gradient, modes), and it stands
where the networks had F.dropout and nn.Dropout."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rl_hydra.networks.layers import GAPS_UP_TO, Dropout, dropout, dropped_positions, mlp


def within(count: float, expected: float, variance: float, sigmas: float = 5.0) -> bool:
    return abs(count - expected) <= sigmas * math.sqrt(variance)


@pytest.mark.parametrize("p", [0.01, 0.1, 0.25])
def test_the_dropped_positions_are_those_of_independent_bernoulli_trials(p):
    n = 200_000
    positions = dropped_positions(n, p, torch.Generator().manual_seed(0))
    assert positions.dtype == torch.int64
    assert bool((positions[1:] > positions[:-1]).all()) and 0 <= int(positions[0]) and int(positions[-1]) < n
    assert within(len(positions), n * p, n * p * (1 - p))  # how many: Binomial(n, p)
    dropped = torch.zeros(n, dtype=torch.bool)
    dropped[positions] = True
    per_tenth = dropped.view(10, -1).sum(dim=1).double()  # where: uniform over the positions
    chi_square = float(((per_tenth - n * p / 10) ** 2 / (n * p / 10)).sum())
    assert chi_square < 35.0  # 9 degrees of freedom: p < 1e-4 to exceed by chance
    pairs = int((dropped[1:] & dropped[:-1]).sum())  # neighbours: independent, P(both) = p^2
    assert within(pairs, (n - 1) * p**2, (n - 1) * p**2 * (1 + 3 * p))


def test_gaps_drawn_one_at_a_time_give_the_same_positions():
    """The loop that draws another chunk when one falls short of n continues the same sequence."""
    for p in (0.01, 0.2):
        whole = dropped_positions(5_000, p, torch.Generator().manual_seed(7))
        piecewise = dropped_positions(5_000, p, torch.Generator().manual_seed(7), chunk=1)
        assert torch.equal(whole, piecewise)


def test_the_layer_zeroes_the_dropped_units_scales_the_rest_and_passes_gradients_alike():
    p = 0.1
    x = torch.randn(4, 64, 32, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(x, p)
    torch.manual_seed(3)  # the same draws from torch's default generator, as F.dropout uses
    expected_dropped = torch.zeros(x.numel(), dtype=torch.bool)
    expected_dropped[dropped_positions(x.numel(), p)] = True
    kept = ~expected_dropped.view_as(x)
    assert bool((y[~kept] == 0).all())
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))


def test_it_is_the_identity_outside_training_or_at_zero_and_f_dropout_above_the_gaps_limit():
    x = torch.randn(8, 16)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    p = 0.5
    assert p > GAPS_UP_TO
    torch.manual_seed(11)
    ours = dropout(x, p)
    torch.manual_seed(11)
    torch.testing.assert_close(ours, F.dropout(x, p, training=True))
    assert bool((dropout(x, 1.0) == 0).all())


def test_the_module_is_nn_dropout_in_state_and_repr_and_the_mlp_uses_it():
    layer = Dropout(0.01)
    assert isinstance(layer, nn.Dropout) and repr(layer) == repr(nn.Dropout(0.01))
    assert layer.state_dict() == {}
    layer.eval()
    x = torch.randn(3, 5)
    assert torch.equal(layer(x), x)
    net = mlp(4, 2, [8, 8], "relu", dropout=0.01)
    assert sum(isinstance(m, Dropout) for m in net) == 2


def test_the_benchmark_script_prints_both_ways_and_their_ratio():
    script = Path(__file__).resolve().parents[2] / "scripts" / "benchmarks" / "dropout.py"
    args = ["--shapes", "2x8x4", "--p", "0.01", "0.5", "--rounds", "1", "--calls", "2"]
    lines = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, check=True).stdout
    header, *rows = lines.strip().splitlines()
    assert "gaps / F.dropout" in header and len(rows) == 2
    assert all(row.split()[0] == "2x8x4" and float(row.split()[-1]) > 0 for row in rows)


@pytest.mark.slow  # torch.compile takes seconds
def test_inside_torch_compile_it_is_f_dropout():
    x = torch.ones(64, 64)
    compiled = torch.compile(lambda t: dropout(t, 0.1), fullgraph=True)  # no graph break: F.dropout's op
    y = compiled(x)
    kept = y != 0
    assert within(float((~kept).sum()), 64 * 64 * 0.1, 64 * 64 * 0.1 * 0.9)
    torch.testing.assert_close(y[kept], torch.full((int(kept.sum()),), 1 / 0.9))
