r"""The cost of the private tensor type (issue 58, :mod:`pyro_dp.private`): seconds per iteration of
DPPenalty and DPHMC on the thesis banana (Räisä 2021 thesis §6.1, d = 2; ``benchmarks/compiled.py``'s
hyperparameters), eager and compiled, with the wrapping on (the default) and off
(:func:`pyro_dp.private.tainting`). Prints the ratio on/off per row. No assertion on timings.

Made for a loaded machine (2 cores shared with other jobs): both kernels of a row are built and
warmed up in one process, then timed in ``--pairs`` pairs of blocks whose order alternates
(on, off; off, on; ...), so that a drift of the machine's speed falls on both sides alike; each
pair gives one ratio, and the row reports the **median ratio over the pairs and its spread**
(the lowest and highest pair ratio, and the interquartile range), with the median ms a side.
Blocks are timed in process CPU time by default (``--clock cpu``: one torch thread, so the time
the other jobs take from the cores is not counted; ``--clock wall`` for wall time).

``--versus PATH`` compares two checkouts instead (e.g. a branch against ``/work/main``): the
rows run with the wrapping on in subprocesses whose ``PYTHONPATH`` alternates between ``PATH``
and this file's checkout (``--pairs`` pairs, order alternating), each reporting its median ms;
the row reports the median of the pairs' ratios (this checkout / ``PATH``) and their spread.

Run: ``python benchmarks/private_overhead.py`` (``--n 100000`` as benchmarks/compiled.py; the
default 20000 keeps it to a few minutes; ``--backend graph`` for the traced graph run as is instead
of the default inductor; ``--rows penalty-eager,hmc-compiled`` for some rows). The eager rows pass
``jit_compile=False`` (the kernels' default chooses by a cost model, :mod:`pyro_dp.kernels.auto_compile`).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
import warnings

import torch

import pyro_dp
from pyro_dp.models.banana import banana_model, make_banana_data
from pyro_dp.private import tainting

warnings.simplefilter("ignore")
ROW_NAMES = ("penalty-eager", "penalty-compiled", "hmc-eager", "hmc-compiled")


def steady(make, X, init, on: bool, clock):
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
            t = clock()
            p = params["p"]
            for _ in range(n):
                p = k.sample(p)
            params["p"] = p
            return (clock() - t) / n

    return step


def rows_for(args):
    hmc = dict(step_size=0.002, num_steps=10, grad_clip=3.0, llr_clip=5.0, grad_noise_multiplier=2.0,
               llr_noise_multiplier=1.0, seed=0)
    pen = dict(proposal_scale=0.01, llr_clip=5.0, noise_multiplier=2.0, seed=0)
    jit = dict(jit_compile=True, jit_options={"backend": args.backend})
    rows = {"penalty-eager": ("DPPenalty eager", lambda: pyro_dp.DPPenalty(banana_model, jit_compile=False, **pen), 40),
            "penalty-compiled": (f"DPPenalty {args.backend}", lambda: pyro_dp.DPPenalty(banana_model, **pen, **jit), 150),
            "hmc-eager": ("DPHMC eager", lambda: pyro_dp.DPHMC(banana_model, jit_compile=False, **hmc), 4),
            "hmc-compiled": (f"DPHMC {args.backend}", lambda: pyro_dp.DPHMC(banana_model, **hmc, **jit), 40)}
    return [(key,) + rows[key] for key in args.rows.split(",")]


def spread(ratios):
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return (f"{statistics.median(ratios):6.3f}  [{min(ratios):.3f}, {max(ratios):.3f}]  "
            f"IQR {q[0]:.3f}-{q[2]:.3f}")


def on_off(args, clock):
    X = make_banana_data(args.n, 2, seed=0, dtype=torch.float64)
    init = {"theta": torch.tensor([0.0, 3.0], dtype=torch.float64)}
    out = {}
    for key, name, make, n in rows_for(args):
        on = steady(make, X, init, True, clock)
        if args.json:  # one side (--versus): the median of --pairs blocks with the wrapping on
            out[key] = statistics.median(on(n) for _ in range(args.pairs))
            continue
        off = steady(make, X, init, False, clock)
        t_on, t_off, ratios = [], [], []
        for k in range(args.pairs):
            if k % 2 == 0:
                a, b = on(n), off(n)
            else:
                b, a = off(n), on(n)
            t_on.append(a)
            t_off.append(b)
            ratios.append(a / b)
        out[key] = statistics.median(t_on)
        print(f"{name:22s} {statistics.median(t_on) * 1e3:10.3f} {statistics.median(t_off) * 1e3:9.3f}   "
              f"{spread(ratios)}", flush=True)
    return out


def versus(args):
    here = str(pathlib.Path(__file__).resolve().parents[1])
    base = [sys.executable, str(pathlib.Path(__file__).resolve()), "--json", "--pairs", "3", "--n", str(args.n),
            "--backend", args.backend, "--clock", args.clock, "--threads", str(args.threads)]
    print(f"{'what':22s} {'this ms':>10s} {'versus ms':>9s}   this/versus: median [min, max] IQR   ({here} vs {args.versus})")
    for key, name, _, _ in rows_for(args):
        mine, theirs, ratios = [], [], []
        for k in range(args.pairs):
            times = {}
            for path in ((here, args.versus) if k % 2 == 0 else (args.versus, here)):
                env = dict(os.environ, PYTHONPATH=path)
                res = subprocess.run(base + ["--rows", key], env=env, capture_output=True, text=True, check=True)
                times[path] = json.loads(res.stdout.strip().splitlines()[-1])[key]
            mine.append(times[here])
            theirs.append(times[args.versus])
            ratios.append(times[here] / times[args.versus])
        print(f"{name:22s} {statistics.median(mine) * 1e3:10.3f} {statistics.median(theirs) * 1e3:9.3f}   "
              f"{spread(ratios)}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--pairs", type=int, default=7, help="alternating pairs of blocks (at least 5 for a spread)")
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--rows", default=",".join(ROW_NAMES), help=f"comma-separated, of {ROW_NAMES}")
    ap.add_argument("--versus", default=None, help="another checkout: compare this one against it (taint on)")
    ap.add_argument("--json", action="store_true", help="print {row: median on seconds} only (for --versus)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.versus:
        return versus(args)
    if not args.json:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), banana d=2 n={args.n}, compiled backend "
              f"{args.backend}, {args.pairs} alternating pairs, {args.clock} time")
        print(f"{'what':22s} {'on ms':>10s} {'off ms':>9s}   on/off: median [min, max] IQR")
    out = on_off(args, clock)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
