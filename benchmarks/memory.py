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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
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
