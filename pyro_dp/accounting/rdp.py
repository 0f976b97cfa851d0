r"""Rényi differential privacy (Mironov 2017): pure functions over arrays of orders.

A mechanism is :math:`(\alpha, \varepsilon(\alpha))`-RDP; RDP composes by adding the curves
order by order (Mironov 2017, Prop. 1; Räisä 2021 thesis, Thm 2.2) and converts to
:math:`(\varepsilon,\delta)`-DP by

* ``conversion="improved"`` (the default; Balle et al. 2020, Thm 21; Canonne, Kamath &
  Steinke 2020, Prop. 12; what Opacus's ``privacy_analysis.get_privacy_spent`` and
  ``dp_accounting``'s ``RdpAccountant`` use):
  :math:`\varepsilon = \min_\alpha\, \varepsilon(\alpha) + \ln(1-1/\alpha)
  - (\ln\delta + \ln\alpha)/(\alpha-1)`, at orders :math:`\alpha > 1.01` (as
  ``dp_accounting``: the formula loses its accuracy as :math:`\alpha \to 1`), plus
  ``dp_accounting``'s KL shortcut: :math:`\varepsilon = 0` when
  :math:`1 - e^{-\varepsilon(\alpha)} < \delta^2` (then the total variation distance is
  below :math:`\delta`, Bretagnolle–Huber);
* ``conversion="mironov"`` (Mironov 2017, Prop. 3; thesis Thm 1, the bound the 2019–2021
  papers state): :math:`\varepsilon = \min_\alpha\, \varepsilon(\alpha) + \ln(1/\delta)/(\alpha-1)`.

Both are valid upper bounds; the improved one is never larger (at :math:`\alpha = 2` it is
smaller by :math:`\ln 2`, Balle et al. 2020). Results are rounded **up** by a bound on the
floating-point error of the formula, so :math:`\varepsilon` is never below Opacus's or
``dp_accounting``'s on the same curve (``tests/accounting/test_tightness.py``).

Example
-------
>>> import numpy as np
>>> orders = np.array(DEFAULT_ORDERS)
>>> curve = 1000 * rdp_gaussian(60.0, orders) + 11000 * rdp_gaussian(80.0, orders)
>>> round(rdp_epsilon(orders, curve, 1e-5)[0], 4)
7.0701
>>> round(rdp_epsilon(orders, curve, 1e-5, conversion="mironov")[0], 4)
7.7785
"""
from __future__ import annotations

import functools
import math
from typing import Sequence, Tuple

import numpy as np

__all__ = [
    "DEFAULT_ORDERS",
    "CONVERSIONS",
    "rdp_gaussian",
    "rdp_pure",
    "rdp_poisson_subsampled_gaussian",
    "rdp_epsilon",
    "rdp_delta",
]

#: Opacus's ``RDPAccountant.DEFAULT_ALPHAS``: 1.1, 1.2, ..., 10.9, 12, ..., 63.
DEFAULT_ORDERS: Tuple[float, ...] = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))

#: Names accepted by ``conversion=``; the first is the default.
CONVERSIONS = ("improved", "mironov")

#: Orders at or below this are not used by the improved conversion (``dp_accounting``'s
#: ``compute_epsilon``/``compute_delta`` threshold; the bound is unstable as alpha -> 1).
_IMPROVED_MIN_ORDER = 1.01

# One float64 rounding step; results are rounded in the pessimistic direction by a few of
# them times the magnitude of the terms summed.
_ULP = 2.0**-52
_ROUND = 16 * _ULP


def check_orders(orders) -> np.ndarray:
    """``orders`` as a float array, refused unless a non-empty 1-d sequence of values above 1."""
    a = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    if a.ndim != 1 or a.size == 0 or not np.all(a > 1):
        raise ValueError("RDP orders must be a non-empty 1-d sequence of values > 1")
    return a


def rdp_gaussian(noise_multiplier: float, orders: Sequence[float]) -> np.ndarray:
    r""":math:`\varepsilon(\alpha) = \alpha/(2\,\mathrm{nm}^2)` of one Gaussian release
    (Mironov 2017, Table II; Räisä 2021 thesis, Thm 4.1).

    >>> rdp_gaussian(2.0, [2, 4]).tolist()
    [0.25, 0.5]
    """
    nm = float(noise_multiplier)
    if not nm > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier!r}")
    return check_orders(orders) / (2.0 * nm * nm)


def rdp_pure(epsilon: float, orders: Sequence[float]) -> np.ndarray:
    r""":math:`\varepsilon(\alpha) = \min(\varepsilon, \alpha\varepsilon^2/2)` of an
    :math:`\varepsilon`-DP mechanism: :math:`D_\alpha \le D_\infty` (Rényi divergence is
    non-decreasing in :math:`\alpha`, van Erven & Harremoës 2014, Thm 3) and
    :math:`\varepsilon^2/2`-zCDP (Bun & Steinke 2016, Prop. 1.4).

    >>> rdp_pure(1.0, [1.5, 4]).tolist()
    [0.75, 1.0]
    """
    eps = float(epsilon)
    if not eps >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    a = check_orders(orders)
    return np.minimum(eps, a * eps * eps / 2.0)


@functools.lru_cache(maxsize=256)
def _subsampled_cached(q: float, nm: float, orders: Tuple[float, ...]) -> np.ndarray:
    from opacus.accountants.analysis.rdp import compute_rdp  # heavy import: only when needed

    out = np.asarray(compute_rdp(q=q, noise_multiplier=nm, steps=1, orders=list(orders)), float)
    out.setflags(write=False)
    return out


