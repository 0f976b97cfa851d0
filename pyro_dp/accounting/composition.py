r"""Composition of :math:`(\varepsilon, \delta)`-DP mechanisms known only by their parameters.

Some kernels can only state that one iteration is :math:`(\varepsilon, \delta)`-DP (DP-Fast
MH, Zhang & Zhang 2023, Thm 2). This module composes such
:class:`~pyro_dp.mechanisms.ApproxDPEvent` (and :class:`~pyro_dp.mechanisms.PureDPEvent`)
releases, with pure functions and two thin accountants:

* :func:`drv_epsilon` — advanced composition (Dwork, Rothblum & Vadhan 2010, Thm III.3;
  Dwork & Roth 2014, Thm 3.20), the bound DP-Fast MH's App. B uses:
  :math:`k` releases of :math:`(\varepsilon,\delta)` are
  :math:`(\sqrt{2k\ln(1/\delta')}\,\varepsilon + k\varepsilon(e^\varepsilon-1),\; k\delta+\delta')`-DP.
* :func:`kov_epsilon` — the heterogeneous bound of Kairouz, Oh & Viswanath (2015), Thm 3.5
  (never worse than DRV).
* :func:`optimal_delta` / :func:`optimal_epsilon` — the **exact** optimal composition of
  :math:`k` :math:`(\varepsilon,\delta)`-DP mechanisms (Kairouz, Oh & Viswanath 2015,
  Thm 3.3; Murtagh & Vadhan 2016): no accountant can certify less for these events. It is
  what ``dp_accounting``'s PLD of the same events approximates on a grid, in :math:`O(k)`
  instead of seconds.
* :func:`with_replacement_amplification` — privacy of an :math:`(\varepsilon_0,\delta_0)`-DP
  mechanism (w.r.t. one *slot*) run on :math:`B` indices drawn with replacement, each equal
  to a given row with probability :math:`p` (the argument of DP-Fast MH, App. B, redone
  without dropped terms, see its docstring).

Accountants: :class:`AdvancedCompositionAccountant` (``"advanced"``: min of DRV, KOV Thm 3.5
and basic composition) and :class:`OptimalCompositionAccountant` (``"optimal"``: exact for a
ledger of identical events; a heterogeneous ledger is dominated by its worst event). Both are
:class:`~pyro_dp.accounting.base.Accountant` subclasses; pass the class wherever an
accountant name is accepted (``get_accountant(OptimalCompositionAccountant, ledger)``).

Example
-------
>>> from pyro_dp.mechanisms import ApproxDPEvent, PrivacyLedger
>>> ledger = PrivacyLedger()
>>> ledger.record(ApproxDPEvent(0.1, 1e-8), 1000)
>>> adv = AdvancedCompositionAccountant(ledger).get_epsilon(1e-4)
>>> opt = OptimalCompositionAccountant(ledger).get_epsilon(1e-4)
>>> round(adv, 3), round(opt, 3), opt < adv
(18.646, 16.141, True)
"""
from __future__ import annotations

import math
from typing import Iterable, Tuple

import numpy as np
from scipy import optimize, special, stats

from pyro_dp.mechanisms import ApproxDPEvent, PrivacyEvent, PureDPEvent

from .adapters import composed_pld
from .base import Accountant, check_delta

__all__ = [
    "drv_epsilon",
    "kov_epsilon",
    "optimal_delta",
    "optimal_epsilon",
    "with_replacement_amplification",
    "AdvancedCompositionAccountant",
    "OptimalCompositionAccountant",
]

_ULP = 2.0**-52


def _check_eps_delta(epsilon, delta) -> Tuple[float, float]:
    e, d = float(epsilon), float(delta)
    if not (e >= 0 and math.isfinite(e)):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    if not (0.0 <= d < 1.0):
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    return e, d


