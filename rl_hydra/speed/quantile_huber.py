"""The quantile Huber loss per sample with its gradient in closed form.

losses.py writes the loss as QR-DQN's paper does, and autograd differentiates it through the
(B, N, N') pairwise terms: about twice the cost of computing the gradient alongside the loss
(figures: docs/benchmark.md). With u = target_j - quantile_i, c = clamp(u, -kappa, kappa)
(Huber's derivative) and g = |tau - 1{u < 0}| * c, which is 0.5 c + (tau - 0.5) |c| because c has
u's sign:

    |tau - 1{u < 0}| * Huber_kappa(u) = (u - c / 2) * g,  so  loss_b = sum_ij (u_ij - c_ij / 2) g_ij / (kappa N')
    and  d loss_b / d quantile_i = -sum_j g_ij / (kappa N').

On the CPU, with numba installed (the `numba` extra), one compiled pass over the (B, N, N') pairs
computes both sums without storing a pair (`pairs_kernel`, about a third of the torch ops' time at
TQC's 512 x 25 x 46 pairs); elsewhere (CUDA, under torch.compile, without numba) torch ops do
(`closed_form`). numba is imported and the pass compiled at its first use, not at start-up, and
checked then against the torch ops (`compiled_pairs`). It is a fast path because it is a second
derivation of the same numbers, equal to losses.py's formula up to float rounding
(tests/algos/test_distributional.py checks values and gradients of both), and `fast_paths=false`
runs the formula.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import torch

log = logging.getLogger(__name__)


def closed_form(
    quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sample's loss (B,) and its gradient into the quantiles (B, N), in torch ops."""
    # quantiles: (B, N); targets: (B, N'); taus: (N,) or (B, N)
    u = targets[:, None, :] - quantiles[:, :, None]  # (B, N, N')
    c = u.clamp(-kappa, kappa)  # (B, N, N')
    tau = taus.expand_as(quantiles)[:, :, None]  # (B, N, 1)
    g = c.abs().mul_(tau - 0.5).add_(c, alpha=0.5)  # d loss_ij / d u_ij  (B, N, N')
    scale = 1.0 / (kappa * u.shape[2])  # the mean over j, the 1 / kappa
    per_sample = u.sub_(c, alpha=0.5).mul_(g).sum(dim=(1, 2)).mul_(scale)  # (B,)
    return per_sample, g.sum(dim=2).mul_(-scale)  # (B,), (B, N)


def kernel_applies(*tensors: torch.Tensor) -> bool:
    """Whether `pairs_kernel` takes these: CPU tensors of one float dtype, outside a torch.compile trace
    (which the torch ops serve), with the compiled pass at hand (numba installed, its check passed)."""
    dtypes = {tensor.dtype for tensor in tensors}
    return (
        all(tensor.device.type == "cpu" for tensor in tensors)
        and len(dtypes) == 1
        and dtypes <= {torch.float32, torch.float64}
        and not torch.compiler.is_compiling()
        and compiled_pairs() is not None
    )


