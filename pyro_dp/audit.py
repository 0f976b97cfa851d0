r"""Empirical privacy audit: a statistically valid **lower bound** on ε, measured by running
a kernel many times on two neighbouring data sets.

An :math:`(\varepsilon, \delta)`-DP mechanism :math:`M` satisfies, for every pair of
neighbouring data sets :math:`D, D'` and every event :math:`S` of its output,

.. math::
    P(M(D) \in S) \le e^{\varepsilon} P(M(D') \in S) + \delta,
    \qquad\text{so}\qquad
    \varepsilon \ge \log\frac{P(M(D)\in S) - \delta}{P(M(D')\in S)}.

The audit (Jagielski, Ullman & Oprea 2020, "Auditing differentially private machine
learning: how private is private SGD?", §3 and Alg. 2; Nasr, Song, Thakurta, Papernot &
Carlini 2021, "Adversary instantiation", §3) runs the kernel ``num_runs`` times on
:math:`D` and ``num_runs`` times on :math:`D'` — every run with the same *public* seed
(proposals, momenta, accept uniforms) and fresh *secret* noise from OS entropy, so that only
the releases differ between runs — reduces each output to a real *score*, and takes
threshold events :math:`S = \{\text{score} > t\}` and their complements. The probabilities
are unknown, so it replaces them by exact binomial (Clopper–Pearson) confidence bounds — a
lower bound :math:`\underline p_0` for the numerator and an upper bound :math:`\overline p_1`
for the denominator:

.. math::
    \hat\varepsilon_{\rm lb} = \max\Big(0,\ \log\frac{\underline p_0 - \delta}{\overline p_1}\Big).

If every bound used holds, :math:`\hat\varepsilon_{\rm lb} \le \varepsilon` for any
mechanism that is :math:`(\varepsilon,\delta)`-DP. The bounds hold jointly with probability at
least ``confidence`` (see :func:`epsilon_lower_bound` for how the choice of the threshold is
paid for), so **a lower bound above the reported ε is, at that confidence, proof that the
privacy claim is false**. The converse does not hold: an audit that finds nothing proves
nothing — it only failed to find a violation with this statistic, these data sets and this
many runs.

>>> import numpy as np
>>> rr = lambda p, n, rng: (rng.random(n) < p).astype(float)  # randomized response, eps = log 3
>>> rng = np.random.default_rng(0)
>>> lb, t, direction = epsilon_lower_bound(rr(0.75, 20_000, rng), rr(0.25, 20_000, rng), delta=0.0,
...                                        thresholds=[0.5])
>>> bool(0.9 < lb < np.log(3)), t, direction
(True, 0.5, "P_D(s>t) / P_D'(s>t)")
"""
from __future__ import annotations

import inspect
import math
from typing import Callable, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import pyro
import torch
from scipy.stats import beta as _beta

from .kernels.base import DPKernel

__all__ = ["AuditResult", "audit", "clopper_pearson", "epsilon_lower_bound"]

#: The four threshold tests, as (name, event "score > t"?, D in the numerator?).
_TESTS = (
    ("P_D(s>t) / P_D'(s>t)", True, True),
    ("P_D(s<=t) / P_D'(s<=t)", False, True),
    ("P_D'(s>t) / P_D(s>t)", True, False),
    ("P_D'(s<=t) / P_D(s<=t)", False, False),
)
_STATISTICS = ("accept", "sample")


def _check_unit(name: str, value, *, closed_low: bool) -> float:
    """A real number in (0, 1), or [0, 1) with ``closed_low``; else TypeError/ValueError naming it."""
    interval = "[0, 1)" if closed_low else "(0, 1)"
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be a number in {interval}, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number in {interval}, got {value!r}") from None
    if not ((0.0 <= v) if closed_low else (0.0 < v)) or not v < 1.0:
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return v


def check_confidence(confidence) -> float:
    """``confidence`` as a float in (0, 1), else TypeError/ValueError (also
    :mod:`pyro_dp.release_audit`'s)."""
    return _check_unit("confidence", confidence, closed_low=False)


