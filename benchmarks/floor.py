r"""Where a compiled iteration's time goes (#17): the kernel's iteration against the two
parts no change to the Python around them can remove, measured in the same run:

* **graph**: the step's compiled graph alone, called again and again on the inputs of one
  real iteration (the per-example work, the clip, the sums, the release's noise and the accept
  test, as :func:`~pyro_dp.kernels.barker.barker_release_accept` and
  :func:`~pyro_dp.kernels.penalty.penalty_release_accept` call it);
* **draws**: the iteration's random draws alone, the same calls on the same generators in
  the same order as the kernel makes them (the proposal; for DP Barker the batch's indices
  with their sorted keys, the release's standard normal and the :math:`V_{\rm corr}` draws;
  for DP penalty the release's standard normal and the accept uniform). They stay outside
  the graph because the chains must be the eager path's, drawn from the kernel's own
  generators (a secret one for batches and noise, ``docs/privacy.md``), which a compiled graph
  cannot draw from.

``draws`` times them through the kernel's own helpers (:func:`~pyro_dp.kernels.proposals.random_walk`,
:func:`~pyro_dp.mechanisms.batch_without_replacement`, ...); ``rng`` times only the generator calls
themselves (and DP Barker's numpy sort of the batch keys), the part no Python around them can
remove. ``floor = graph + rng`` is what an iteration would cost with no Python at all around
the graph and the generators; ``python = iteration - floor`` is the rest (the helpers, the
skeleton's proposal bookkeeping, budget check, ledger, statistics, Pyro's ``sample`` /
``logging`` calls). The issue's targets (0.3 ms for DPPenalty and
the minibatch kernels at b = 1000) are printed beside them. No assertion is made on timings.

Run: ``python benchmarks/floor.py`` (about a minute; ``--threads``, ``--device``, ``--dtype float32``).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

import pyro_dp
from pyro_dp.kernels.proposals import accept_uniform, correction_draws, random_walk
from pyro_dp.mechanisms import batch_without_replacement
from pyro_dp.mechanisms.batches import _draws_per_round
from pyro_dp.models.banana import banana_model, make_banana_data

from compiled import _sync, gauss_model

warnings.simplefilter("ignore")


def per_call(fn, n: int, dev) -> float:
    """Seconds per call of ``fn()`` over ``n`` calls (after one warm call)."""
    fn()
    _sync(dev)
    t = time.perf_counter()
    for _ in range(n):
        fn()
    _sync(dev)
    return (time.perf_counter() - t) / n


def captured_graph(kernel):
    """Run one iteration of ``kernel`` and return ``(graph, its inputs)``: the compiled step
    graph the iteration called, and what it called it with."""
    cl = kernel.lik.compiled
    orig, seen = cl.fused_graph, {}

    def spy(*args, **kwargs):
        graph = orig(*args, **kwargs)
        if graph is None:
            return None

        def call(*xs):
            seen["graph"], seen["inputs"] = graph, xs
            return graph(*xs)

        return call

    cl.fused_graph = spy
    try:
        kernel.sample(kernel.lik.unravel(kernel._state.z))
    finally:
        cl.fused_graph = orig
    if "graph" not in seen:
        raise RuntimeError("the iteration ran no fused graph (not compiled?)")
    return seen["graph"], seen["inputs"]


def breakdown(kernel, data, init, draws, rng, n_iter: int, warm: int):
    """``(iteration, graph, draws, rng)`` seconds for ``kernel`` after ``warm`` iterations."""
    kernel.initial_params = init
    kernel.setup(0, *data)
    params = kernel.initial_params
    for _ in range(warm):
        params = kernel.sample(params)
    dev = data[0].device
    box = [params]

    def step():
        box[0] = kernel.sample(box[0])
        kernel.logging()

    it = per_call(step, n_iter, dev)
    graph, inputs = captured_graph(kernel)
    g = per_call(lambda: graph(*inputs), n_iter, dev)
    d = per_call(lambda: draws(kernel), n_iter, dev)
    r = per_call(rng(kernel), n_iter, dev)
    return it, g, d, r


def barker_draws(k):
    """The draws of one compiled DP Barker iteration, in the kernel's order (module doc)."""
    st, n, b = k._state, k.lik.num_rows, k.batch_size
    random_walk(k._rng, st.z, k.adapted_proposal_scale, k.mode, st.direction)
    batch_without_replacement(k._noise, n, b, device=st.z.device)  # the batch, before the step (issue 39)
    k._noise.standard_normal(())
    correction_draws(k._rng, k.correction, st.z)


