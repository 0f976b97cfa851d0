"""Benchmark: per-iteration cost of DPSGLD / DPSGNHT does not grow with N.

Each iteration Poisson-samples ~b rows (``poisson_subsample``: a Binomial count and a
uniform subset, O(b log b)), evaluates their per-example gradients through the Pyro model
(``vmap(grad)`` on the injected indices), clips, sums and adds noise. Nothing touches all N
rows. The script times iterations for several N at fixed expected batch size b and prints
ms/iteration and the ratio to the smallest N; it also times the two parts of the work.
No timing is asserted anywhere.

    python benchmarks/sgmcmc.py [--n 10000 100000 1000000] [--batch 100] [--iters 100]
"""
import argparse
import time

import pyro
import pyro.distributions as dist
import torch
from pyro.infer.autoguide.initialization import init_to_mean

from pyro_dp.kernels.sgmcmc import DPSGLD, DPSGNHT
from pyro_dp.kernels.subsampling import poisson_subsample


def logistic_model(X, y):
    """Bayesian logistic regression, rows indexed by the plate's indices."""
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype), 2.0).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("obs", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def data(n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(X[:, 0])).double()
    return X, y


def per_iteration(kernel, X, y, iters, warm=5):
    kernel.setup(0, X, y)
    params = kernel.initial_params
    for _ in range(warm):
        params = kernel.sample(params)
    t0 = time.perf_counter()
    for _ in range(iters):
        params = kernel.sample(params)
    return (time.perf_counter() - t0) / iters


def parts(kernel, n, b, iters):
    """Time of the subsample draw and of the per-example gradients of ~b rows."""
    g = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    for _ in range(iters):
        idx = poisson_subsample(g, n, b / n)
    t_sub = (time.perf_counter() - t0) / iters
    z = kernel._state.z
    t0 = time.perf_counter()
    for _ in range(iters):
        kernel.lik.per_example_grad(z, idx)
    return t_sub, (time.perf_counter() - t0) / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, d={args.d}, expected batch b={args.batch}, float64")
    print(f"{'kernel':8s} {'N':>9s} {'ms/iter':>9s} {'x N_min':>8s} {'subsample ms':>13s} {'grads ms':>9s}")
    for name, cls, extra in (("DPSGLD", DPSGLD, {}), ("DPSGNHT", DPSGNHT, {"thermostat": 1.0})):
        base = None
        for n in args.n:
            X, y = data(n, args.d)
            kernel = cls(logistic_model, args.batch, 1e-4, 1.0, seed=0, init_strategy=init_to_mean, **extra)
            t = per_iteration(kernel, X, y, args.iters)
            base = base or t
            t_sub, t_grad = parts(kernel, n, args.batch, args.iters)
            print(f"{name:8s} {n:9d} {1e3 * t:9.3f} {t / base:8.2f} {1e3 * t_sub:13.3f} {1e3 * t_grad:9.3f}")


if __name__ == "__main__":
    main()
