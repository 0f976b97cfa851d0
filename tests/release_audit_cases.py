r"""Every release kind of every kernel family, with neighbours at the clip, for the per-release
white-box audit (:mod:`pyro_dp.release_audit`): the cases of ``tests/test_release_audit.py`` and
the table of ``docs/audit.md`` (``python benchmarks/release_audit_table.py``).

The model is ``tests/audit_cases.py``'s Gaussian mean (:math:`y_i \sim N(\mu, 1)`,
:math:`\mu \sim N(0, 10^2)`) on 20 rows (DP Barker: 100), started at the prior mean; the grouped
kernel's is a three-group version. :math:`D` and :math:`D'` differ in row 0 (the multi-party
kernel's party-1 release: row 1), chosen per release kind so that the row's clipped term is at
opposite ends of its clip:

* sums of clipped ratios or gradients (``"sum"``): the row at :math:`+50` and :math:`-50`
  (the default path's private start, whose clip comes from a noisy histogram: :math:`\pm 10^6`,
  ``"far"``);
* counts and histograms of rows by gradient norm (the default path's ``tune:clip``,
  ``"count"``): the row at :math:`10^6` (a norm above every clip the tuning can choose, the
  overflow bin) and :math:`0` (a norm near 0, a bottom bin);
* the count of rows the per-row rule maps (``tune:rows``, ``"rule"``): the row at :math:`50` and
  NaN.

Every Gaussian release has noise multiplier 0.5 (:math:`\mu_{\rm ledger} = 2`) where the kernel
takes one: a larger :math:`\mu` makes the power check sharp with few draws (the interval's width
in :math:`\mu` barely grows with :math:`\mu`), and the audit of one release does not care what a
whole run would spend. Exceptions: DP Barker (its noise is fixed by its test, :math:`C = 2`;
the ledger is an RDP curve; its subsampled case: 20 of 100 rows), DP-Fast MH (noise multiplier
0.82 from ``step_epsilon=0.99``, ``step_delta=0.9``: ``step_epsilon < 1`` is required; its
minibatch case, :data:`FASTMH_MINIBATCH` on 100 rows: :math:`\sigma_1 = 2.01`), DP-SGLD (2.0:
the Langevin noise, the larger of it and the one asked for, is the release's), the default path (its own calibration at
``epsilon=1000`` on 20 rows: noise multipliers from 0.2 to 1.8 in its tuning releases), the
multi-party kernel's party 1 (1.0, so that the two parties' releases are two kinds).
"""
import math
from typing import Callable, NamedTuple, Optional

import pyro
import pyro.distributions as dist
import torch
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
from pyro_dp.kernels.expfam import gaussian_known_variance
from pyro_dp.mechanisms import NoiseSource
from pyro_dp.testing import ScaledNoiseSource

from .audit_cases import model, neighbours

KW = dict(init_strategy=init_to_mean)
NM = 0.5
Y = 50.0
#: the default path's budget: on 20 rows, noise multipliers between 0.03 and 2.7
DEFAULT_EPSILON = 1000.0

#: the settings of the tests: draws per data set, confidence of each two-sided interval,
#: the weak-noise factor of the mutants, the power check's fraction of the ledger's mu
DRAWS = 60
MUTANT_DRAWS = 40
CONFIDENCE = 0.999
FACTOR = 0.2
POWER_FRACTION = 0.8


def grouped_model(g, y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))  # prior only
    with pyro.plate("groups", 3):
        a = pyro.sample("a", dist.Normal(mu, 1.0))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(a[g], 1.0), obs=y)


def grouped_neighbours(row_d=Y, row_dprime=-Y, num_rows=30):
    g = torch.arange(num_rows) % 3
    d, dp = neighbours(row_d, row_dprime, num_rows)
    return (g, d), (g, dp)


#: ``"far"``: beyond the largest clip the default path's tuning can choose (its norm histogram's
#: top edge is 1e5), for its private start's clipped gradient sum
PAIRS = {"sum": (Y, -Y), "far": (1e6, -1e6), "count": (1e6, 0.0), "rule": (Y, math.nan), "tenth": (0.1, 0.0)}


def pair(kind="sum", num_rows=20, row=0):
    """``(D, D')`` as model arguments: row ``row`` set to the two values of ``PAIRS[kind]``."""
    a, b = PAIRS[kind]
    d, dp = neighbours(0.0, 0.0, num_rows)
    d[row], dp[row] = a, b
    return (d,), (dp,)