def _check_count(count) -> int:
    if isinstance(count, bool) or int(count) != count or count < 0:
        raise ValueError(f"count must be a non-negative integer, got {count!r}")
    return int(count)


def _one_minus_prod(deltas_counts: Iterable[Tuple[float, int]]) -> float:
    r""":math:`1-\prod_i(1-\delta_i)^{k_i}`, accurately for tiny :math:`\delta_i`."""
    log_keep = math.fsum(k * math.log1p(-d) for d, k in deltas_counts)
    return -math.expm1(log_keep)


def drv_epsilon(epsilon: float, delta: float, count: int, delta_total: float) -> float:
    r"""Advanced composition (Dwork, Rothblum & Vadhan 2010, Thm III.3; Dwork & Roth 2014,
    Thm 3.20; the bound of Zhang & Zhang 2023, App. B): ``count`` = :math:`k` adaptive
    releases of :math:`(\varepsilon,\delta)`-DP mechanisms are
    :math:`(\varepsilon_k, k\delta+\delta')`-DP with
    :math:`\varepsilon_k = \sqrt{2k\ln(1/\delta')}\,\varepsilon + k\varepsilon(e^\varepsilon-1)`,
    where :math:`\delta' = \delta_{\rm total} - k\delta`. Returns :math:`\varepsilon_k`
    (``inf`` when :math:`k\delta \ge \delta_{\rm total}`), rounded up.

    >>> round(drv_epsilon(0.1, 0.0, 100, 1e-5), 4)  # sqrt(200 ln 1e5) 0.1 + 10 (e^0.1 - 1)
    5.8502
    """
    eps, d = _check_eps_delta(epsilon, delta)
    k = _check_count(count)
    dt = check_delta(delta_total, "delta_total")
    if k == 0 or eps == 0.0:
        return 0.0 if k * d <= dt else math.inf
    d_prime = dt - k * d  # Dwork & Roth Thm 3.20: delta_total = k delta + delta'
    if not d_prime > 0:
        return math.inf
    out = math.sqrt(2.0 * k * math.log(1.0 / d_prime)) * eps + k * eps * math.expm1(eps)
    return out * (1 + 8 * _ULP)


def kov_epsilon(events: Iterable[Tuple[float, float, int]], delta_total: float) -> float:
    r"""Kairouz, Oh & Viswanath (2015), Thm 3.5: releases of :math:`(\varepsilon_l,\delta_l)`-DP
    mechanisms compose to :math:`(\tilde\varepsilon, 1-(1-\tilde\delta)\prod_l(1-\delta_l))`
    with :math:`\tilde\varepsilon = \min\{\sum_l\varepsilon_l,\ S + \sqrt{2V\log(e+\sqrt V/\tilde\delta)},\
    S + \sqrt{2V\log(1/\tilde\delta)}\}`, :math:`S=\sum_l \varepsilon_l(e^{\varepsilon_l}-1)/(e^{\varepsilon_l}+1)`,
    :math:`V=\sum_l\varepsilon_l^2`. ``events`` holds ``(epsilon, delta, count)``; the
    :math:`\tilde\delta` left after the per-release :math:`\delta_l` is solved for exactly.

    >>> kov_epsilon([(0.1, 0.0, 100)], 1e-5) < drv_epsilon(0.1, 0.0, 100, 1e-5)
    True
    """
    dt = check_delta(delta_total, "delta_total")
    items = []
    for e, d, k in events:
        e, d = _check_eps_delta(e, d)
        k = _check_count(k)
        if k:
            items.append((e, d, k))
    if not items:
        return 0.0
    spent = _one_minus_prod((d, k) for _, d, k in items)
    if not spent < dt:
        return math.inf
    # 1 - dt = (1 - d_tilde) prod(1 - d_l)  =>  d_tilde = 1 - (1 - dt)/prod(1 - d_l)
    log_keep = math.fsum(k * math.log1p(-d) for _, d, k in items)
    d_tilde = -math.expm1(math.log1p(-dt) - log_keep)
    basic = math.fsum(e * k for e, _, k in items)
    s = math.fsum(k * e * math.tanh(e / 2.0) for e, _, k in items)  # (e^x-1)/(e^x+1) = tanh(x/2)
    v = math.fsum(k * e * e for e, _, k in items)
    second = s + math.sqrt(2.0 * v * math.log(math.e + math.sqrt(v) / d_tilde))
    third = s + math.sqrt(2.0 * v * math.log(1.0 / d_tilde))
    return min(basic, second, third) * (1 + 8 * _ULP)


