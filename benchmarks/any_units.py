r"""Issue 59, acceptance 2 ("any units"): the default suite's GLMs with their covariates on scales
1, 30 and 1 000 and (linear regression) the outcome on a scale of 10⁴, against the same models on
the standardised data, N = 10⁴, ε = 8.

The unscaled model is the standardised one written in the new units — the data
:math:`x_{ij} s_j`, :math:`y_i s_y` and every prior carried over (:math:`b_0\sim\mathcal N(0,
(5s_y)^2)`, :math:`\beta_j\sim\mathcal N(0,(5s_y/s_j)^2)`, :math:`\sigma\sim\mathrm{HalfNormal}(2s_y)`)
— so its posterior is exactly the standardised posterior mapped by :math:`b_0 s_y`,
:math:`\beta_j s_y/s_j`, :math:`\sigma s_y`: the DP draws are mapped back and compared with one
NUTS reference on the standardised data (500 + 1 000, seeded, cached in ``<out>/any_units_nuts.json``).
Errors in NUTS sds and sd ratios are invariant under that map, so a kernel whose results do not
depend on the units gives the same numbers on both data sets (to its own Monte Carlo error).

Per (model, data, kernel, seed): ``MCMC(K(model, epsilon=8, seed=s, noise_seed=1000+s),
num_samples=300, warmup_steps=300)`` — the default path, seeded. One CSV row per run
(``<out>/any_units.csv``: the worst |Δmean| / NUTS sd, its coordinate, the sd-ratio range, warned,
and every coordinate's signed error, from which ``--compare`` prints, per (model, kernel, seed),
the largest difference between the unscaled and the standardised run's means in NUTS sds).

Run: ``python benchmarks/any_units.py --out results/any_units [--models linear --kernels DPPenalty
--seeds 0,1 --iters 300]``.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import warnings

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import default_suite as ds  # noqa: E402

import pyro_dp  # noqa: E402
from pyro_dp.mechanisms.noise import ReproducibleNoiseWarning  # noqa: E402

#: column scales and (linear regression) the outcome's scale
COLUMN_SCALES = (1.0, 30.0, 1000.0)
OUTCOME_SCALE = 1e4
N = 10_000


def units_model(name: str, sx: torch.Tensor, sy: float):
    """The suite model ``name`` written in units where column j is ``sx[j]`` times and the outcome
    (linear only) ``sy`` times the standardised one, priors carried over (module doc)."""
    z = torch.zeros((), dtype=torch.float64)

    def coefficients():
        b0 = pyro.sample("b0", dist.Normal(z, 5.0 * sy))
        beta = pyro.sample("beta", dist.Normal(torch.zeros(3, dtype=torch.float64), 5.0 * sy / sx).to_event(1))
        return b0, beta

    if name == "linear":
        def model(X, y):
            b0, beta = coefficients()
            sigma = pyro.sample("sigma", dist.HalfNormal(z + 2.0 * sy))
            with pyro.plate("data", X.shape[0]):
                pyro.sample("y", dist.Normal(b0 + X @ beta, sigma), obs=y)
    elif name == "logistic":
        def model(X, y):
            b0, beta = coefficients()
            with pyro.plate("data", X.shape[0]):
                pyro.sample("y", dist.Bernoulli(logits=b0 + X @ beta), obs=y)
    else:
        def model(X, log_exposure, y):
            b0, beta = coefficients()
            with pyro.plate("data", X.shape[0]):
                pyro.sample("y", dist.Poisson(torch.exp(log_exposure + b0 + X @ beta)), obs=y)
    return model


def scales(name: str, unscaled: bool):
    sx = torch.tensor(COLUMN_SCALES if unscaled else (1.0,) * 3, dtype=torch.float64)
    sy = OUTCOME_SCALE if (unscaled and name == "linear") else 1.0
    return sx, sy


def run(name: str, unscaled: bool, kernel: str, seed: int, *, eps: float, iters: int, out: str) -> dict:
    sm = ds.get_suite_model(name)
    args = sm.make_data(N, 0)
    ref = ds.nuts_reference(f"{name}-n{N}", args, num_samples=1000, warmup_steps=500, n=N, model=sm.model,
                            cache=os.path.join(out, "any_units_nuts.json"))
    sx, sy = scales(name, unscaled)
    data = (args[0] * sx,) + tuple(args[1:-1]) + ((args[-1] * sy,) if name == "linear" else (args[-1],))
    model = units_model(name, sx, sy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # seeded on purpose
        k = ds.KERNELS[kernel](model, epsilon=eps, seed=seed, noise_seed=1000 + seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = MCMC(k, num_samples=iters, warmup_steps=iters, disable_progbar=True)
        mcmc.run(*data)
    seconds = time.perf_counter() - t0
    s = mcmc.get_samples()
    back = {"b0": s["b0"] / sy, "beta": s["beta"] * sx / sy}  # the standardised coordinates
    if "sigma" in s:
        back["sigma"] = s["sigma"] / sy
    coords = ds.compare(back, ref)
    warned = any(issubclass(w.category, pyro_dp.SamplingWarning) for w in caught)
    worst = max(coords, key=lambda c: coords[c]["mean_err"])
    ratios = [v["sd_ratio"] for v in coords.values()]
    row = {"model": name, "data": "unscaled" if unscaled else "standardised", "kernel": kernel, "eps": eps,
           "seed": seed, "iters": iters, "worst": worst, "err": round(coords[worst]["mean_err"], 3),
           "rmin": round(min(ratios), 3), "rmax": round(max(ratios), 3), "warned": warned,
           "spent": round(float(k.get_epsilon(1e-5)), 3), "seconds": round(seconds, 1),
           # signed (mean - NUTS mean) / NUTS sd per coordinate: the two data sets' runs compared coordinate-wise
           "signed": " ".join(f"{c}:{(v['mean'] - v['nuts_mean']) / v['nuts_sd']:+.3f}" for c, v in coords.items())}
    path = os.path.join(out, "any_units.csv")
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, list(row))
        if new:
            w.writeheader()
        w.writerow(row)
    return row


def compare(path: str) -> None:
    """Per (model, kernel, seed): both runs' worst error and sd-ratio range, and the largest
    |unscaled mean - standardised mean| over the coordinates, in NUTS sds (acceptance 2: <= 0.3)."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    runs = {(r["model"], r["kernel"], r["seed"], r["data"]): r for r in rows}
    print("| model | kernel | seed | standardised: worst (sd ratios) | unscaled: worst (sd ratios) | max |Δ| between |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (m, k, s, d), u in runs.items():
        st = runs.get((m, k, s, "standardised"))
        if d != "unscaled" or st is None:
            continue
        sig = [dict((x.split(":")[0], float(x.split(":")[1])) for x in r["signed"].split()) for r in (st, u)]
        gap = max(abs(sig[0][c] - sig[1][c]) for c in sig[0])
        cell = lambda r: f"{r['worst']} {float(r['err']):.2f} ({r['rmin']}-{r['rmax']}){' w' if r['warned'] == 'True' else ''}"
        print(f"| {m} | {k} | {s} | {cell(st)} | {cell(u)} | {gap:.2f} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/any_units")
    p.add_argument("--models", default="linear,logistic,poisson")
    p.add_argument("--kernels", default="DPPenalty,DPHMC")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--eps", type=float, default=8.0)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--compare", action="store_true", help="read <out>/any_units.csv and print the comparison")
    a = p.parse_args(argv)
    if a.compare:
        return compare(os.path.join(a.out, "any_units.csv"))
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    for name in a.models.split(","):
        for kernel in a.kernels.split(","):
            for seed in (int(x) for x in a.seeds.split(",")):
                for unscaled in (False, True):
                    r = run(name, unscaled, kernel, seed, eps=a.eps, iters=a.iters, out=a.out)
                    print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
