"""Benchmark: per-iteration cost of the subsampled kernels does not grow with N.

Times (median over 5 blocks) DPBarker (b = 1000) and DPMinibatchPenalty (Poisson and without
replacement, b = 1000) on logistic regression (d = 10) at N = 1e4, 1e5, 1e6, and prints the time
per iteration and the least-squares log-log slope of time against N (0: independent of N; a
kernel that reads all rows, like DPPenalty, would approach 1). Accounting is not timed (the
ledger only records events). No timing is asserted anywhere.

    python benchmarks/minibatch.py [--n 10000 100000 1000000] [--iters 200] [--b 1000]
"""
import argparse
import math
import time

import torch
from pyro.infer.autoguide.initialization import init_to_mean

from pyro_dp.demo import logistic_model
from pyro_dp.kernels.barker import DPBarker
from pyro_dp.kernels.minibatch_penalty import DPMinibatchPenalty


def data(n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    X = X / X.norm(dim=1, keepdim=True).clamp(min=1.0)
    y = (torch.rand(n, generator=g, dtype=torch.float64) < 0.5).double()
    return X, y


def kernels(n, b):
    common = dict(seed=0, init_strategy=init_to_mean)
    return {
        "DPBarker": DPBarker(logistic_model, b, 0.01, temperature=100.0 / n, **common),
        "MinibatchPenalty(poisson)": DPMinibatchPenalty(logistic_model, b, 0.01, llr_clip=1.0, noise_multiplier=2.0,
                                                        temperature=100.0 / n, **common),
        "MinibatchPenalty(wor)": DPMinibatchPenalty(logistic_model, b, 0.01, llr_clip=1.0, noise_multiplier=2.0,
                                                    temperature=100.0 / n, subsampling="without_replacement",
                                                    accountant="dp_rdp", **common),
    }


def time_kernel(k, X, y, iters, blocks=5):
    """Median over ``blocks`` blocks of the mean time per iteration (robust to other load)."""
    k.setup(0, X, y)
    params = k.initial_params
    for _ in range(5):  # warm up
        params = k.sample(params)
    per_block = max(iters // blocks, 1)
    times = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(per_block):
            params = k.sample(params)
        times.append((time.perf_counter() - t0) / per_block)
    return sorted(times)[len(times) // 2]


def slope(ns, ts):
    """Least-squares slope of log t against log N."""
    x = [math.log(n) for n in ns]
    y = [math.log(t) for t in ts]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--b", type=int, default=1000)
    ap.add_argument("--iters", type=int, default=200)
    a = ap.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, d={a.d}, b={a.b}, {a.iters} iterations")
    X, y = data(min(a.n), a.d)
    for k in kernels(min(a.n), a.b).values():  # process-wide warm-up (first-call overheads)
        time_kernel(k, X, y, 20)
    results = {}
    for n in a.n:
        X, y = data(n, a.d)
        for name, k in kernels(n, a.b).items():
            results.setdefault(name, []).append(time_kernel(k, X, y, a.iters))
    print(f"{'kernel':>28} " + " ".join(f"{'N=%.0e ms/it' % n:>14}" for n in a.n) + f" {'slope':>7}")
    for name, ts in results.items():
        print(f"{name:>28} " + " ".join(f"{t * 1e3:>14.3f}" for t in ts) + f" {slope(a.n, ts):>7.3f}")


if __name__ == "__main__":
    main()