def _default_penalty():
    return pyro_dp.DPPenalty(model, epsilon=DEFAULT_EPSILON, **KW, inference="iterative")


def model_2d(y):
    """The Gaussian mean in two coordinates: the default path then also releases per-coordinate
    scales (``tune:scale``)."""
    mu = pyro.sample("mu", dist.Normal(torch.zeros(2, dtype=y.dtype), 10.0).to_event(1))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(mu, 1.0).to_event(1), obs=y)


def scale_neighbours(num_rows=20):
    """Row 0 at ``(1e9, 1e9)`` (log-gradient magnitudes above the bound ``A = 16`` of
    :func:`~pyro_dp.default_path.whitening.private_log_scales`) and at ``(1e-30, 1e-30)`` (below
    ``-A``, at the tuning's start at the origin): the row's vector of clipped log-magnitudes
    flips from ``+A`` to ``-A``, its counts stay (both gradients are non-zero)."""
    base = torch.linspace(-1.0, 1.0, 2 * num_rows, dtype=torch.float64).reshape(num_rows, 2)
    d, dp = base.clone(), base.clone()
    d[0], dp[0] = 1e9, 1e-30
    return (d,), (dp,)


#: case -> (kernel factory, (D, D'), labels audited or None for all, expected release kinds).
#: ``expected``: the number of release kinds the case audits (a change in a kernel's releases
#: shows up as a failure to update, not as a silent gap).
CASES = {
    "DPPenalty": (lambda: pyro_dp.DPPenalty(model, 0.3, llr_clip=1.0, noise_multiplier=NM, **KW), pair(), None, 1),
    "DPHMC": (lambda: pyro_dp.DPHMC(model, 0.1, 3, grad_clip=1.0, llr_clip=0.1, grad_noise_multiplier=NM,
                                    llr_noise_multiplier=NM, **KW), pair(), None, 2),
    "DPBarker": (lambda: pyro_dp.DPBarker(model, 100, 0.3, **KW), pair(num_rows=100), None, 1),
    "DPMinibatchPenalty": (lambda: pyro_dp.DPMinibatchPenalty(model, 20, 0.3, llr_clip=1.0, noise_multiplier=NM,
                                                              **KW), pair(), None, 1),
    "DPFastMH": (lambda: pyro_dp.DPFastMH(model, 0.3, lipschitz=1.0, full_batch=True, step_epsilon=0.99,
                                          step_delta=0.9, **KW), pair(), None, 1),
    "DPSGLD": (lambda: pyro_dp.DPSGLD(model, 20, 1e-2, grad_clip=5.0, noise_multiplier=NM, relation="substitute",
                                      **KW), pair(), None, 1),
    "DPExpFamPenalty": (lambda: pyro_dp.DPExpFamPenalty(model, gaussian_known_variance("mu", 1.0, -3.0, 3.0), 0.3,
                                                        noise_multiplier=NM, **KW),
                        tuple((x,) for x in neighbours(3.0, -3.0, 20)), None, 1),
    "DPMultiPartyPenalty[0]": (lambda: pyro_dp.DPMultiPartyPenalty(model, torch.arange(20) % 2, 0.3, llr_clip=1.0,
                                                                   noise_multiplier=[NM, 1.0], **KW),
                               pair(row=0), None, 2),
    "DPMultiPartyPenalty[1]": (lambda: pyro_dp.DPMultiPartyPenalty(model, torch.arange(20) % 2, 0.3, llr_clip=1.0,
                                                                   noise_multiplier=[NM, 1.0], **KW),
                               pair(row=1), None, 2),
    "DPGroupedPenalty": (lambda: pyro_dp.DPGroupedPenalty(grouped_model, 0.1, llr_clip=1.0, noise_multiplier=NM,
                                                          group_site="a", group_scale=0.3, **KW),
                         grouped_neighbours(), None, 1),
    "default:sum": (_default_penalty, pair("far"), ("tune:start",), 1),
    "default:count": (_default_penalty, pair("count"), ("tune:clip",), 2),
    "default:rule": (_default_penalty, pair("rule"), ("tune:rows",), 1),
    "default2d:scale": (lambda: pyro_dp.DPPenalty(model_2d, epsilon=DEFAULT_EPSILON, **KW, inference="iterative"), scale_neighbours(),
                        ("tune:scale",), 1),
}

#: the cases the tests also audit with ``draws="kernel"`` (a fresh kernel per draw): every
#: family's own releases (the default path's, deeper in its run, are replayed only)
KERNEL_CASES = tuple(c for c in CASES if not c.startswith("default"))

