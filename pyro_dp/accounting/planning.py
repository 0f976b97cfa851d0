r"""Planning: how many iterations fit a budget, and how much noise a run needs.

Generic over *what one iteration releases*: a kernel describes its releases as lists of
events (or ``(event, count)`` pairs) — ``fixed`` once per chain (e.g. DP-HMC's initial
gradient) and ``per_iteration`` every iteration (DP-HMC: one log-likelihood ratio and
``L`` gradients, Räisä 2021 thesis, Alg. 3 and Thm 11). ``num_chains`` independent chains
on the same data compose, so every count is multiplied by it.

All searches are exact over the accountant's own :math:`\varepsilon`: results never
overshoot the target.

**Speed of numerical accountants** (``"pld"``, ``"prv"``: one evaluation costs 0.1–1 s).
When the accountant offers a coarser version of itself
(:meth:`~pyro_dp.accounting.base.Accountant.search_options`: PLD on a 10× coarser grid,
~10× faster), a search runs in two stages: it first *locates* the answer with the coarse
accountant, then *certifies* it with the requested one, starting from that guess. Both
stages grow a bracket from their starting point to where the line through the last two
points, in :math:`(\log s, \log\varepsilon)` for a noise scale or
:math:`(\log(k+1), \log\varepsilon)` for an iteration count, reaches the target (nearly
linear, so one or two steps), then close it with safeguarded Illinois (regula falsi) steps,
with bisection when they stall: typically 3–6 fine evaluations instead of 20–40 for
doubling and bisection. The coarse guess can be far off (the coarse grid's pessimism grows
with the number of compositions: 2.0 against 1.56 after ~5·10⁵ subsampled steps), which
costs an extra step, never correctness: every comparison with the target in the final stage
is the requested accountant's own, so the guarantees are those of a plain search (if the
coarse stage fails, the search runs on the fine accountant alone). Closed-form accountants
(``"gdp"``, ``"rdp"``, ...) keep the plain doubling-and-bisection search. The PLD adapter
also caches one-release PLDs, so a search over counts builds the mechanism once.

Example: DP-HMC with ``L = 10`` leapfrog steps, ratio noise multiplier 40 and gradient
noise multiplier 120, budget :math:`(1, 10^{-5})`

>>> from pyro_dp.mechanisms import GaussianEvent
>>> per_iter = [(GaussianEvent(40.0), 1), (GaussianEvent(120.0), 10)]
>>> k = max_iterations(1.0, 1e-5, per_iter, fixed=[GaussianEvent(120.0)])
>>> k
54
>>> planned_epsilon(1e-5, k, per_iter, fixed=[GaussianEvent(120.0)]) <= 1.0
True
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, Iterable, List, Optional, Tuple, Union

from pyro_dp.mechanisms import GaussianEvent, PrivacyEvent, PrivacyLedger

from . import gdp, zcdp
from .accountants import GaussianAccountant
from .base import Accountant, check_delta, check_epsilon
from .registry import ACCOUNTANTS, DEFAULT_ACCOUNTANT, get_accountant

__all__ = [
    "planned_ledger",
    "planned_epsilon",
    "max_iterations",
    "calibrate",
    "calibrate_noise_multiplier",
    "zcdp_max_iterations_penalty",
]

EventSpec = Union[PrivacyEvent, Tuple[PrivacyEvent, int]]
#: An event, an ``(event, count)`` pair, or an iterable of either.
Events = Union[EventSpec, Iterable[EventSpec]]
AccountantSpec = Union[str, type]

_MAX_DOUBLINGS = 62
_ULP = 2.0**-52
# Relative width of the first bracket around a coarse guess (the coarse PLD's ε is within
# ~1e-3 of the fine one; the bracket grows 4x per failed probe).
_GUESS_WIDTH = 1e-3


def _events(spec, what: str) -> List[Tuple[PrivacyEvent, int]]:
    """Normalise an event, an ``(event, count)`` pair or an iterable of either."""
    if spec is None:
        return []
    if isinstance(spec, PrivacyEvent) or (
        isinstance(spec, tuple) and len(spec) == 2
        and isinstance(spec[0], PrivacyEvent) and not isinstance(spec[1], PrivacyEvent)
    ):
        spec = [spec]
    out = []
    for item in spec:
        if isinstance(item, PrivacyEvent):
            item = (item, 1)
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], PrivacyEvent)):
            raise TypeError(f"{what} must hold PrivacyEvents or (event, count) pairs, got {item!r}")
        event, count = item
        if isinstance(count, bool) or not isinstance(count, numbers.Real) or int(count) != count or count < 0:
            raise ValueError(f"counts in {what} must be non-negative integers, got {count!r}")
        out.append((event, int(count)))
    return out


def _positive_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not (
        isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
    ):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def planned_ledger(
    num_iterations: int,
    per_iteration: Events,
    *,
    fixed: Events = (),
    num_chains: int = 1,
    relation: str = "substitute",
) -> PrivacyLedger:
    """The ledger of ``num_chains`` chains that each release ``fixed`` once and
    ``per_iteration`` ``num_iterations`` times.

    >>> planned_ledger(3, GaussianEvent(2.0), num_chains=2).entries
    (LedgerEntry(event=GaussianEvent(noise_multiplier=2.0), count=6),)
    """
    k = _positive_int(num_iterations, "num_iterations", 0)
    chains = _positive_int(num_chains, "num_chains", 1)
    ledger = PrivacyLedger(relation)
    for event, count in _events(fixed, "fixed"):
        ledger.record(event, count * chains)
    for event, count in _events(per_iteration, "per_iteration"):
        ledger.record(event, count * k * chains)
    return ledger


def planned_epsilon(
    delta: float,
    num_iterations: int,
    per_iteration: Events,
    *,
    fixed: Events = (),
    accountant: AccountantSpec = DEFAULT_ACCOUNTANT,
    num_chains: int = 1,
    relation: str = "substitute",
    accountant_kwargs: Optional[dict] = None,
) -> float:
    r""":math:`\varepsilon(\delta)` of the planned run (see :func:`planned_ledger`).

    >>> round(planned_epsilon(1e-5, 100, GaussianEvent(10.0)), 4)
    4.3772
    """
    ledger = planned_ledger(num_iterations, per_iteration, fixed=fixed, num_chains=num_chains,
                            relation=relation)
    return get_accountant(accountant, ledger, **(accountant_kwargs or {})).get_epsilon(delta)


def max_iterations(
    epsilon: float,
    delta: float,
    per_iteration: Events,
    *,
    fixed: Events = (),
    accountant: AccountantSpec = DEFAULT_ACCOUNTANT,
    num_chains: int = 1,
    relation: str = "substitute",
    accountant_kwargs: Optional[dict] = None,
    cap: Optional[int] = None,
) -> int:
    r"""Largest ``k`` such that ``fixed`` once plus ``k`` times ``per_iteration`` (per chain,
    ``num_chains`` chains) is :math:`(\varepsilon,\delta)`-DP under ``accountant``.

    Exact integer search (doubling, then bisection) on the accountant's own
    :math:`\varepsilon`, so ``k`` fits and ``k + 1`` does not. Raises ``ValueError`` if
    ``fixed`` alone exceeds the budget or if iterations cost nothing.

    ``cap``: search no further than ``cap`` (return ``cap`` when it fits; no count above it is
    evaluated). A caller that needs only "at least this many" sets it: a numerical accountant
    composing millions of iterations takes seconds to minutes (a subsampled Gaussian with a
    generous budget fits millions), and the answer beyond the run is never used.

    >>> max_iterations(1.0, 1e-5, GaussianEvent(10.0))  # thesis Thm 6, nm = tau n^alpha = 10
    7
    >>> max_iterations(1.0, 1e-5, GaussianEvent(10.0), cap=5)
    5
    """
    eps_t, delta = check_epsilon(epsilon), check_delta(delta)
    per = _events(per_iteration, "per_iteration")
    if not any(c for _, c in per):
        raise ValueError("per_iteration must release at least one event")

    if cap is not None:
        cap = int(cap)
        if cap < 0:
            raise ValueError(f"cap must be a non-negative integer, got {cap}")

    def eps_with(kwargs):
        def eps_of(k: int) -> float:
            if cap is not None and k > cap:
                return math.inf  # never evaluated: the search stops at the cap (non-decreasing still)
            return planned_epsilon(delta, k, per, fixed=fixed, accountant=accountant, num_chains=num_chains,
                                   relation=relation, accountant_kwargs=kwargs)
        return eps_of

    fine = dict(accountant_kwargs or {})
    coarse = _search_options(accountant, fine)
    if coarse is None:  # closed forms: plain doubling and bisection
        eps_of = eps_with(fine)
        return _integer_search(lambda k: eps_of(k) <= eps_t)
    guess = None
    try:  # locate with the coarse accountant (module doc) ...
        guess = _secant_count(eps_with(coarse), eps_t)
    except ValueError:
        guess = None
    return _secant_count(eps_with(fine), eps_t, start=guess)  # ... certify with the requested one


def _search_options(accountant, options: dict) -> Optional[dict]:
    """The coarse accountant's options for a two-stage search, or ``None``."""
    cls = accountant if isinstance(accountant, type) else ACCOUNTANTS.get(accountant)
    if cls is None or not issubclass(cls, Accountant):
        return None
    return cls.search_options(options)


