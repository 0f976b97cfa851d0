r"""DP-MALA, a new kernel on the kernel base (``docs/new_kernel.md``). Each iteration proposes
:math:`\theta' = \theta + \tfrac h2 G(\theta) + \sqrt h\,\xi` (MALA, Roberts & Tweedie 1996)
from the released gradient :math:`G = T(\sum_i \mathrm{clip}_{b_g}\nabla\ell_i + \mathcal N(0,
\sigma_g^2)) + \nabla\log p`, releases :math:`G(\theta')` and the clipped log-likelihood ratio
sum plus :math:`\mathcal N(0,\sigma_l^2)`, and accepts with the penalty rule (Yıldırım & Ermiş
2019 §3.1) on :math:`\hat\lambda = T\hat s + \Delta\log p + \log q(\theta|\theta') - \log
q(\theta'|\theta)`. :math:`G(\theta')` is kept if accepted (DP-HMC's reuse, Räisä 2021 Alg. 3):
MH on :math:`(\theta, G)`. Privacy: one gradient per chain, then two Gaussian releases per
iteration, counted also when rejected (pessimistic)."""
import math
from typing import NamedTuple, Optional

import torch

from pyro_dp.kernels.base import DPKernel, check_positive
from pyro_dp.kernels.hmc import release_gradient
from pyro_dp.kernels.proposals import penalty_accept, sample_momentum
from pyro_dp.mechanisms import clipped_sum_with_noise, gaussian_event


class MALAState(NamedTuple):
    z: torch.Tensor  # current point, flat, unconstrained
    log_prior: torch.Tensor  # data-free
    loglik: Optional[torch.Tensor] = None  # private per-example ℓ_i(z): read only by the next release
    grad: Optional[torch.Tensor] = None  # the released G(z): public, reused


class MALAInfo(NamedTuple):
    accepted: bool
    events: tuple  # what the step released, reported to the ledger
    clipped_fraction: float  # non-private diagnostic


class DPMALA(DPKernel):
    def __init__(self, model, step_size, grad_clip, llr_clip, noise_multiplier=None, **kwargs):
        super().__init__(model, **kwargs)
        self.step_size, self.grad_clip, self.llr_clip = (check_positive(n, v) for n, v in zip(
            ("step_size", "grad_clip", "llr_clip"), (step_size, grad_clip, llr_clip)))
        self.nm = self._check_noise_multiplier("noise_multiplier", noise_multiplier)  # of both releases

    def _calibrate(self):  # no noise multiplier given: from the budget (data-free)
        if self.nm is None:
            self.nm = self._calibrate_scale(lambda s: ([gaussian_event(s)], [gaussian_event(s)] * 2))

    def _fixed_events(self):  # G(θ_0), released lazily by the first iteration
        return [gaussian_event(self.nm)]

    def _per_iteration_events(self):  # G(θ') and the ratio
        return [gaussian_event(self.nm)] * 2

    def _step_events(self, state):
        return (self._fixed_events() if state.grad is None else []) + self._per_iteration_events()

    def _init_state(self, z):
        return MALAState(z, self.lik.log_prior(z))

    def _log_q_ratio(self, s, z_new, g_new):  # log q(θ|θ') − log q(θ'|θ), Gaussian q(a|b) = N(b + h G(b)/2, h)
        h = self.step_size
        return (((z_new - s.z - h / 2 * s.grad) ** 2).sum() - ((s.z - z_new - h / 2 * g_new) ** 2).sum()) / (2 * h)

    def _gradient(self, z, events):
        g, (ll, lp, rel) = release_gradient(self._noise, self.lik, z, grad_clip=self.grad_clip,
                                            noise_multiplier=self.nm)
        events.append(rel.event)
        return g, ll, lp

    def _step(self, s):
        lik, h, T, events = self.lik, self.step_size, self.lik.temperature, []
        if s.grad is None:
            g, ll, _ = self._gradient(s.z, events)
            s = s._replace(loglik=ll, grad=g)
        xi = sample_momentum(self._rng, 1.0, s.z)  # N(0, I) from the public stream (MALA is one-step HMC)
        z_new = s.z + h / 2 * s.grad + math.sqrt(h) * xi
        g_new, ll_new, lp_new = self._gradient(z_new, events)
        clip = self.llr_clip * lik.jump_norm(z_new, s.z)  # sensitivity 2 b_l‖θ'−θ‖, data-free
        rel = clipped_sum_with_noise(lik.clipped_difference_sum(ll_new, s.loglik, clip), clip, self.nm, self._noise)
        events.append(rel.event)
        lam = T * rel.value + (lp_new - s.log_prior) + self._log_q_ratio(s, z_new, g_new)
        accepted = penalty_accept(self._rng, lam, (T * rel.noise_std) ** 2) and bool(torch.isfinite(lam))
        new = MALAState(z_new, lp_new, ll_new, g_new) if accepted else s
        return new, MALAInfo(accepted, tuple(events), rel.clipped_fraction)
