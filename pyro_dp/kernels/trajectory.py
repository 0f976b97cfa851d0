r"""DP-HMC's trajectory as a proposal of the MH core (Räisä, Koskela & Honkela 2021; Räisä 2021
thesis Alg. 3): ``L`` leapfrog steps on released gradients, its log q-ratio (the kinetic
energies) and what it hands to the ratio release. Pure tensor functions, their randomness
drawn before them (:func:`~.hmc.hmc_step`)."""
from __future__ import annotations

from typing import NamedTuple

import torch

from .mh import Proposal
from .proposals import kinetic_energy, leapfrog

__all__ = ["KineticRatio", "TrajectoryEnd", "trajectory_proposal"]


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