def optimal_delta(epsilon: float, delta: float, count: int, epsilon_total: float) -> float:
    r"""Exact :math:`\delta_k(\varepsilon_{\rm total})` of ``count`` = :math:`k`-fold adaptive
    composition of :math:`(\varepsilon,\delta)`-DP mechanisms (Kairouz, Oh & Viswanath 2015,
    Thm 3.3, extended between their grid points :math:`(k-2i)\varepsilon` by the dominating
    pair, Murtagh & Vadhan 2016):

    .. math::
        \delta_k(\varepsilon_g) = 1-(1-\delta)^k\Big(1-\sum_{l=0}^{k}\binom{k}{l}
        \frac{e^{(k-l)\varepsilon}}{(1+e^\varepsilon)^k}\big(1-e^{\varepsilon_g-(k-2l)\varepsilon}\big)_+\Big).

    Summed in log space (``Binomial(k, 1/(1+e^ε))`` weights), rounded up.

    >>> optimal_delta(1.0, 0.0, 1, 1.0), abs(optimal_delta(1.0, 0.0, 1, 0.0) - math.tanh(0.5)) < 1e-13
    (0.0, True)
    """
    eps, d = _check_eps_delta(epsilon, delta)
    k = _check_count(count)
    eg = float(epsilon_total)
    if not eg >= 0:
        raise ValueError(f"epsilon_total must be >= 0, got {epsilon_total!r}")
    if k == 0:
        return 0.0
    base = _one_minus_prod([(d, k)])
    hom = 0.0
    if eps > 0:
        l = np.arange(k + 1)
        loss = (k - 2 * l) * eps  # privacy loss with l "bad" outcomes
        keep = loss > eg
        if keep.any():
            q = 1.0 / (1.0 + math.exp(eps))  # Binomial(k, q) law of l under P
            logw = stats.binom.logpmf(l[keep], k, q) + np.log(-np.expm1(eg - loss[keep]))
            hom = float(np.exp(special.logsumexp(logw)))
    out = base + (1.0 - base) * min(1.0, hom)
    return min(1.0, out * (1 + 64 * _ULP))


def optimal_epsilon(epsilon: float, delta: float, count: int, delta_total: float) -> float:
    r"""Smallest :math:`\varepsilon_g` with :func:`optimal_delta` :math:`\le` ``delta_total``
    (root of the exact curve, bumped up until verified). ``inf`` if the per-release
    :math:`\delta` alone spends ``delta_total``.

    >>> round(optimal_epsilon(0.1, 0.0, 100, 1e-5), 4)
    4.3068
    """
    eps, d = _check_eps_delta(epsilon, delta)
    k = _check_count(count)
    dt = check_delta(delta_total, "delta_total")
    spent = _one_minus_prod([(d, k)])
    if k == 0 or eps == 0.0:
        return 0.0 if spent <= dt else math.inf
    if not spent < dt:  # nothing left for the homogeneous part: basic composition or nothing
        return k * eps if spent <= dt else math.inf
    f = lambda x: optimal_delta(eps, d, k, x) - dt  # noqa: E731  decreasing in x
    if f(0.0) <= 0:
        return 0.0
    hi = k * eps
    x = optimize.brentq(f, 0.0, hi, xtol=1e-12, rtol=1e-12)
    step = max(abs(x), 1e-12) * 1e-12
    while f(x) > 0:  # round in the pessimistic direction
        x, step = x + step, 2 * step
    return x


