"""Benchmark: DPExpFamPenalty's time per iteration does not grow with n (Yıldırım & Ermiş 2019,
§3.3: "the computation load does not grow with n"), against DPPenalty's O(n) iteration.

Model: y_i ~ N(mu, 1), mu ~ N(0, 10^2), data clipped to the public domain [-4, 4]. For each n the
script times the one pass over the data (first iteration: per-row statistics, clip, sum) and
then the mean time of the following iterations; DPPenalty on the same data for comparison
(skipped above --penalty-max-n). Prints only; nothing is asserted.

    python benchmarks/expfam.py [--n 10000 100000 1000000] [--iters 300]
"""
import argparse
import time

import pyro
import pyro.distributions as dist
import torch
from pyro.infer.autoguide.initialization import init_to_mean

from pyro_dp import DPPenalty
from pyro_dp.kernels.expfam import DPExpFamPenalty, gaussian_known_variance


def model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 10.0))
    with pyro.plate("data", y.shape[0]) as idx:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[idx])


def timed(kernel, y, iters):
    kernel.setup(0, y)
    params = kernel.initial_params
    t0 = time.perf_counter()
    params = kernel.sample(params)  # first iteration: includes the one pass over the data
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(iters):
        params = kernel.sample(params)
    return first, (time.perf_counter() - t0) / iters, kernel.diagnostics()["acceptance rate"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--penalty-max-n", type=int, default=100_000)
    a = ap.parse_args()
    fam = gaussian_known_variance("mu", scale=1.0, low=-4.0, high=4.0)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, float64, {a.iters} iterations")
    print(f"{'n':>9} {'first it (pass) ms':>19} {'ExpFam ms/it':>13} {'acc':>5} {'DPPenalty ms/it':>16}")
    for n in a.n:
        g = torch.Generator().manual_seed(0)
        y = (torch.randn(n, generator=g, dtype=torch.float64) + 1.0).clamp(-4, 4)
        sd = n**-0.5
        ef = DPExpFamPenalty(model, fam, proposal_scale=2 * sd, noise_multiplier=0.1 * n**0.5,
                             init_strategy=init_to_mean, seed=0)  # Corollary 1: nm ∝ n^α, α = 1/2
        first, per_it, acc = timed(ef, y, a.iters)
        pen = "-"
        if n <= a.penalty_max_n:
            k = DPPenalty(model, 2 * sd, llr_clip=5.0, noise_multiplier=0.1 * n**0.5, init_strategy=init_to_mean, seed=0)
            pen = f"{timed(k, y, max(a.iters // 5, 20))[1] * 1e3:.3f}"
        print(f"{n:>9} {first * 1e3:>19.2f} {per_it * 1e3:>13.3f} {acc:>5.2f} {pen:>16}")


if __name__ == "__main__":
    main()