_FIXED = "the fixed releases alone exceed the privacy budget"
_FREE = "per_iteration releases cost no privacy: the number of iterations is unbounded"


def _integer_search(fits: Callable[[int], bool]) -> int:
    """Largest ``k >= 0`` with ``fits(k)`` (``fits`` non-increasing): doubling, then bisection."""
    if not fits(0):
        raise ValueError(_FIXED)
    lo, hi = 0, 1
    for _ in range(_MAX_DOUBLINGS):
        if not fits(hi):
            break
        lo, hi = hi, 2 * hi
    else:
        raise ValueError(_FREE)
    while hi - lo > 1:  # invariant: fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _log_ratio(e: float, eps_t: float) -> float:
    """``log(e / eps_t)``, the ordinate of the secant steps (``±inf`` at 0 and ``inf``);
    whether a point fits is always decided on ``e`` itself."""
    if e <= 0:
        return -math.inf
    return math.inf if math.isinf(e) else math.log(e / eps_t)


def _secant_root(x0: float, g0: float, x1: float, g1: float) -> Optional[float]:
    """Abscissa where the line through ``(x0, g0)``, ``(x1, g1)`` crosses 0 (``None`` if
    the line is flat or a value is infinite)."""
    if not (math.isfinite(g0) and math.isfinite(g1)) or g0 == g1:
        return None
    return x1 - g1 * (x1 - x0) / (g1 - g0)


