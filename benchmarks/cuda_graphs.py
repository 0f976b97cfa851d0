r"""CUDA graphs for the compiled path (#17, GPU): ``jit_options={"mode": "reduce-overhead"}``
(torch.compile's CUDA-graph mode) against the default inductor compile, per iteration, with
the chains compared (the same seed must give the same chain). On a GPU a DP MCMC iteration is
launch- and synchronisation-bound (a few kernels per graph, one host read of the accept
decision per iteration), which is what CUDA graphs address.

The library refuses these modes (``pyro_dp.compiled.CUDA_GRAPH_MODES``) because of what this
script measured on an NVIDIA H200 (2026-11-26): torch stops DP penalty's second iteration
("accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run") and
cannot re-trace DP-HMC's and DP Barker's graphs ("Attempt to trace generator"). The script
lifts the refusal for its own kernels to show it again.

Run on a machine with CUDA: ``python benchmarks/cuda_graphs.py``.
"""
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from compiled import gauss_model, timed_runs  # noqa: E402

import pyro_dp  # noqa: E402
import pyro_dp.compiled  # noqa: E402
from pyro_dp.models.banana import banana_model, make_banana_data  # noqa: E402

warnings.simplefilter("ignore")
pyro_dp.compiled.CUDA_GRAPH_MODES = ()  # lift the refusal: this script measures what it prevents


def chain(make, data, init, n=30):
    k = make()
    k.initial_params = init
    k.setup(0, *data)
    p, out = k.initial_params, []
    for _ in range(n):
        p = k.sample(p)
        out.append(k.lik.flatten(p).detach().cpu().clone())
    return torch.stack(out)


def main():
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"torch {torch.__version__}, device {dev}")
    X = make_banana_data(100_000, 2, seed=0).to(dev)
    init = {"theta": torch.tensor([0.0, 3.0], dtype=torch.float64, device=dev)}
    y = (torch.randn(100_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.8 + 0.7).to(dev)
    init1 = {"mu": torch.tensor(0.7, dtype=torch.float64, device=dev)}
    cases = {
        "DPPenalty banana": (lambda o: pyro_dp.DPPenalty(banana_model, proposal_scale=0.01, llr_clip=5.0,
                                                        noise_multiplier=2.0, seed=0, noise_seed=1, jit_compile=True,
                                                        jit_options=o), (X,), init, 300),
        "DPHMC banana L=10": (lambda o: pyro_dp.DPHMC(banana_model, step_size=0.002, num_steps=10, grad_clip=3.0,
                                                     llr_clip=5.0, grad_noise_multiplier=2.0, llr_noise_multiplier=1.0,
                                                     seed=0, noise_seed=1, jit_compile=True, jit_options=o),
                              (X,), init, 40),
        "DPBarker b=1000": (lambda o: pyro_dp.DPBarker(gauss_model, 1000, 1e-3, seed=0, noise_seed=1, jit_compile=True,
                                                      jit_options=o), (y,), init1, 300),
    }
    print(f"{'what':24s} {'default ms':>11s} {'cudagraphs ms':>14s} {'ratio':>6s} {'max chain diff':>15s}")
    for name, (make, data, ini, n) in cases.items():
        try:
            _, base = timed_runs(lambda: make(None), data, n, ini)
            _, cg = timed_runs(lambda: make({"mode": "reduce-overhead"}), data, n, ini)
            diff = float((chain(lambda: make(None), data, ini) - chain(lambda: make({"mode": "reduce-overhead"}),
                                                                         data, ini)).abs().max())
            print(f"{name:24s} {base * 1e3:11.3f} {cg * 1e3:14.3f} {cg / base:6.2f} {diff:15.3g}", flush=True)
        except Exception as e:  # report and go on: this is a measurement, not a test
            print(f"{name:24s} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - t:.0f} s")
