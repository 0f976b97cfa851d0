"""Every kernel family on one small problem, for the mutation tests of the audit
(``tests/test_audit_mutants.py``) and the power table of ``docs/audit.md``
(``python -m tests.audit_cases``).

The model is a Gaussian mean (:math:`y_i \\sim N(\\mu, 1)`, :math:`\\mu \\sim N(0, 10^2)`) on
``N`` rows, started at the prior mean; :math:`D` and :math:`D'` differ in row 0 only, set to
:math:`+Y` and :math:`-Y` with :math:`Y` far beyond every clip bound, so the row's clipped
term flips from one end of its clip interval to the other: the full sensitivity of every
release (the worst case the ledger is computed for).
"""
import pyro
import pyro.distributions as dist
import torch
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
from pyro_dp.kernels.expfam import gaussian_known_variance

N = 20
Y = 50.0


def model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 10.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])


def neighbours(row_d=Y, row_dprime=-Y, num_rows=N):
    """D and D' = D with row 0 replaced (the substitute relation every kernel below uses)."""
    base = torch.linspace(-1.0, 1.0, num_rows, dtype=torch.float64)
    d, dp = base.clone(), base.clone()
    d[0], dp[0] = row_d, row_dprime
    return d, dp


KW = dict(init_strategy=init_to_mean)

#: DP Barker's noise is fixed by its test (C = 2) and its clip is sqrt(b)/N: with b = N = 100
#: its claim is 0.98 at delta = 0.05 (2.85 with b = N = 20, beyond what 100 runs can refute).
BARKER_ROWS = 100

#: family -> (factory, statistic, (row on D, row on D'), number of rows). Every Gaussian
#: release has noise multiplier 2 (one release: eps = 0.51 at delta = 0.05); batches are the
#: whole data set (q = 1), so the audited row is in every release. The multi-party kernel's
#: audited row 0 is party 0's, so the claim audited is party 0's (``CLAIMS``); party 1's
#: release (noise multiplier 0.5) adds a quarter of party 0's noise to the accept test, which
#: with equal noise would hide a factor 1/sqrt(2) of party 0's signal.
FAMILIES = {
    "DPPenalty": (lambda: pyro_dp.DPPenalty(model, 0.3, llr_clip=1.0, noise_multiplier=2.0, **KW), "accept", (Y, -Y),
                  N),
    "DPExpFamPenalty": (lambda: pyro_dp.DPExpFamPenalty(model, gaussian_known_variance("mu", 1.0, -3.0, 3.0), 0.3,
                                                        noise_multiplier=2.0, **KW), "accept", (3.0, -3.0), N),
    "DPMultiPartyPenalty": (lambda: pyro_dp.DPMultiPartyPenalty(model, torch.arange(N) % 2, 0.3, llr_clip=1.0,
                                                                noise_multiplier=[2.0, 0.5], **KW), "accept", (Y, -Y),
                            N),
    "DPMinibatchPenalty": (lambda: pyro_dp.DPMinibatchPenalty(model, N, 0.3, llr_clip=1.0, noise_multiplier=2.0,
                                                              **KW), "accept", (Y, -Y), N),
    "DPBarker": (lambda: pyro_dp.DPBarker(model, BARKER_ROWS, 0.3, **KW), "accept", (Y, -Y), BARKER_ROWS),
    "DPFastMH": (lambda: pyro_dp.DPFastMH(model, 0.3, lipschitz=1.0, full_batch=True, step_epsilon=0.99,
                                          step_delta=0.2, **KW), "accept", (Y, -Y), N),
    "DPHMC": (lambda: pyro_dp.DPHMC(model, 0.1, 3, grad_clip=1.0, llr_clip=0.1, grad_noise_multiplier=2.0,
                                    llr_noise_multiplier=10.0, **KW), "sample", (Y, -Y), N),
    "DPSGLD": (lambda: pyro_dp.DPSGLD(model, N, 1e-2, grad_clip=5.0, noise_multiplier=2.0, relation="substitute",
                                      **KW), "sample", (Y, -Y), N),
    "DPSGNHT": (lambda: pyro_dp.DPSGNHT(model, N, 1e-2, grad_clip=4.0, noise_multiplier=2.0, relation="substitute",
                                        **KW), "sample", (Y, -Y), N),
}


#: The claim audited, where it is finer than the kernel's overall (worst-party) epsilon.
CLAIMS = {"DPMultiPartyPenalty": lambda k, delta: k.get_epsilon(delta, party=0)}


# --------------------------------------------------------------------------- aiming and power