def _secant_count(eps_of: Callable[[int], float], eps_t: float, start: Optional[int] = None) -> int:
    """Largest ``k >= 0`` with ``eps_of(k) <= eps_t`` (``eps_of`` non-decreasing), in few
    evaluations: the bracket grows from ``start`` (a coarse guess; else from 0 and 1) to the
    point where the line through the last two points in ``(log(k+1), log eps)`` reaches the
    target, at least geometrically, then closes by safeguarded Illinois steps."""
    u = math.log1p
    w = 1.0 if start is None else _GUESS_WIDTH
    k0 = 0 if start is None else max(int(start), 0)
    e0 = eps_of(k0)
    if e0 <= eps_t:  # grow upwards until hi does not fit
        lo, e_lo = k0, e0
        hi = lo + max(1, math.ceil(lo * w))
        e_hi = eps_of(hi)
        while e_hi <= eps_t:
            x = _secant_root(u(lo), _log_ratio(e_lo, eps_t), u(hi), _log_ratio(e_hi, eps_t))
            lo, e_lo, w = hi, e_hi, min(4 * w, 1.0)
            step = max(1, math.ceil(lo * w))
            if x is not None and x > u(lo):
                step = max(step, math.ceil(math.expm1(min(x, 700.0)) * (1 + _GUESS_WIDTH)) - lo)
            hi = lo + min(step, 1024 * (lo + 1))
            if hi >= 2**_MAX_DOUBLINGS:
                raise ValueError(_FREE)
            e_hi = eps_of(hi)
    else:  # grow downwards until lo fits
        hi, e_hi = k0, e0
        if hi == 0:
            raise ValueError(_FIXED)
        lo = hi - max(1, math.ceil(hi * w / (1 + w)))
        e_lo = eps_of(lo)
        while e_lo > eps_t:
            if lo == 0:
                raise ValueError(_FIXED)
            x = _secant_root(u(lo), _log_ratio(e_lo, eps_t), u(hi), _log_ratio(e_hi, eps_t))
            hi, e_hi, w = lo, e_lo, min(4 * w, 1.0)
            step = max(1, math.ceil(hi * w / (1 + w)))
            if x is not None and x < u(hi):
                step = max(step, hi - math.floor(math.expm1(max(x, 0.0)) / (1 + _GUESS_WIDTH)))
            lo = max(0, hi - step)
            e_lo = eps_of(lo)
    g_lo, g_hi = _log_ratio(e_lo, eps_t), _log_ratio(e_hi, eps_t)
    side, stalls, width = 0, 0, hi - lo
    while hi - lo > 1:  # invariant: eps_of(lo) <= eps_t < eps_of(hi)
        x = None if stalls >= 2 else _secant_root(u(lo), g_lo, u(hi), g_hi)
        if x is None:
            mid, stalls = (lo + hi) // 2, 0  # bisection safeguard
        else:
            mid = min(max(round(math.expm1(x)), lo + 1), hi - 1)
        e = eps_of(mid)
        if e <= eps_t:
            lo, g_lo = mid, _log_ratio(e, eps_t)
            if side == 1:
                g_hi /= 2  # Illinois: hi was kept twice, halve its weight
            side = 1
        else:
            hi, g_hi = mid, _log_ratio(e, eps_t)
            if side == -1:
                g_lo /= 2
            side = -1
        stalls = stalls + 1 if 2 * (hi - lo) > width else 0
        width = hi - lo
    return lo


