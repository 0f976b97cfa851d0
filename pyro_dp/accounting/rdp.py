r"""Rényi differential privacy (Mironov 2017): pure functions over arrays of orders.

A mechanism is :math:`(\alpha, \varepsilon(\alpha))`-RDP; RDP composes by adding the curves
order by order (Mironov 2017, Prop. 1; Räisä 2021 thesis, Thm 2.2) and converts to
:math:`(\varepsilon,\delta)`-DP by

* ``conversion="mironov"`` (the default, Mironov 2017, Prop. 3; thesis Thm 1):
  :math:`\varepsilon = \min_\alpha\, \varepsilon(\alpha) + \ln(1/\delta)/(\alpha-1)`;
* ``conversion="improved"`` (Balle et al. 2020, Thm 21; Canonne, Kamath & Steinke 2020,
  Prop. 12; what Opacus and ``dp_accounting`` use):
  :math:`\varepsilon = \min_\alpha\, \varepsilon(\alpha) + \ln(1-1/\alpha)
  - (\ln\delta + \ln\alpha)/(\alpha-1)`.

Both are valid upper bounds; the improved one is never larger.

Example
-------
>>> import numpy as np
>>> orders = np.array(DEFAULT_ORDERS)
>>> curve = 1000 * rdp_gaussian(60.0, orders) + 11000 * rdp_gaussian(80.0, orders)
>>> round(rdp_epsilon(orders, curve, 1e-5)[0], 4)
7.7785
>>> round(rdp_epsilon(orders, curve, 1e-5, conversion="improved")[0], 4)
7.0701
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

#: Names accepted by ``conversion=``.
CONVERSIONS = ("mironov", "improved")


def _orders(orders) -> np.ndarray:
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
    return _orders(orders) / (2.0 * nm * nm)


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
    a = _orders(orders)
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
    return np.array(_subsampled_cached(q, nm, tuple(_orders(orders).tolist())))


def _check_conversion(conversion: str) -> str:
    if conversion not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")
    return conversion


def _curve(orders, rdp) -> Tuple[np.ndarray, np.ndarray]:
    a = _orders(orders)
    r = np.atleast_1d(np.asarray(rdp, dtype=np.float64))
    if r.shape != a.shape:
        raise ValueError("orders and rdp must have the same length")
    if np.any(np.isnan(r)) or np.any(r < 0):
        raise ValueError("RDP values must be >= 0")
    return a, r


def rdp_epsilon(
    orders: Sequence[float], rdp: Sequence[float], delta: float, *, conversion: str = "mironov"
) -> Tuple[float, float]:
    r"""Best :math:`\varepsilon` over the orders and the order attaining it.

    >>> rdp_epsilon([2.0, 3.0], [0.5, 0.75], 0.01)[1]
    3.0
    """
    a, r = _curve(orders, rdp)
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if _check_conversion(conversion) == "mironov":
        # Mironov 2017, Prop. 3; thesis Thm 1
        eps = r + math.log(1.0 / delta) / (a - 1.0)
    else:
        # Balle et al. 2020, Thm 21
        eps = r + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(a[i])


def rdp_delta(
    orders: Sequence[float], rdp: Sequence[float], epsilon: float, *, conversion: str = "mironov"
) -> Tuple[float, float]:
    r"""Best :math:`\delta` over the orders for a target :math:`\varepsilon`, and the order.

    ``"mironov"``: :math:`\delta = \exp((\alpha-1)(\varepsilon(\alpha)-\varepsilon))`
    (Mironov 2017, Prop. 3 solved for :math:`\delta`); ``"improved"``:
    :math:`\delta = \exp((\alpha-1)(\varepsilon(\alpha)-\varepsilon+\ln(1-1/\alpha)))/\alpha`
    (Canonne, Kamath & Steinke 2020, Prop. 12). Capped at 1.

    >>> round(rdp_delta([2.0, 3.0], [0.5, 0.75], 3.0)[0], 6)
    0.011109
    """
    a, r = _curve(orders, rdp)
    eps = float(epsilon)
    if not eps >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    with np.errstate(invalid="ignore"):
        if _check_conversion(conversion) == "mironov":
            log_delta = (a - 1.0) * (r - eps)
        else:
            log_delta = (a - 1.0) * (r - eps + np.log1p(-1.0 / a)) - np.log(a)
    log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
    i = int(np.argmin(log_delta))
    return min(1.0, math.exp(min(float(log_delta[i]), 0.0))), float(a[i])