#: The audit's settings in the mutation tests. delta: the ledger's claim is a curve eps(delta);
#: at delta = 0.05 the claim of one release with noise multiplier 2 is eps = 0.51 (1.99 at
#: delta = 1e-5), while the audit's numerator loses only 0.05: a noise shortfall shows most
#: clearly there (docs/audit.md, "Power"). confidence 0.999: an honest kernel fails with
#: probability at most 1e-3 by the validity of the bound alone, whatever its accept rates.
RUNS = 200
DELTA = 0.05
CONFIDENCE = 0.999
FACTOR = 0.2


def aim(factory, d, dprime, statistic):
    """``(public seed, thresholds)`` for an audit of ``factory`` on ``(d, dprime)``, fixed from
    the data and the public draws alone (never from audited runs), as the audit's validity
    requires: for the accept bit, the first seed under which the noise-free kernel accepts on
    one data set and not on the other; for a sample, seed 0 and the midpoint of the two
    noise-free samples."""
    from pyro_dp.testing import noise_free_scores, separating_seed

    if statistic == "accept":
        return separating_seed(factory, d, dprime), [0.5]
    a, b = noise_free_scores(factory, d, dprime, seed=0, statistic=statistic)
    return 0, [(a + b) / 2]


def prob_bound_above(p0, p1, n, claim, delta=DELTA, confidence=CONFIDENCE):
    """Exact probability that :func:`pyro_dp.audit.audit` with one fixed threshold reports a
    lower bound above ``claim`` when the event ``score > t`` has probability ``p0`` on D and
    ``p1`` on D' in each of ``n`` independent runs per data set: the sum of the two binomial
    laws over every pair of counts whose bound exceeds ``claim``."""
    import numpy as np
    from scipy.stats import binom

    from pyro_dp.audit import _log_ratios

    k = np.arange(n + 1)
    k0, k1 = np.meshgrid(k, k, indexing="ij")
    r = _log_ratios(k0.ravel(), n, k1.ravel(), n, (1 - confidence) / 2, delta).max(axis=1).reshape(n + 1, n + 1)
    w = np.outer(binom.pmf(k, n, p0), binom.pmf(k, n, p1))
    return float(w[np.maximum(r, 0.0) > claim].sum())


def conservative(k0, k1, n, toward):
    """Pilot counts ``k0/n``, ``k1/n`` moved to the ends of their 99.9% Clopper-Pearson
    intervals: ``toward="each other"`` (a mutant looks as weak as the pilot allows: its miss
    probability is not understated) or ``"apart"``."""
    from pyro_dp.audit import clopper_pearson

    (lo0, hi0), (lo1, hi1) = clopper_pearson(k0, n, 0.999), clopper_pearson(k1, n, 0.999)
    if (k0 > k1) == (toward == "apart"):
        return hi0, lo1
    return lo0, hi1


def power_table(families=None, factors=(1 / 2, 1 / 3, 1 / 5, 1 / 10, 1 / 20), pilot_runs=1000):
    """For each family: the claim, and for the honest kernel and each mutant factor, the pilot's
    counts and the probability that an audit of ``RUNS`` runs fails, from pilot audits of
    ``pilot_runs`` runs: for a mutant ``1 -`` its miss probability, at the pilot's rates moved
    toward each other (:func:`conservative`); for the honest kernel its false-fail probability at
    the pilot's rates (at most ``1 - CONFIDENCE`` whatever the rates: the bound is valid)."""
    import warnings

    from pyro_dp.audit import audit
    from pyro_dp.testing import weak_noise

    warnings.simplefilter("ignore")
    rows = []
    for name in families or FAMILIES:
        factory, statistic, (rd, rdp), n = FAMILIES[name]
        d, dp = neighbours(rd, rdp, n)
        seed, thr = aim(factory, d, dp, statistic)
        row = {"family": name, "seed": seed, "thresholds": thr}
        for f in (1.0,) + tuple(factors):
            make = factory if f == 1.0 else (lambda f=f: weak_noise(factory(), f))
            r = audit(make, d, dp, statistic=statistic, num_runs=pilot_runs, delta=DELTA, confidence=CONFIDENCE,
                      seed=seed, thresholds=thr, claim=CLAIMS.get(name))
            row["claim"] = r.reported_epsilon
            if f == 1.0:  # the point estimate (an honest kernel's true rates obey its claim; the bound's
                p0, p1 = r.counts[0] / pilot_runs, r.counts[1] / pilot_runs  # validity caps this at 1 - CONFIDENCE)
            else:
                p0, p1 = conservative(*r.counts, pilot_runs, "each other")
            row[f] = (r.counts, prob_bound_above(p0, p1, RUNS, r.reported_epsilon))
        rows.append(row)
        print(row, flush=True)
    return rows


if __name__ == "__main__":
    import sys

    power_table(sys.argv[1].split(",") if len(sys.argv) > 1 else None)
