r"""Pieces shared by several kernels: proposals and accept tests.

Accept tests are interchangeable functions of the *released* log acceptance ratio and
its noise variance; none of them touches data.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

__all__ = [
    "penalty_log_accept_threshold",
    "penalty_accept",
    "RandomWalkProposal",
    "random_walk",
    "flip_direction",
    "uniform_log",
]


def uniform_log(rng: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """``log U`` with ``U ~ Uniform(0, 1)`` drawn from the algorithm's generator."""
    u = torch.rand((), generator=rng, dtype=like.dtype, device=like.device)
    return torch.log(u)


def penalty_log_accept_threshold(lambda_hat: torch.Tensor, noise_var: torch.Tensor) -> torch.Tensor:
    r"""Log acceptance probability of the penalty method, :math:`\min(0, \hat\lambda - \sigma^2/2)`.

    Ceperley & Dewing (1999); Yıldırım & Ermiş (2019) §3.1; Räisä 2021 thesis §3.1:
    with :math:`\hat\lambda = \lambda + \mathcal N(0, \sigma^2)` the chain accepts with
    probability :math:`\min\{1, e^{\hat\lambda - \sigma^2/2}\}`, which satisfies detailed
    balance for the exact target on average over the noise.
    """
    return torch.clamp(lambda_hat - noise_var / 2, max=0.0)


def penalty_accept(rng: torch.Generator, lambda_hat: torch.Tensor, noise_var: torch.Tensor) -> bool:
    """Draw the penalty accept decision (see :func:`penalty_log_accept_threshold`)."""
    return bool(uniform_log(rng, lambda_hat) < penalty_log_accept_threshold(lambda_hat, noise_var))


class RandomWalkProposal(NamedTuple):
    """A random-walk proposal.

    :ivar z: proposed point.
    :ivar coord: index of the coordinate moved (one-component modes) or ``-1``.
    :ivar log_q_ratio: :math:`\\log q(z|z')/q(z'|z)` (0: every mode here is symmetric, or,
        for the guided walk, a deterministic involution on the lifted space).
    """

    z: torch.Tensor
    coord: int
    log_q_ratio: float


def random_walk(
    rng: torch.Generator,
    z: torch.Tensor,
    scale: torch.Tensor,
    mode: str = "full",
    direction: Optional[torch.Tensor] = None,
) -> RandomWalkProposal:
    r"""Gaussian random-walk proposals (Räisä 2021 thesis §3.1; Yıldırım & Ermiş 2019).

    * ``"full"``: :math:`z' = z + s \odot \xi`, :math:`\xi \sim \mathcal N(0, I)`.
    * ``"ocu"`` (one-component update): pick :math:`j` uniformly,
      :math:`z'_j = z_j + s_j \xi`.
    * ``"gwmh"`` (guided walk, Gustafson 1998): pick :math:`j` uniformly,
      :math:`z'_j = z_j + d_j s_j |\xi|` with the direction :math:`d_j \in \{\pm1\}` carried in
      the state; after a rejection :math:`d_j` flips (:func:`flip_direction`). This is a
      lifted, non-reversible chain that leaves :math:`\pi(z)\times\mathrm{Unif}(d)` invariant
      with the ordinary MH/penalty acceptance ratio, because the move
      :math:`(z, d) \to (z', -d)` is an involution with a symmetric step law.

    ``scale`` is a scalar or a length-``D`` tensor. Data-free.
    """
    d = z.numel()
    scale = torch.as_tensor(scale, dtype=z.dtype, device=z.device).expand(d)
    if mode == "full":
        xi = torch.randn(z.shape, generator=rng, dtype=z.dtype, device=z.device)
        return RandomWalkProposal(z + scale * xi, -1, 0.0)
    j = int(torch.randint(d, (), generator=rng, device=z.device))
    xi = torch.randn((), generator=rng, dtype=z.dtype, device=z.device)
    step = scale[j] * xi
    if mode == "gwmh":
        if direction is None:
            raise ValueError("the guided walk needs a direction vector")
        step = direction[j] * step.abs()
    elif mode != "ocu":
        raise ValueError(f"unknown proposal mode {mode!r}")
    z_new = z.clone()
    z_new[j] = z_new[j] + step
    return RandomWalkProposal(z_new, j, 0.0)


def flip_direction(direction: torch.Tensor, coord: int, accepted: bool) -> torch.Tensor:
    """Guided walk: keep :math:`d_j` after an acceptance, flip it after a rejection."""
    if accepted or coord < 0:
        return direction
    out = direction.clone()
    out[coord] = -out[coord]
    return out
