r"""DP-MALA, a new kernel on the kernel base and the MH core (``docs/new_kernel.md``). Each
iteration proposes :math:`\theta' = \theta + \tfrac h2 G(\theta) + \sqrt h\,\xi` (MALA, Roberts &
Tweedie 1996) from the released gradient :math:`G = T(\sum_i \mathrm{clip}_{b_g}\nabla\ell_i +
\mathcal N(0, \sigma_g^2)) + \nabla\log p` — the core's Langevin proposal, which also releases
:math:`G(\theta')` for the reverse density — and accepts with the penalty test (Yıldırım & Ermiş
2019 §3.1) on the released clipped log-likelihood ratio sum plus :math:`\mathcal N(0,\sigma_l^2)`
and :math:`\hat\lambda = T\hat s + \Delta\log p + \log q(\theta|\theta') - \log q(\theta'|\theta)`.
:math:`G(\theta')` is kept if accepted (DP-HMC's reuse, Räisä 2021 Alg. 3): MH on
:math:`(\theta, G)`. Privacy: one gradient per chain, then two Gaussian releases per iteration,
counted also when rejected (pessimistic)."""
from pyro_dp.kernels.base import DPKernel, check_positive
from pyro_dp.kernels.mh import langevin_proposal, mh_init, mh_step
from pyro_dp.kernels.penalty import penalty_release_accept
from pyro_dp.kernels.releases import Budget, calibrated_scale, gradient_mh_releases, init_events, noise_setting


class DPMALA(DPKernel):
    def __init__(self, model, step_size, grad_clip, llr_clip, noise_multiplier=None, **kwargs):
        super().__init__(model, **kwargs)
        self.step_size, self.grad_clip, self.llr_clip = (check_positive(n, v) for n, v in zip(
            ("step_size", "grad_clip", "llr_clip"), (step_size, grad_clip, llr_clip)))
        self.nm = noise_setting(self, "noise_multiplier", noise_multiplier)  # of both releases

    def _calibrate(self):  # no noise multiplier given: from the budget (data-free)
        if self.nm is None:
            self.nm = calibrated_scale(gradient_mh_releases, Budget.of(self), self.num_iterations,
                                       init_events=init_events(self))

    def releases(self, state=None):  # G(θ_0) once, by the first iteration; then G(θ') and the ratio
        return gradient_mh_releases(self.nm).first_step(state is not None and state.grad is None)

    def _init_state(self, z):  # data-free: the first gradient is released by the first proposal
        return mh_init(self.lik, z)

    def _proposal(self):  # the core's Langevin proposal: releases G(θ'), returns log q(θ|θ') − log q(θ'|θ)
        return langevin_proposal(self.lik, self.step_size, self.grad_clip, self.nm)

    def _release_accept(self, noise, rng, state, z_new, log_q_ratio):  # the penalty test, as DPPenalty's
        return penalty_release_accept(self.lik, noise, rng, state, z_new, log_q_ratio, llr_clip=self.llr_clip,
                                      noise_multiplier=self.nm)

    def _step(self, state):
        return mh_step(self._rng, self._noise, state, propose=self._proposal(), release_accept=self._release_accept)
