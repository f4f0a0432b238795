"""The quantile Huber loss per sample with its gradient in closed form.

losses.py writes the loss as QR-DQN's paper does, and autograd differentiates it through the
(B, N, N') pairwise terms: about twice the cost of computing the gradient alongside the loss
(figures: docs/benchmark.md). With u = target_j - quantile_i, c = clamp(u, -kappa, kappa)
(Huber's derivative) and g = |tau - 1{u < 0}| * c, which is 0.5 c + (tau - 0.5) |c| because c has
u's sign:

    |tau - 1{u < 0}| * Huber_kappa(u) = (u - c / 2) * g,  so  loss_b = sum_ij (u_ij - c_ij / 2) g_ij / (kappa N')
    and  d loss_b / d quantile_i = -sum_j g_ij / (kappa N').

On the CPU, with numba installed (the `numba` extra), one compiled pass over the (B, N, N') pairs
computes both sums without storing a pair (`pairs_kernel`, about 3.5x faster than the torch ops at
TQC's 512 x 25 x 46 pairs); elsewhere (CUDA, under torch.compile, without numba) torch ops do
(`closed_form`). It is a fast path because it is a second derivation of the same numbers, equal to
losses.py's formula up to float rounding (tests/algos/test_distributional.py checks values and
gradients of both), and `fast_paths=false` runs the formula.
"""

from __future__ import annotations

import numpy as np
import torch

try:
    import numba
except ImportError:  # the torch ops serve
    numba = None  # type: ignore[assignment]  # the module's name, None without it


def closed_form(
    quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float, with_grad: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each sample's loss (B,) and, `with_grad`, its gradient into the quantiles (B, N), in torch ops."""
    # quantiles: (B, N); targets: (B, N'); taus: (N,) or (B, N)
    u = targets[:, None, :] - quantiles[:, :, None]  # (B, N, N')
    c = u.clamp(-kappa, kappa)  # (B, N, N')
    tau = taus.expand_as(quantiles)[:, :, None]  # (B, N, 1)
    g = c.abs().mul_(tau - 0.5).add_(c, alpha=0.5)  # d loss_ij / d u_ij  (B, N, N')
    scale = 1.0 / (kappa * u.shape[2])  # the mean over j, the 1 / kappa
    per_sample = u.sub_(c, alpha=0.5).mul_(g).sum(dim=(1, 2)).mul_(scale)  # (B,)
    return per_sample, g.sum(dim=2).mul_(-scale) if with_grad else None  # (B,), (B, N)


def kernel_applies(*tensors: torch.Tensor) -> bool:
    """Whether `pairs_kernel` can take these: numba installed, CPU tensors of one float dtype, not
    inside a torch.compile trace (which the torch ops serve)."""
    dtypes = {tensor.dtype for tensor in tensors}
    return (
        numba is not None
        and all(tensor.device.type == "cpu" for tensor in tensors)
        and len(dtypes) == 1
        and dtypes <= {torch.float32, torch.float64}
        and not torch.compiler.is_compiling()
    )


def pairs_kernel(
    quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`closed_form`'s numbers from one compiled pass over the pairs (numba; CPU tensors)."""
    q = quantiles.detach().contiguous().numpy()  # (B, N)
    t = targets.detach().contiguous().numpy()  # (B, N')
    tau = taus.detach().expand_as(quantiles).contiguous().numpy()  # (B, N)
    per_sample, grad = np.empty(q.shape[0], dtype=q.dtype), np.empty_like(q)
    _pairs(q, t, tau, q.dtype.type(kappa), per_sample, grad)
    return torch.from_numpy(per_sample), torch.from_numpy(grad)


if numba is not None:

    def _jit(function):
        """Compiled once and cached beside this file (or in the user's cache), else compiled every run.
        fastmath only lets the sums be reordered (and vectorized): NaN and inf keep their meaning."""
        options = {"nogil": True, "fastmath": {"reassoc", "contract", "nsz", "arcp"}}
        try:
            return numba.njit(cache=True, **options)(function)
        except RuntimeError:  # no cache locator: nowhere writable to keep the machine code
            return numba.njit(**options)(function)

    @_jit
    def _pairs(q, t, tau, kappa, per_sample, grad):  # pragma: no cover - numba compiles it
        batch, n = q.shape
        n_prime = t.shape[1]
        scale = 1.0 / (kappa * n_prime)
        for b in range(batch):
            total = 0.0
            for i in range(n):
                loss_i, grad_i = 0.0, 0.0
                for j in range(n_prime):
                    u = t[b, j] - q[b, i]
                    c = min(max(u, -kappa), kappa)
                    g = abs(c) * (tau[b, i] - 0.5) + 0.5 * c  # d loss_ij / d u_ij
                    loss_i += (u - 0.5 * c) * g
                    grad_i += g
                total += loss_i
                grad[b, i] = -grad_i * scale
            per_sample[b] = total * scale


class ClosedFormQuantileHuber(torch.autograd.Function):
    """Each sample's sum_i mean_j of the quantile Huber terms (B,), its gradient saved as it is computed."""

    @staticmethod
    def forward(ctx, quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float) -> torch.Tensor:
        with_grad = ctx.needs_input_grad[0]
        if kernel_applies(quantiles, targets, taus):
            per_sample, grad = pairs_kernel(quantiles, targets, taus, kappa)
        else:
            per_sample, grad = closed_form(quantiles, targets, taus, kappa, with_grad)
        if with_grad:
            ctx.save_for_backward(grad)  # d loss_b / d quantiles_b (B, N)
        return per_sample

    @staticmethod
    def backward(ctx, grad_per_sample: torch.Tensor):
        (grad_quantiles,) = ctx.saved_tensors  # (B, N)
        return grad_per_sample[:, None] * grad_quantiles, None, None, None


def per_sample(quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float) -> torch.Tensor:
    """losses.quantile_huber_per_sample's numbers, its gradient into `quantiles` only."""
    return ClosedFormQuantileHuber.apply(quantiles, targets.detach(), taus.detach(), float(kappa))


def probe() -> None:
    """Raises unless the closed-form gradient is autograd's gradient of the same forward, on a
    small batch in float64 with terms on both sides of kappa and a tau per row."""
    generator = torch.Generator().manual_seed(0)
    quantiles = torch.randn(3, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    targets = 2 * torch.randn(3, 5, generator=generator, dtype=torch.float64)
    taus = torch.rand(3, 4, generator=generator, dtype=torch.float64)
    kappa = 0.7
    closed_form = torch.autograd.grad(per_sample(quantiles, targets, taus, kappa).sum(), quantiles)[0]
    u = targets[:, None, :] - quantiles[:, :, None]  # (B, N, N'), autograd through it
    c = u.clamp(-kappa, kappa)
    g = c.abs() * (taus[:, :, None] - 0.5) + 0.5 * c
    autograd = torch.autograd.grad(((u - 0.5 * c) * g).sum() / (kappa * u.shape[2]), quantiles)[0]
    if not torch.allclose(closed_form, autograd, rtol=1e-10, atol=1e-12):
        raise ArithmeticError("the closed-form gradient differs from autograd's")