def with_replacement_amplification(eps0: float, delta0: float, batch_size: int, p: float) -> Tuple[float, float]:
    r"""A mechanism that is :math:`(\varepsilon_0,\delta_0)`-DP w.r.t. changing one of its
    ``batch_size`` = :math:`B` input slots, run on :math:`B` indices drawn **with
    replacement** where a given row is drawn with probability at most :math:`p` per slot,
    is :math:`(\varepsilon', \delta')`-DP w.r.t. substituting one row, with

    .. math::
        \varepsilon' = B\log\frac{a}{b},\qquad
        \delta' = \frac{\delta_0}{e^{\varepsilon_0}-1}\Big[\Big(\frac ab\Big)^B(1-b^B) + a^B-1\Big],
        \qquad a = 1-p+pe^{\varepsilon_0},\ b = 1-p+pe^{-\varepsilon_0}.

    Derivation (Zhang & Zhang 2023, App. B, eqs. (3)–(7), redone): with :math:`k` copies of
    the changed row in the batch, group privacy over the coupling that redraws those slots
    from the other rows gives :math:`q_k \le e^{k\varepsilon_0}q_0 + \delta_0\frac{e^{k\varepsilon_0}-1}{e^{\varepsilon_0}-1}`
    and :math:`q'_k \ge e^{-k\varepsilon_0}q_0 - \delta_0\frac{1-e^{-k\varepsilon_0}}{e^{\varepsilon_0}-1}`;
    averaging over :math:`k\sim\mathrm{Bin}(B,p)` gives the result. (The paper drops the
    :math:`\delta` term of the lower bound in (7) and bounds :math:`\log(a/b) \le 6p\varepsilon_0`,
    which fails for :math:`\varepsilon_0 \gtrsim 2.9`; here nothing is dropped.) Both
    quantities increase with :math:`B`.

    >>> e, d = with_replacement_amplification(0.5, 1e-6, 100, 1e-3)
    >>> round(e, 4), d < 2 * 100 * 1e-3 * 1e-6  # the paper's 6Bp eps0 = 0.3 and 2Bp delta0
    (0.1042, True)
    """
    e0, d0 = _check_eps_delta(eps0, delta0)
    b_ = _check_count(batch_size)
    p = float(p)
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    if b_ == 0 or p == 0.0 or e0 == 0.0:
        return 0.0, (b_ * p * d0 * 2.0 if e0 == 0.0 else 0.0)
    log_a = math.log1p(p * math.expm1(e0))
    log_b = math.log1p(-p * -math.expm1(-e0))
    eps = b_ * (log_a - log_b)
    try:
        term = math.exp(eps) * -math.expm1(b_ * log_b) + math.expm1(b_ * log_a)
        delta = d0 / math.expm1(e0) * term
    except OverflowError:  # a vacuous guarantee
        return eps, 1.0
    return eps * (1 + 8 * _ULP), min(1.0, delta * (1 + 8 * _ULP))


# --------------------------------------------------------------------------- accountants


def _approx_params(event: PrivacyEvent) -> Tuple[float, float]:
    if isinstance(event, ApproxDPEvent):
        return event.epsilon, event.delta
    return event.epsilon, 0.0  # PureDPEvent


class _ApproxDPComposition(Accountant):
    """Shared plumbing: supports ApproxDPEvent / PureDPEvent; ``_delta`` by bisection."""

    def _unsupported(self, event):
        if isinstance(event, (ApproxDPEvent, PureDPEvent)):
            return None
        return f"{self.name!r} composes (epsilon, delta)-DP events only, not {type(event).__name__}"

    def _delta(self, events, epsilon):
        # smallest delta_total whose epsilon is <= the given one (epsilon decreases in delta)
        lo, hi = -300.0, 0.0  # log10 bracket
        if self._epsilon(events, 1.0 - 1e-12) > epsilon:
            return 1.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if self._epsilon(events, 10.0**mid) <= epsilon:
                hi = mid
            else:
                lo = mid
            if hi - lo < 1e-10:
                break
        return 10.0**hi


