r"""Issue 59, acceptance 3: non-location latents on the default path — a Student-t regression's
degrees of freedom ν, a Gamma regression's shape and a mixture weight
(:mod:`pyro_dp.models.latent_kinds`, N = 10⁴) — within 1 NUTS sd at ε = 10.

Per (model, kernel, seed): ``MCMC(K(model, epsilon=EPS, seed=s, noise_seed=1000 + s),
num_samples=S, warmup_steps=W)`` — the default path, with only the seeds added so that a change
of the default path can be compared on the same draws — against Pyro's NUTS on the same data
(500 warmup + 1 000 draws, seeded, cached in ``<out>/latent_kinds_nuts.json``); per latent
coordinate (constrained, as ``mcmc.get_samples()`` returns it) ``mean_err`` = |Δmean| / NUTS sd
and ``sd_ratio`` = sd / NUTS sd (``default_suite.compare``). One CSV row per coordinate
(``<out>/latent_kinds.csv``, appended run by run) and one summary line per run: the worst
``mean_err``, the range of ``sd_ratio``, whether a :class:`pyro_dp.SamplingWarning` fired.

Run: ``python benchmarks/latent_kinds.py --out results/latent_kinds`` (defaults: every model,
DPPenalty and DPHMC, ε = 10, seeds 0 and 1, 300 + 300 iterations, eager; about 1–3 minutes per
run on one thread); ``--models student_t --kernels DPHMC --seeds 0 --iters 300``.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import warnings

import torch
from pyro.infer import MCMC

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import default_suite as ds  # noqa: E402

import pyro_dp  # noqa: E402
from pyro_dp.mechanisms.noise import ReproducibleNoiseWarning  # noqa: E402
from pyro_dp.models.latent_kinds import LATENT_SUITE  # noqa: E402

FIELDS = ["model", "kernel", "eps", "seed", "iters", "coord", "mean", "sd", "nuts_mean", "nuts_sd", "mean_err",
          "sd_ratio", "warned", "seconds"]


def run(name: str, kernel: str, seed: int, *, eps: float, iters: int, out: str) -> dict:
    """One default-path run against the cached NUTS reference (module doc); returns its summary."""
    sm = LATENT_SUITE[name]
    args = sm.data()
    ref = ds.nuts_reference(f"latent-{name}", args, num_samples=1000, warmup_steps=500, n=sm.n, model=sm.model,
                            cache=os.path.join(out, "latent_kinds_nuts.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # seeded on purpose (module doc)
        k = ds.KERNELS[kernel](sm.model, epsilon=eps, seed=seed, noise_seed=1000 + seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = MCMC(k, num_samples=iters, warmup_steps=iters, disable_progbar=True)
        mcmc.run(*args)
    seconds = time.perf_counter() - t0
    warned = any(issubclass(w.category, pyro_dp.SamplingWarning) for w in caught)
    coords = ds.compare(mcmc.get_samples(), ref)
    path = os.path.join(out, "latent_kinds.csv")
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        if new:
            w.writeheader()
        for c, v in coords.items():
            w.writerow({"model": name, "kernel": kernel, "eps": eps, "seed": seed, "iters": iters, "coord": c,
                        **{x: round(v[x], 4) for x in ("mean", "sd", "nuts_mean", "nuts_sd", "mean_err", "sd_ratio")},
                        "warned": warned, "seconds": round(seconds, 1)})
    worst = max(coords, key=lambda c: coords[c]["mean_err"])
    ratios = [v["sd_ratio"] for v in coords.values()]
    return {"model": name, "kernel": kernel, "seed": seed, "worst": worst, "err": coords[worst]["mean_err"],
            "rmin": min(ratios), "rmax": max(ratios), "warned": warned, "seconds": seconds, "coords": coords}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/latent_kinds")
    p.add_argument("--models", default=",".join(LATENT_SUITE))
    p.add_argument("--kernels", default="DPPenalty,DPHMC")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--eps", type=float, default=10.0)
    p.add_argument("--iters", type=int, default=300, help="warmup and draws each (default 300)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    print(f"{'model':<10} {'kernel':<10} {'seed':>4} {'worst':<10} {'err/sd':>7} {'sd ratios':>12} warned  secs")
    for name in a.models.split(","):
        for kernel in a.kernels.split(","):
            for seed in (int(s) for s in a.seeds.split(",")):
                r = run(name, kernel, seed, eps=a.eps, iters=a.iters, out=a.out)
                print(f"{name:<10} {kernel:<10} {seed:>4} {r['worst']:<10} {r['err']:7.2f} "
                      f"{r['rmin']:5.2f}-{r['rmax']:<5.2f} {str(r['warned']):<7} {r['seconds']:5.0f}", flush=True)


if __name__ == "__main__":
    main()