#: in the table only, not in the tests: the default path's own iterations (its control-variate
#: reference and residual releases) come after its 182 tuning releases, about a second per draw
TABLE_ONLY = {
    "default:own": (_default_penalty, pair("far"), ("",), 2),
}


def axis_neighbours(num_rows=20):
    r"""Row 0 at ``(1e6, 0)`` and at ``(0, 1e6)``: its clipped gradient at :math:`c e_1` and
    :math:`c e_2`, the pair that moves the sum of outer products :math:`g g^\top` the most
    (``tune:metric``, :func:`~pyro_dp.default_path.whitening.private_metric`): by :math:`\sqrt 2\,c^2`
    (the diagonal entries :math:`c^2` and :math:`0` swap), where its ledger assumes :math:`2c^2`."""
    (d,), (dp,) = scale_neighbours(num_rows)
    d[0], dp[0] = torch.tensor([1e6, 0.0]), torch.tensor([0.0, 1e6])
    return (d,), (dp,)


def far_2d(num_rows=20):
    r"""Row 0 at :math:`\pm 10^6` in both coordinates (the two-coordinate model's own releases)."""
    (d,), (dp,) = scale_neighbours(num_rows)
    d[0], dp[0] = 1e6, -1e6
    return (d,), (dp,)


class ReplayCase(NamedTuple):
    """A case of the replayed audits (``audit_releases(..., draws="replay")``).

    :ivar factory: the honest kernel's factory; ``data``: ``(D, D')``.
    :ivar labels: the ledger labels audited (``None``: all); ``occurrence``, ``num_iterations``,
        ``row``: as :func:`~pyro_dp.release_audit.audit_releases` takes them.
    :ivar expected: how many releases the case audits (a change in a kernel's releases shows up).
    :ivar mutant: ``"weak"`` (:func:`~pyro_dp.mutants.weak_noise`, every release) or
        ``"tuning"`` (:func:`tuning_weak_noise`, the private start and tuning only).
    :ivar ratio: where the ledger is looser than the release's noise at its true sensitivity,
        the exact ``mu_design / mu_ledger`` at the clip (the power check is then against
        ``mu_design``: :meth:`~pyro_dp.release_audit.ReleaseAudit.powerful_at`); ``"loose"``: a
        ratio below 0.8 that is not a closed form (DP Barker's); ``None``: the ledger is tight.
    :ivar at_clip: which releases the neighbours are at the clip for (default: all).
    :ivar num_draws: replayed draws per data set.
    :ivar design: where the ledger is loose, the closed form of ``mu_design`` at the clip,
        ``design(audit) -> mu`` (asserted to 1e-6: the neighbours move the noise-free release by
        its whole sensitivity, so that the power check against ``mu_design`` is one at the clip).
    """

    factory: Callable
    data: tuple
    labels: Optional[tuple]
    occurrence: object
    num_iterations: int
    row: Optional[int]
    expected: int
    mutant: str = "weak"
    ratio: object = None
    at_clip: Optional[Callable] = None
    num_draws: int = 1000
    design: Optional[Callable] = None


#: draws per data set of the replayed audits: the interval's half-width about 0.2 at
#: ``REPLAY_CONFIDENCE``
REPLAY_DRAWS = 1000
#: confidence of each replayed interval: some 50 checks per run of the tests, so a false alarm
#: of the honest kernels' every check together at most 2.5e-4 (5e-6 each)
REPLAY_CONFIDENCE = 0.99999
#: DP Barker's: its release's mu (0.142) is a third of its ledger's, and the power check is
#: against the former
BARKER_REPLAY_DRAWS = 2000
SQRT_HALF = 2 ** -0.5


#: DP Barker subsampled: a batch of 20 of 100 rows (rate 1/5) without replacement
BARKER_BATCH = 20
#: DP-Fast MH's minibatch mode: on 100 rows, c = 0.05 (C = 5, so that B ~ Poisson(5 + 5M) is
#: below K = 10 nine times in ten), Thm 2's per-step (0.99, 1e-3): Alg. 2's sigma_1 = 2.01
FASTMH_MINIBATCH = dict(lipschitz=0.05, lam=5.0, max_batch_size=10, step_epsilon=0.99, step_delta=1e-3)


def _barker_subsampled():
    return pyro_dp.DPBarker(model, BARKER_BATCH, 0.3, **KW)


def _fastmh_minibatch():
    return pyro_dp.DPFastMH(model, 0.3, **FASTMH_MINIBATCH, **KW)


