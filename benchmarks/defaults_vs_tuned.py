r"""The cost of not hand-tuning (#16 acceptance 4): MMD to the exact posterior of DP penalty and
DP-HMC on the thesis bananas at ε = 4, with the default path (``DPPenalty(model, epsilon=4,
delta=...)``, no other setting: private start, clips and scales bought from the budget) against
the papers' hand-tuned settings (``experiments._sampling.THESIS_PARAMS``, the settings of
the Fig. 6.4 reproduction, which start near the true parameter as the thesis does).

Both use the experiments' scale (n = 1e4 rows, δ = 0.1/n, thesis §6.4), the same number of
iterations (first half warm-up) and the same MMD as ``python3 -m experiments fig64`` (thesis §5.4,
against an exact reference sample of the posterior). The exact row is the MMD of an independent
exact sample of the same size: the floor. Printed: mean MMD over repeats per cell, and the ratio
default / hand-tuned. No assertion on the numbers.

Run: ``python benchmarks/defaults_vs_tuned.py`` (about 10 minutes) or ``--quick``.
"""
from __future__ import annotations

import argparse
import math
import pathlib
import statistics
import sys
import warnings

import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.evaluation import mmd
from pyro_dp.models import get_problem

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository's experiments/
from experiments._sampling import THESIS_PARAMS, exact_baseline, run_chain, to_device  # noqa: E402

warnings.simplefilter("ignore")

KERNELS = {"dp_penalty": pyro_dp.DPPenalty, "dp_hmc": pyro_dp.DPHMC}


def default_chain(algorithm, problem, ref, *, epsilon, n, iterations, repeat):
    """The default path: only the budget is given; the start is the kernel's own (data-free
    prior median, then the private tuning)."""
    delta = 0.1 / n
    k = KERNELS[algorithm](problem.model, epsilon=epsilon, delta=delta, temperature=problem.temperature,
                           seed=1000 * repeat + 7, jit_compile=True)
    warmup = iterations // 2
    mcmc = MCMC(k, num_samples=iterations - warmup, warmup_steps=warmup, disable_progbar=True)
    mcmc.run(*problem.args)
    x = mcmc.get_samples()["theta"].detach().double()
    eps = k.get_epsilon(delta)
    assert eps <= epsilon * (1 + 1e-9), (algorithm, eps)
    return float(mmd(x, ref)) if bool(torch.isfinite(x).all()) else math.nan


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one repeat, the 2-d bananas, fewer iterations")
    ap.add_argument("--epsilon", type=float, default=4.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    n = 10_000
    repeats = 1 if args.quick else 3
    iters = {"dp_penalty": 600 if args.quick else 2000, "dp_hmc": 60 if args.quick else 200}
    problems = ("flat-banana-2d", "tempered-banana-2d")
    print(f"epsilon = {args.epsilon}, n = {n}, delta = 0.1/n, {repeats} repeat(s); mean MMD to the exact posterior")
    print(f"{'problem':22s} {'kernel':11s} {'iterations':>10s} {'hand-tuned':>11s} {'default':>9s} {'ratio':>7s} "
          f"{'exact':>7s}")
    for pname in problems:
        p = to_device(get_problem(pname, n=n), torch.device("cpu"))
        ref = p.reference_sample(2000, seed=12345)
        for alg in ("dp_penalty", "dp_hmc"):
            tuned, default, exact = [], [], []
            for r in range(repeats):
                tuned.append(run_chain(alg, p, ref, epsilon=args.epsilon, n=n, num_iterations=iters[alg], repeat=r,
                                       params=THESIS_PARAMS[pname][alg])["mmd"])
                default.append(default_chain(alg, p, ref, epsilon=args.epsilon, n=n, iterations=iters[alg],
                                             repeat=r))
                exact.append(exact_baseline(ref, p, iters[alg] - iters[alg] // 2, r)["mmd"])
            t, d, e = (statistics.fmean(v) for v in (tuned, default, exact))
            print(f"{pname:22s} {alg:11s} {iters[alg]:10d} {t:11.4f} {d:9.4f} {d / t:7.2f} {e:7.4f}", flush=True)


if __name__ == "__main__":
    main()
