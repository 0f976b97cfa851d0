r"""Data-free Metropolis sweeps on the coordinates that enter only the prior.

A hierarchical model's population parameters (the mean :math:`\mu` and scale :math:`\tau` of its
group effects) enter no row's likelihood: :attr:`~pyro_dp.likelihood.PrivateLikelihood.likelihood_mask`
is 0 on them. Given the other latents their full conditional is the prior's, so a Metropolis step
that moves only them,

.. math:: z' = z + s\odot m\odot\xi,\qquad \text{accept} \iff \log u < \log p(z') - \log p(z)

(:math:`m` the 0/1 mask of those coordinates, :math:`\xi \sim \mathcal N(0, I)` and :math:`u` from the
algorithm stream), is an exact MH step for the posterior (Metropolis et al. 1953; Tierney 1994 on
compositions of kernels each invariant for the target) and reads no data: it costs no privacy,
and the per-row cache of the state stays valid (no row's term changed).

Why a kernel needs it: the posterior of :math:`\mu, \tau` is as wide as the spread of the group
effects (0.16 and 0.12 on ``benchmarks/hierarchical.py``), while the likelihood's coordinates have
posterior scales of order :math:`1/\sqrt N` (0.003–0.017 there); a joint random walk with one
scale moves them at the likelihood's step, and their chains barely move (sd 0.02–0.06 of NUTS's
on the default path before 2026-11-28). Each iteration therefore runs :data:`PRIOR_SWEEPS` such
steps with a scale of their own, adapted during warmup by Robbins–Monro on its logarithm towards
the kernel's target acceptance (Andrieu & Thoms 2008, §4; post-processing of accept decisions
that read no data), and the kernel's private step holds those coordinates fixed.

Used by :class:`~pyro_dp.kernels.grouped.DPGroupedPenalty` (always), and on the default path
(step sizes tuned) of :class:`~pyro_dp.kernels.penalty.DPPenalty` (its walk gives those coordinates
scale 0) and :class:`~pyro_dp.kernels.hmc.DPHMC` (its trajectory gives them inverse mass 0: their
positions stay, and their momenta enter no kinetic energy). DP-HMC's released gradient, kept with
the state for the next trajectory, is moved to the new point by the prior's gradient (data-free:
the likelihood's part does not depend on these coordinates).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from .mh import MHState
from .proposals import random_walk, uniform_log

__all__ = ["prior_only_step", "PriorSweeps", "PRIOR_SWEEPS"]

#: data-free MH steps per iteration on the coordinates that enter only the prior
PRIOR_SWEEPS = 5


def prior_only_step(lik, rng: torch.Generator, state: MHState, scale: torch.Tensor):
    r"""``(state, accepted)``: one Metropolis step (Gaussian random walk of per-coordinate ``scale``,
    zero outside the coordinates it moves) on coordinates that enter **only the prior**
    (:attr:`~pyro_dp.likelihood.PrivateLikelihood.likelihood_mask` 0: a hierarchical model's
    population mean and scale). Their full conditional is the prior's, so the test
    :math:`\log u < \log p(\theta') - \log p(\theta)` is exact and reads no data (the prior on the
    stand-in row); the per-row cache stays valid. Randomness from the algorithm stream."""
    prop = random_walk(rng, state.z, scale)
    with torch.no_grad():
        lp_new = lik.log_prior(prop.z)
    log_u = uniform_log(rng, lp_new)
    ok = bool(torch.isfinite(lp_new)) and bool(log_u < lp_new - state.log_prior)
    return (state._replace(z=prop.z, log_prior=lp_new) if ok else state), ok


class PriorSweeps:
    """The sweeps a kernel runs on the coordinates that enter only the prior (module doc): a part
    the kernel holds (``kernel.prior_sweeps``, checkpointed with the chain), whose state is the
    adapted log scale of its steps. Reads no data.

    >>> PriorSweeps().log_scale
    0.0
    """

    def __init__(self, log_scale: float = 0.0):
        self.log_scale = float(log_scale)

    @staticmethod
    def mask(lik, default_path: bool) -> Optional[torch.Tensor]:
        """The 0/1 mask of the coordinates that enter only the prior, which the sweeps move and the
        private step holds fixed, on the kernel's ``default_path`` (its step sizes tuned), else
        ``None`` (also when every coordinate is in the likelihood). Structure only: data-free."""
        mask = lik.likelihood_mask
        if not default_path or mask is None or bool(mask.all()):
            return None
        return 1.0 - mask

    def run(self, lik, rng: torch.Generator, state: MHState, mask: torch.Tensor, *, iteration: int,
            target_accept_prob: float, warmup: bool):
        """``(state, moved)`` after :data:`PRIOR_SWEEPS` steps on the coordinates of the 0/1 ``mask``
        at the kernel's ``iteration``; in warmup each decision moves the log scale by
        :math:`t^{-0.6}(\text{accepted} - \text{target})`."""
        moved, z_old = False, state.z
        for sweep in range(PRIOR_SWEEPS):
            state, ok = prior_only_step(lik, rng, state, mask * math.exp(self.log_scale))
            moved = moved or ok
            if warmup:  # Robbins-Monro on the log scale (post-processing of nothing private)
                t = iteration * PRIOR_SWEEPS + sweep + 1.0
                self.log_scale += t ** -0.6 * (float(ok) - target_accept_prob)
        if moved and getattr(state, "grad", None) is not None:
            # a released gradient of the log target kept with the state (DP-HMC's, reused by the next
            # trajectory): the likelihood's part does not depend on these coordinates, the prior's is
            # taken at the new point (data-free), so it is the same release's gradient there
            state = state._replace(grad=state.grad - lik.grad_log_prior(z_old) + lik.grad_log_prior(state.z))
        return state, moved