def fastmh_sigma1(num_rows=100):
    r"""Alg. 2's :math:`\sigma_1` of :data:`FASTMH_MINIBATCH` on ``num_rows`` rows (public settings
    only): the minibatch release's noise is :math:`\sigma_1\Delta(\ell_1)`, so at the clip its
    :math:`\mu` given the batch is :math:`1/\sigma_1`."""
    from pyro_dp.accounting.algorithms import fastmh_step_privacy

    c = FASTMH_MINIBATCH
    return fastmh_step_privacy(c["step_epsilon"], c["step_delta"], c["max_batch_size"], 1.0 / num_rows).sigma1


def _sgld_default():
    return pyro_dp.DPSGLD(model, epsilon=DEFAULT_EPSILON, relation="substitute", **KW)


def _penalty_2d():
    return pyro_dp.DPPenalty(model_2d, epsilon=DEFAULT_EPSILON, **KW, inference="iterative")


def _families():
    """Every release of every kernel family's first two iterations (``occurrence="all"``): later
    occurrences — DP-HMC's second to seventh leapfrog gradients and second accept ratio, every
    kernel's second iteration."""
    counts = {"DPPenalty": 2, "DPHMC": 9, "DPBarker": 2, "DPMinibatchPenalty": 2, "DPFastMH": 2, "DPSGLD": 2,
              "DPExpFamPenalty": 2, "DPMultiPartyPenalty[0]": 4, "DPMultiPartyPenalty[1]": 4, "DPGroupedPenalty": 2}
    out = {}
    for name, count in counts.items():
        factory, data, _, _ = CASES[name]
        barker = name == "DPBarker"
        out[f"{name}:all"] = ReplayCase(factory, data, None, "all", 2, 0 if name[-2:] != "1]" else 1, count,
                                        ratio="loose" if barker else None, at_clip=AT_CLIP.get(name),
                                        num_draws=BARKER_REPLAY_DRAWS if barker else REPLAY_DRAWS)
    return out


#: the replayed cases (``tests/test_release_audit.py``): later occurrences of every family, the
#: subsampled releases given their batch, and the default path's releases deep in its run
REPLAY_CASES = {
    # subsampled (rate 1/4), audited given a batch that contains row 0, against 1/nm un-amplified
    "DPSGLD:poisson": ReplayCase(lambda: pyro_dp.DPSGLD(model, 5, 1e-2, grad_clip=5.0, noise_multiplier=NM,
                                                        relation="substitute", **KW), pair(), None, "all", 2, 0, 2),
    # (the first iteration only: the minibatch penalty's statistic is not linear in the row's
    # clipped ratio — the Poisson bound's clip_h, the without-replacement lambda* - sigma_b^2/2 —
    # so whether +-50 is its worst case depends on the batch's other rows; at the first
    # iteration it is within 0.8, at the second not: a neighbour choice, not a leak)
    "DPMinibatchPenalty:poisson": ReplayCase(lambda: pyro_dp.DPMinibatchPenalty(
        model, 5, 0.3, llr_clip=1.0, noise_multiplier=NM, **KW), pair(), None, 0, 1, 0, 1),
    "DPMinibatchPenalty:without_replacement": ReplayCase(lambda: pyro_dp.DPMinibatchPenalty(
        model, 5, 0.3, llr_clip=1.0, noise_multiplier=NM, subsampling="without_replacement", **KW), pair(), None,
        0, 1, 0, 1),
    # the default path: the last private-start step, the tuning's metric and centre, its own
    # iterations (the control-variate reference and residual releases; DP-SGLD's gradient)
    "default:rows": ReplayCase(_default_penalty, pair("rule"), ("tune:rows",), 0, 1, 0, 1, "tuning"),
    "default:clip": ReplayCase(_default_penalty, pair("count"), ("tune:clip",), 0, 1, 0, 2, "tuning"),
    "default:start": ReplayCase(_default_penalty, pair("far"), ("tune:start",), 0, 1, 0, 1, "tuning"),
    "default:start-last": ReplayCase(_default_penalty, pair("far"), ("tune:start",), -1, 1, 0, 1, "tuning"),
    "default:clip-last": ReplayCase(_default_penalty, pair("count"), ("tune:clip",), -1, 1, 0, 2, "tuning"),
    "default:own": ReplayCase(_default_penalty, pair("far"), ("",), "all", 2, 0, 3),
    "defaultHMC:own": ReplayCase(lambda: pyro_dp.DPHMC(model, epsilon=DEFAULT_EPSILON, **KW, inference="iterative"), pair("far"), ("",),
                                 "all", 2, 0, 3),
    "default2d:scale": ReplayCase(_penalty_2d, scale_neighbours(), ("tune:scale",), 0, 1, 0, 1, "tuning",
                                  ratio=SQRT_HALF),
    "default2d:metric": ReplayCase(_penalty_2d, axis_neighbours(), ("tune:metric",), 0, 1, 0, 1, "tuning",
                                   ratio=SQRT_HALF),
    "default2d:own": ReplayCase(_penalty_2d, far_2d(), ("",), 0, 1, 0, 2),
    "defaultSGLD:centre-direction": ReplayCase(_sgld_default, pair("far"), ("tune:centre",), 0, 1, 0, 2, "tuning",
                                               at_clip=lambda a: a.dim == 1),
    "defaultSGLD:centre-radii": ReplayCase(_sgld_default, pair("count"), ("tune:centre",), 0, 1, 0, 2, "tuning",
                                           at_clip=lambda a: a.dim > 1),
    "defaultSGLD:own": ReplayCase(_sgld_default, pair("far"), ("",), "all", 2, 0, 2),
    # DP Barker subsampled (20 of 100 rows), given a batch that contains row 0, against Thm 2's
    # un-amplified curve (mu 1.104; the ledger's is its amplification, Cor. 2): its noise allows
    # mu = (2/sqrt b)/sqrt(C - sigma_b^2), 0.32 to 0.45, so the power check is against that
    "DPBarker:subsampled": ReplayCase(_barker_subsampled, pair(num_rows=100), None, "all", 2, 0, 2,
                                      ratio="loose", design=lambda a: 2.0 / math.sqrt(BARKER_BATCH) / a.sigma),
    # DP-Fast MH's minibatch release (B < K), its batch, size and thinning pinned by the audit's
    # selection stream with row 0 in it once and kept: against the largest per-slot Gaussian mu
    # whose with-replacement amplification over B slots stays within the ledger's (0.99, 1e-3)
    # (about 1.0 to 1.2); its noise allows 1/sigma_1 = 0.50 (Alg. 2's calibration is looser)
    "DPFastMH:minibatch": ReplayCase(_fastmh_minibatch, pair(num_rows=100), None, "all", 2, 0, 2, ratio="loose",
                                     design=lambda a: 1.0 / fastmh_sigma1()),
}

