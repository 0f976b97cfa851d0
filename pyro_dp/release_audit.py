r"""Per-release white-box audit: for every kind of release a kernel makes, the Gaussian-DP
:math:`\mu` it really has on a pair of neighbouring data sets, measured from the released
values, with a confidence interval, against the :math:`\mu` its ledger accounts for.

The method is the white-box ("gradient canary") audit of Nasr, Hayes, Steinke, Balle, Tramèr,
Jagielski, Carlini & Terzis 2023, *Tight auditing of differentially private machine learning*
(USENIX Security), §4: the auditor sees each noisy release, not only the final output, and
chooses everything but the release's own noise. For one release of a kernel:

1. **Neighbours at the clip.** :math:`D` and :math:`D'` differ in one row whose clipped term
   sits at opposite ends of its clip interval (e.g. a row at :math:`\pm 50` when every clip is
   a few units), so the release's noise-free value moves by its whole sensitivity
   :math:`\Delta` between them — the worst case the ledger is computed for. Which pair is worst
   depends on the release (a histogram of norms needs the row in two different bins): the
   caller chooses it.
2. **The same state.** Every draw is a fresh kernel with the same public seed (proposals,
   momenta, uniforms) and fresh secret noise (OS entropy), as :func:`pyro_dp.audit.audit`
   runs it; the releases *before* the audited one are **pinned** (:func:`pyro_dp.mechanisms.tap_releases`)
   to the values of one reference run on :math:`D`, so the state in which the audited release
   is computed is the same in every draw, on :math:`D` and on :math:`D'` — a white-box adversary
   who fixed the earlier outputs. (Without pinning, the earlier releases' noise and their own
   dependence on the row would move the state, and the measured shift would mix several
   releases.) The run stops right after the audited release. Batch selections are pinned the
   same way (the ``batches`` of :func:`~pyro_dp.mechanisms.tap_releases`).
3. **One-dimensional Gaussian test.** Given the state, the release is
   :math:`v + \sigma\xi` with :math:`v` the clipped sum (a vector for gradients and
   histograms). The direction :math:`u` of :math:`v_D - v_{D'}` is computed from one noise-free
   run on each data set (:func:`pyro_dp.mutants.weak_noise` with factor 0; data and public
   draws only, never the audited draws), and each draw is reduced to
   :math:`s = u^\top(\text{release})`: :math:`s \sim N(u^\top v_D, \sigma^2)` on :math:`D` and
   :math:`N(u^\top v_{D'}, \sigma^2)` on :math:`D'`. Two Gaussians of equal variance are
   :math:`\mu`-GDP apart with :math:`\mu = (u^\top v_D - u^\top v_{D'})/\sigma`
   (Dong, Roth & Su 2022, Thm 2.7 and Prop. 2.8: the test's trade-off curve), estimated by
   :math:`\hat\mu = (\bar s_D - \bar s_{D'})/s_p` with the pooled standard deviation :math:`s_p`.
4. **Exact confidence interval.** :math:`T = \hat\mu\sqrt{n/2}` is noncentral-:math:`t` with
   :math:`2n-2` degrees of freedom and noncentrality :math:`\mu\sqrt{n/2}`; inverting its law
   gives the two-sided interval :math:`[\underline\mu, \overline\mu]` at ``confidence``
   (:func:`mu_confidence_interval`).

**Two-sided verdict.** The ledger's :math:`\mu` of the release is
:math:`\mu_{\rm ledger} = 1/\mathrm{nm}` for a Gaussian event (sensitivity over noise), the
smallest :math:`\sqrt{2\varepsilon(\alpha)/\alpha}` over the listed orders for an RDP curve
(a Gaussian release of :math:`\mu` is :math:`(\alpha, \alpha\mu^2/2)`-RDP, so a larger
:math:`\mu` breaks the curve at that order), the largest :math:`\mu` with
:math:`\delta_\mu(\varepsilon) \le \delta` for an :math:`(\varepsilon, \delta)` event (Dong,
Roth & Su 2022, Cor. 2.13: the Gaussian trade-off curve inside the :math:`(\varepsilon, \delta)`
region, exact for a Gaussian release), the un-amplified bound given the batch for a subsampled
release (below), and none otherwise (the release is skipped, with the reason). The release is

* **sound** if :math:`\underline\mu \le \mu_{\rm ledger}`: else, at the stated confidence, the
  release leaks more than its ledger says (weaker noise, a wrong sensitivity, a clip not
  applied);
* **powerful** if :math:`\overline\mu \ge 0.8\,\mu_{\rm ledger}` (``power_fraction``): the audit
  saw (nearly) the whole sensitivity — the neighbours really are at the clip. A release that
  is not powerful was not audited at its worst case: its soundness verdict is weak evidence.

The honest kernel fails either test with probability at most ``(1 - confidence) / 2`` each
(the interval is exact when the release's noise is Gaussian and its variance the same on both
data sets), whatever its true :math:`\mu` below the ledger's (soundness) or at or above
``power_fraction`` of it (power).

**Which releases.** A release kind is a (ledger label, call site, event) of a reference run;
``occurrence`` chooses which of each kind's releases are audited (the first, the last, given
indices, or all: DP-HMC's later leapfrog gradients, a second iteration's release, the last
private-start step), each in the state its pinned predecessors set.

**Two ways to draw.** ``draws="kernel"``: every draw a fresh kernel run up to the release, as
above. ``draws="replay"``: one pinned run per data set in which the tap makes each audited
release ``num_draws`` more times from the noise-free value the kernel computed, with fresh
normals from the secret stream that drew the release's own (the kernel's
:class:`~pyro_dp.mechanisms.NoiseSource`, a mutant's included); the tap replays a release only
if the normals it added are that stream's draw bit for bit (a kernel that rescaled them after
the draw is refused, not replayed). Given the pinned state both give the same law; replay costs
one run instead of ``num_draws`` (the default path's own releases come after its 182 tuning
releases) and so affords 1000–2000 draws, hence intervals a third as wide. What replay does not
exercise is the kernel's code between the draw and the release a second time — that is what
``"kernel"`` checks, on every family's own releases in the tests.

**Subsampled releases** (a ``SubsampledGaussianEvent`` of rate below 1 stated or recorded, or
a batch smaller than the data, or drawn with replacement) are a mixture of Gaussians over the
secret batch. With ``row=r`` every batch selection contains the differing row (the tap puts it
in, then pins every batch to the reference run's), and the release is audited **given its
batch** (``conditional`` in the result) against the *un-amplified* :math:`\mu` the ledger's
event rests on:

* a subsampled Gaussian (DP-SGLD, the minibatch penalty): :math:`\mu \le \Delta/\sigma =
  1/\mathrm{nm}`;
* DP Barker (its event, an RDP curve, is the amplified one: Heikkilä et al. 2019 Thm 2 on the
  batch, amplified by Cor. 2): the event is recognised as
  :func:`~pyro_dp.accounting.subsampled.dp_barker_event` of the batch's size :math:`b` and the
  data's :math:`N`, and the bound is the Gaussian :math:`\mu` of Thm 2's own curve on those
  orders (:func:`~pyro_dp.audit_batches.barker_given_batch_mu`; 1.104 at :math:`b = 20`). Its
  noise allows :math:`(2/\sqrt b)/\sqrt{C - \sigma_b^2}` at the clip (0.32 to 0.45 at
  :math:`b = 20`): the bound is loose, and the power check is against ``mu_design``
  (:meth:`ReleaseAudit.powerful_at`);
* DP-Fast MH's minibatch release (Zhang & Zhang 2023, Alg. 1–2): its batch size :math:`B`,
  indices drawn with replacement and thinning uniforms are secret draws the tap cannot pin, so
  the audit pins them **from outside the kernel**: after ``setup`` the kernel's secret stream is
  wrapped (:class:`~pyro_dp.audit_batches.PinnedSelection`, as
  :func:`~pyro_dp.mutants.weak_noise` wraps it for its mutant) so that every batch selection
  comes from a stream seeded with a *selection seed*, the
  row ``r`` put into the batch exactly once, while the release's normals stay the kernel's fresh
  ones. Of the first selection seeds, the one whose noise-free releases move most between
  :math:`D` and :math:`D'` is taken (the thinning keeps a row with a probability that depends
  on its value: the adversary picks a batch that keeps it on both sides; noise-free runs only).
  Given that batch the release is a Gaussian, and the ledger's event an
  :class:`~pyro_dp.mechanisms.ApproxDPEvent` :math:`(\varepsilon, \delta)` of the whole step.
  The bound a given batch must meet is the per-slot Gaussian :math:`\mu_0` from which the
  ledger's :math:`(\varepsilon, \delta)` follows by the amplification lemma of Thm 2's proof
  (App. B) at the drawn :math:`B` and :math:`p = 1/N`: the largest :math:`\mu_0` for which
  the amplification of :math:`(\varepsilon_0, \delta_{\mu_0}(\varepsilon_0))` over :math:`B`
  slots (:func:`~pyro_dp.accounting.composition.with_replacement_amplification`) is within
  :math:`(\varepsilon, \delta)` for some :math:`\varepsilon_0`
  (:func:`~pyro_dp.audit_batches.with_replacement_mu`). Its noise allows :math:`1/\sigma_1`
  (one copy of the row moves the sum by :math:`\Delta(\ell_1)`, the noise is :math:`\sigma_1\Delta(\ell_1)`), below
  the bound (Alg. 2's :math:`6Kp` and its classical Gaussian calibration are looser than the
  exact lemma): the power check is against ``mu_design``. A batch with :math:`k` copies of the
  row is group privacy over :math:`k` slots, not audited. DP-Fast MH's full-batch branch
  (:math:`B \ge K`), with its selection pinned, is a Gaussian release against the ledger's
  :math:`(\varepsilon, \delta)` directly (:func:`gaussian_mu_of_event`: the largest Gaussian
  :math:`\mu` inside the region, an exact condition for a Gaussian).

What this verifies is the Gaussian mechanism inside each amplified release — the clip, the
sensitivity, the noise — and that it meets the premise of the ledger's amplification at the
given batch. What it does not verify is the amplification itself (Balle, Barthe & Gaboardi
2018; Zhu & Wang 2019 for Poisson sampling; WBK19 Thm 9 for DP Barker; Zhang & Zhang 2023
App. B for DP-Fast MH), which is the accountant's and is tested against oracles in
``tests/accounting``, nor the mixture over batches a real run draws. Without ``row`` such a
release is skipped, with the reason (and so is every DP-Fast MH minibatch-mode release: whether
it is the minibatch or the full-batch branch is decided by the unpinned :math:`B`).

**Assumptions and what is not covered.** Gaussian release noise of a data-free variance (DP
Barker's :math:`\sqrt{C-\sigma_b^2}` depends on the data a little; the pooled variance is then
an approximation); the kernel run eagerly (the tap does not see inside a compiled graph:
``jit_compile`` is forced to ``False``, and ``True`` is refused); the same sequence of
releases and batches in every draw up to the audited one (it is, with the public draws fixed
and the earlier releases and batches pinned: else a ``RuntimeError``). A release whose ledger
is looser than its noise at its true sensitivity (DP Barker's RDP curve; the default path's
``tune:scale`` and ``tune:metric``, by :math:`\sqrt 2`) cannot be powerful against its ledger:
:meth:`ReleaseAudit.powerful_at` states the power check against ``mu_design``, the
:math:`\mu` the noise drawn allows. The audit measures each release alone: composition is the
accountant's job (tested against oracles in ``tests/accounting``), and the end-to-end claim is
:func:`pyro_dp.audit.audit`'s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyro
import torch
from scipy.optimize import brentq
from scipy.stats import norm, nct

from .accounting.gdp import gdp_mu
from .audit import as_args, check_confidence, check_seed, factory_caller
from .audit_batches import barker_given_batch_mu, pin_selection, with_replacement_mu
from .kernels.base import DPKernel
from .mechanisms import (ApproxDPEvent, GaussianEvent, NonPrivateEvent, RDPCurveEvent, SubsampledGaussianEvent,
                         StopTap, tap_releases)
from .testing import weak_noise

__all__ = ["ReleaseAudit", "audit_releases", "gaussian_mu_of_event", "mu_confidence_interval"]


@dataclass(frozen=True)
class ReleaseAudit:
    r"""The audit of one kind of release (:func:`audit_releases`).

    :ivar tag: ``"<ledger label or 'step'> @ <site>"``, e.g. ``"tune:clip @ pyro_dp.default_path.tuning.clip_histogram"``.
    :ivar label: the ledger label of the release (``""``: the kernel's own iterations).
    :ivar site: ``module.function`` that made it.
    :ivar index: its position among the reference run's releases.
    :ivar occurrence: its position among the releases of its kind (0: the first), of
        ``occurrences`` in the reference run.
    :ivar event: the event the release function stated (else the ledger's);
        ``recorded_event``: the ledger's (e.g. a ``SubsampledGaussianEvent``, DP-Fast MH's
        ``ApproxDPEvent``).
    :ivar dim: number of released coordinates.
    :ivar mu_ledger: the ledger's :math:`\mu` (``nan`` when skipped).
    :ivar mu: the measured :math:`\hat\mu`; ``mu_low``, ``mu_high``: its confidence interval.
    :ivar mu_design: :math:`\|v_D - v_{D'}\|/\sigma` of the noise-free releases with the
        release's stated noise :math:`\sigma`: what the neighbours give if the noise is honest
        (a value well below ``mu_ledger`` means the neighbours are not at the clip).
    :ivar sound: ``mu_low <= mu_ledger``; ``powerful``: ``mu_high >= power_fraction * mu_ledger``
        (``None`` when skipped).
    :ivar skipped: why the release was not audited (``None``: audited).
    :ivar conditional: a subsampled release audited given its batch, which contains the
        differing row, against the un-amplified ``mu_ledger`` (``row=``).
    :ivar num_draws: draws per data set; ``confidence``: of the interval; ``draws``:
        ``"kernel"`` or ``"replay"``.
    :ivar sigma: the standard deviation of the release's noise on :math:`D` (its first coordinate),
        as the noise-free run states it: ``mu_design * sigma`` is the noise-free shift
        :math:`\|v_D - v_{D'}\|`, to compare with the release's sensitivity.
    :ivar selection_seed: the seed of the batch selections the audit pinned (DP-Fast MH's batch,
        its size and thinning: :func:`audit_releases`), ``None`` where the tap pins the batches.
    """

    tag: str
    label: str
    site: str
    index: int
    event: object
    dim: int
    mu_ledger: float
    mu: float
    mu_low: float
    mu_high: float
    mu_design: float
    sound: Optional[bool]
    powerful: Optional[bool]
    skipped: Optional[str]
    num_draws: int
    confidence: float
    recorded_event: object = None
    occurrence: int = 0
    occurrences: int = 1
    conditional: bool = False
    draws: str = "kernel"
    sigma: float = math.nan
    selection_seed: Optional[int] = None

    @property
    def passed(self) -> bool:
        """Sound and powerful (a skipped release has not passed)."""
        return bool(self.sound) and bool(self.powerful)

    def powerful_at(self, mu_reachable: float, power_fraction: float = 0.8) -> bool:
        r"""Whether the interval's upper end reaches ``power_fraction`` of ``mu_reachable``: the
        power check against the :math:`\mu` the release's noise allows at its true sensitivity,
        where the ledger's is looser (``mu_design`` at neighbours shown to be at the clip; DP
        Barker, ``tune:scale``: module doc)."""
        return bool(self.sound is not None and self.mu_high >= power_fraction * mu_reachable)

    def __str__(self) -> str:
        if self.skipped is not None:
            return f"{self.tag}: skipped ({self.skipped})"
        verdict = ("SOUND" if self.sound else "NOT SOUND") + ", " + ("POWERFUL" if self.powerful else "NOT POWERFUL")
        return (f"{self.tag} [{self.event}, dim {self.dim}]: mu = {self.mu:.3f} "
                f"[{self.mu_low:.3f}, {self.mu_high:.3f}] vs ledger {self.mu_ledger:.3f} "
                f"(design {self.mu_design:.3f}; {self.num_draws} draws per data set, {self.confidence:.1%}): {verdict}")


def gaussian_mu_of_event(event) -> Tuple[Optional[float], str]:
    r"""``(mu, how)``: the Gaussian-DP :math:`\mu` one release of ``event`` is accounted for, or
    ``(None, why not)``.

    >>> gaussian_mu_of_event(GaussianEvent(2.0))
    (0.5, 'Gaussian: 1/nm')
    >>> gaussian_mu_of_event(RDPCurveEvent((2.0, 8.0), (0.25, 4.0)))  # min over orders of sqrt(2 eps/alpha)
    (0.5, 'RDP curve: min sqrt(2 eps(a)/a)')
    >>> round(gaussian_mu_of_event(ApproxDPEvent(1.0, 1e-5))[0], 5)  # the largest mu inside (1, 1e-5)
    0.26805
    >>> gaussian_mu_of_event(NonPrivateEvent())[0] is None
    True

    An :class:`~pyro_dp.mechanisms.ApproxDPEvent` :math:`(\varepsilon, \delta)` of a Gaussian
    release: the largest :math:`\mu` whose Gaussian trade-off curve lies inside the
    :math:`(\varepsilon, \delta)` region, :math:`\sup\{\mu : \delta_\mu(\varepsilon) \le
    \delta\}` (:func:`~pyro_dp.accounting.gdp.gdp_mu`; Dong, Roth & Su 2022, Cor. 2.13). The
    condition is exact for a Gaussian release (Balle & Wang 2018, Thm 8): a Gaussian of larger
    :math:`\mu` is *not* :math:`(\varepsilon, \delta)`-DP, so comparing the measured
    :math:`\mu` with it is the comparison of the measured trade-off curve with the region.
    """
    if isinstance(event, GaussianEvent):
        return 1.0 / event.noise_multiplier, "Gaussian: 1/nm"
    if isinstance(event, SubsampledGaussianEvent):
        if event.sample_rate >= 1.0:
            return 1.0 / event.noise_multiplier, "subsampled Gaussian of rate 1: 1/nm"
        return None, f"subsampled (rate {event.sample_rate:g}): a mixture of Gaussians, not a Gaussian release"
    if isinstance(event, RDPCurveEvent):
        return min(math.sqrt(2.0 * e / a) for a, e in zip(event.orders, event.rdp)), "RDP curve: min sqrt(2 eps(a)/a)"
    if isinstance(event, ApproxDPEvent):
        if not (event.epsilon > 0 and 0 < event.delta < 1):
            return None, f"{event} bounds no Gaussian release"
        return gdp_mu(event.epsilon, event.delta), "(eps, delta): the largest Gaussian mu inside the region"
    if isinstance(event, NonPrivateEvent):
        return None, "no noise (the non-private test mode)"
    return None, f"{type(event).__name__} has no Gaussian equivalent"


def mu_confidence_interval(s_d, s_dprime, confidence: float = 0.999) -> Tuple[float, float, float]:
    r"""``(mu_hat, low, high)``: the estimate :math:`\hat\mu = (\bar s_D - \bar s_{D'})/s_p` of
    the distance between two Gaussians of equal variance, in standard deviations, from ``n``
    draws of each, and its exact two-sided interval at ``confidence``: :math:`T =
    \hat\mu\sqrt{n/2}` is noncentral-:math:`t` with :math:`2n-2` degrees of freedom and
    noncentrality :math:`\mu\sqrt{n/2}`; the bounds are the noncentralities at which ``T`` is at
    its upper and lower :math:`(1-\mathrm{confidence})/2` quantiles. The sign is kept
    (``s_d`` should be the larger in expectation); ``low`` may be negative.

    >>> rng = np.random.default_rng(0)
    >>> mu, lo, hi = mu_confidence_interval(rng.normal(0.5, 2.0, 4000), rng.normal(0.0, 2.0, 4000), 0.99)
    >>> bool(lo < 0.25 < hi), bool(hi - lo < 0.2)
    (True, True)
    """
    a, b = np.asarray(s_d, dtype=np.float64), np.asarray(s_dprime, dtype=np.float64)
    n = len(a)
    if len(b) != n or n < 2:
        raise ValueError("need the same number (>= 2) of draws on D and on D'")
    confidence = check_confidence(confidence)
    sp = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2.0)
    if not (sp > 0) or not math.isfinite(sp):
        raise ValueError("the draws have no spread (noise-free releases?): mu is not estimable")
    mu = (a.mean() - b.mean()) / sp
    scale = math.sqrt(n / 2.0)
    t, df, alpha = mu * scale, 2 * n - 2, (1.0 - confidence) / 2.0

    def cdf(nc):  # P(T <= t); scipy's nct gives NaN far in a tail: there the normal approximation
        c = nct.cdf(t, df, nc)  # (Abramowitz & Stegun 26.7.10) is 0 or 1 to many digits
        return c if math.isfinite(c) else norm.cdf((t * (1 - 1 / (4 * df)) - nc) / math.sqrt(1 + t * t / (2 * df)))

    def nc_at(p):  # the noncentrality at which P(T <= t) = p (the cdf decreases in nc)
        f = lambda nc: cdf(nc) - p  # noqa: E731
        w = 8.0 * math.sqrt(1.0 + t * t / (2 * df))
        lo, hi = t - w, t + w
        while f(lo) < 0:
            lo -= w
        while f(hi) > 0:
            hi += w
        return brentq(f, lo, hi, xtol=1e-10)

    return float(mu), float(nc_at(1.0 - alpha) / scale), float(nc_at(alpha) / scale)


def _draw(make, args, seed: int, cache: dict, num_iterations: int, pin=None, stop_after=None, replay=0,
          replay_at=None, batches=None, include=None,
          selection=None):
    """One run of a fresh kernel under the tap: ``(releases seen, batches, rows)`` (a list of
    TappedRelease with ``.batches`` and ``.batch_at``; ``rows``: the likelihood's number of rows).
    ``selection``: the batch selections drawn from a stream seeded with it
    (:class:`~pyro_dp.audit_batches.PinnedSelection`)."""
    k = make()
    if not isinstance(k, DPKernel):
        raise TypeError(f"kernel_factory must return a pyro_dp DPKernel, got {type(k).__name__}")
    if k.lik is not None or k.ledger:
        raise ValueError("kernel_factory returned a kernel that was already set up or run: return a new one per call")
    if getattr(k, "jit_compile", None) is True:
        raise ValueError("audit_releases runs kernels eagerly (the tap does not see inside a compiled graph): "
                         "build the kernel with jit_compile=False or None")
    k.jit_compile = False
    k.seed, k.noise_seed, k._jit_cache = seed, None, cache  # one public seed; fresh secret noise (pyro_dp.audit)
    if selection is not None:  # the batch selections from a stream of their own (audit_batches)
        k = pin_selection(k, selection, include)
    with tap_releases(pin=pin, stop_after=stop_after, replay=replay, replay_at=replay_at, batches=batches,
                      include=include) as seen:
        try:
            k.setup(0, *args)
            params = k.initial_params
            for _ in range(int(num_iterations)):
                params = k.sample(params)
        except StopTap:
            pass
    seen.num_rows = getattr(k.lik, "num_rows", None)
    return seen


def _kinds(reference, occurrence) -> List:
    """``(release, event, position among its kind, releases of its kind)`` of the reference run:
    for each (label, site, event), the occurrences ``occurrence`` asks for (an index, a sequence
    of indices, negative from the last, or ``"all"``), those that exist, each once."""
    groups = {}
    for r in reference:
        event = r.event if r.event is not None else r.recorded_event
        groups.setdefault((r.label, r.site, repr(event)), []).append((r, event))
    out = []
    for group in groups.values():
        m = len(group)
        wanted = range(m) if occurrence == "all" else (
            [occurrence] if isinstance(occurrence, (int, np.integer)) else list(occurrence))
        picked = sorted({int(o) % m for o in wanted if -m <= int(o) < m})
        out.extend((group[k][0], group[k][1], k, m) for k in picked)
    return sorted(out, key=lambda t: t[0].index)


def _batch_before(r, reference) -> Optional[int]:
    """The index of the last batch selected before release ``r`` (``None``: none)."""
    before = [j for j, at in enumerate(reference.batch_at) if at <= r.index]
    return before[-1] if before else None


def _subsampling(r, event, reference) -> Optional[str]:
    """Why release ``r`` is subsampled (its stated or recorded event a subsampled Gaussian of rate
    below 1, or its batch, the last selected before it, smaller than the data, or drawn with
    replacement), else ``None``."""
    for e in (event, r.recorded_event):
        if isinstance(e, SubsampledGaussianEvent) and e.sample_rate < 1.0:
            return f"subsampled (rate {e.sample_rate:g})"
    j = _batch_before(r, reference)
    if j is None:
        return None
    n, size = reference.num_rows, len(reference.batches[j])
    if j in reference.unpinned:
        return (f"subsampled (a batch of {size} of {n} rows drawn with replacement, its size and thinning secret "
                "draws: DP-Fast MH's, Zhang & Zhang 2023 Alg. 1)")
    if n is not None and size < n:
        return f"subsampled (batch of {size} of {n} rows)"
    return None


def _ledger_mu(r, event, reference, row, selection=None) -> Tuple[Optional[float], str, bool]:
    """``(mu_ledger, how, conditional)`` of release ``r`` (:func:`gaussian_mu_of_event`), given its
    batch contains the row ``row`` when it is subsampled (``conditional``; module doc, "Subsampled
    releases"), else ``(None, why not, False)``."""
    sub = _subsampling(r, event, reference)
    if sub is None:
        if isinstance(r.recorded_event, ApproxDPEvent):  # DP-Fast MH's step: the ledger's (eps, delta)
            if selection is None:
                return None, (f"{r.recorded_event}: a release whose branch is decided by a batch size the tap "
                              "does not see (DP-Fast MH's B, Zhang & Zhang 2023 Alg. 2); pass row= so that the "
                              "audit pins the batch selections"), False
            event = r.recorded_event
        mu, how = gaussian_mu_of_event(event)
        return mu, how, False
    if row is None:
        return None, (f"{sub}: a mixture of Gaussians over the secret batch; pass row= to audit it given a "
                      "batch that contains the differing row"), False
    j = _batch_before(r, reference)
    n = reference.num_rows
    if j is not None and j in reference.unpinned:  # DP-Fast MH's batch: pinned by the selection stream
        if selection is None:
            return None, f"{sub}: no selection seed in the search put row {row} in it exactly once", False
        b = len(reference.batches[j])
        e = next((x for x in (event, r.recorded_event) if isinstance(x, ApproxDPEvent)), None)
        if e is None or not (e.epsilon > 0 and 0 < e.delta < 1) or b < 1:
            return None, f"{sub}: its event {event} is not an (eps, delta) the audit can un-amplify", False
        mu = with_replacement_mu(e.epsilon, e.delta, b, 1.0 / n)
        return mu, (f"{sub}, given its batch (selection seed {selection}) with row {row} in it once: the largest "
                    f"per-slot Gaussian mu whose amplification over {b} slots at p = 1/{n} is within {e}"), True
    e = next((x for x in (event, r.recorded_event) if isinstance(x, SubsampledGaussianEvent)), event)
    if isinstance(e, SubsampledGaussianEvent):
        return 1.0 / e.noise_multiplier, f"{sub}, given its batch contains row {row}: un-amplified 1/nm", True
    if isinstance(e, GaussianEvent):
        return 1.0 / e.noise_multiplier, f"{sub}, given its batch contains row {row}: 1/nm", True
    b = len(reference.batches[j]) if j is not None else None
    mu = None if b is None or n is None else barker_given_batch_mu(e, b, n)
    if mu is not None:
        return mu, (f"{sub}, given its batch contains row {row}: DP Barker's un-amplified curve (Heikkilä et al. "
                    "2019 Thm 2 on the batch; the ledger's is Cor. 2's amplification of it)"), True
    return None, (f"{sub}: its {type(e).__name__} is not one whose un-amplified bound the audit knows (a Gaussian, "
                  "DP Barker's curve, DP-Fast MH's (eps, delta))"), False


def _needs_selection(reference) -> bool:
    """Whether the reference run shows a selection the tap cannot pin: a batch drawn with
    replacement (DP-Fast MH's, whose size and thinning are secret draws too) or a release stating
    an :class:`~pyro_dp.mechanisms.ApproxDPEvent` (DP-Fast MH's minibatch mode, whose batch size
    decides the branch even when no batch follows)."""
    return bool(reference.unpinned) or any(isinstance(r.event, ApproxDPEvent) or
                                           isinstance(r.recorded_event, ApproxDPEvent) for r in reference)


#: selection seeds the audit tries for DP-Fast MH's batch, and how many qualifying ones it compares
SELECTION_SEEDS = 32
SELECTION_CANDIDATES = 4


def _choose_selection(make, args, seed, cache, num_iterations, row, unpinned_reference):
    """``(selection seed, reference run)`` for a kernel whose batch the tap cannot pin (DP-Fast
    MH's). Each selection seed ``0, 1, ...`` (:data:`SELECTION_SEEDS`) fixes the batch sizes, the
    batches drawn with replacement — the row ``row`` in each exactly once
    (:class:`~pyro_dp.audit_batches.PinnedSelection`) — and their thinning; a seed qualifies if every such batch holds
    the row once (an empty batch does not). Of the first :data:`SELECTION_CANDIDATES` qualifying
    seeds, the one whose releases after such a batch move most between :math:`D` and :math:`D'`
    (the smallest noise-free shift over noise std, in the seed's reference run's pinned state) is
    taken: a white-box adversary who fixes the batch with the row in it and kept by the thinning
    on both data sets (Zhang & Zhang 2023, Alg. 1 keeps a row with a probability that depends on
    its value, so a seed may drop it on one side). The choice uses noise-free runs only (data and
    public draws), never the audited draws. ``(None, unpinned_reference)`` when no seed qualifies
    (the releases after such a batch are then skipped, with the reason)."""
    noise_free = lambda: weak_noise(make(), 0.0)  # noqa: E731
    best, found = None, 0
    for s in range(SELECTION_SEEDS):
        ref = _draw(make, args[0], seed, cache, num_iterations, include=row, selection=s)
        if not all(int((ref.batches[j] == int(row)).sum()) == 1 for j in ref.unpinned):
            continue
        pin = {i: r.value for i, r in enumerate(ref)}
        free = [_draw(noise_free, a, seed, cache, num_iterations, pin=pin, batches=dict(enumerate(ref.batches)),
                      include=row, selection=s) for a in args]
        after = {i for i in range(len(ref)) if any(at <= i for j, at in enumerate(ref.batch_at) if j in ref.unpinned)}
        if len(free[0]) != len(ref) or len(free[1]) != len(ref):
            continue
        shifts = [float((free[0][i].computed - free[1][i].computed).double().norm()) /
                  max(float(free[0][i].noise_std.reshape(-1)[0]) if free[0][i].noise_std.numel() else 0.0, 1e-300)
                  for i in sorted(after)]
        score = min(shifts) if shifts else 0.0
        if best is None or score > best[0]:
            best = (score, s, ref)
        found += 1
        if found >= SELECTION_CANDIDATES:
            break
    if best is None:
        return None, unpinned_reference
    return best[1], best[2]


def audit_releases(
    kernel_factory: Callable,
    data,
    neighbour,
    *,
    num_draws: int = 200,
    seed: int = 0,
    confidence: float = 0.999,
    num_iterations: int = 1,
    power_fraction: float = 0.8,
    labels: Optional[Sequence[str]] = None,
    occurrence: Union[int, Sequence[int], str] = 0,
    draws: str = "kernel",
    row: Optional[int] = None,
    args_fn: Optional[Callable] = None,
    disable_validation: bool = True,
) -> List[ReleaseAudit]:
    r"""Audit every kind of release of a kernel on one pair of neighbouring data sets, white-box
    (module doc: Nasr et al. 2023): the Gaussian-DP :math:`\mu` of each release measured from
    ``num_draws`` released values on :math:`D` and on :math:`D'`, with its exact confidence
    interval, against the ledger's.

    A reference run on :math:`D` (public seed ``seed``, fresh secret noise, ``setup`` and
    ``num_iterations`` iterations, eager, under :func:`~pyro_dp.mechanisms.tap_releases`) lists
    the releases. A release kind is a (ledger label, call site, event); ``occurrence`` chooses
    which of each kind's releases are audited. For each, the releases before it are pinned to
    the reference run's values and every batch selection to the reference run's batch, and:

    * ``draws="kernel"``: each draw is a fresh kernel from ``kernel_factory()`` (its
      ``noise_seed`` cleared), run until the audited release and stopped;
    * ``draws="replay"``: one such run per data set, in which the audited release is made
      ``num_draws`` more times from its noise-free value with fresh normals from the secret
      stream that drew its noise (the kernel's, a mutant's included; the tap checks that the
      normals the release used are that stream's draw, bit for bit, and refuses it otherwise):
      the same law given the state, at the cost of one run — for releases deep in a run (the
      default path's, after its 182 tuning releases) and for many draws.

    :param kernel_factory: ``kernel_factory()`` returns a new, not yet set-up
        :class:`~pyro_dp.kernels.base.DPKernel` (``jit_compile`` ``False`` or ``None``).
    :param data, neighbour: the model's positional arguments on :math:`D` and :math:`D'` (a
        tuple, or one tensor), differing in one row whose clipped term is at opposite ends of
        the clip for the releases audited (module doc).
    :param int num_draws: draws per data set and release: the interval's half-width is about
        :math:`3.3\sqrt{2/n}` at confidence 0.999 (0.33 for 200 draws, 0.10 for 2000).
    :param int seed: the shared public seed.
    :param float confidence: of each two-sided interval.
    :param int num_iterations: iterations after ``setup`` in the reference run (releases made
        later are not audited).
    :param float power_fraction: the release is powerful if the interval's upper end reaches
        this fraction of the ledger's :math:`\mu`.
    :param labels: audit only releases with these ledger labels (``""``: the kernel's own
        iterations; ``"tune:clip"``, ...); default: all.
    :param occurrence: which releases of each kind: ``0`` (the first, default), ``-1`` (the
        last of the reference run), a sequence of such indices, or ``"all"``.
    :param str draws: ``"kernel"`` (default) or ``"replay"`` (above).
    :param int row: the index of the differing row among the rows a batch selects. Given, every
        batch selection contains it (:func:`~pyro_dp.mechanisms.tap_releases` ``include``; DP-Fast
        MH's batch, its size and thinning: the audit's selection stream, the row in it once), and a
        subsampled release is audited **given its batch** against the ledger's un-amplified
        :math:`\mu` (:math:`1/\mathrm{nm}`, DP Barker's Thm 2 curve, DP-Fast MH's per-slot bound:
        module doc); without it such a release is skipped, with the reason.
    :param args_fn: optional ``args_fn(x) -> tuple`` of the model's positional arguments.
    :param bool disable_validation: Pyro's validation off, as :class:`pyro.infer.MCMC` runs.
    :returns: one :class:`ReleaseAudit` per release audited or skipped, in the order of the
        reference run.

    Example: DP penalty's one release per iteration, on a row at :math:`\pm 50` (the clip is a
    few units), with its ledger's noise and with a fifth of it (:func:`pyro_dp.mutants.weak_noise`).
    Skipped as a doctest: 400 kernel runs take a few seconds (``tests/test_release_audit.py``
    runs it).

    >>> import torch
    >>> from pyro.infer.autoguide.initialization import init_to_mean
    >>> from pyro_dp import DPPenalty
    >>> from pyro_dp.models.examples import normal_mean_model as model
    >>> from pyro_dp.testing import weak_noise
    >>> y = torch.linspace(-1.0, 1.0, 20, dtype=torch.float64); y[0] = 50.0
    >>> y2 = y.clone(); y2[0] = -50.0
    >>> make = lambda: DPPenalty(model, 0.3, llr_clip=1.0, noise_multiplier=2.0, init_strategy=init_to_mean)
    >>> [a.passed for a in audit_releases(make, y, y2)]  # doctest: +SKIP
    [True]
    >>> [a.sound for a in audit_releases(lambda: weak_noise(make(), 0.2), y, y2)]  # doctest: +SKIP
    [False]
    >>> [a.sound for a in audit_releases(lambda: weak_noise(make(), 0.2), y, y2, draws="replay")]  # doctest: +SKIP
    [False]
    """
    if isinstance(num_draws, bool) or not isinstance(num_draws, (int, np.integer)) or num_draws < 2:
        raise ValueError(f"num_draws must be an integer >= 2, got {num_draws!r}")
    confidence = check_confidence(confidence)
    seed = check_seed(seed)
    if not (0.0 < float(power_fraction) <= 1.0):
        raise ValueError(f"power_fraction must be in (0, 1], got {power_fraction!r}")
    if draws not in ("kernel", "replay"):
        raise ValueError(f"draws must be 'kernel' or 'replay', got {draws!r}")
    if not (occurrence == "all" or isinstance(occurrence, (int, np.integer))
            or (isinstance(occurrence, (list, tuple)) and all(isinstance(o, (int, np.integer)) for o in occurrence))):
        raise ValueError(f"occurrence must be an int, a sequence of ints or 'all', got {occurrence!r}")
    if row is not None and (isinstance(row, bool) or not isinstance(row, (int, np.integer)) or row < 0):
        raise ValueError(f"row must be a row index >= 0, got {row!r}")
    make = factory_caller(kernel_factory)
    args = (as_args("data", data, args_fn), as_args("neighbour", neighbour, args_fn))
    n, cache, out = int(num_draws), {}, []
    with pyro.validation_enabled(not disable_validation):
        reference = _draw(make, args[0], seed, cache, num_iterations, include=row)
        selection = None
        if row is not None and _needs_selection(reference):  # DP-Fast MH: its batch pinned from outside
            selection, reference = _choose_selection(make, args, seed, cache, num_iterations, row, reference)
        pinned_batches = dict(enumerate(reference.batches))
        todo = []  # (release, event, common, mu_ledger) of the releases to measure
        for r, event, k, m in _kinds(reference, occurrence):
            if labels is not None and r.label not in labels:
                continue
            tag = f"{r.label or 'step'} @ {r.site}" + (f" #{k}" if k else "")
            mu_ledger, how, conditional = _ledger_mu(r, event, reference, row, selection)
            common = dict(tag=tag, label=r.label or "", site=r.site, index=r.index, event=event,
                          recorded_event=r.recorded_event, occurrence=k, occurrences=m, dim=int(r.value.numel()),
                          num_draws=n, confidence=confidence, conditional=conditional, draws=draws,
                          selection_seed=selection)
            if mu_ledger is None:
                out.append(ReleaseAudit(mu_ledger=math.nan, mu=math.nan, mu_low=math.nan, mu_high=math.nan,
                                        mu_design=math.nan, sound=None, powerful=None, skipped=how, **common))
            else:
                todo.append((r, common, mu_ledger))
        if not todo:
            return out

        def run_to(factory, a, last, replay_at=()):
            """A run with every release before ``last`` pinned to the reference run's (and every
            batch), stopped after it; the releases ``replay_at`` replayed ``n`` times."""
            pin = {i: reference[i].value for i in range(last)}
            seen = _draw(factory, a, seed, cache, num_iterations, pin=pin, stop_after=last,
                         replay=n if replay_at else 0, replay_at=replay_at, batches=pinned_batches, include=row,
                         selection=selection)
            for r, common, _ in todo:
                if r.index <= last and (len(seen) <= r.index or seen[r.index].site != r.site):
                    got = seen[r.index].site if len(seen) > r.index else "no release"
                    raise RuntimeError(f"release {r.index} of a draw ({got}) is not the reference run's ({r.site}): "
                                       "the releases before it must not depend on the data or the noise")
            return seen

        noise_free = lambda: weak_noise(make(), 0.0)  # noqa: E731 (aim: data and public draws only)
        if draws == "replay":  # one run per data set for all: each release computed in the pinned state
            last = max(r.index for r, _, _ in todo)
            free_runs = [run_to(noise_free, a, last) for a in args]
            runs = [run_to(make, a, last, replay_at=[r.index for r, _, _ in todo]) for a in args]
        for r, common, mu_ledger in todo:
            if draws == "replay":
                free = [seen[r.index].computed for seen in free_runs]
                sigma_t = free_runs[0][r.index].noise_std
            else:
                got = [run_to(noise_free, a, r.index)[r.index] for a in args]
                free, sigma_t = [g.value for g in got], got[0].noise_std
            diff = (free[0] - free[1]).reshape(-1).to(torch.float64)
            norm = float(diff.norm())
            u = diff / norm if norm > 0 else torch.nn.functional.one_hot(torch.tensor(0), common["dim"]).to(
                torch.float64)
            sigma = float(sigma_t.reshape(-1)[0]) if sigma_t.numel() else math.nan
            mu_design = norm / sigma if sigma > 0 else math.inf
            if draws == "replay":
                s = []
                for seen in runs:
                    if seen[r.index].replays is None:
                        raise RuntimeError(f"release {r.index} ({common['tag']}) cannot be replayed: its normals are "
                                           "not a draw of the secret stream its spec drew (use draws='kernel')")
                    s.append(np.array([float(v.reshape(-1).to(torch.float64) @ u) for v in seen[r.index].replays]))
            else:
                s = [np.array([float(run_to(make, a, r.index)[r.index].value.reshape(-1).to(torch.float64) @ u)
                               for _ in range(n)]) for a in args]
            mu, lo, hi = mu_confidence_interval(s[0], s[1], confidence)
            out.append(ReleaseAudit(mu_ledger=mu_ledger, mu=mu, mu_low=lo, mu_high=hi, mu_design=mu_design, sigma=sigma,
                                    sound=bool(lo <= mu_ledger), powerful=bool(hi >= power_fraction * mu_ledger),
                                    skipped=None, **common))
    out.sort(key=lambda a: (a.index, a.tag))
    return out
