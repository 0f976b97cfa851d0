r"""Proposals from a released gradient, for the MH core :func:`~.mh.mh_step`: a shell that
releases the gradients (:func:`gradient_proposal`) around a data-free move and its proposal
density ratio, and the **Barker proposal** (Livingstone & Zanella 2022) written on it
(:func:`barker_proposal`).

The shell is the construction of :func:`~.mh.langevin_proposal` (DP-HMC's gradient reuse,
Räisä 2021 thesis Alg. 3): the released gradient :math:`G(\theta)` is kept in
``state.grad`` (the chain's first one released lazily, so that set-up stays data-free), the
move draws :math:`\theta'` from :math:`q(\cdot\mid\theta, G(\theta))` with the public stream,
:math:`G(\theta')` is released — the reverse density needs it — and kept if :math:`\theta'` is
accepted. This is Metropolis–Hastings on the pair :math:`(\theta, G(\theta))` with :math:`G`
drawn from its law given :math:`\theta`, so the law of :math:`G` cancels in the ratio and any
move with a correct density ratio leaves the posterior invariant (Räisä, Koskela & Honkela
2021, Thm 3.1). The shell lives in :mod:`~.mh` (:func:`~.mh.gradient_proposal`), where
:func:`~.mh.langevin_proposal` is written on it (``tests/kernels/test_gradient_proposals.py``
checks that it gives DP-MALA's chain and ledger exactly).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .base import check_positive
from .mh import Proposal, gradient_proposal  # noqa: F401 (re-exported: the shell, used by barker_proposal)
from .proposals import release_gradient, sample_momentum

__all__ = ["barker_move", "barker_log_q_ratio", "barker_proposal"]


def barker_move(rng: torch.Generator, z: torch.Tensor, grad: torch.Tensor, scale) -> torch.Tensor:
    r"""One draw of the Barker proposal (Livingstone & Zanella 2022, JRSS-B 84(2), §3, the
    multivariate proposal with independent coordinates): per coordinate
    :math:`\xi_i\sim\mathcal N(0, \sigma_i^2)`, kept with probability
    :math:`p_i = 1/(1+e^{-\xi_i g_i})` and flipped otherwise (probability
    :math:`1/(1+e^{\xi_i g_i})`), :math:`z'_i = z_i + b_i\xi_i`, so that a move along the gradient
    is favoured. Its density is :math:`q(z'\mid z) = \prod_i 2\varphi_{\sigma_i}(w_i)/(1+e^{-w_i
    g_i})`, :math:`w = z' - z` (:func:`barker_log_q_ratio`). Both draws, the normals then the
    uniforms, come from the public stream ``rng``; ``scale`` is :math:`\sigma` (a number or one
    per coordinate). Data-free given the released ``grad``.

    >>> rng = torch.Generator().manual_seed(0)
    >>> w = barker_move(rng, torch.zeros(10_000), torch.full((10_000,), 3.0), 1.0)
    >>> p_up = float((w > 0).double().mean())  # P(w > 0) = E[1/(1 + exp(-3|xi|))] = 0.836 (4 SE: 0.015)
    >>> abs(p_up - 0.836) < 0.015
    True
    """
    xi = sample_momentum(rng, scale, z)  # N(0, sigma^2) per coordinate, public stream
    u = torch.rand(z.shape, generator=rng, dtype=z.dtype, device=z.device)
    return z + torch.where(u < torch.sigmoid(xi * grad), xi, -xi)  # keep the sign w.p. 1/(1+exp(-xi g))


def barker_log_q_ratio(z: torch.Tensor, grad: torch.Tensor, z_new: torch.Tensor, grad_new: torch.Tensor):
    r""":math:`\log q(z\mid z') - \log q(z'\mid z)` of :func:`barker_move`: with :math:`w = z'-z`,

    .. math:: \sum_i \log\big(1+e^{-w_i g_i(z)}\big) - \log\big(1+e^{w_i g_i(z')}\big),

    the proposal's part of the Barker proposal's Metropolis–Hastings acceptance ratio
    (Livingstone & Zanella 2022, §3: :math:`\prod_i (1+e^{(x_i-y_i)\partial_i\log\pi(x)})/
    (1+e^{(y_i-x_i)\partial_i\log\pi(y)})` for the current :math:`x` and proposed :math:`y`; the
    symmetric :math:`\varphi_\sigma` cancels, so the ratio does not depend on the scale). Written
    with ``softplus``, stable for large :math:`|w_i g_i|`.

    >>> x, y = torch.tensor([0.0]), torch.tensor([1.0])
    >>> round(float(barker_log_q_ratio(x, torch.tensor([2.0]), y, torch.tensor([0.0]))), 4)  # log((1+e^-2)/2)
    -0.5662
    >>> float(barker_log_q_ratio(x, torch.zeros(1), y, torch.zeros(1)))  # no gradient: symmetric
    0.0
    """
    w = z_new - z
    return (F.softplus(-w * grad) - F.softplus(w * grad_new)).sum()


def barker_proposal(lik, scale, grad_clip: float, noise_multiplier: float) -> Callable[..., Proposal]:
    r"""The Barker proposal (Livingstone & Zanella 2022) on the released gradient: the shell
    :func:`gradient_proposal` with :func:`barker_move` of scale :math:`\sigma` = ``scale`` (a
    positive number, or one per coordinate) and :func:`barker_log_q_ratio`. Releases
    :math:`G(\theta')` (and the chain's first gradient), returns the proposal with
    :math:`\log q(\theta\mid\theta') - \log q(\theta'\mid\theta)`; with the penalty test
    (:func:`~.penalty.penalty_release_accept`) it is the DP Barker-proposal kernel of
    ``pyro_dp/examples/dp_barker_proposal.py`` (``docs/new_kernel.md``)."""
    scale = check_positive("scale", scale)
    return gradient_proposal(lik, grad_clip, noise_multiplier, lambda rng, z, g: barker_move(rng, z, g, scale),
                             barker_log_q_ratio)