def _check_delta(delta) -> float:
    return _check_unit("delta", delta, closed_low=True)


# --------------------------------------------------------------------------- statistics


def clopper_pearson(k, n, confidence: float = 0.95) -> Tuple[float, float]:
    r"""Two-sided exact (Clopper & Pearson 1934) confidence interval for a binomial
    proportion after ``k`` successes in ``n`` trials.

    :math:`[\,B(\alpha/2;\,k,\,n-k+1),\ B(1-\alpha/2;\,k+1,\,n-k)\,]` with :math:`B(q; a, b)`
    the ``q``-quantile of the Beta(a, b) distribution and :math:`\alpha = 1 -` ``confidence``
    (the lower end is 0 when ``k = 0``, the upper end 1 when ``k = n``). Each end fails with
    probability at most :math:`\alpha/2`, for every true proportion.

    >>> lo, hi = clopper_pearson(0, 100, 0.95)  # closed form: hi = 1 - (alpha/2)^(1/n)
    >>> lo, round(hi, 6), round(1 - 0.025 ** (1 / 100), 6)
    (0.0, 0.036217, 0.036217)
    >>> [round(x, 4) for x in clopper_pearson(5, 10, 0.95)]
    [0.1871, 0.8129]
    """
    for name, v in (("k", k), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {v!r}")
    k, n = int(k), int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, n] = [0, {n}], got {k}")
    alpha = 1.0 - check_confidence(confidence)
    lo, hi = _cp_bounds(np.array([k]), n, alpha)
    return float(lo[0]), float(hi[0])


