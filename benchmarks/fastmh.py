"""Benchmark: DPFastMH's per-iteration cost does not grow with N while B < K.

Logistic regression (``pyro_dp.demo.logistic_model``, features in the unit ball, so the
log-likelihood is 1-Lipschitz: c = 1). At each N the proposal scale is set so that
C E[M] = N c s E||xi|| stays fixed (TunaMH's regime: M ~ 1/C), hence E[B] = lambda + C E[M]
is the same at every N and B < K almost always. The script prints time per iteration of the
minibatch kernel and of the full-batch variant (which reads all N rows), the mean batch size
against lambda + C E[M], and the log-log slope of time against N (0: flat; 1: linear).
No timing is asserted anywhere.

    python benchmarks/fastmh.py [--n 10000 100000 1000000] [--iters 300]
"""
import argparse
import math
import time

import numpy as np
import torch
from pyro.infer.autoguide.initialization import init_to_mean
from scipy.special import gammaln

from pyro_dp.demo import logistic_model, make_logistic_data
from pyro_dp.kernels.fastmh import DPFastMH


def mean_chi(d):
    """E||xi|| for xi ~ N(0, I_d)."""
    return math.sqrt(2.0) * math.exp(gammaln((d + 1) / 2) - gammaln(d / 2))


def time_kernel(kernel, X, y, iters):
    kernel.setup(0, X, y)
    params = kernel.initial_params
    for _ in range(5):  # warm up
        params = kernel.sample(params)
    t0 = time.perf_counter()
    for _ in range(iters):
        params = kernel.sample(params)
    return (time.perf_counter() - t0) / iters, kernel.diagnostics()


def slope(ns, ts):
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--full-iters", type=int, default=20)
    ap.add_argument("--cm", type=float, default=50.0, help="target C E[M]")
    ap.add_argument("--lam", type=float, default=50.0)
    ap.add_argument("--K", type=int, default=300, help="minimum K (raised to eps N / 6)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (on a loaded 2-core machine torch's parallel BCE took 16 ms "
                         "per call for 100 rows with 2 threads, 0.2 ms with 1)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {a.iters} iterations, "
          f"lambda={a.lam}, C E[M]={a.cm}, K={a.K}")
    print(f"{'N':>9} {'scale':>10} {'E[B] theory':>11} {'mean B':>8} {'full frac':>9} "
          f"{'minibatch ms/it':>15} {'full-batch ms/it':>16}")
    ns, t_mb, t_fb = [], [], []
    for n in a.n:
        X, y, _ = make_logistic_data(n, seed=0)
        d = X.shape[1]
        c = 1.0
        scale = a.cm / (n * c * mean_chi(d))
        common = dict(lipschitz=c, step_epsilon=0.5, step_delta=1e-9, init_strategy=init_to_mean, seed=0)
        # K >= eps N / 6 (the paper's Sec. 6.2 recommendation; smaller K voids Thm 2 at large N)
        kk = max(a.K, math.ceil(0.5 * n / 6))
        k_mb = DPFastMH(logistic_model, scale, lam=a.lam, max_batch_size=kk, **common)
        t1, diag = time_kernel(k_mb, X, y, a.iters)
        k_fb = DPFastMH(logistic_model, scale, full_batch=True, **common)
        t2, _ = time_kernel(k_fb, X, y, a.full_iters)
        ns.append(n), t_mb.append(t1), t_fb.append(t2)
        print(f"{n:>9} {scale:>10.3g} {a.lam + a.cm:>11.1f} {diag['mean batch size']:>8.1f} "
              f"{diag['full-batch fraction']:>9.3f} {1e3 * t1:>15.3f} {1e3 * t2:>16.3f}")
    if len(ns) > 1:
        print(f"log-log slope of time vs N: minibatch {slope(ns, t_mb):+.3f}, full batch {slope(ns, t_fb):+.3f}")


if __name__ == "__main__":
    main()
