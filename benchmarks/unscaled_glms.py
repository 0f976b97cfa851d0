r"""Issue #40, acceptance 2 (second half): the suite's linear, logistic and Poisson regressions
with their three covariates on their own scales, against the same models with the covariates in
the unit ball.

Data: :mod:`pyro_dp.models.default_suite`'s generator (N = 5·10⁴, data seed ``SEED``), then the
three feature columns multiplied by ``SCALES`` = (1, 30, 1 000) — the same outcomes, so the
coefficients of the scaled columns shrink by the same factors; the model (its N(0, 5²) priors
included) is the suite's, unchanged. ``--scaled``: the suite's own data, covariates in the unit
ball (scales 1, 1, 1).

Per run: the NUTS reference (Pyro, 500 warmup + 1 000 draws, seeded; cached in ``--cache``) —
for the unscaled data run in the unit-ball coordinates with the coefficients' prior carried over
(:math:`\beta = s\beta'`, so the prior N(0, 5²) on :math:`\beta'_j` is N(0, (5 s_j)²) on
:math:`\beta_j`) and its draws mapped back by :math:`\beta' = \beta/s`: the same posterior, exactly,
where NUTS itself on the unscaled coordinates did not converge (2026-11-28: sd of
:math:`\sigma` 0.14 against 0.002, warmup's diagonal mass matrix against scales spread by 10⁶;
``tests/test_unscaled_benchmark.py`` checks the identity) —, then the card's line ``MCMC(K(model, epsilon=EPS), num_samples=1000,
warmup_steps=500)`` with nothing else given; one JSON line with the worst |Δmean| / NUTS sd, the
range of sd / NUTS sd (constrained coordinates, ``default_suite.compare``), the smallest ESS and
whether the kernel warned. Results: ``docs/tuning.md``, "Control variates" (acceptance 2).

Run: ``python benchmarks/unscaled_glms.py MODEL KERNEL EPS SEED [--scaled]``
(e.g. ``poisson DPPenalty 8 0``; KERNEL one of DPPenalty, DPHMC, DPSGLD). Collect the lines of
several runs in a file and ``python benchmarks/warning_rates.py FILE`` counts how often the
runs within 0.5 sd and those beyond 1 sd warned (issue 40, acceptance 4).
"""
import argparse
import json
import os
import sys
import time
import warnings

import torch
import pyro.distributions as dist
from pyro.infer import MCMC
from pyro.poutine.messenger import Messenger
from pyro.ops.stats import effective_sample_size

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import default_suite as ds  # noqa: E402

import pyro_dp  # noqa: E402
from pyro_dp.checks import linear_memory_ess  # noqa: E402

SCALES = (1.0, 30.0, 1000.0)


def scaled_data(name: str, seed: int, scaled: bool) -> tuple:
    """The suite model's arguments with the feature columns (always the first argument)
    multiplied by :data:`SCALES` (by 1 with ``scaled``)."""
    args = ds.get_suite_model(name).data(seed=seed)
    X = args[0] * torch.as_tensor((1.0,) * 3 if scaled else SCALES, dtype=args[0].dtype)
    return (X,) + tuple(args[1:])


class _PriorScale(Messenger):
    """The coefficients' prior N(0, 5²) of the suite model, widened per column to N(0, (5 s_j)²)."""

    def __init__(self, scales):
        super().__init__()
        self.scales = scales

    def _pyro_sample(self, msg):
        if msg["name"] == "beta":
            msg["fn"] = dist.Normal(torch.zeros_like(self.scales), 5.0 * self.scales).to_event(1)


def reference(name: str, seed: int, scaled: bool, cache: str) -> dict:
    """The NUTS reference on the data of :func:`scaled_data` (module doc: for the unscaled data,
    NUTS in the unit-ball coordinates, its ``beta`` draws divided by the scales)."""
    sm = ds.get_suite_model(name)
    args = sm.data(seed=seed)
    if scaled:
        return ds.nuts_reference(f"{name}-scaled-dseed{seed}", args, num_samples=1000, warmup_steps=500,
                                 cache=cache, n=sm.n, model=sm.model)
    s = torch.as_tensor(SCALES, dtype=args[0].dtype)

    def unit_model(*a):
        with _PriorScale(s):
            return sm.model(*a)

    ref = ds.nuts_reference(f"{name}-unscaled-dseed{seed}-unitcoords", args, num_samples=1000, warmup_steps=500,
                            cache=cache, n=sm.n, model=unit_model)
    out = {"mean": dict(ref["mean"]), "sd": dict(ref["sd"])}
    for j in range(len(SCALES)):  # beta'_j = beta_j / s_j
        out["mean"][f"beta[{j}]"] /= SCALES[j]
        out["sd"][f"beta[{j}]"] /= SCALES[j]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", choices=["linear", "logistic", "poisson"])
    p.add_argument("kernel", choices=["DPPenalty", "DPHMC", "DPSGLD"])
    p.add_argument("eps", type=float)
    p.add_argument("seed", type=int)
    p.add_argument("--scaled", action="store_true", help="covariates in the unit ball (scales 1, 1, 1)")
    p.add_argument("--warmup", type=int, default=500, help="warmup_steps of the DP run (default 500)")
    p.add_argument("--plain", action="store_true", help="control_variate=False (DPPenalty, DPHMC: the plain test)")
    p.add_argument("--cache", default=os.environ.get("UNSCALED_REF", "results/unscaled_glms_nuts.json"))
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    sm = ds.get_suite_model(a.model)
    args = scaled_data(a.model, a.seed, a.scaled)
    tag = "scaled" if a.scaled else "unscaled"
    ref = reference(a.model, a.seed, a.scaled, a.cache)
    kernel = getattr(pyro_dp, a.kernel)(sm.model, epsilon=a.eps, **({"control_variate": False} if a.plain else {}))
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = MCMC(kernel, num_samples=1000, warmup_steps=a.warmup, disable_progbar=True)
        mcmc.run(*args)
    seconds = time.perf_counter() - t0
    samples = mcmc.get_samples()
    coords = ds.compare(samples, ref)
    warned = [f"{type(w.message).__name__}: {str(w.message)[:120]}" for w in caught
              if issubclass(w.category, pyro_dp.SamplingWarning)]
    with linear_memory_ess():
        ess = min(float(effective_sample_size(v.reshape(1, v.shape[0], -1), 0, 1).min()) for v in samples.values())
    errs = [c["mean_err"] for c in coords.values()]
    ratios = [c["sd_ratio"] for c in coords.values()]
    print(json.dumps(dict(model=a.model, data=tag, kernel=a.kernel, eps=a.eps, seed=a.seed, warmup=a.warmup, plain=a.plain,
                          err=max(errs),
                          rmin=min(ratios), rmax=max(ratios), right=ds.criterion(coords), ess=ess,
                          warned=bool(warned), spent=kernel.get_epsilon(1e-5), seconds=round(seconds, 1),
                          worst=max(coords, key=lambda k: coords[k]["mean_err"]), warnings=warned,
                          signed={k: round((c["mean"] - c["nuts_mean"]) / c["nuts_sd"], 3) for k, c in coords.items()},
                          centre_ratio=getattr(getattr(getattr(kernel, "init", None), "result", None), "centre_ratio",
                                               None))))


if __name__ == "__main__":
    main()
