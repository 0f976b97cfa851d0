r"""DP-HMC's trajectory as a proposal of the MH core (Räisä, Koskela & Honkela 2021; Räisä 2021
thesis Alg. 3): ``L`` leapfrog steps on released gradients, its log q-ratio (the kinetic
energies) and what it hands to the ratio release. Pure tensor functions, their randomness
drawn before them (:func:`~.hmc.hmc_step`); DP-HMC's state and step info (:class:`HMCState`,
:class:`HMCInfo`), which :mod:`~.control_variate`'s DP-HMC steps build too."""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch

from .mh import Proposal
from .proposals import kinetic_energy, leapfrog

__all__ = ["HMCState", "HMCInfo", "KineticRatio", "TrajectoryEnd", "trajectory_proposal"]


class HMCState(NamedTuple):
    """State of the DP-HMC chain.

    :ivar z: current point, flat, in unconstrained space.
    :ivar log_prior: data-free log prior (+ log-Jacobian) at ``z``.
    :ivar loglik: cached per-example log-likelihoods at ``z`` (private: never released,
        only used inside the next ratio release); ``None`` until the first gradient release.
    :ivar grad: the **released** noisy gradient :math:`G(z)` of the log target at ``z``
        (public, reused by the next iteration, thesis Alg. 3); ``None`` until released.
    """

    z: torch.Tensor
    log_prior: torch.Tensor
    loglik: Optional[torch.Tensor]
    grad: Optional[torch.Tensor]


class HMCInfo(NamedTuple):
    """What one iteration did.

    :ivar accepted: the accept decision (post-processing of the releases).
    :ivar events: privacy events released, in order: the initial gradient (first
        iteration of a chain only), ``L`` gradients, then the ratio (absent when the
        trajectory left the prior's support, a data-free rejection).
    :ivar clipped_fraction: mean clipped fraction over this iteration's releases
        (**non-private** diagnostic).
    :ivar grad_clipped_fraction: mean fraction of clipped per-example gradients
        (**non-private**).
    :ivar llr_clipped_fraction: fraction of clipped per-example ratios (**non-private**). The
        three fractions are NaN unless the kernel counts them (``nonprivate_diagnostics=True``,
        :func:`hmc_step`'s ``count_clipped``).
    :ivar accept_prob: penalty acceptance probability from the released
        :math:`\\hat\\lambda` (post-processing; used by step-size adaptation).
    :ivar step_size: the step size this iteration used.
    :ivar proposal: the proposed point (post-processing of released gradients).
    :ivar noise_std: standard deviation of the noise on the summed ratio.
    :ivar ratio_released: whether the ratio was released (``False`` only after a
        data-free rejection of a trajectory that left the support).
    """

    accepted: bool
    events: Tuple
    clipped_fraction: float
    grad_clipped_fraction: float
    llr_clipped_fraction: float
    accept_prob: float
    step_size: float
    proposal: torch.Tensor
    noise_std: float
    ratio_released: bool


class KineticRatio(NamedTuple):
    r"""DP-HMC's log q-ratio :math:`K(p_0) - K(p_L)` (:func:`~.proposals.kinetic_energy`): HMC is
    MH on :math:`(\theta, p)` with a reversible, volume-preserving trajectory, so the momentum's
    density ratio is the proposal's (Neal 2011 §5.2; Räisä et al. 2021 Thm 3.1). Given by the
    momenta at the trajectory's ends and the inverse mass; :meth:`added_to` adds it.

    :ivar p0: the momentum drawn at the start.
    :ivar p: the momentum at the trajectory's end.
    :ivar inv_mass: :math:`M^{-1}` (diagonal or scalar).
    """

    p0: torch.Tensor
    p: torch.Tensor
    inv_mass: torch.Tensor

    def added_to(self, x):
        """``x + K(p_0) - K(p_L)``, the terms added in this order."""
        return x + kinetic_energy(self.p0, self.inv_mass) - kinetic_energy(self.p, self.inv_mass)


class TrajectoryEnd(NamedTuple):
    """What a DP-HMC trajectory computed at its end :math:`\theta_L` and hands to the ratio
    release (:attr:`~.mh.Proposal.aux`).

    :ivar loglik: the per-example log-likelihoods at :math:`\theta_L` (private: used only inside
        the ratio release), from the last gradient release's model evaluation.
    :ivar log_prior: the log prior at :math:`\theta_L` (data-free).
    :ivar releases: the ``L`` gradient releases (their clipped and total rows: non-private counts).
    """

    loglik: torch.Tensor
    log_prior: torch.Tensor
    releases: tuple


def trajectory_proposal(gradient, num_steps: int, p0, step_size, inv_mass, grad_clip, xis):
    r"""DP-HMC's trajectory as a proposal of the MH core, ``propose(rng, noise, state) ->
    Proposal``: ``L`` leapfrog steps (:func:`~.proposals.leapfrog`) from :math:`(\theta, p_0)` on the
    released gradients of ``gradient`` (:func:`gradient_release_fn`; the ``j``-th with the
    standard normal ``xis[j]``), starting from the state's released :math:`G(\theta)` (thesis
    Alg. 3). Its log q-ratio is the :class:`KineticRatio`, its ``aux`` the
    :class:`TrajectoryEnd`, its ``grad`` :math:`G(\theta_L)` (reused if accepted). The
    randomness is drawn before it (the momentum ``p0`` from the algorithm stream, ``xis`` from the
    secret stream by the release spec), so ``rng`` and ``noise`` are unused and it is a pure
    tensor function."""

    def propose(rng, noise, state):
        draws, rels = iter(range(num_steps)), []

        def grad_fn(zz):
            g, ll, lp, rel = gradient(zz, grad_clip, xis[next(draws)])
            rels.append(rel)
            return g, (ll, lp)

        traj = leapfrog(state.z, p0, state.grad, step_size, num_steps, inv_mass, grad_fn)
        ll, lp = traj.aux[-1]
        return Proposal(traj.z, KineticRatio(p0, traj.p, inv_mass), grad=traj.grad,
                        aux=TrajectoryEnd(ll, lp, tuple(rels)))

    return propose