#: which of a case's release kinds its neighbours are at the clip for (the others are audited
#: for soundness only): the multi-party kernel's row 0 is in party 0's release only, row 1 in
#: party 1's.
AT_CLIP = {
    "DPMultiPartyPenalty[0]": lambda a: a.event == pyro_dp.mechanisms.GaussianEvent(NM),
    "DPMultiPartyPenalty[1]": lambda a: a.event == pyro_dp.mechanisms.GaussianEvent(1.0),
}
REPLAY_CASES.update(_families())
#: the replayed cases whose releases are subsampled (rate below 1): audited given their batch
SUBSAMPLED = {"DPSGLD:poisson", "DPMinibatchPenalty:poisson", "DPMinibatchPenalty:without_replacement",
              "DPBarker:subsampled", "DPFastMH:minibatch"}


# --------------------------------------------------------------------------- mutants

class TuningOnlyScaledNoise(ScaledNoiseSource):
    """A :class:`~pyro_dp.mutants.ScaledNoiseSource` that scales its draws only while
    :attr:`tuning` is set (the kernel's private start and tuning), a mutant whose tuning releases
    carry ``factor`` times their ledger's noise and whose own iterations are honest."""

    tuning = False

    def standard_normal(self, shape=()):
        z = NoiseSource.standard_normal(self, shape)
        return z * self.noise_factor if self.tuning else z


def tuning_weak_noise(kernel, factor):
    """``kernel`` (not set up) as a mutant whose private start and tuning releases (those made in
    its ``_run_private_start``, ledger labels ``tune:*``) add ``factor`` times their ledger's noise;
    its iterations' releases are honest. For tests only."""
    base = type(kernel)

    def setup(self, warmup_steps, *args, **kwargs):
        base.setup(self, warmup_steps, *args, **kwargs)
        self._noise = TuningOnlyScaledNoise(self._noise, factor)

    def _run_private_start(self):
        self._noise.tuning = True
        try:
            base._run_private_start(self)
        finally:
            self._noise.tuning = False

    kernel.__class__ = type(f"TuningWeakNoise[{base.__name__}]", (base,),
                            {"setup": setup, "_run_private_start": _run_private_start})
    return kernel


