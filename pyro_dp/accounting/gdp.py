r"""Exact :math:`(\varepsilon, \delta)` curve of composed (non-subsampled) Gaussian mechanisms.

Pure functions, no state. The composition of Gaussian mechanisms with noise multipliers
:math:`\sigma_i/\Delta_i` is *exactly* :math:`\mu`-Gaussian-DP with

.. math:: \mu = \sqrt{\textstyle\sum_i \Delta_i^2/\sigma_i^2}

(Dong, Roth & Su 2019, Cor. 2.13; equivalently the privacy loss distribution is
:math:`\mathcal N(\mu_S, 2\mu_S)` with :math:`\mu_S = \mu^2/2`, Sommer, Meiser & Mohammadi
2019, Lemma 11 + Thm 1; Räisä 2021 thesis, Thm 4.3, Thm 6 and Thm 11). The ADP curve of
:math:`\mu`-GDP is

.. math:: \delta(\varepsilon) = \Phi(-\varepsilon/\mu + \mu/2)
          - e^{\varepsilon}\,\Phi(-\varepsilon/\mu - \mu/2)

(Dong, Roth & Su 2019, Cor. 2.13; Sommer et al. 2019, Lemma 12). It holds for the
substitute and the add/remove relation alike, as long as every noise multiplier is stated
relative to the sensitivity under the relation in use.

Example
-------
>>> mu = gaussian_mu([(60.0, 1000), (80.0, 11000)])
>>> round(gdp_epsilon(1e-5, mu), 4)
6.5662
>>> gdp_delta(gdp_epsilon(1e-5, mu), mu) <= 1e-5
True
"""
from __future__ import annotations

import math
from typing import Iterable, Tuple

import numpy as np
from scipy import optimize, special

__all__ = ["gaussian_mu", "gdp_delta", "gdp_epsilon", "gdp_mu"]

# One float64 rounding step; used to round results in the pessimistic direction.
_ULP = 2.0**-52
_SQRT2 = math.sqrt(2.0)


def gaussian_mu(noise_multipliers_and_counts: Iterable[Tuple[float, int]]) -> float:
    r"""GDP parameter :math:`\mu = \sqrt{\sum_i c_i/\mathrm{nm}_i^2}` of ``c_i`` releases of
    Gaussian mechanisms with noise multipliers ``nm_i`` (Dong, Roth & Su 2019, Cor. 2.13).

    ``nm = inf`` contributes nothing. The result is rounded up by a few ulps so that the
    floating-point sum can never make it optimistic.

    >>> gaussian_mu([(2.0, 4)])  # sqrt(4 / 4) = 1, rounded up
    1.0000000000000009
    """
    terms = []
    for nm, count in noise_multipliers_and_counts:
        nm = float(nm)
        if not nm > 0:
            raise ValueError(f"noise multipliers must be > 0, got {nm!r}")
        if int(count) != count or count < 0:
            raise ValueError(f"counts must be non-negative integers, got {count!r}")
        if count and math.isfinite(nm):
            terms.append(int(count) / (nm * nm))
    total = math.fsum(terms)
    if total == 0.0:
        return 0.0
    return math.sqrt(total) * (1.0 + 4 * _ULP)


def _check_mu(mu) -> float:
    mu = float(mu)
    if not mu >= 0:
        raise ValueError(f"mu must be >= 0, got {mu!r}")
    return mu


