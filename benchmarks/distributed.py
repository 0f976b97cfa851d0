r"""Scaling out (#19): per-iteration time and all-reduce share of a sharded DP-HMC at 1 and 2
ranks with fixed rows per rank (weak scaling), gloo on this CPU; and a model of N = 1e9 rows
over 64 GPUs built from the measured numbers.

**What is measured.** Each configuration launches ``world`` gloo processes
(``torch.multiprocessing``, one torch thread each) and runs ``DPHMC`` on a logistic regression
(d = 10, float32, L = 5, eager) over ``--rows`` rows per rank: ``distributed=True`` on 2 ranks,
the ordinary single-process path on 1 rank (the baseline the ratios are taken against). Per
configuration it reports the median time per iteration (rank 0) and the time spent inside
``torch.distributed.all_reduce`` (timed around every collective of the releases: L + 1 releases
per iteration, two all-reduces each — the noisy sum and the clipped counts). That time
includes *waiting for the slower rank*, so after the run each configuration also times 200
back-to-back all-reduces of a d-vector after a barrier: the bare **all-reduce latency**. The
single-rank runs at ``--rows`` and ``--rows / 4`` rows fit the **compute per row** ``c`` and a
fixed cost per iteration ``a`` (Python and Pyro overhead): ``t = a + c · rows``. No assertion
is made on timings; on a machine shared with other work the 2-rank figures include that
contention (the load average is printed).

**The model** (printed at the end, with its assumptions): one iteration over N rows on P ranks
costs

.. math::  t(N, P) = a + c\,N/P + 2(L+1)\,\ell(P), \qquad \ell(P) = \lceil\log_2 P\rceil\,\alpha,

the compute of one shard plus 2(L + 1) latency-bound all-reduces of a few bytes, each
:math:`\lceil\log_2 P\rceil` rounds of pairwise exchange with per-round latency :math:`\alpha`
(recursive doubling, the short-message all-reduce of MPICH: Thakur, Rabenseifner & Gropp
2005, "Optimization of collective communication operations in MPICH", IJHPCA 19(1), cost
:math:`\lceil\log_2 p\rceil\alpha` plus bandwidth terms negligible for a few bytes). One
all-reduce between 2 ranks is one round, so the measured 2-rank latency is :math:`\alpha`.
Printed twice:

* **64 ranks like this machine's cores** — every input measured here (``a``, ``c``,
  :math:`\alpha` of gloo over localhost);
* **64 GPUs** — assumed inputs, replaceable by flags once measured on the hardware (no GPU was
  lent when this was written): ``--gpu-rows-per-s`` (default 2e9 clipped per-example gradient
  rows per second for d = 10 float32 on an H100-class GPU: its roofline for one read of a
  44-byte row at 3.35 TB/s is 7.6e10 rows/s, and an eager pass that materialises several
  N × d intermediates runs well below it — an assumption), ``--alpha-us`` (default 10 µs
  per round for NCCL over NVLink/InfiniBand — an assumption) and ``a = --gpu-overhead-ms``
  (default: the measured CPU ``a``, as the same Python runs the iteration).

Run: ``python benchmarks/distributed.py`` (about 1–2 minutes on 2 cores).
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import socket
import statistics
import tempfile
import time
import warnings

import pyro
import pyro.distributions as pdist
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import pyro_dp

L = 5  # leapfrog steps: L gradient releases + 1 ratio release per iteration (thesis Alg. 3)
D = 10


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model(x, y):
    w = pyro.sample("w", pdist.Normal(torch.zeros(D), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]) as idx:
        pyro.sample("y", pdist.Bernoulli(logits=x[idx] @ w), obs=y[idx])


def _worker(rank, world, port, rows, iters, out):
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    spent = [0.0]
    original = dist.all_reduce

    def timed_all_reduce(*a, **kw):  # every collective of the releases (pyro_dp.distributed.Shards)
        t = time.perf_counter()
        r = original(*a, **kw)
        spent[0] += time.perf_counter() - t
        return r

    dist.all_reduce = timed_all_reduce
    g = torch.Generator().manual_seed(rank)  # this rank's rows only
    x = torch.randn(rows, D, generator=g) / math.sqrt(D)
    y = (torch.rand(rows, generator=g) < 0.5).float()
    k = pyro_dp.DPHMC(model, 0.01, L, 1.0, 1.0, 5.0, 2.0, seed=0, distributed=world > 1)
    k.setup(0, x, y)
    params = k.initial_params
    for _ in range(3):  # the first gradient release and warm caches
        params = k.sample(params)
    times = []
    spent[0] = 0.0
    for _ in range(iters):
        t = time.perf_counter()
        params = k.sample(params)
        times.append(time.perf_counter() - t)
    dist.all_reduce = original
    latency = float("nan")
    if world > 1:  # the bare latency of one all-reduce of a d-vector, nobody late
        dist.barrier()
        v, lat = torch.zeros(D), []
        for _ in range(200):
            t = time.perf_counter()
            dist.all_reduce(v)
            lat.append(time.perf_counter() - t)
        latency = statistics.median(lat)
    if rank == 0:
        torch.save(dict(per_it=statistics.median(times), allreduce=spent[0] / iters, latency=latency,
                        releases=k.ledger.num_releases), out)
    if world > 1:
        dist.barrier()  # no rank tears its connections down while a peer is still using them
    dist.destroy_process_group()


def measure(world, rows, iters):
    """Median seconds per iteration, all-reduce seconds per iteration and bare latency (rank 0)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.pt")
        mp.start_processes(_worker, args=(world, _port(), rows, iters, out), nprocs=world, start_method="spawn")
        return torch.load(out)


