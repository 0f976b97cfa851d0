r"""The cost of the private tensor type (issue 58, :mod:`pyro_dp.private`): seconds per iteration of
DPPenalty and DPHMC on the thesis banana (Räisä 2021 thesis §6.1, d = 2; ``benchmarks/compiled.py``'s
hyperparameters), eager and compiled, with the wrapping on (the default) and off
(:func:`pyro_dp.private.tainting`), measured in the same process in alternating blocks (the
median of ``--blocks`` blocks a side, so that a drift of the shared machine's speed falls on both).
Prints the ratio on/off per row. No assertion on timings.

Run: ``python benchmarks/private_overhead.py`` (``--n 100000`` as benchmarks/compiled.py; the
default 20000 keeps it to a few minutes; ``--backend graph`` for the traced graph run as is instead
of the default inductor). The eager rows pass ``jit_compile=False`` (the kernels' default chooses
by a cost model, :mod:`pyro_dp.kernels.auto_compile`).
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

import pyro_dp
from pyro_dp.models.banana import banana_model, make_banana_data
from pyro_dp.private import tainting

warnings.simplefilter("ignore")


def steady(make, X, init, on: bool):
    """A kernel set up and run a few iterations with the wrapping ``on``, and ``step(n)`` that times n more."""
    with tainting(on):
        k = make()
        k.initial_params = init
        k.setup(0, X)
        params = {"p": k.initial_params}
        for _ in range(5):
            params["p"] = k.sample(params["p"])

    def step(n):
        with tainting(on):
            t = time.perf_counter()
            p = params["p"]
            for _ in range(n):
                p = k.sample(p)
            params["p"] = p
            return (time.perf_counter() - t) / n

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    X = make_banana_data(args.n, 2, seed=0, dtype=torch.float64)
    init = {"theta": torch.tensor([0.0, 3.0], dtype=torch.float64)}
    hmc = dict(step_size=0.002, num_steps=10, grad_clip=3.0, llr_clip=5.0, grad_noise_multiplier=2.0,
               llr_noise_multiplier=1.0, seed=0)
    pen = dict(proposal_scale=0.01, llr_clip=5.0, noise_multiplier=2.0, seed=0)
    jit = dict(jit_compile=True, jit_options={"backend": args.backend})
    rows = [("DPPenalty eager", lambda: pyro_dp.DPPenalty(banana_model, jit_compile=False, **pen), 40),
            (f"DPPenalty {args.backend}", lambda: pyro_dp.DPPenalty(banana_model, **pen, **jit), 100),
            ("DPHMC eager", lambda: pyro_dp.DPHMC(banana_model, jit_compile=False, **hmc), 4),
            (f"DPHMC {args.backend}", lambda: pyro_dp.DPHMC(banana_model, **hmc, **jit), 40)]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), banana d=2 n={args.n}, "
          f"compiled backend {args.backend}, median of {args.blocks} alternating blocks")
    print(f"{'what':22s} {'private on ms':>14s} {'off ms':>9s} {'on/off':>7s}")
    for name, make, n in rows:
        on, off = steady(make, X, init, True), steady(make, X, init, False)
        t_on, t_off = [], []
        for _ in range(args.blocks):
            t_on.append(on(n))
            t_off.append(off(n))
        a, b = statistics.median(t_on), statistics.median(t_off)
        print(f"{name:22s} {a * 1e3:14.3f} {b * 1e3:9.3f} {a / b:7.3f}", flush=True)


if __name__ == "__main__":
    main()