def barker_rng(k):
    """The generator calls of :func:`barker_draws` alone (and the numpy key sort)."""
    z, n, b = k._state.z, k.lik.num_rows, k.batch_size
    m = _draws_per_round(b)  # sample_without_replacement's first round
    gen, alg = k._noise.generator, k._rng
    K = int(k.correction.weights.numel())
    shift = max(m - 1, 1).bit_length()
    pos = np.arange(m)

    def calls():
        torch.randn(z.shape, generator=alg, dtype=z.dtype, device=z.device)
        d = torch.randint(n, (m,), generator=gen, device=gen.device)
        if d.device.type == "cpu":
            np.sort((d.numpy() << shift) | pos)
        else:
            torch.sort(d << shift)
        torch.randn((), generator=gen, dtype=torch.float64, device=gen.device)
        torch.empty(K, dtype=torch.float64, device=alg.device).exponential_(1.0, generator=alg)
        torch.rand((), generator=alg, dtype=torch.float64, device=alg.device)
        torch.randn((), generator=alg, dtype=z.dtype, device=z.device)

    return calls


def penalty_rng(k):
    """The generator calls of :func:`penalty_draws` alone."""
    z, gen, alg = k._state.z, k._noise.generator, k._rng

    def calls():
        torch.randn(z.shape, generator=alg, dtype=z.dtype, device=z.device)
        torch.randn((), generator=gen, dtype=torch.float64, device=gen.device)
        torch.rand((), generator=alg, dtype=z.dtype, device=alg.device)

    return calls


def penalty_draws(k):
    """The draws of one compiled DP penalty iteration, in the kernel's order (module doc)."""
    st = k._state
    random_walk(k._rng, st.z, k.adapted_proposal_scale, k.mode, st.direction)
    k._noise.standard_normal(())
    accept_uniform(k._rng, st.z)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                    help="the data's and latents' dtype (float32 is the thesis JAX code's default)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    dt = getattr(torch, args.dtype)
    n_it = args.iterations
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device {dev}, {args.dtype}")
    print(f"{'kernel':40s} {'iteration':>10s} {'graph':>8s} {'draws':>8s} {'rng':>8s} {'floor':>8s} {'python':>8s} "
          f"{'target':>7s} {'it/floor':>8s}   (ms)")

    def row(name, it, g, d, r, target):
        print(f"{name:40s} {it * 1e3:10.3f} {g * 1e3:8.3f} {d * 1e3:8.3f} {r * 1e3:8.3f} {(g + r) * 1e3:8.3f} "
              f"{(it - g - r) * 1e3:8.3f} {target:7.2f} {it / (g + r):8.2f}", flush=True)

    gen = torch.Generator().manual_seed(0)
    for n in (100_000, 10_000_000):
        y = (torch.randn(n, generator=gen, dtype=dt) * 0.8 + 0.7).to(dev)
        k = pyro_dp.DPBarker(gauss_model, 1000, 1e-3, seed=0, jit_compile=True)
        res = breakdown(k, (y,), {"mu": torch.tensor(0.7, dtype=dt, device=dev)}, barker_draws,
                        barker_rng, n_it, warm=200)
        row(f"DPBarker b=1000 N={n:.0e}", *res, 0.3)
    X = make_banana_data(100_000, 2, seed=0, dtype=dt).to(dev)
    k = pyro_dp.DPPenalty(banana_model, proposal_scale=0.01, llr_clip=5.0, noise_multiplier=2.0, seed=0,
                          jit_compile=True)
    res = breakdown(k, (X,), {"theta": torch.tensor([0.0, 3.0], dtype=dt, device=dev)}, penalty_draws,
                    penalty_rng, max(n_it // 2, 1), warm=50)
    row("DPPenalty banana d=2 n=1e5", *res, 0.3)


if __name__ == "__main__":
    main()