# --------------------------------------------------------------------------- miss probabilities

def _scale(n):
    return math.sqrt(n / 2.0)


def prob_not_sound(mu_true, mu_ledger, n, confidence=CONFIDENCE):
    """Exact probability that the audit of a Gaussian release of true ``mu_true`` with ``n`` draws
    per data set reports *not sound* (lower bound above ``mu_ledger``): the statistic
    :math:`T = \\hat\\mu\\sqrt{n/2}` is noncentral-t (``2n - 2`` degrees of freedom, noncentrality
    ``mu_true sqrt(n/2)``), and the lower bound exceeds ``mu_ledger`` iff ``T`` exceeds the upper
    ``(1 - confidence) / 2`` quantile of the law at ``mu_ledger``."""
    from scipy.stats import nct

    df, alpha = 2 * n - 2, (1 - confidence) / 2
    t_crit = nct.ppf(1 - alpha, df, mu_ledger * _scale(n))
    return float(nct.sf(t_crit, df, mu_true * _scale(n)))


def prob_powerful(mu_true, mu_ledger, n, confidence=CONFIDENCE, fraction=POWER_FRACTION):
    """Exact probability that the audit reports *powerful* (upper bound at least ``fraction *
    mu_ledger``) for a release of true ``mu_true``."""
    from scipy.stats import nct

    df, alpha = 2 * n - 2, (1 - confidence) / 2
    t_crit = nct.ppf(alpha, df, fraction * mu_ledger * _scale(n))
    return float(nct.sf(t_crit, df, mu_true * _scale(n)))


# --------------------------------------------------------------------------- the table

def table(cases=None, num_draws=200):
    """One audit per case with ``num_draws`` draws per data set (the replayed cases: their own
    ``num_draws``, 1000 or 2000): the rows of docs/audit.md's tables."""
    import time
    import warnings

    from pyro_dp.release_audit import audit_releases

    warnings.simplefilter("ignore")
    print("| case | release (label @ site) | event | dim | mu ledger | mu design | mu measured [CI] "
          "| sound | powerful |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    every = {**CASES, **TABLE_ONLY, **{f"replay:{k}": v for k, v in REPLAY_CASES.items()}}
    for name in cases or every:
        t = time.time()
        if name.startswith("replay:"):
            c = every[name]
            out = audit_releases(c.factory, *c.data, num_draws=c.num_draws, confidence=REPLAY_CONFIDENCE,
                                 labels=c.labels,
                                 occurrence=c.occurrence, num_iterations=c.num_iterations, row=c.row, draws="replay")
            at_clip = c.at_clip or (lambda _: True)
        else:
            factory, (d, dp), labels, _ = every[name]
            out = audit_releases(factory, d, dp, num_draws=num_draws, confidence=CONFIDENCE, labels=labels)
            at_clip = AT_CLIP.get(name, lambda _: True)
        for a in out:
            if a.skipped is not None:
                print(f"| {name} | `{a.tag.replace('pyro_dp.', '')}` | skipped: {a.skipped} | | | | | | |")
                continue
            ev = type(a.event).__name__ + (f"({a.event.noise_multiplier:.3g})"
                                           if hasattr(a.event, "noise_multiplier") else "")
            if a.conditional:
                rec = a.recorded_event
                ledger = (f"rate {rec.sample_rate:g}" if hasattr(rec, "sample_rate") else
                          f"({rec.epsilon:g}, {rec.delta:g})" if hasattr(rec, "delta") else "amplified")
                ev += f", given its batch (ledger: {type(rec).__name__} {ledger}" + (
                    f"; selection seed {a.selection_seed})" if a.selection_seed is not None else ")")
            power = "yes" if a.powerful else "NO"
            if not a.powerful and a.mu_design < 0.8 * a.mu_ledger and at_clip(a):
                power += f" (vs design: {'yes' if a.powerful_at(a.mu_design) else 'NO'})"
            print(f"| {name} | `{a.tag.replace('pyro_dp.', '')}` | {ev} | {a.dim} | "
                  f"{a.mu_ledger:.3f} | {a.mu_design:.3f} | {a.mu:.3f} [{a.mu_low:.3f}, {a.mu_high:.3f}] | "
                  f"{'yes' if a.sound else 'NO'} | {power}{'' if at_clip(a) else ' (not at clip)'} |",
                  flush=True)
        print(f"<!-- {name}: {time.time() - t:.1f} s -->", flush=True)