def pairs_kernel(
    quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`closed_form`'s numbers from one compiled pass over the pairs (CPU tensors; `kernel_applies`)."""
    compiled = compiled_pairs()
    assert compiled is not None, "kernel_applies() first"
    return run_pass(compiled, quantiles, targets, taus, kappa)


def run_pass(
    compiled: Callable[..., None], quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`compiled` (the pass over the pairs) on these tensors: each sample's loss (B,) and its gradient (B, N)."""
    q = quantiles.detach().contiguous().numpy()  # (B, N)
    t = targets.detach().contiguous().numpy()  # (B, N')
    tau = taus.detach().expand_as(quantiles).contiguous().numpy()  # (B, N)
    per_sample, grad = np.empty(q.shape[0], dtype=q.dtype), np.empty_like(q)
    compiled(q, t, tau, q.dtype.type(kappa), per_sample, grad)
    return torch.from_numpy(per_sample), torch.from_numpy(grad)


_compiled: dict[str, Callable[..., None] | None] = {}  # {"pairs": the pass, or None where it cannot serve}


def compiled_pairs() -> Callable[..., None] | None:
    """The compiled pass, built and checked against the torch ops at the first call; None without
    numba, or where the check fails (said once in the log: the torch ops serve)."""
    if "pairs" not in _compiled:
        try:
            _compiled["pairs"] = check(compile_pairs())
        except ImportError:  # no numba: the torch ops serve, as they do on CUDA
            _compiled["pairs"] = None
        except Exception as error:  # a numba that compiles it wrong or not at all
            log.warning("speed: the quantile Huber loss takes torch ops on the CPU (%s)", error)
            _compiled["pairs"] = None
    return _compiled["pairs"]


def pairs(q, t, tau, kappa, per_sample, grad):  # compiled by compile_pairs
    """q, tau (B, N); t (B, N'): each sample's loss into per_sample (B,), its gradient into grad (B, N)."""
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


def compile_pairs() -> Callable[..., None]:
    """`pairs` compiled by numba (ImportError without it)."""
    import numba

    # fastmath lets the sums be reordered (and vectorized) only: NaN and inf keep their meaning
    options: dict = {"nogil": True, "fastmath": {"reassoc", "contract", "nsz", "arcp"}}
    try:  # compiled once and cached beside this file (or in the user's cache)
        return numba.njit(cache=True, **options)(pairs)
    except RuntimeError:  # no cache locator: nowhere writable to keep the machine code
        return numba.njit(**options)(pairs)


def check(compiled: Callable[..., None]) -> Callable[..., None]:
    """`compiled` where it gives the torch ops' numbers on a small case of each float dtype, else raises."""
    # numpy's draws, not torch's: the first use may come under vmap (a pack's batched update), which refuses them
    draws = np.random.default_rng(0)
    for dtype in (torch.float64, torch.float32):
        quantiles = torch.from_numpy(draws.standard_normal((3, 4))).to(dtype)
        targets = torch.from_numpy(2 * draws.standard_normal((3, 5))).to(dtype)
        taus = torch.from_numpy(draws.random(4)).to(dtype)
        per_sample, grad = run_pass(compiled, quantiles, targets, taus, 0.7)
        want_loss, want_grad = closed_form(quantiles, targets, taus, 0.7)
        if not (
            torch.allclose(per_sample, want_loss, rtol=1e-5) and torch.allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
        ):
            raise ArithmeticError(f"its compiled pass differs from the torch ops in {dtype}")
    return compiled


class ClosedFormQuantileHuber(torch.autograd.Function):
    """Each sample's sum_i mean_j of the quantile Huber terms (B,), its gradient (B, N) computed beside it
    (a second output, not differentiable) and saved. Under vmap (a pack's batched update) the members'
    rows are one batch of K * B rows: one pass for all of them."""

    @staticmethod
    def forward(
        quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float, kernel: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if kernel:  # kernel_applies(quantiles, targets, taus)
            per_sample, grad = pairs_kernel(quantiles, targets, taus, kappa)
        else:
            per_sample, grad = closed_form(quantiles, targets, taus, kappa)
        return per_sample, grad

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # noqa: ARG004
        _, grad = output
        ctx.mark_non_differentiable(grad)
        ctx.save_for_backward(grad)  # d loss_b / d quantiles_b (B, N)

    @staticmethod
    def backward(ctx, grad_per_sample: torch.Tensor, _):
        (grad_quantiles,) = ctx.saved_tensors  # (B, N)
        return grad_per_sample[:, None] * grad_quantiles, None, None, None, None

    @staticmethod
    def vmap(info, in_dims, quantiles, targets, taus, kappa, kernel):
        def members_first(x: torch.Tensor, dim: int | None) -> torch.Tensor:  # (K, ...)
            return x.expand(info.batch_size, *x.shape) if dim is None else x.movedim(dim, 0)

        q, t, tau = (members_first(x, dim) for x, dim in zip((quantiles, targets, taus), in_dims[:3], strict=True))
        tau = tau.unsqueeze(1).expand_as(q) if tau.dim() == 2 else tau.expand_as(q)  # (K, N) or (K, B, N)
        members, batch, n = q.shape  # (K, B, N); t: (K, B, N')
        per_sample, grad = ClosedFormQuantileHuber.apply(
            q.reshape(members * batch, n),
            t.reshape(members * batch, -1),
            tau.reshape(members * batch, n),
            kappa,
            kernel,
        )
        return (per_sample.view(members, batch), grad.view(members, batch, n)), (0, 0)


def per_sample(quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float) -> torch.Tensor:
    """losses.quantile_huber_per_sample's numbers, its gradient into `quantiles` only."""
    kernel = kernel_applies(quantiles, targets, taus)
    return ClosedFormQuantileHuber.apply(quantiles, targets.detach(), taus.detach(), float(kappa), kernel)[0]


def probe() -> None:
    """Raises unless the closed-form gradient is autograd's gradient of the same forward, on a
    small batch in float64 with terms on both sides of kappa and a tau per row."""
    generator = torch.Generator().manual_seed(0)
    quantiles = torch.randn(3, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    targets = 2 * torch.randn(3, 5, generator=generator, dtype=torch.float64)
    taus = torch.rand(3, 4, generator=generator, dtype=torch.float64)
    kappa = 0.7
    loss, _ = ClosedFormQuantileHuber.apply(
        quantiles, targets, taus, kappa, False
    )  # the torch ops (numba: its first use)
    closed_form = torch.autograd.grad(loss.sum(), quantiles)[0]
    u = targets[:, None, :] - quantiles[:, :, None]  # (B, N, N'), autograd through it
    c = u.clamp(-kappa, kappa)
    g = c.abs() * (taus[:, :, None] - 0.5) + 0.5 * c
    autograd = torch.autograd.grad(((u - 0.5 * c) * g).sum() / (kappa * u.shape[2]), quantiles)[0]
    if not torch.allclose(closed_form, autograd, rtol=1e-10, atol=1e-12):
        raise ArithmeticError("the closed-form gradient differs from autograd's")