def rdp_poisson_subsampled_gaussian(
    sample_rate: float, noise_multiplier: float, orders: Sequence[float]
) -> np.ndarray:
    r"""RDP of the Poisson-subsampled Gaussian mechanism under the **add/remove** relation
    (Mironov, Talwar & Zhang 2019, §3.3), computed by Opacus's
    ``opacus.accountants.analysis.rdp.compute_rdp``. Not valid for substitution.

    >>> rdp_poisson_subsampled_gaussian(1.0, 2.0, [2.0]).tolist()  # q = 1: plain Gaussian
    [0.25]
    """
    q, nm = float(sample_rate), float(noise_multiplier)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
    if not nm > 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier!r}")
    return np.array(_subsampled_cached(q, nm, tuple(check_orders(orders).tolist())))


def check_conversion(conversion: str) -> str:
    """``conversion``, refused unless one of :data:`CONVERSIONS`."""
    if conversion not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")
    return conversion


def _curve(orders, rdp) -> Tuple[np.ndarray, np.ndarray]:
    a = check_orders(orders)
    r = np.atleast_1d(np.asarray(rdp, dtype=np.float64))
    if r.shape != a.shape:
        raise ValueError("orders and rdp must have the same length")
    if np.any(np.isnan(r)) or np.any(r < 0):
        raise ValueError("RDP values must be >= 0")
    return a, r


def rdp_epsilon(
    orders: Sequence[float], rdp: Sequence[float], delta: float, *, conversion: str = "improved"
) -> Tuple[float, float]:
    r"""Best :math:`\varepsilon` over the orders and the order attaining it (``nan`` when the
    KL shortcut gives 0), rounded up.

    >>> rdp_epsilon([2.0, 3.0], [0.5, 0.75], 0.01, conversion="mironov")[1]
    3.0
    >>> round(rdp_epsilon([2.0, 3.0], [0.5, 0.75], 0.01)[0], 6)  # improved: 0.75 + ln(2/3) - ln(0.03)/2
    2.097814
    """
    a, r = _curve(orders, rdp)
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        if check_conversion(conversion) == "mironov":
            # Mironov 2017, Prop. 3; thesis Thm 1
            terms = (r, np.full_like(a, math.log(1.0 / delta)) / (a - 1.0))
        else:
            # Balle et al. 2020, Thm 21; Canonne, Kamath & Steinke 2020, Prop. 12
            terms = (r, np.log1p(-1.0 / a), -(math.log(delta) + np.log(a)) / (a - 1.0))
            terms = tuple(np.where(a > _IMPROVED_MIN_ORDER, t, np.inf) for t in terms)
        eps = sum(terms)
        eps = eps + _ROUND * sum(np.abs(t) for t in terms)  # round up past the float error
    eps = np.where(np.isnan(eps), np.inf, eps)
    i = int(np.argmin(eps))
    if conversion == "improved" and delta * delta + math.expm1(-float(np.min(r))) > 0:
        # KL shortcut (dp_accounting's compute_epsilon): D_KL <= D_alpha, and
        # TV <= sqrt(1 - exp(-D_KL)) < delta (Bretagnolle–Huber), so the pair is (0, delta)-DP
        return 0.0, math.nan
    return max(0.0, float(eps[i])), float(a[i])


def rdp_delta(
    orders: Sequence[float], rdp: Sequence[float], epsilon: float, *, conversion: str = "improved"
) -> Tuple[float, float]:
    r"""Best :math:`\delta` over the orders for a target :math:`\varepsilon`, and the order
    (``nan`` when the KL bound wins), rounded up and capped at 1.

    ``"improved"``: :math:`\delta = \exp((\alpha-1)(\varepsilon(\alpha)-\varepsilon+\ln(1-1/\alpha)))/\alpha`
    (Canonne, Kamath & Steinke 2020, Prop. 12) at orders above 1.01, and the KL bound
    :math:`\delta \le \sqrt{1 - e^{-\varepsilon(\alpha)}}` (as ``dp_accounting``'s
    ``compute_delta``); ``"mironov"``: :math:`\delta = \exp((\alpha-1)(\varepsilon(\alpha)-\varepsilon))`
    (Mironov 2017, Prop. 3 solved for :math:`\delta`).

    >>> round(rdp_delta([2.0, 3.0], [0.5, 0.75], 3.0, conversion="mironov")[0], 6)
    0.011109
    >>> round(rdp_delta([2.0, 3.0], [0.5, 0.75], 3.0)[0], 6)
    0.001646
    """
    a, r = _curve(orders, rdp)
    eps = float(epsilon)
    if not eps >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    with np.errstate(divide="ignore", invalid="ignore"):
        if check_conversion(conversion) == "mironov":
            terms = ((a - 1.0) * r, -(a - 1.0) * eps)
        else:
            terms = ((a - 1.0) * r, -(a - 1.0) * eps, (a - 1.0) * np.log1p(-1.0 / a), -np.log(a))
            terms = tuple(np.where(a > _IMPROVED_MIN_ORDER, t, np.inf) for t in terms)
        log_delta = sum(terms)
        log_delta = log_delta + _ROUND * sum(np.abs(t) for t in terms)  # round up
    log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
    i = int(np.argmin(log_delta))
    best, order = float(log_delta[i]), float(a[i])
    if conversion == "improved":
        # KL bound (dp_accounting's compute_delta): delta <= sqrt(1 - exp(-D_KL)), D_KL <= D_alpha
        j = int(np.argmin(r))
        kl = 0.5 * math.log(-math.expm1(-float(r[j]))) if r[j] > 0 else -math.inf
        kl += _ROUND * abs(kl) if math.isfinite(kl) else 0.0
        if kl < best:
            best, order = kl, math.nan
    return min(1.0, math.exp(min(best, 0.0)) * (1.0 + _ROUND)), order
