"""Timing channel of one bad row (issue 58): an iteration's cost with and without one row whose
group id is out of range, and the cost of the tensor guard around every model call.

A model that indexes a latent vector with a group id from the data (``a[g[i]]``) raised for the
whole batch when one id was out of range; the rows were then bisected to find it (NaN terms for
it), and an iteration took several times longer: a distinguisher from wall time alone. The tensor
guard (``pyro_dp.reach.CallGuard``) now clamps such an index elementwise and makes the row's term
NaN, with no exception, so the work done does not depend on the row.

Prints, for DP-HMC's iteration (eager; the per-row gradient and ratio passes), the median time
with one bad row over the median time without (target: within 1.1), and the median time with the
guard over the time with the guard switched off (its overhead). Ratios are measured in the same
run, interleaved, as CPU time of the (single) torch thread, which load from other work on the
machine does not inflate; timings are never asserted.

    python benchmarks/raising_row.py [--rows 20000] [--reps 15]
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import pyro
import pyro.distributions as dist
import torch
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
import pyro_dp.reach as reach

GROUPS = 20


def model(g, x, y):
    a = pyro.sample("a", dist.Normal(torch.zeros(GROUPS, dtype=x.dtype), 1.0).to_event(1))
    b = pyro.sample("b", dist.Normal(torch.tensor(0.0, dtype=x.dtype), 1.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(a[g[i]] + b * x[i], 1.0), obs=y[i])


def data(n, bad: bool):
    gen = torch.Generator().manual_seed(0)
    g = torch.randint(0, GROUPS, (n,), generator=gen)
    x = torch.randn(n, generator=gen, dtype=torch.float64)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    if bad:
        g[n // 2] = GROUPS + 79  # one id out of range
    return g, x, y


def kernel():
    return pyro_dp.DPHMC(model, 0.01, 3, 2.0, 2.0, 5.0, 3.0, init_strategy=init_to_mean, jit_compile=False, seed=0,
                         noise_seed=1)


def iteration_time(args, reps):
    k = kernel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k.setup(0, *args)
        params = k.sample(k.initial_params)  # warm
        out = []
        for _ in range(reps):
            t = time.thread_time()
            params = k.sample(params)
            out.append(time.thread_time() - t)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--reps", type=int, default=15)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    clean, bad = data(a.rows, False), data(a.rows, True)
    times = {"clean": [], "bad row": [], "guard off": []}
    original = reach.CallGuard.__torch_function__
    for _ in range(3):  # interleaved rounds, so load from other work falls on all three alike
        times["clean"] += iteration_time(clean, a.reps)
        times["bad row"] += iteration_time(bad, a.reps)
        reach.CallGuard.__torch_function__ = lambda self, func, types_, args=(), kwargs=None: func(*args,
                                                                                                     **(kwargs or {}))
        try:
            times["guard off"] += iteration_time(clean, a.reps)
        finally:
            reach.CallGuard.__torch_function__ = original
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"DP-HMC (L=3, eager) on {a.rows} rows, {GROUPS} groups: median iteration {1e3 * med['clean']:.2f} ms")
    print(f"one row's group id out of range / none: {med['bad row'] / med['clean']:.3f}")
    print(f"tensor guard on / off (its overhead):  {med['clean'] / med['guard off']:.3f}")


if __name__ == "__main__":
    main()