class AdvancedCompositionAccountant(_ApproxDPComposition):
    r"""Advanced composition of :math:`(\varepsilon,\delta)`-DP releases: the minimum of
    basic composition, Dwork–Rothblum–Vadhan (:func:`drv_epsilon`, for a ledger of
    identical events) and Kairouz–Oh–Viswanath Thm 3.5 (:func:`kov_epsilon`). Every term is
    a valid bound, so their minimum is.

    >>> from pyro_dp.mechanisms import PrivacyLedger, PureDPEvent
    >>> acc = AdvancedCompositionAccountant()
    >>> acc.record(PureDPEvent(0.1), 100)
    >>> acc.get_epsilon(1e-5) <= drv_epsilon(0.1, 0.0, 100, 1e-5)
    True
    """

    name = "advanced"

    def _epsilon(self, events, delta):
        items = [(*_approx_params(e), c) for e, c in events.items()]
        out = kov_epsilon(items, delta)
        if len(items) == 1:
            e, d, k = items[0]
            out = min(out, drv_epsilon(e, d, k, delta))
        spent = _one_minus_prod((d, k) for _, d, k in items)
        basic_delta = math.fsum(d * k for _, d, k in items)
        if basic_delta <= delta:  # basic composition: (sum eps, sum delta)
            out = min(out, math.fsum(e * k for e, _, k in items) * (1 + 8 * _ULP))
        return out if spent < delta or basic_delta <= delta else math.inf


class OptimalCompositionAccountant(_ApproxDPComposition):
    r"""Exact (optimal) composition of identical :math:`(\varepsilon,\delta)`-DP releases
    (Kairouz, Oh & Viswanath 2015, Thm 3.3; :func:`optimal_epsilon`). A ledger with
    different events has no closed form (Murtagh & Vadhan 2016): it gets the smaller of two
    valid bounds, one event with the largest :math:`\varepsilon` and the largest
    :math:`\delta` composed optimally, and ``dp_accounting``'s pessimistic PLD of the
    events' dominating pairs (what ``"pld"`` computes; often much tighter, e.g.
    500 x (0.1, 1e-8) + 500 x (0.05, 1e-8) at :math:`\delta = 10^{-4}`: 11.84 instead of 16.14).

    >>> from pyro_dp.mechanisms import PrivacyLedger, ApproxDPEvent
    >>> acc = OptimalCompositionAccountant()
    >>> acc.record(ApproxDPEvent(0.1, 0.0), 100)
    >>> round(acc.get_epsilon(1e-5), 4)
    4.3068
    """

    name = "optimal"

    def _epsilon(self, events, delta):
        params = [_approx_params(e) for e in events]
        eps = max(e for e, _ in params)
        d = max(d for _, d in params)
        out = optimal_epsilon(eps, d, sum(events.values()), delta)
        if len(events) > 1:
            out = min(out, max(0.0, float(_heterogeneous_pld(events).get_epsilon_for_delta(delta))))
        return out

    def _delta(self, events, epsilon):
        params = [_approx_params(e) for e in events]
        out = optimal_delta(max(e for e, _ in params), max(d for _, d in params), sum(events.values()), epsilon)
        if len(events) > 1:
            out = min(out, float(_heterogeneous_pld(events).get_delta_for_epsilon(epsilon)))
        return out


def _heterogeneous_pld(events: dict):
    """``dp_accounting``'s PLD of (ε, δ) events (relation-free: the dominating pair of an
    (ε, δ)-DP mechanism is the same under either relation), as in the ``"pld"`` adapter."""
    return composed_pld("substitute", frozenset(events.items()), 1e-4)
