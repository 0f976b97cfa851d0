r"""DP Barker proposal, a second new kernel on the kernel base and the MH core beside DP-MALA
(``docs/new_kernel.md``). Each iteration proposes with the Barker proposal (Livingstone &
Zanella 2022, JRSS-B 84(2) §3): per coordinate :math:`\xi_i\sim\mathcal N(0,\sigma^2)`, its sign
kept with probability :math:`1/(1+e^{-\xi_i G_i(\theta)})`, :math:`\theta'_i = \theta_i \pm
\xi_i`, on the released gradient :math:`G = T(\sum_i \mathrm{clip}_{b_g}\nabla\ell_i +
\mathcal N(0, \sigma_g^2)) + \nabla\log p` — the building block
:func:`~pyro_dp.kernels.gradient_proposals.barker_proposal`, which also releases
:math:`G(\theta')` for the reverse density — and accepts with the penalty test (Yıldırım &
Ermiş 2019 §3.1) on the released clipped log-likelihood ratio sum plus
:math:`\mathcal N(0,\sigma_l^2)` and :math:`\hat\lambda = T\hat s + \Delta\log p + \sum_i
\log(1+e^{-w_iG_i(\theta)}) - \log(1+e^{w_iG_i(\theta')})`, :math:`w=\theta'-\theta` (the
Barker proposal's MH ratio, Livingstone & Zanella 2022 §3). :math:`G(\theta')` is kept if
accepted (DP-HMC's reuse, Räisä 2021 Alg. 3): MH on :math:`(\theta, G)`. Privacy, as DP-MALA's:
one gradient per chain, then two Gaussian releases per iteration, counted also when rejected
(pessimistic)."""
from pyro_dp.kernels.base import DPKernel, check_positive
from pyro_dp.kernels.gradient_proposals import barker_proposal
from pyro_dp.kernels.mh import mh_init, mh_step
from pyro_dp.kernels.penalty import penalty_release_accept
from pyro_dp.kernels.releases import Budget, calibrated_scale, gradient_mh_releases, init_events, noise_setting


class DPBarkerProposal(DPKernel):
    r"""DP Barker-proposal MH (module docstring) as a Pyro ``MCMCKernel``.

    :param model: Pyro model with its observed sites in a data plate.
    :param float scale: :math:`\sigma`, the Barker proposal's scale in unconstrained space.
    :param float grad_clip: :math:`b_g`, the per-example gradient clip (L2 norm).
    :param float llr_clip: :math:`b_l`: each per-example log-likelihood ratio is clipped to
        :math:`\pm b_l\|\theta'-\theta\|`.
    :param float noise_multiplier: of both releases (noise std / sensitivity); ``None``:
        calibrated to the budget (``epsilon``, ``delta``) over the run.
    :param kwargs: :class:`~pyro_dp.kernels.base.DPKernel`'s (budget, seeds, ``init_strategy``, ...).
    """

    def __init__(self, model, scale, grad_clip, llr_clip, noise_multiplier=None, **kwargs):
        super().__init__(model, **kwargs)
        self.scale, self.grad_clip, self.llr_clip = (check_positive(n, v) for n, v in zip(
            ("scale", "grad_clip", "llr_clip"), (scale, grad_clip, llr_clip)))
        self.nm = noise_setting(self, "noise_multiplier", noise_multiplier)  # of both releases

    def _calibrate(self):  # no noise multiplier given: from the budget (data-free)
        if self.nm is None:
            self.nm = calibrated_scale(gradient_mh_releases, Budget.of(self), self.num_iterations,
                                       init_events=init_events(self))

    def releases(self, state=None):  # G(θ_0) once, by the first iteration; then G(θ') and the ratio
        return gradient_mh_releases(self.nm).first_step(state is not None and state.grad is None)

    def _init_state(self, z):  # data-free: the first gradient is released by the first proposal
        return mh_init(self.lik, z)

    def _proposal(self):  # releases G(θ'), returns log q(θ|θ') − log q(θ'|θ) (Barker's)
        return barker_proposal(self.lik, self.scale, self.grad_clip, self.nm)

    def _release_accept(self, noise, rng, state, z_new, log_q_ratio):  # the penalty test, as DPPenalty's
        return penalty_release_accept(self.lik, noise, rng, state, z_new, log_q_ratio, llr_clip=self.llr_clip,
                                      noise_multiplier=self.nm)

    def _step(self, state):
        return mh_step(self._rng, self._noise, state, propose=self._proposal(), release_accept=self._release_accept)
