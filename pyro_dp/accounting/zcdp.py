r"""Zero-concentrated differential privacy (Bun & Steinke 2016): pure functions.

:math:`\rho`-zCDP composes by adding :math:`\rho` (Bun & Steinke 2016, Lemma 1.7;
Räisä 2021 thesis, Thm 2.3) and converts to :math:`(\varepsilon, \delta)`-DP by
:math:`\varepsilon = \rho + 2\sqrt{\rho\ln(1/\delta)}` (Bun & Steinke 2016, Prop. 1.3;
thesis Thm 1). Loose compared with :mod:`pyro_dp.accounting.gdp`; it is here because
the DP penalty and DP-HMC papers state their iteration budgets in zCDP (thesis Thm 5, 10).

Example
-------
>>> rho = 100 * zcdp_gaussian(10.0)  # 100 releases, noise multiplier 10
>>> rho
0.5
>>> round(zcdp_epsilon(rho, 1e-5), 4)
5.2985
>>> round(zcdp_rho_budget(zcdp_epsilon(rho, 1e-5), 1e-5), 12)
0.5
"""
from __future__ import annotations

import math

__all__ = ["zcdp_gaussian", "zcdp_pure", "zcdp_epsilon", "zcdp_delta", "zcdp_rho_budget"]


def _check_delta(delta) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return delta


def _check_rho(rho) -> float:
    rho = float(rho)
    if not rho >= 0:
        raise ValueError(f"rho must be >= 0, got {rho!r}")
    return rho


def zcdp_gaussian(noise_multiplier: float) -> float:
    r""":math:`\rho = 1/(2\,\mathrm{nm}^2)` of one Gaussian release (Bun & Steinke 2016,
    Prop. 1.6; thesis Thm 4.2 with :math:`\Delta^2/(2\sigma^2)`).

    >>> zcdp_gaussian(2.0)
    0.125
    """
    nm = float(noise_multiplier)
    if not nm > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier!r}")
    return 1.0 / (2.0 * nm * nm)


def zcdp_pure(epsilon: float) -> float:
    r""":math:`\rho = \varepsilon^2/2`: an :math:`\varepsilon`-DP mechanism is
    :math:`\varepsilon^2/2`-zCDP (Bun & Steinke 2016, Prop. 1.4).

    >>> zcdp_pure(0.5)
    0.125
    """
    eps = float(epsilon)
    if not eps >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    return 0.5 * eps * eps


def zcdp_epsilon(rho: float, delta: float) -> float:
    r""":math:`\varepsilon = \rho + 2\sqrt{\rho\ln(1/\delta)}` (Bun & Steinke 2016,
    Prop. 1.3; Räisä 2021 thesis, Thm 1).

    >>> zcdp_epsilon(0.0, 1e-5), zcdp_epsilon(float("inf"), 1e-5)
    (0.0, inf)
    """
    rho, delta = _check_rho(rho), _check_delta(delta)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def zcdp_delta(rho: float, epsilon: float) -> float:
    r"""Inverse of :func:`zcdp_epsilon` in :math:`\delta`:
    :math:`\delta = \exp(-(\varepsilon-\rho)^2/(4\rho))` for :math:`\varepsilon > \rho`,
    else 1 (the conversion certifies nothing there).

    >>> round(zcdp_delta(0.5, zcdp_epsilon(0.5, 1e-5)), 12)
    1e-05
    """
    rho = _check_rho(rho)
    eps = float(epsilon)
    if not eps >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if rho == 0.0:
        return 0.0
    if not eps > rho:
        return 1.0
    d = eps - rho
    return math.exp(-(d * d) / (4.0 * rho))  # d * d, not d ** 2: inf (delta 0) rather than OverflowError


def zcdp_rho_budget(epsilon: float, delta: float) -> float:
    r"""Largest :math:`\rho` whose conversion is :math:`(\varepsilon,\delta)`-DP:
    :math:`\rho = (\sqrt{\varepsilon - \ln\delta} - \sqrt{-\ln\delta})^2`
    (Räisä 2021 thesis, Thm 5 and Thm 10; Yildirim & Ermiş 2019).

    Written as :math:`\varepsilon^2/(\sqrt{\varepsilon+L}+\sqrt{L})^2`, :math:`L=-\ln\delta`,
    to avoid cancellation.

    >>> round(zcdp_rho_budget(1.0, 1e-5), 6)
    0.02082
    """
    eps = float(epsilon)
    if not eps >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    log_inv = math.log(1.0 / _check_delta(delta))
    return eps * eps / (math.sqrt(eps + log_inv) + math.sqrt(log_inv)) ** 2