def iteration_model(n, p, a, c, alpha):
    """Seconds per DP-HMC iteration over ``n`` rows on ``p`` ranks (module docstring):
    ``(a + c n / p, 2 (L + 1) ceil(log2 p) alpha)`` — compute of one shard, communication.
    """
    # short-message all-reduce by recursive doubling: ceil(log2 p) rounds (Thakur, Rabenseifner & Gropp 2005)
    rounds = math.ceil(math.log2(p)) if p > 1 else 0
    return a + c * n / p, 2 * (L + 1) * rounds * alpha


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000, help="rows per rank")
    ap.add_argument("--iters", type=int, default=30, help="timed iterations per configuration")
    ap.add_argument("--gpu-rows-per-s", type=float, default=2e9, help="assumed GPU throughput (see docstring)")
    ap.add_argument("--alpha-us", type=float, default=10.0, help="assumed NCCL latency per round, µs")
    ap.add_argument("--gpu-overhead-ms", type=float, default=None, help="fixed cost per iteration on a GPU")
    args = ap.parse_args()
    print(f"DPHMC, logistic regression d={D}, float32, eager, L={L}: {2 * (L + 1)} all-reduces per iteration "
          f"when sharded; gloo over localhost, one torch thread per rank; {os.cpu_count()} CPU cores, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    small = measure(1, args.rows // 4, args.iters)
    res = {w: measure(w, args.rows, args.iters) for w in (1, 2)}
    base = res[1]["per_it"]
    print()
    print(f"weak scaling, {args.rows} rows per rank (baseline: 1 rank, the single-process path)")
    print(f"{'ranks':>5} {'rows':>9} {'ms/iteration':>13} {'all-reduce ms/it':>17} {'share':>6} "
          f"{'bare latency µs':>16} {'time vs 1 rank':>15}")
    for w, r in res.items():
        lat = "-" if math.isnan(r["latency"]) else f"{r['latency'] * 1e6:.0f}"
        print(f"{w:5d} {w * args.rows:9d} {r['per_it'] * 1e3:13.2f} {r['allreduce'] * 1e3:17.3f} "
              f"{r['allreduce'] / r['per_it']:6.1%} {lat:>16} {r['per_it'] / base:15.2f}")
    print(f"(load average {os.getloadavg()[0]:.2f} at the end; 'all-reduce' includes waiting for the slower rank)")

    # the linear cost model t = a + c * rows (module docstring), fitted through two single-rank sizes
    n1, n4 = args.rows, args.rows // 4
    c = (res[1]["per_it"] - small["per_it"]) / (n1 - n4)
    a = max(res[1]["per_it"] - c * n1, 0.0)
    alpha = res[2]["latency"]  # one all-reduce at P = 2 is one round (module docstring)
    print()
    print(f"measured: compute c = {c * 1e9:.1f} ns per row per iteration (L + 1 = {L + 1} passes), fixed a = "
          f"{a * 1e3:.2f} ms per iteration (1 rank: {small['per_it'] * 1e3:.1f} ms at {n4} rows, "
          f"{res[1]['per_it'] * 1e3:.1f} ms at {n1}); all-reduce latency {res[2]['latency'] * 1e6:.0f} µs "
          f"at 2 ranks = alpha, one round")
    n, p = 1e9, 64
    rounds = math.ceil(math.log2(p))
    print(f"model: t(N, P) = a + c N / P + 2(L+1) ceil(log2 P) alpha; N = 1e9 rows, P = {p} "
          f"({n / p:.3g} rows per rank), {2 * (L + 1)} all-reduces of {rounds} rounds per iteration")
    gpu_a = a if args.gpu_overhead_ms is None else args.gpu_overhead_ms * 1e-3
    for label, (ai, ci, al) in {
        "64 ranks like this machine's cores (all inputs measured)": (a, c, alpha),
        f"64 GPUs ({args.gpu_rows_per_s:.2g} rows/s each, alpha = {args.alpha_us:g} µs: assumed)":
            (gpu_a, 1.0 / args.gpu_rows_per_s, args.alpha_us * 1e-6),
    }.items():
        comp, comm = iteration_model(n, p, ai, ci, al)
        print(f"  {label}:")
        print(f"    compute {comp * 1e3:.1f} ms + communication {comm * 1e3:.2f} ms = {(comp + comm) * 1e3:.1f} ms "
              f"per iteration (communication {comm / (comp + comm):.1%}); 1000 iterations in "
              f"{(comp + comm) * 1000:.0f} s; rows per rank {n / p * (D + 1) * 4 / 2**30:.2f} GiB (float32)")


if __name__ == "__main__":
    main()