def calibrate(
    epsilon: float,
    delta: float,
    num_iterations: int,
    events_for_scale: Callable[[float], Tuple[Events, Events]],
    *,
    accountant: AccountantSpec = DEFAULT_ACCOUNTANT,
    num_chains: int = 1,
    relation: str = "substitute",
    accountant_kwargs: Optional[dict] = None,
    rtol: float = 1e-9,
    at_least: Optional[float] = None,
) -> float:
    r"""Smallest noise scale ``s`` (within relative ``rtol``, rounded **up**) such that the
    run described by ``events_for_scale(s) -> (fixed, per_iteration)`` for
    ``num_iterations`` iterations is :math:`(\varepsilon,\delta)`-DP. The result is verified:
    its :math:`\varepsilon` is at most ``epsilon``. :math:`\varepsilon` must decrease as
    ``s`` grows (more noise, more privacy).

    >>> def dp_hmc(tau):  # thesis Thm 11 with n = 100: nm = tau * sqrt(n) for both releases
    ...     nm = tau * 10.0
    ...     return [GaussianEvent(nm)], [(GaussianEvent(nm), 1), (GaussianEvent(nm), 5)]
    >>> tau = calibrate(1.0, 1e-5, 50, dp_hmc)
    >>> round(tau, 4), planned_epsilon(1e-5, 50, dp_hmc(tau)[1], fixed=dp_hmc(tau)[0]) <= 1.0
    (6.4724, True)

    ``at_least``: the caller uses the larger of the result and this scale (a kernel whose own
    noise may already exceed what the budget needs, DP-SGLD's Langevin noise): ``max(at_least,
    s)``, found with one evaluation when ``at_least`` fits (no search: a large budget makes the
    search's small scales slow to account, 48 s at epsilon = 10^4 with the PLD accountant).

    >>> calibrate(1.0, 1e-5, 50, dp_hmc, at_least=10.0), round(calibrate(1.0, 1e-5, 50, dp_hmc, at_least=1.0), 4)
    (10.0, 6.4724)
    """
    eps_t, delta = check_epsilon(epsilon), check_delta(delta)
    k = _positive_int(num_iterations, "num_iterations", 1)
    if not callable(events_for_scale):
        raise TypeError("events_for_scale must be a callable scale -> (fixed, per_iteration)")
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must be in (0, 1), got {rtol!r}")

    def eps_with(kwargs):
        def eps_of(s: float) -> float:
            fixed, per = events_for_scale(s)
            return planned_epsilon(delta, k, per, fixed=fixed, accountant=accountant, num_chains=num_chains,
                                   relation=relation, accountant_kwargs=kwargs)
        return eps_of

    fine = dict(accountant_kwargs or {})
    if at_least is not None:
        at_least = float(at_least)
        if not (at_least > 0 and math.isfinite(at_least)):
            raise ValueError(f"at_least must be a positive finite scale, got {at_least!r}")
        if eps_with(fine)(at_least) <= eps_t:  # epsilon decreases in s: the smallest fitting s is below
            return at_least
    coarse = _search_options(accountant, fine)
    try:
        if coarse is None:  # closed forms: plain bisection
            eps_of = eps_with(fine)
            scale = _bisect_scale(lambda s: eps_of(s) <= eps_t, rtol)
        else:
            guess = None
            try:  # locate with the coarse accountant (module doc) ...
                guess = _secant_scale(eps_with(coarse), eps_t, max(rtol, 1e-4))
            except ValueError:
                guess = None
            scale = _secant_scale(eps_with(fine), eps_t, rtol, start=guess)  # ... certify with the requested one
        return scale if at_least is None else max(scale, at_least)
    except OverflowError:  # dp_accounting squares the noise scale: only reached when no scale fits (s10 audit)
        raise ValueError(f"{_NO_SCALE}: the search reached noise scales whose square overflows") from None