def _cp_bounds(k: np.ndarray, n: int, alpha: float) -> Tuple[np.ndarray, np.ndarray]:
    """Vectorised Clopper–Pearson: each end at one-sided level ``alpha / 2``."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, _beta.ppf(alpha / 2, np.maximum(k, 1), n - k + 1), 0.0)
        hi = np.where(k < n, _beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1)), 1.0)
    return lo, hi


def _as_scores(name: str, scores) -> np.ndarray:
    s = np.asarray(scores.detach().cpu() if torch.is_tensor(scores) else scores)
    if s.dtype == object or not (np.issubdtype(s.dtype, np.number) or s.dtype == bool):
        raise TypeError(f"{name} must be a 1-d array of real numbers")
    if s.ndim != 1:
        raise ValueError(f"{name} must be 1-d, got shape {s.shape}")
    if s.size < 2:
        raise ValueError(f"{name} needs at least 2 scores, got {s.size}")
    s = s.astype(float)
    # NaN -> +inf: a fixed post-processing of the output, so the test stays valid
    return np.where(np.isnan(s), np.inf, s)


def _check_thresholds(thresholds) -> Optional[np.ndarray]:
    if thresholds is None:
        return None
    try:
        t = np.atleast_1d(np.asarray(thresholds, dtype=float))
    except (TypeError, ValueError):
        raise TypeError(f"thresholds must be a sequence of numbers, got {thresholds!r}") from None
    if t.ndim != 1 or t.size == 0 or bool(np.isnan(t).any()):
        raise ValueError("thresholds must be a non-empty 1-d sequence of numbers (not NaN)")
    return t


class _Bound(NamedTuple):
    epsilon: float
    threshold: float
    direction: Optional[str]


def _log_ratios(k0, n0, k1, n1, alpha, delta) -> np.ndarray:
    """``[len(k), 4]`` log ratio lower bounds of the four tests of :data:`_TESTS`, with each
    Clopper-Pearson end at one-sided level ``alpha / 2``; ``-inf`` where the numerator's
    lower bound does not exceed ``delta``."""
    lo0, hi0 = _cp_bounds(k0, n0, alpha)  # P_D(s > t)
    lo1, hi1 = _cp_bounds(k1, n1, alpha)  # P_D'(s > t)
    num_den = [
        (lo0, hi1),  # P_D(s>t) >= lo0, P_D'(s>t) <= hi1
        (1 - hi0, 1 - lo1),  # P_D(s<=t) >= 1 - hi0, P_D'(s<=t) <= 1 - lo1
        (lo1, hi0),
        (1 - hi1, 1 - lo0),
    ]
    out = np.full((len(lo0), 4), -np.inf)
    for j, (num, den) in enumerate(num_den):
        ok = (num - delta > 0) & (den > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[:, j] = np.where(ok, np.log(np.where(ok, num - delta, 1.0) / np.where(ok, den, 1.0)), -np.inf)
    return out


def _count_above(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    s = np.sort(scores)
    return len(s) - np.searchsorted(s, thresholds, side="right")


def _candidate_thresholds(pooled: np.ndarray) -> np.ndarray:
    """Midpoints between consecutive distinct pooled scores (the lower one next to an infinity):
    every split of the pooled sample into 'above' and 'not above'."""
    u = np.unique(pooled)
    if len(u) < 2:
        return np.zeros(0)
    a, b = u[:-1], u[1:]
    both = np.isfinite(a) & np.isfinite(b)
    return np.where(both, a / 2 + np.where(both, b, 0.0) / 2, a)


def _lower_bound(s0, s1, delta, confidence, thresholds) -> _Bound:
    alpha = 1.0 - confidence
    if thresholds is not None:
        # Bonferroni over the m fixed thresholds: 4 one-sided bounds per threshold (lo and hi for
        # D and D'), each at level alpha / (4m), i.e. two-sided intervals at 1 - alpha / (2m).
        t = np.asarray(thresholds, dtype=float)
        k0, k1 = _count_above(s0, t), _count_above(s1, t)
        r = _log_ratios(k0, len(s0), k1, len(s1), alpha / (2 * len(t)), delta)
        i, j = np.unravel_index(int(np.argmax(r)), r.shape)
        best = float(r[i, j])
        return _Bound(max(0.0, best) if math.isfinite(best) else 0.0, float(t[i]), _TESTS[j][0])
    # Held-out split: choose (threshold, test) on the first half, evaluate it on the second.
    h0, h1 = len(s0) // 2, len(s1) // 2
    sel0, sel1, ev0, ev1 = s0[:h0], s1[:h1], s0[h0:], s1[h1:]
    cand = _candidate_thresholds(np.concatenate([sel0, sel1]))
    if len(cand) == 0:
        return _Bound(0.0, math.nan, None)
    # selection criterion: the same bound at the same level on this half, which does not reward
    # thresholds far in a tail with tiny counts (any rule that sees only this half is valid)
    r = _log_ratios(_count_above(sel0, cand), h0, _count_above(sel1, cand), h1, alpha, delta)
    i, j = np.unravel_index(int(np.argmax(r)), r.shape)
    t = float(cand[i])
    name, above, d_first = _TESTS[j]
    # the one chosen test, on data it has not seen: two one-sided bounds at alpha / 2 each
    k0, k1 = int(_count_above(ev0, np.array([t]))[0]), int(_count_above(ev1, np.array([t]))[0])
    if not above:
        k0, k1 = len(ev0) - k0, len(ev1) - k1
    (k_num, n_num), (k_den, n_den) = ((k0, len(ev0)), (k1, len(ev1))) if d_first else ((k1, len(ev1)), (k0, len(ev0)))
    lo = _cp_bounds(np.array([k_num]), n_num, alpha)[0][0]
    hi = _cp_bounds(np.array([k_den]), n_den, alpha)[1][0]
    eps = math.log((lo - delta) / hi) if lo - delta > 0 and hi > 0 else 0.0
    return _Bound(max(0.0, eps), t, name)


def epsilon_lower_bound(
    scores_d,
    scores_dprime,
    *,
    delta: float,
    confidence: float = 0.95,
    thresholds: Optional[Sequence[float]] = None,
) -> Tuple[float, float, Optional[str]]:
    r"""A lower bound on ε, valid with probability ``confidence``, from the scores of
    independent runs on :math:`D` (``scores_d``) and :math:`D'` (``scores_dprime``).

    For a threshold :math:`t`, let :math:`p_0 = P_D(s > t)` and :math:`p_1 = P_{D'}(s > t)`.
    Each of the four tests — the event :math:`\{s > t\}` or :math:`\{s \le t\}`, with
    :math:`D` or :math:`D'` in the numerator — gives
    :math:`\log((\underline{p}_{\rm num} - \delta)/\overline{p}_{\rm den})`, where
    :math:`\underline p, \overline p` are Clopper–Pearson bounds (:func:`clopper_pearson`).
    The result is the largest, clamped at 0 (no evidence).

    **Statistical validity.** The bound exceeds the true ε of an :math:`(\varepsilon,\delta)`-DP
    mechanism only if one of the confidence bounds it used fails. The threshold search is paid
    for in one of two ways:

    * ``thresholds`` given (a set fixed *before* seeing the scores, e.g. ``[0.5]`` for a 0/1
      accept bit): **Bonferroni**. All runs are used; with :math:`m` thresholds, each of the
      :math:`4m` one-sided bounds (lower and upper, for :math:`D` and :math:`D'`, per
      threshold) is taken at level :math:`(1-\mathrm{confidence})/(4m)`, so all hold at once
      with probability :math:`\ge` ``confidence`` and the maximum over thresholds and the four
      tests is valid.
    * ``thresholds=None``: **held-out split**. The threshold (among the midpoints of the
      distinct scores) and the test are chosen on the first half of each sample, maximising
      the same bound there; the bound is then computed for that one test on the second half,
      which played no part in the choice, with each of its two one-sided bounds at level
      :math:`(1-\mathrm{confidence})/2`. Runs are i.i.d., so the halves are independent.

    NaN scores count as :math:`+\infty` (a fixed post-processing of the output).

    :param scores_d, scores_dprime: 1-d arrays (at least 2 scores each; lengths may differ).
    :param float delta: the δ of the claim being audited, in [0, 1).
    :param float confidence: in (0, 1).
    :param thresholds: optional fixed thresholds (see above).
    :returns: ``(epsilon_lower_bound, threshold, direction)``; ``direction`` names the test,
        e.g. ``"P_D(s>t) / P_D'(s>t)"``; ``(0.0, nan, None)`` when no threshold separates the
        selection half.

    >>> import numpy as np
    >>> same = np.arange(100.0) % 2
    >>> epsilon_lower_bound(same, same, delta=1e-5)[0]  # no evidence: clamped to 0
    0.0
    >>> lb, t, d = epsilon_lower_bound(np.ones(200), np.zeros(200), delta=1e-5, thresholds=[0.5])
    >>> round(lb, 2)  # perfect separation: log(lo/hi) with lo = 0.0125**(1/200) = 1 - hi
    3.81
    """
    s0, s1 = _as_scores("scores_d", scores_d), _as_scores("scores_dprime", scores_dprime)
    delta = _check_delta(delta)
    confidence = check_confidence(confidence)
    b = _lower_bound(s0, s1, delta, confidence, _check_thresholds(thresholds))
    return b.epsilon, b.threshold, b.direction


# --------------------------------------------------------------------------- the audit


class AuditResult(NamedTuple):
    r"""Outcome of :func:`audit`.

    :ivar epsilon_lower_bound: the empirical lower bound on ε (valid at ``confidence``).
    :ivar reported_epsilon: the ε the kernel's ledger reports for one run, at ``delta``.
    :ivar delta: δ of both.
    :ivar confidence: confidence level of the lower bound.
    :ivar num_runs: independent runs per data set.
    :ivar threshold: threshold :math:`t` of the test that gave the bound.
    :ivar counts: ``(k_D, k_D')``: runs with score :math:`> t` on :math:`D` and on
        :math:`D'`, out of ``num_runs`` each (for ``"accept"``: the accepted runs). With the
        held-out split only the second half of the runs enters the bound.
    :ivar direction: the test that gave the bound (see :func:`epsilon_lower_bound`).

    ``passed`` is ``epsilon_lower_bound <= reported_epsilon``: no violation found (which
    does **not** prove the claim; a failure, at the stated confidence, disproves it).

    >>> r = AuditResult(0.2, 1.0, 1e-5, 0.95, 500, 0.5, (260, 240), "P_D(s>t) / P_D'(s>t)")
    >>> r.passed
    True
    >>> print(r)  # doctest: +NORMALIZE_WHITESPACE
    privacy audit PASSED: no violation found (this does not prove the claim)
      empirical lower bound  eps >= 0.2 (95% confidence, 500 runs per data set)
      reported by the ledger eps = 1 at delta = 1e-05
      test P_D(s>t) / P_D'(s>t) with t = 0.5: 260/500 runs with score > t on D, 240/500 on D'
    """

    epsilon_lower_bound: float
    reported_epsilon: float
    delta: float
    confidence: float
    num_runs: int
    threshold: float
    counts: Tuple[int, int]
    direction: Optional[str] = None

    @property
    def passed(self) -> bool:
        """``epsilon_lower_bound <= reported_epsilon``."""
        return self.epsilon_lower_bound <= self.reported_epsilon

    def __str__(self) -> str:
        head = (
            "privacy audit PASSED: no violation found (this does not prove the claim)"
            if self.passed
            else "privacy audit FAILED: the lower bound exceeds the reported epsilon (the privacy claim is false "
            f"at {self.confidence:.0%} confidence)"
        )
        n = self.num_runs
        lines = [
            head,
            f"  empirical lower bound  eps >= {self.epsilon_lower_bound:.4g} ({self.confidence:.0%} confidence, "
            f"{n} runs per data set)",
            f"  reported by the ledger eps = {self.reported_epsilon:.4g} at delta = {self.delta:.3g}",
        ]
        if self.direction is not None:
            lines.append(
                f"  test {self.direction} with t = {self.threshold:.4g}: {self.counts[0]}/{n} runs with score > t "
                f"on D, {self.counts[1]}/{n} on D'"
            )
        return "\n".join(lines)


def statistic_fn(statistic) -> Callable:
    """``statistic(kernel, before, after)``: ``"accept"``, ``"sample"`` or the caller's callable
    (the audit runners', here and in :mod:`pyro_dp.testing`)."""
    if isinstance(statistic, str):
        if statistic == "accept":
            return lambda k, before, after: float(not torch.equal(k.lik.flatten(before), k.lik.flatten(after)))
        if statistic == "sample":
            # the model's own unconstrained coordinates, not the kernel's (a preconditioned chain's
            # u hides its released shift and scales: pyro_dp.preconditioning)
            return lambda k, before, after: float(k.lik.to_unconstrained(k.lik.flatten(after))[0])
        raise ValueError(f"statistic must be one of {_STATISTICS} or a callable, got {statistic!r}")
    if not callable(statistic):
        raise TypeError(f"statistic must be one of {_STATISTICS} or a callable, got {type(statistic).__name__}")
    return statistic


def factory_caller(factory) -> Callable[[], object]:
    """``factory()``; refuses a factory that needs arguments (the run index of the old design)."""
    if not callable(factory):
        raise TypeError(f"kernel_factory must be callable, got {type(factory).__name__}")
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # no signature (some builtins): call it without arguments
        return factory
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind in positional and p.default is inspect.Parameter.empty for p in params):
        raise TypeError(
            "kernel_factory must take no argument: every run shares one public seed (audit(..., seed=s)), "
            "so there is no run index to pass (a seed per run made the audit powerless, docs/audit.md)")
    return factory


def check_seed(seed) -> int:
    """The shared public seed as an int, else TypeError (also :mod:`pyro_dp.release_audit`'s)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer (the shared public seed), got {seed!r}")
    return int(seed)


def as_args(name: str, x, args_fn) -> tuple:
    """A data set (a tensor, or a tuple of the model's positional arguments, after ``args_fn``)
    as the model's positional arguments (the audit runners', here, in
    :mod:`pyro_dp.release_audit` and :mod:`pyro_dp.testing`)."""
    if args_fn is not None:
        x = args_fn(x)
    if torch.is_tensor(x):
        return (x,)
    if isinstance(x, (tuple, list)):
        return tuple(x)
    raise TypeError(f"{name} must be a tensor or a tuple of the model's positional arguments (or use args_fn)")


def _score(statistic, k, before, after, where: str) -> float:
    v = statistic(k, before, after)
    if torch.is_tensor(v):
        if v.numel() != 1:
            raise ValueError(
                f"the statistic must return one real number, got a tensor of shape {tuple(v.shape)} ({where})"
            )
        v = v.item()
    if isinstance(v, (str, bytes)):
        raise ValueError(f"the statistic must return one real number, got {v!r} ({where})")
    if isinstance(v, bool):
        v = float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"the statistic must return one real number, got {v!r} ({where})") from None


def one_run(k, args: tuple, statistic, num_iterations: int, seed: int, where: str, cache: Optional[dict] = None):
    """Set up a fresh kernel with the shared public ``seed`` and fresh secret noise, run it,
    and score the run: ``(kernel, score)``. ``cache``: the data-free set-up caches (set-up
    checks, compiled graphs) shared by the runs of one audit, as one kernel object shares them
    between its chains (keyed by model, arguments and configuration)."""
    if not isinstance(k, DPKernel):
        raise TypeError(f"kernel_factory must return a pyro_dp DPKernel, got {type(k).__name__}")
    if k.lik is not None or k.ledger:
        raise ValueError(f"kernel_factory returned a kernel that was already set up or run ({where}): "
                         "return a new kernel object for every run")
    # The public randomness (proposals, momenta, accept uniforms, prior draws) is seeded alike in
    # every run, on D and on D'; the secret stream (privacy noise, batch selection) is seeded from OS
    # entropy by the kernel's setup() once noise_seed is None — the production path — so a
    # noise_seed given to the kernel (a testing option, or tests/conftest.py's) cannot replay one
    # run's noise in another.
    k.seed = seed
    k.noise_seed = None
    if cache is not None:
        k._jit_cache = cache
    k.setup(0, *args)
    before = params = k.initial_params
    for _ in range(int(num_iterations)):
        params = k.sample(params)
    return k, _score(statistic, k, before, params, where)


def audit(
    kernel_factory: Callable,
    data,
    neighbour,
    *,
    statistic: Union[str, Callable] = "accept",
    num_runs: int = 500,
    delta: float = 1e-5,
    confidence: float = 0.95,
    num_iterations: int = 1,
    seed: int = 0,
    args_fn: Optional[Callable] = None,
    thresholds: Optional[Sequence[float]] = None,
    disable_validation: bool = True,
    claim: Optional[Callable] = None,
) -> AuditResult:
    r"""Audit a kernel's privacy claim on one pair of neighbouring data sets.

    Runs the kernel ``num_runs`` times on ``data`` (:math:`D`) and ``num_runs`` times on
    ``neighbour`` (:math:`D'`), each run a new kernel from scratch::

        k = kernel_factory()
        k.seed, k.noise_seed = seed, None    # one public seed; fresh secret noise (OS entropy)
        k.setup(0, *args)
        params = k.initial_params
        for _ in range(num_iterations):
            params = k.sample(params)
        score = statistic(k, k.initial_params, params)

    and compares the scores with :func:`epsilon_lower_bound`. The reported ε is
    ``k.get_epsilon(delta)`` of one run (or ``claim(k, delta)``); every run must record the
    same ledger (a ledger that depends on the data would itself leak), else a ``RuntimeError``.

    **One shared public seed, fresh secret noise.** A kernel's randomness has two parts
    (:class:`~pyro_dp.mechanisms.NoiseSource`): the *public*, data-free draws (proposals,
    momenta, accept uniforms, prior draws), which DP does not hide and which the adversary of
    the DP definition may know, and the *secret* stream (privacy noise, batch selection), on
    which the guarantee rests. The audit fixes the public draws — every run, on :math:`D` and
    on :math:`D'`, uses the kernel seed ``seed`` (whatever seed the factory gave the kernel)
    — and leaves only the secret stream random: it clears the kernel's ``noise_seed``
    (a testing option that would replay one run's noise in every run), so every run's
    :meth:`~pyro_dp.kernels.base.DPKernel.setup` seeds its noise from OS entropy, as in
    production. Runs are then i.i.d. given the public seed, and the output differs between
    :math:`D` and :math:`D'` only through the releases: the bound is valid (the DP inequality
    holds for every fixed value of the public randomness, since the mechanism's analysis
    conditions on it) and as sharp as the releases allow. With a different public seed per
    run the public draws would vary the output far more than one row does, and even a kernel
    that releases with a millionth of its ledger's noise would pass (``docs/audit.md``).
    Which public seed is audited is the auditor's choice, made before the runs (it may look
    at :math:`D` and :math:`D'`, never at the audited runs' scores); a seed under which the
    noise-free kernel behaves differently on :math:`D` and :math:`D'` gives the most power
    (:func:`pyro_dp.mutants.separating_seed`). Runs must start from the same data-free point
    (``init_strategy=init_to_mean`` or fixed ``initial_params``; with the shared seed,
    ``init_to_sample`` is also the same point in every run).

    :param kernel_factory: ``kernel_factory()`` returns a new, not yet set-up
        :class:`~pyro_dp.kernels.base.DPKernel` (its ``seed`` and ``noise_seed`` are replaced,
        see above); e.g. ``lambda: DPPenalty(model, 0.1, llr_clip=1.0, noise_multiplier=3.0)``.
    :param data, neighbour: the model's positional arguments for :math:`D` and :math:`D'`
        (a tuple, or one tensor), differing in one row (the kernel's neighbouring relation).
    :param statistic: what is audited, reduced to one real score per run: ``"accept"``
        (1.0 if the flat unconstrained parameters moved from the start, else 0.0 — with one
        iteration, the accept bit of an MH kernel; tested at the fixed threshold 0.5 unless
        ``thresholds`` is given), ``"sample"`` (the first coordinate of the final flat
        unconstrained parameters in the model's own coordinates,
        ``k.lik.to_unconstrained(k.lik.flatten(params))[0]``: a preconditioned chain's coordinates
        would hide the released shift and scales), or a callable
        ``statistic(kernel, params_before, params_after) -> float``.
    :param int num_runs: runs per data set (:math:`\ge 2`); the largest bound the audit can
        show grows like :math:`\log(\mathrm{num\_runs})`.
    :param float delta: δ of the claim, in (0, 1). The ledger's claim is a whole curve
        :math:`\varepsilon(\delta)`; a larger δ audits a smaller ε and costs the bound only
        δ in its numerator, which is where a noise shortfall is easiest to see.
    :param float confidence: confidence level of the lower bound.
    :param int num_iterations: iterations per run.
    :param int seed: the shared public seed (kernel ``seed``) of every run.
    :param args_fn: optional ``args_fn(x) -> tuple`` mapping ``data`` / ``neighbour`` to the
        model's positional arguments.
    :param thresholds: fixed thresholds for :func:`epsilon_lower_bound` (Bonferroni), chosen
        before the runs; default: ``[0.5]`` for ``"accept"``, else the held-out split.
    :param bool disable_validation: run the kernels with Pyro's distribution validation off,
        as :class:`pyro.infer.MCMC` runs them by default (``MCMC(disable_validation=True)``):
        a row outside a likelihood's support then gives a NaN or infinite term, which the
        kernel must handle, rather than an exception.
    :param claim: optional ``claim(kernel, delta) -> float``, the ε under audit, when the
        row that differs is covered by a finer claim than the kernel's overall one: e.g.
        ``lambda k, d: k.get_epsilon(d, party=0)`` for a row of party 0 of
        :class:`~pyro_dp.DPMultiPartyPenalty` (its overall ε is the worst party's). Default:
        ``kernel.get_epsilon(delta)``.
    :returns: :class:`AuditResult`.

    Example: DP penalty MH, one iteration, against a row at the clip bound. The honest
    kernel passes; the same kernel releasing with a fifth of its ledger's noise
    (:func:`pyro_dp.mutants.weak_noise`) fails.

    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer.autoguide.initialization import init_to_mean
    >>> from pyro_dp import DPPenalty
    >>> from pyro_dp.testing import separating_seed, weak_noise
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype, device=y.device), 10.0))
    ...     with pyro.plate("data", len(y)) as i:
    ...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])
    >>> y = torch.linspace(-1.0, 1.0, 20, dtype=torch.float64)
    >>> y[0] = 50.0; y2 = y.clone(); y2[0] = -50.0  # one row replaced, far beyond the clip both ways
    >>> factory = lambda: DPPenalty(model, 0.3, llr_clip=1.0, noise_multiplier=2.0, init_strategy=init_to_mean)
    >>> seed = separating_seed(factory, y, y2)  # the noise-free kernel accepts on one of D, D' only
    >>> honest = audit(factory, y, y2, num_runs=100, delta=0.05, seed=seed)
    >>> honest.passed, round(honest.reported_epsilon, 2), len(honest.counts)  # counts: accepted runs on D, D'
    (True, 0.51, 2)
    >>> audit(lambda: weak_noise(factory(), 0.2), y, y2, num_runs=100, delta=0.05, seed=seed).passed
    False

    (This pair is the ``DPPenalty`` case of ``tests/audit_cases.py``: ``docs/audit.md``
    gives the probability that either line comes out otherwise, below :math:`10^{-4}`.)
    """
    if isinstance(num_runs, bool) or not isinstance(num_runs, (int, np.integer)):
        raise TypeError(f"num_runs must be an integer >= 2, got {num_runs!r}")
    if num_runs < 2:
        raise ValueError(f"num_runs must be >= 2, got {num_runs}")
    if isinstance(num_iterations, bool) or not isinstance(num_iterations, (int, np.integer)):
        raise TypeError(f"num_iterations must be an integer >= 1, got {num_iterations!r}")
    if num_iterations < 1:
        raise ValueError(f"num_iterations must be >= 1, got {num_iterations}")
    delta = _check_delta(delta)
    if delta == 0.0:
        raise ValueError("delta must be in (0, 1) for the reported epsilon")
    confidence = check_confidence(confidence)
    seed = check_seed(seed)
    if claim is not None and not callable(claim):
        raise TypeError(f"claim must be a callable (kernel, delta) -> epsilon, got {type(claim).__name__}")
    stat = statistic_fn(statistic)
    make = factory_caller(kernel_factory)
    args = (as_args("data", data, args_fn), as_args("neighbour", neighbour, args_fn))
    if len(args[0]) != len(args[1]):
        raise ValueError("data and neighbour must give the model the same number of positional arguments")
    thresholds = _check_thresholds((0.5,) if thresholds is None and statistic == "accept" else thresholds)

    n = int(num_runs)
    scores = (np.empty(n), np.empty(n))
    first, cache = None, {}
    with pyro.validation_enabled(not disable_validation):
        for which, i in ((w, j) for w in (0, 1) for j in range(n)):
            where = f"run {i} on {'D' if which == 0 else 'the neighbour'}"
            k, scores[which][i] = one_run(make(), args[which], stat, num_iterations, seed, where, cache)
            if first is None:
                first = k
            elif k.ledger != first.ledger:
                raise RuntimeError(
                    f"{where} recorded a different privacy ledger than the first run: {k.ledger.entries} vs "
                    f"{first.ledger.entries}; the audit compares one mechanism (a data-dependent ledger would leak)"
                )
    reported = float(first.get_epsilon(delta) if claim is None else claim(first, delta))
    b = _lower_bound(_as_scores("scores on D", scores[0]), _as_scores("scores on the neighbour", scores[1]), delta,
                     confidence, thresholds)
    t = b.threshold
    counts = (0, 0) if math.isnan(t) else tuple(int(_count_above(_as_scores("s", s), np.array([t]))[0]) for s in scores)
    return AuditResult(b.epsilon, reported, delta, confidence, n, t, counts, b.direction)
