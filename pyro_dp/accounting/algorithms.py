r"""Per-algorithm privacy theorems, as pure functions of public quantities.

The kernels import their privacy analysis from here, and so do the experiments that plot it
(Räisä 2021 thesis Fig. 6.2), so the theorems live in one place next to the accountants:

* DP-HMC (Räisä 2021 thesis, Thm 10 and Thm 11): :func:`dphmc_mu`, :func:`dphmc_events`,
  :func:`dphmc_max_iterations`, :func:`dphmc_max_iterations_zcdp`;
* DP-Fast MH (Zhang & Zhang 2023, Alg. 2 and Thm 2, re-derived): :func:`fastmh_step_privacy`;
* DP Barker and the minibatch penalty (Heikkilä et al. 2019 Thm 2; thesis Thm 8):
  :mod:`pyro_dp.accounting.subsampled`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..mechanisms import ApproxDPEvent, GaussianEvent, NonPrivateEvent
from .composition import with_replacement_amplification
from .gdp import gdp_delta
from .planning import max_iterations
from .registry import DEFAULT_ACCOUNTANT
from .zcdp import zcdp_rho_budget

__all__ = [
    "default_noise_ratio",
    "dphmc_mu",
    "dphmc_events",
    "dphmc_max_iterations",
    "dphmc_max_iterations_zcdp",
    "StepPrivacy",
    "fastmh_step_privacy",
]


def dphmc_mu(num_iterations: int, num_steps: int, llr_noise_multiplier: float, grad_noise_multiplier: float) -> float:
    r"""Sommer et al.'s :math:`\mu_S = k/(2\mathrm{nm}_l^2) + (kL+1)/(2\mathrm{nm}_g^2)` of ``k``
    DP-HMC iterations (Räisä 2021 thesis, Thm 11); the run is :math:`\sqrt{2\mu_S}`-GDP.

    >>> dphmc_mu(10, 4, 5.0, 10.0)
    0.405
    """
    k, L = int(num_iterations), int(num_steps)
    return k / (2.0 * llr_noise_multiplier**2) + (k * L + 1) / (2.0 * grad_noise_multiplier**2)


def default_noise_ratio(num_steps: int) -> float:
    r""":math:`r = \mathrm{nm}_g/\mathrm{nm}_l` when the noise is calibrated to a budget and
    ``noise_ratio`` is not given: :math:`\sqrt L`, which minimises the noise the penalty test sees
    per unit of trajectory length at a fixed budget. Each iteration's releases cost
    :math:`\mu^2 \propto (1 + L/r^2)/\mathrm{nm}_l^2` (thesis Thm 11), so at a fixed budget
    :math:`\mathrm{nm}_l^2 \propto 1 + L/r^2`; the test sees the ratio noise
    :math:`\sigma_l \propto \mathrm{nm}_l L\eta` and the kinetic-energy term's noise, whose standard
    deviation is :math:`r/\sqrt L` times it (the released gradients move the momentum:
    :func:`pyro_dp.default_path.forecast.predicted_move`), in all :math:`\propto (1 + L/r^2)(1 + r^2/L)`, least
    at :math:`r^2 = L` (4, against 7.2 at :math:`r = 1`, :math:`L = 5`).

    >>> round(default_noise_ratio(5) ** 2, 12)
    5.0
    """
    return math.sqrt(num_steps)


def dphmc_events(num_steps: int, llr_noise_multiplier: float, grad_noise_multiplier: float):
    """``(fixed, per_iteration)`` releases of DP-HMC for the planning functions of
    :mod:`pyro_dp.accounting` (thesis Alg. 3: one gradient once per chain; ``L`` gradients and
    one ratio per iteration). A zero noise multiplier is a :class:`NonPrivateEvent`."""
    ev_l = GaussianEvent(llr_noise_multiplier) if llr_noise_multiplier > 0 else NonPrivateEvent()
    ev_g = GaussianEvent(grad_noise_multiplier) if grad_noise_multiplier > 0 else NonPrivateEvent()
    return [ev_g], [(ev_l, 1), (ev_g, int(num_steps))]


def dphmc_max_iterations(epsilon, delta, num_steps, llr_noise_multiplier, grad_noise_multiplier, *,
                         accountant=DEFAULT_ACCOUNTANT, num_chains=1) -> int:
    r"""Iterations per chain that fit :math:`(\varepsilon, \delta)` under ``accountant``
    (default: the tight Gaussian composition of thesis Thm 11).

    >>> dphmc_max_iterations(1.0, 1e-5, 10, 40.0, 120.0)
    54
    """
    fixed, per = dphmc_events(num_steps, llr_noise_multiplier, grad_noise_multiplier)
    return max_iterations(epsilon, delta, per, fixed=fixed, accountant=accountant, num_chains=num_chains)


def dphmc_max_iterations_zcdp(epsilon, delta, num_steps, llr_noise_multiplier, grad_noise_multiplier) -> int:
    r"""Iterations allowed by zCDP accounting (Räisä 2021 thesis, Thm 10):
    :math:`k = \lfloor(\rho-\rho_g)/(\rho_l + L\rho_g)\rfloor` with
    :math:`\rho = (\sqrt{\varepsilon-\ln\delta}-\sqrt{-\ln\delta})^2`,
    :math:`\rho_l = 1/(2\mathrm{nm}_l^2)`, :math:`\rho_g = 1/(2\mathrm{nm}_g^2)` (the thesis's
    :math:`\tau\sqrt n` is our noise multiplier). Looser than the ``"gdp"`` ledger (Thm 11).

    >>> dphmc_max_iterations_zcdp(1.0, 1e-5, 10, 40.0, 120.0)
    31
    """
    rho = zcdp_rho_budget(epsilon, delta)
    rho_l = 1.0 / (2.0 * llr_noise_multiplier**2)
    rho_g = 1.0 / (2.0 * grad_noise_multiplier**2)
    return max(int(math.floor((rho - rho_g) / (rho_l + int(num_steps) * rho_g))), 0)


# --------------------------------------------------------------------------- DP-Fast MH


class StepPrivacy(NamedTuple):
    r"""Noise scales and the per-iteration guarantee of Alg. 2 (Zhang & Zhang 2023).

    :ivar sigma1: minibatch noise scale (noise std :math:`\sigma_1\Delta(\ell_1)`).
    :ivar sigma2: full-batch noise scale (noise std :math:`\sigma_2\Delta(\ell_2)`).
    :ivar threshold1: privacy-for-free threshold on :math:`\Delta(\ell_1)`, :math:`\varepsilon C/(6K\max_i c_i)`.
    :ivar threshold2: privacy-for-free threshold on :math:`\Delta(\ell_2)`, :math:`\varepsilon`.
    :ivar eps0, delta0: guarantee of the minibatch Gaussian w.r.t. one slot
        (:math:`\varepsilon_0=\varepsilon/(6Kp)`, exact :math:`\delta` of noise multiplier
        :math:`\sigma_1` at :math:`\varepsilon_0`, Balle & Wang 2018).
    :ivar certified_epsilon, certified_delta: what this configuration provably achieves
        per iteration, max over both branches (full batch: exact Gaussian :math:`\delta` at
        :math:`\varepsilon`; minibatch: :func:`~pyro_dp.accounting.composition.with_replacement_amplification`
        at :math:`B=K-1`), plus the free branch when enabled.
    :ivar event: the event recorded every iteration.
    """

    sigma1: float
    sigma2: float
    threshold1: float
    threshold2: float
    eps0: float
    delta0: float
    certified_epsilon: float
    certified_delta: float
    event: object


def fastmh_step_privacy(
    step_epsilon: float,
    step_delta: float,
    max_batch_size: int,
    sample_prob: float,
    *,
    privacy_for_free: bool = False,
    full_batch: bool = False,
) -> StepPrivacy:
    r"""Alg. 2's noise scales and a re-derived per-iteration guarantee.

    ``sample_prob`` is :math:`p = \max_i c_i / C` (:math:`1/N` for one bound for all rows).

    * The full-batch branch is the Gaussian mechanism with noise multiplier :math:`\sigma_2`
      (Lemma 1, eq. 2 is the substitute sensitivity): exactly :math:`(\varepsilon, \delta_2)`
      with :math:`\delta_2\le\delta` for :math:`\varepsilon<1` (Dwork & Roth 2014, Thm A.1).
    * The minibatch branch: :math:`(\varepsilon_0,\delta_0)` per slot, amplified by
      sampling with replacement (App. B) for every :math:`B\le K-1`.
    * Privacy for free (deviation, see :class:`DPFastMH`): an un-noised MH accept bit whose
      log-ratio moves by :math:`\Delta` is only :math:`(0, 1-e^{-\Delta})`-DP (the *reject*
      probability can go from 0 to :math:`1-e^{-\Delta}`); enabling it raises δ accordingly.

    The recorded event is Thm 2's ``ApproxDPEvent(step_epsilon, step_delta)`` when the
    re-derivation certifies it, else the certified (larger) pair; with ``full_batch`` and no
    free branch it is ``GaussianEvent(sigma2)``, exact.

    >>> sp = fastmh_step_privacy(0.5, 1e-6, 1000, 1e-4)
    >>> round(sp.sigma2, 4), round(sp.sigma1, 4), sp.event
    (10.5976, 5.983, ApproxDPEvent(epsilon=0.5, delta=1e-06))
    >>> sp.certified_epsilon <= 0.5 and sp.certified_delta <= 1e-6  # Thm 2 holds here
    True
    """
    eps, delta = float(step_epsilon), float(step_delta)
    k, p = int(max_batch_size), float(sample_prob)
    # Alg. 2, first line: sigma2 = sqrt(2 log(1.25/delta))/eps (Gaussian mechanism, Dwork & Roth Thm A.1)
    sigma2 = math.sqrt(2.0 * math.log(1.25 / delta)) / eps
    # Alg. 2: sigma1 = 6 K max c_i sqrt(2 log(2.5 K max c_i/(delta C)))/(eps C), with p = max c_i / C;
    # i.e. the Gaussian mechanism at (eps0, delta0) = (eps/(6Kp), delta/(2Kp)) (App. B).
    eps0, delta0_paper = eps / (6.0 * k * p), delta / (2.0 * k * p)
    if not delta0_paper < 1.0:
        raise ValueError(
            f"step_delta={delta} is too large for K={k} and p={p:.3g}: Alg. 2 needs "
            f"delta/(2 K max c_i / C) < 1; lower step_delta"
        )
    sigma1 = math.sqrt(2.0 * math.log(1.25 / delta0_paper)) / eps0
    threshold1, threshold2 = eps0, eps  # Alg. 2, the two "privacy for free" tests
    # Re-derivation (exact Gaussian curves; nothing dropped in the amplification).
    d_full = gdp_delta(eps, 1.0 / sigma2)
    cert_eps, cert_delta = eps, d_full
    delta0 = gdp_delta(eps0, 1.0 / sigma1)
    if not full_batch:
        e_mb, d_mb = with_replacement_amplification(eps0, delta0, max(k - 1, 0), p)
        cert_eps = max(cert_eps, e_mb)
        cert_delta = max(cert_delta, d_mb)
    if privacy_for_free:
        # full batch: Delta(l2) <= eps  =>  (0, 1 - e^{-eps}); minibatch: k ~ Bin(B, p) copies,
        # each moving l1 by <= Delta(l1) <= threshold1  =>  (0, 1 - (1 - p + p e^{-t1})^B), B <= K-1.
        free = -math.expm1(-threshold2)
        if not full_batch:
            free = max(free, -math.expm1(max(k - 1, 0) * math.log1p(-p * -math.expm1(-threshold1))))
        cert_delta = max(cert_delta, free)
    if not (cert_eps < 50.0 and cert_delta < 1.0):
        raise ValueError(
            f"no per-iteration guarantee: with K={k} and p={p:.3g}, eps0 = eps/(6Kp) = {eps0:.3g} is so large "
            f"that sampling with replacement gives ({cert_eps:.3g}, {cert_delta:.3g}); increase K towards "
            f"eps/(6p) (the paper's recommendation, Sec. 6.2)"
        )
    if full_batch and not privacy_for_free:
        event = GaussianEvent(sigma2)  # the full-batch variant releases only this Gaussian
    else:
        event = ApproxDPEvent(max(eps, cert_eps), max(delta, cert_delta))
    return StepPrivacy(sigma1, sigma2, threshold1, threshold2, eps0, delta0, cert_eps, cert_delta, event)
