"""Benchmark: time of a kernel's privacy set-up under its default accountant.

With ``epsilon``, ``delta`` and ``num_iterations`` a kernel's ``setup`` calibrates its noise
multiplier (``_calibrate``: :func:`~pyro_dp.accounting.calibrate`) and computes how many
iterations the budget allows (``_setup_budget``: :func:`~pyro_dp.accounting.max_iterations`).
Both are searches over the accountant's ε; with a numerical accountant (PLD) each evaluation
costs 0.1-1 s. The script times the two parts for DPSGLD (add/remove and substitute) and the
Poisson DPMinibatchPenalty, and prints the calibrated noise multiplier and its ε under the
kernel's accountant (never above the target). ``--accountant`` overrides the default (e.g.
``rdp`` or ``pld`` to compare). No timing is asserted anywhere.

    python benchmarks/calibration.py [--accountant pld]
"""
import argparse
import time
import warnings

import pyro
import pyro.distributions as dist
import torch
from pyro.infer.autoguide.initialization import init_to_mean

from pyro_dp.accounting import planned_epsilon
from pyro_dp.kernels.minibatch_penalty import DPMinibatchPenalty
from pyro_dp.kernels.sgmcmc import DPSGLD

EPSILON, DELTA = 2.0, 1e-5


def model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 10.0))
    with pyro.plate("data", len(y)) as idx:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[idx])


def clear_caches():
    """Forget cached PLDs (``pyro_dp.accounting.adapters``) so each case is timed cold."""
    from pyro_dp.accounting import adapters

    for name in ("_gaussian_pld", "_composed_pld"):
        if hasattr(adapters, name):
            getattr(adapters, name).cache_clear()


def timed_setup(kernel, y):
    """Run ``kernel.setup`` and return the seconds spent in its two privacy searches."""
    clear_caches()
    t = {}
    for name in ("_calibrate", "_setup_budget"):
        f = getattr(kernel, name)

        def wrapped(f=f, name=name):
            t0 = time.perf_counter()
            f()
            t[name] = time.perf_counter() - t0

        setattr(kernel, name, wrapped)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SGLD's "adding the missing noise" note
        kernel.setup(0, y)
    return t["_calibrate"], t["_setup_budget"]


def cases(accountant):
    kw = dict(epsilon=EPSILON, delta=DELTA, init_strategy=init_to_mean, seed=0)
    if accountant:
        kw["accountant"] = accountant
    # (label, rows, kernel); step_size 1.0 makes the Langevin noise negligible: calibration decides
    for n, b, k, rel in ((10_000, 100, 300, "add_remove"), (10_000, 100, 1000, "add_remove"),
                         (10_000, 100, 1000, "substitute"), (1000, 100, 200, "add_remove")):
        public = dict(public_num_rows=n) if rel == "add_remove" else {}  # add/remove reads no N (#38)
        yield (f"DPSGLD {rel} q={b / n:g} T={k}", n,
               DPSGLD(model, b, 1.0, 1.0, relation=rel, num_iterations=k, **public, **kw))
    # a small step: the Langevin noise alone is private enough; the budget search runs long
    yield ("DPSGLD substitute q=0.01 T=1000, Langevin nm", 10_000,
           DPSGLD(model, 100, 1e-4, 1.0, relation="substitute", num_iterations=1000, **kw))
    # Heikkilä et al.'s GMM settings (quick): the Langevin noise (nm ~ 9.4) allows ~7.5e5 steps
    yield ("DPSGLD add_remove q=0.005 T=400, Langevin nm", 20_000,
           DPSGLD(model, 100, 5e-3, 3.0, temperature=100 / 20_000, num_iterations=400, relation="add_remove",
                  public_num_rows=20_000, **kw))
    yield ("DPMinibatchPenalty poisson q=0.1 T=1000", 1000,
           DPMinibatchPenalty(model, 100, 0.03, llr_clip=5.0, num_iterations=1000, **kw))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accountant", default=None, help="override every kernel's default accountant")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import dp_accounting.pld.privacy_loss_distribution  # noqa: F401  imports out of the timings
    import opacus.accountants.analysis.rdp  # noqa: F401
    print(f"target (epsilon, delta) = ({EPSILON}, {DELTA})")
    print(f"{'case':45s} {'acct':5s} {'noise mult.':>12s} {'eps(nm)':>8s} {'calibrate s':>12s} {'budget s':>9s}")
    for label, n, kernel in cases(args.accountant):
        y = torch.randn(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        t_cal, t_budget = timed_setup(kernel, y)
        eps = planned_epsilon(DELTA, kernel.num_iterations, kernel.planned_events()[1],
                              accountant=kernel.accountant, relation=kernel.relation)
        print(f"{label:45s} {kernel.accountant:5s} {kernel.noise_multiplier:12.6f} {eps:8.4f} "
              f"{t_cal:12.2f} {t_budget:9.2f}", flush=True)


if __name__ == "__main__":
    main()
