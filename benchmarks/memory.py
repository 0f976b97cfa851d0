r"""Working memory of one full-data clipped per-example gradient pass (#17: "N = 1e7, d = 100
must fit in 2 GB"), eager vs ``jit_compile=True``.

Each measurement runs in a fresh process: it builds the data (logistic regression, float32,
``N`` rows, ``d`` features), records the resident set size, runs
``PrivateLikelihood.clipped_grad_sum`` once (after a warm-up call for the compiled path, so
the compile is not counted), and prints the peak resident set size above the data
(Linux: the peak resident set size ``VmHWM``, reset just before the pass through
``/proc/self/clear_refs``). The compiled path processes the rows in
chunks of :data:`pyro_dp.compiled.CHUNK_ELEMENTS` gradient entries; the eager path
materialises all ``N × d`` per-example gradients.

Run: ``python benchmarks/memory.py`` (N = 1e6 both paths, then N = 1e7 compiled only; about
2 minutes and 5 GB of RAM) or ``--quick`` (N = 1e6 only).

``--heap``: the resident memory a long chain gains (:mod:`pyro_dp.heap`). A DP penalty chain
through ``pyro.infer.MCMC`` on N = 50 000 rows, 1 500 iterations, in fresh processes, with the
kernels' heap trimming (every :data:`~pyro_dp.heap.HEAP_TRIM_EVERY` iterations) and without it
(the baseline, measured in the same run); prints both growths, over ``--repeats`` processes (glibc's
fragmentation depends on the process's address layout, so the untrimmed growth varies).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys, time, warnings
import torch, pyro, pyro.distributions as dist
warnings.simplefilter("ignore")
from pyro_dp.likelihood import PrivateLikelihood
n, d, jit = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"

def model(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=x[idx] @ w), obs=y[idx])

g = torch.Generator().manual_seed(0)
x = torch.empty(n, d)
for s in range(0, n, 1_000_000):  # build in blocks: no temporary copy of the whole matrix
    x[s:s + 1_000_000] = torch.randn(min(1_000_000, n - s), d, generator=g) / d ** 0.5
y = (torch.rand(n, generator=g) < 0.5).float()
def status(key):  # KiB, from /proc/self/status
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])

def reset_peak():  # Linux: writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

marks = {"data": status("VmRSS")}
lik = PrivateLikelihood(model, (x, y), seed=0, jit_compile=jit)
z = torch.zeros(d)
if jit:
    reset_peak()
    lik.clipped_grad_sum(z, 1.0)  # compile (not measured)
    marks["compile peak"] = status("VmHWM")
before = status("VmRSS")
reset_peak()
t = time.perf_counter()
ll, cs = lik.clipped_grad_sum(z, 1.0)
sec = time.perf_counter() - t
peak = status("VmHWM")
data_kib = (x.numel() * 4 + y.numel() * 4) // 1024
print(json.dumps(dict(n=n, d=d, jit=jit, data_mib=data_kib / 1024, peak_mib=peak / 1024,
                      above_before_mib=(peak - before) / 1024, seconds=sec)))
"""


def measure(n, d, jit):
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(d), "1" if jit else "0"],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return dict(n=n, d=d, jit=jit, error=out.stderr.strip().splitlines()[-1][:200])
    return json.loads(out.stdout.strip().splitlines()[-1])


HEAP_CHILD = r"""
import os, sys, warnings
import torch, pyro, pyro.distributions as dist
from pyro.infer import MCMC
import pyro_dp, pyro_dp.kernels.base as base
warnings.simplefilter("ignore")
torch.set_num_threads(1)
base.HEAP_TRIM_EVERY = int(sys.argv[1])
def model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 10.0))
    with pyro.plate("data", y.shape[0]) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])
y = torch.randn(50_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
start = {"mu": torch.tensor(0.0, dtype=torch.float64)}
k = pyro_dp.DPPenalty(model, 0.005, llr_clip=3.0, noise_multiplier=1.0, seed=0)
MCMC(k, num_samples=200, warmup_steps=0, disable_progbar=True, initial_params=start).run(y)
r0 = rss()
MCMC(k, num_samples=1500, warmup_steps=0, disable_progbar=True, initial_params=start).run(y)
print((rss() - r0) / 2**20)
"""


def heap(repeats: int):
    from pyro_dp.heap import HEAP_TRIM_EVERY

    def growth(every):
        out = subprocess.run([sys.executable, "-c", HEAP_CHILD, str(every)], capture_output=True, text=True,
                             check=True, timeout=1800)
        return float(out.stdout.strip().splitlines()[-1])

    print(f"{'process':>7} {'untrimmed MiB':>14} {'trimmed MiB':>12}   (DP penalty, N = 5e4, 1 500 iterations)")
    for r in range(repeats):
        u, t = growth(10**9), growth(HEAP_TRIM_EVERY)
        print(f"{r:>7} {u:14.1f} {t:12.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--heap", action="store_true", help="a long chain's resident memory, trimmed or not")
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()
    if args.heap:
        heap(args.repeats)
        return
    cases = [(1_000_000, 100, False), (1_000_000, 100, True)]
    if not args.quick:
        cases.append((10_000_000, 100, True))
    print(f"{'N':>10} {'d':>4} {'path':>9} {'data MiB':>9} {'peak RSS MiB':>13} {'pass: peak - before':>19} {'s/pass':>7}")
    for n, d, jit in cases:
        r = measure(n, d, jit)
        path = "compiled" if jit else "eager"
        if "error" in r:
            print(f"{n:>10} {d:>4} {path:>9}  failed: {r['error']}")
            continue
        print(f"{n:>10.0e} {d:>4} {path:>9} {r['data_mib']:9.0f} {r['peak_mib']:13.0f} "
              f"{r['above_before_mib']:19.0f} {r['seconds']:7.2f}", flush=True)


if __name__ == "__main__":
    main()