def gdp_delta(epsilon: float, mu: float) -> float:
    r""":math:`\delta(\varepsilon)` of a :math:`\mu`-GDP mechanism (Dong, Roth & Su 2019,
    Cor. 2.13; Räisä 2021 thesis Thm 4.3 with :math:`k\mu_S = \mu^2/2`).

    Evaluated without forming :math:`e^\varepsilon` (scaled ``erfcx``, with the difference
    of the two terms integrated rather than subtracted when :math:`\mu \le 1`;
    :func:`scipy.special.log_ndtr` when :math:`\varepsilon < \mu^2/2` and
    :math:`\mu > 1`), so it neither overflows nor returns NaN and stays accurate to
    about :math:`10^{-12}` relative (checked against mpmath) down to :math:`\delta \sim 10^{-300}`.

    >>> round(gdp_delta(1.0, 1.0), 6)
    0.126937
    >>> gdp_delta(1000.0, 1.0)
    0.0
    """
    eps = float(epsilon)
    if not eps >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    mu = _check_mu(mu)
    if mu == 0.0 or eps == math.inf:
        return 0.0
    if mu == math.inf:
        return 1.0
    xa, xb = eps / mu - mu / 2, eps / mu + mu / 2
    if mu <= 1.0:
        # Phi(-x) = erfcx(x/sqrt2) exp(-x^2/2) / 2 and xb^2/2 - xa^2/2 = eps, hence
        # delta = exp(-xa^2/2) (erfcx(xa/sqrt2) - erfcx(xb/sqrt2)) / 2. For small mu the two
        # erfcx values nearly cancel, so their difference is integrated instead.
        drop = _erfcx_drop(xa / _SQRT2, mu / _SQRT2)
        return max(0.0, min(1.0, 0.5 * math.exp(-0.5 * xa * xa) * drop))
    if xa >= 0:
        # the same identity; mu > 1 so there is little cancellation (and no e^eps overflow)
        diff = float(special.erfcx(xa / _SQRT2)) - float(special.erfcx(xb / _SQRT2))
        return max(0.0, min(1.0, 0.5 * math.exp(-0.5 * xa * xa) * diff))
    # delta = Phi(-xa) (1 - exp(eps + log Phi(-xb) - log Phi(-xa))), Phi(-xa) >= 1/2 here
    log_pa = float(special.log_ndtr(-xa))
    diff = eps + float(special.log_ndtr(-xb)) - log_pa
    if not diff < 0:  # only reachable through rounding
        return 0.0
    return min(1.0, math.exp(log_pa) * -math.expm1(diff))


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(12)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erfcx_drop(u: float, h: float) -> float:
    """``erfcx(u) - erfcx(u + h)`` without cancellation, for ``0 < h <= 1/sqrt2``:
    the integral of ``-erfcx'(t) = 2/sqrt(pi) - 2 t erfcx(t)`` over ``[u, u + h]`` by
    12-point Gauss-Legendre (exact to rounding on such short intervals)."""
    t = u + 0.5 * h * (1.0 + _GL_NODES)
    g = _TWO_OVER_SQRT_PI - 2.0 * t * special.erfcx(t)
    return 0.5 * h * float(np.dot(_GL_WEIGHTS, g))


def gdp_epsilon(delta: float, mu: float) -> float:
    r"""Smallest :math:`\varepsilon \ge 0` with :math:`\delta(\varepsilon) \le` ``delta`` for a
    :math:`\mu`-GDP mechanism, **rounded up**: the returned value always satisfies
    ``gdp_delta(eps, mu) <= delta`` and is never below the exact root.

    ``mu = 0`` gives 0 and ``mu = inf`` gives ``inf``.

    >>> round(gdp_epsilon(1e-5, 1.0), 6)
    4.377178
    >>> gdp_epsilon(1e-5, 0.0), gdp_epsilon(1e-5, float("inf"))
    (0.0, inf)
    """
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    mu = _check_mu(mu)
    if mu == 0.0:
        return 0.0
    if mu == math.inf:
        return math.inf
    if gdp_delta(0.0, mu) <= delta:
        return 0.0
    # Phi(-x) <= exp(-x^2/2)/2 for x >= 0, so delta(hi) <= delta/2 at this hi.
    hi = mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta))
    while gdp_delta(hi, mu) > delta:  # safety net; not expected to run
        hi *= 2
    root = optimize.brentq(
        lambda e: gdp_delta(e, mu) - delta, 0.0, hi, xtol=1e-300, rtol=4 * _ULP, maxiter=500
    )
    return _round_up(lambda e: gdp_delta(e, mu) <= delta, root, hi)


def gdp_mu(epsilon: float, delta: float) -> float:
    r"""Largest :math:`\mu` such that :math:`\mu`-GDP is :math:`(\varepsilon, \delta)`-DP,
    **rounded down** (``gdp_delta(epsilon, result) <= delta`` always holds).

    Used to calibrate noise: ``k`` releases with noise multiplier ``nm`` are
    :math:`\sqrt{k}/\mathrm{nm}`-GDP, so ``nm = sqrt(k) / gdp_mu(eps, delta)``.

    >>> mu = gdp_mu(1.0, 1e-5)
    >>> round(mu, 5), gdp_delta(1.0, mu) <= 1e-5
    (0.26805, True)
    """
    eps = float(epsilon)
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    hi = 1.0
    while gdp_delta(eps, hi) <= delta:
        hi *= 2
    root = optimize.brentq(
        lambda m: gdp_delta(eps, m) - delta, 0.0, hi, xtol=1e-300, rtol=4 * _ULP, maxiter=500
    )
    # delta increases with mu: walk down until the constraint holds
    return -_round_up(lambda m: gdp_delta(eps, -m) <= delta, -root, 0.0)


def _round_up(ok, x: float, limit: float) -> float:
    """Smallest float of the form ``x + 2^j ulp`` (j = 0, 1, ...) at which ``ok`` holds;
    ``limit`` is a point known to satisfy ``ok``."""
    if ok(x):
        return x
    step = max(abs(x), 1e-300) * _ULP
    while True:
        y = x + step
        if y >= limit:
            return limit
        if ok(y):
            return y
        step *= 2