_NO_SCALE = "no noise scale reaches the budget (do fixed releases exceed it?)"
_ANY_SCALE = "the budget holds at every noise scale: the events ignore the scale"


def _bisect_scale(fits: Callable[[float], bool], rtol: float) -> float:
    """Smallest ``s`` with ``fits(s)`` within relative ``rtol`` (the upper end of the final
    bracket): a bracket from [0.5, 1] by halving or doubling, then geometric bisection."""
    lo, hi = 0.5, 1.0
    if fits(hi):
        while fits(lo):
            lo, hi = lo / 2, lo
            if lo < 1e-300:
                raise ValueError(_ANY_SCALE)
    else:
        lo, hi = hi, 2.0
        while not fits(hi):
            lo, hi = hi, hi * 2
            if hi > 1e300:
                raise ValueError(_NO_SCALE)
    while hi / lo - 1 > rtol:  # invariant: not fits(lo) and fits(hi)
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:
            break
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def _secant_scale(eps_of: Callable[[float], float], eps_t: float, rtol: float,
                  start: Optional[float] = None) -> float:
    """Like :func:`_bisect_scale` for ``fits(s) = eps_of(s) <= eps_t``, with fewer
    evaluations: the bracket is grown around ``start`` (or from [0.5, 1]) and closed by a
    safeguarded Illinois step on ``log eps`` against ``log s`` (module doc)."""
    def g(e: float) -> float:
        return _log_ratio(e, eps_t)

    if start is None:
        lo, hi, w = 0.5, 1.0, 1.0
    else:
        lo, hi, w = start / (1 + _GUESS_WIDTH), start, _GUESS_WIDTH
    e_hi = eps_of(hi)
    if e_hi <= eps_t:  # grow downwards until lo does not fit
        e_lo = eps_of(lo)
        while e_lo <= eps_t:
            x = _secant_root(math.log(lo), g(e_lo), math.log(hi), g(e_hi))
            hi, e_hi, w = lo, e_lo, min(4 * w, 1.0)
            lo = hi / (1 + w)
            if x is not None and x < math.log(hi):  # go to the extrapolated root, past it a little
                lo = min(lo, max(math.exp(max(x, -700.0)) / (1 + _GUESS_WIDTH), hi / 1024))
            if lo < 1e-300:
                raise ValueError(_ANY_SCALE)
            e_lo = eps_of(lo)
    else:  # grow upwards until hi fits
        lo, e_lo = hi, e_hi
        hi = lo * (1 + w)
        e_hi = eps_of(hi)
        while e_hi > eps_t:
            x = _secant_root(math.log(lo), g(e_lo), math.log(hi), g(e_hi))
            lo, e_lo, w = hi, e_hi, min(4 * w, 1.0)
            hi = lo * (1 + w)
            if x is not None and x > math.log(lo):
                hi = max(hi, min(math.exp(min(x, 700.0)) * (1 + _GUESS_WIDTH), lo * 1024))
            if hi > 1e300:
                raise ValueError(_NO_SCALE)
            e_hi = eps_of(hi)
    g_lo, g_hi = g(e_lo), g(e_hi)
    margin = math.log1p(rtol) / 4
    side, stalls, width = 0, 0, math.log(hi / lo)
    while hi / lo - 1 > rtol:  # invariant: eps_of(lo) > eps_t >= eps_of(hi)
        a, b = math.log(lo), math.log(hi)
        x = None if stalls >= 2 else _secant_root(a, g_lo, b, g_hi)  # regula falsi in (log s, log eps)
        if x is None:
            x, stalls = 0.5 * (a + b), 0  # bisection safeguard
        else:
            x = min(max(x, a + margin), b - margin)
        mid = math.exp(x)
        if not lo < mid < hi:
            break
        e = eps_of(mid)
        if e <= eps_t:
            hi, g_hi = mid, g(e)
            if side == 1:
                g_lo /= 2  # Illinois: lo was kept twice, halve its weight
            side = 1
        else:
            lo, g_lo = mid, g(e)
            if side == -1:
                g_hi /= 2
            side = -1
        new_width = math.log(hi / lo)
        stalls = stalls + 1 if new_width > 0.5 * width else 0
        width = new_width
    return hi


def calibrate_noise_multiplier(
    epsilon: float,
    delta: float,
    num_releases: int,
    *,
    accountant: AccountantSpec = DEFAULT_ACCOUNTANT,
    num_chains: int = 1,
    relation: str = "substitute",
    accountant_kwargs: Optional[dict] = None,
    rtol: float = 1e-9,
) -> float:
    r"""Smallest noise multiplier (rounded up, verified) for ``num_releases`` Gaussian
    releases per chain to be :math:`(\varepsilon,\delta)`-DP.

    With ``"gdp"`` it is the closed form :math:`\sqrt{k}/\mu^*(\varepsilon,\delta)` (Dong,
    Roth & Su 2019, Cor. 2.13; Balle & Wang 2018) bumped up until verified; with other
    accountants it is :func:`calibrate`.

    >>> round(calibrate_noise_multiplier(1.0, 1e-5, 100), 4)
    37.3063
    """
    eps_t, delta = check_epsilon(epsilon), check_delta(delta)
    k = _positive_int(num_releases, "num_releases", 1)
    chains = _positive_int(num_chains, "num_chains", 1)
    if accountant in ("gdp", GaussianAccountant):
        nm = math.sqrt(k * chains) / gdp.gdp_mu(eps_t, delta)
        step = nm * _ULP
        while planned_epsilon(delta, k, GaussianEvent(nm), num_chains=chains, relation=relation) > eps_t:
            nm, step = nm + step, 2 * step
        return nm
    return calibrate(eps_t, delta, k, lambda s: ((), [GaussianEvent(s)]), accountant=accountant,
                     num_chains=chains, relation=relation, accountant_kwargs=accountant_kwargs, rtol=rtol)


def zcdp_max_iterations_penalty(epsilon: float, delta: float, *, tau: float, n: int, alpha: float) -> int:
    r"""Räisä 2021 thesis, Thm 5 (Yildirim & Ermiş 2019): DP penalty with noise variance
    :math:`\tau^2 n^{2\alpha} c^2(\theta,\theta')` may run
    :math:`k = \lfloor 2\tau^2 n^{2\alpha}\rho \rfloor` iterations, with
    :math:`\rho = (\sqrt{\varepsilon-\ln\delta}-\sqrt{-\ln\delta})^2`. Equivalently each
    iteration is a Gaussian release with noise multiplier :math:`\tau n^{\alpha}`.

    >>> zcdp_max_iterations_penalty(1.0, 1e-5, tau=1.0, n=100, alpha=0.5)
    4
    """
    tau, alpha = float(tau), float(alpha)
    if not (tau > 0 and alpha > 0):
        raise ValueError("tau and alpha must be > 0")
    n = _positive_int(n, "n", 1)
    rho = zcdp.zcdp_rho_budget(check_epsilon(epsilon), check_delta(delta))
    return int(math.floor(2.0 * tau * tau * n ** (2 * alpha) * rho))
