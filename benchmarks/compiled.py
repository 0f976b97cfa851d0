r"""The compiled path (#17): time per iteration, eager vs ``jit_compile=True``, against
baselines measured in the same run.

Rows (one torch thread by default, as the issue's measurements; ``--threads`` to change):

* **DPHMC, thesis flat banana** (Räisä 2021 thesis §6.1: d = 2, n = 1e5, L = 10): eager,
  compiled, and a hand-fused DP-HMC iteration with closed-form per-example gradients under
  ``torch.compile`` (the lower bound the issue compares to);
* **DPPenalty, same banana**: eager, compiled, and a hand-fused DP penalty iteration (one
  compiled pass for the ratios, the rest of the loop as a hand-written script has it);
* **DPBarker, DPMinibatchPenalty, DPSGLD** at b = 1000 on a 1-d Gaussian mean, N = 1e5 and
  N = 1e7 (``--quick``: 1e6): compiled per-iteration cost and the ratio of the two N (each the
  median of five blocks, the two N timed in turn, so that the ratio does not carry a drift of
  the machine's speed between two runs);
* **logistic regression** d = 10, N = 1e5: DPHMC per gradient evaluation, compiled, with the
  indexed idiom (``obs=y[idx]``) and the usual one (``obs=y``), against the compiled
  hand-fused pass.

Each compiled row reports its one-time compile cost separately (first run minus a steady
run). The research code's figures quoted in the table (thesis DP-HMC code 31 ms, thesis DP
penalty code 0.89 ms, Heikkilä et al.'s DP Barker 1.2 ms) are the issue's own measurements on
this machine type, not re-measured here. No assertion is made on timings.

Run: ``python benchmarks/compiled.py`` (about 3–5 minutes) or ``--quick``; ``--dtype float32`` for
the data and latents in float32 (the thesis JAX code's default precision; float64 by default).
"""
from __future__ import annotations

import argparse
import math
import time
import warnings

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.models.banana import banana_lik_scale, banana_model, make_banana_data

warnings.simplefilter("ignore")


def prepared(make_kernel, data, init, warm=20):
    """``(seconds of a first ``MCMC`` run of ``warm`` iterations, step)``: a kernel that has run
    once (the first run compiles the graphs; for batch kernels, the size buckets its batches
    reach) and a function ``step(n_iter)`` that returns the seconds per iteration of ``n_iter``
    more, made as Pyro's runner makes them, ``params = kernel.sample(params)``, without the
    per-chain costs around them (set-up, and the chain's ε in ``diagnostics()``, which a
    numerical accountant computes once per chain)."""
    k = make_kernel()
    t = time.perf_counter()
    MCMC(k, num_samples=warm, warmup_steps=0, disable_progbar=True, initial_params=init).run(*data)
    first = time.perf_counter() - t
    k.initial_params = init
    k.setup(0, *data)
    state = {"params": k.initial_params}
    dev = data[0].device

    def step(n_iter):
        params = state["params"]
        _sync(dev)
        t = time.perf_counter()
        for _ in range(n_iter):
            params = k.sample(params)
            k.logging()  # Pyro asks for the progress-bar postfix every iteration
        _sync(dev)
        state["params"] = params
        return (time.perf_counter() - t) / n_iter

    return first, step


def timed_runs(make_kernel, data, n_iter, init, warm=20):
    """``(one-time cost: a first ``MCMC`` run of ``warm`` iterations beyond their steady cost,
    seconds per iteration)`` (:func:`prepared`)."""
    first, step = prepared(make_kernel, data, init, warm)
    per = step(n_iter)
    return max(first - warm * per, 0.0), per


def interleaved(steps, n_iter, rounds=5):
    """Seconds per iteration of each of ``steps`` (from :func:`prepared`), as the median of
    ``rounds`` blocks of ``n_iter // rounds`` iterations run in turn (A, B, A, B, …), and each
    one's blocks: a ratio of two such medians is not moved by a drift of the machine's speed
    or a burst of other work during one of them, as a ratio of two runs made one after the
    other is."""
    blocks = [[] for _ in steps]
    for _ in range(rounds):
        for j, step in enumerate(steps):
            blocks[j].append(step(max(1, n_iter // rounds)))
    return [sorted(b)[len(b) // 2] for b in blocks], blocks


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# ---------------------------------------------------------------------------- hand-fused banana
A_BAN = 20.0


def banana_loglik(x, theta, inv_var):
    """``(ℓ, r1, r2)``: closed-form per-example log-likelihoods (up to a constant) of the thesis
    banana (Räisä 2021 thesis Thm 12: mean (θ1, θ2 + aθ1²)) and the residuals."""
    r1 = x[:, 0] - theta[0]
    r2 = x[:, 1] - theta[1] - A_BAN * theta[0] ** 2
    return -0.5 * (r1 * r1 * inv_var[0] + r2 * r2 * inv_var[1]), r1, r2


def banana_pass(x, theta, clip, inv_var):
    """Closed-form per-example log-likelihoods and clipped gradient sum of the banana
    (:func:`banana_loglik`)."""
    ll, r1, r2 = banana_loglik(x, theta, inv_var)
    g2 = r2 * inv_var[1]
    g1 = r1 * inv_var[0] + g2 * 2 * A_BAN * theta[0]
    norms = torch.sqrt(g1 * g1 + g2 * g2)
    f = torch.clamp(clip / norms.clamp(min=1e-300), max=1.0)
    return ll, torch.stack([(g1 * f).sum(), (g2 * f).sum()])


def fused_banana_hmc(pass_fn, x, n_iter, eta, L, clip, nm_g, nm_l, llr_clip, inv_var):
    """``n_iter`` DP-HMC iterations (thesis Alg. 3) with the fused pass; returns s/iteration."""
    dev = x.device
    gen, rng = torch.Generator(dev).manual_seed(1), torch.Generator(dev).manual_seed(2)
    theta = torch.tensor([0.0, 3.0], dtype=x.dtype, device=dev)
    sd_g, prior_var = nm_g * 2 * clip, 1000.0

    def grad_at(v):
        ll, s = pass_fn(x, v, clip, inv_var)
        return ll, s + sd_g * torch.randn(2, generator=gen, dtype=v.dtype, device=dev) - v / prior_var

    ll, g = grad_at(theta)
    t = time.perf_counter()
    for _ in range(n_iter):
        p0 = torch.randn(2, generator=rng, dtype=x.dtype, device=dev)
        p, v = p0 + 0.5 * eta * g, theta
        for j in range(L):
            v = v + eta * p
            ll_v, g_v = grad_at(v)
            p = p + (eta if j < L - 1 else 0.5 * eta) * g_v
        d = torch.linalg.vector_norm(v - theta)
        r = torch.clamp(ll_v - ll, -llr_clip * d, llr_clip * d).sum()
        s2 = (nm_l * 2 * llr_clip * d) ** 2
        lam = r + math.sqrt(s2) * torch.randn((), generator=gen, dtype=x.dtype, device=dev) + 0.5 * (p0 @ p0 - p @ p)
        if math.log(torch.rand((), generator=rng, device=dev)) < float(lam - 0.5 * s2):
            theta, ll, g = v, ll_v, g_v
    return (time.perf_counter() - t) / n_iter


def banana_penalty_pass(x, theta_new, ll_old, bound, inv_var):
    """Closed-form per-example log-likelihoods at ``theta_new`` and their ratios to
    ``ll_old`` clipped to ``±bound`` and summed (Yıldırım & Ermiş 2019 §3.1), in one pass."""
    ll = banana_loglik(x, theta_new, inv_var)[0]
    return ll, torch.clamp(ll - ll_old, -bound, bound).sum()


def fused_banana_penalty(pass_fn, x, n_iter, scale, llr_clip, nm, inv_var):
    """``n_iter`` DP penalty iterations (Yıldırım & Ermiş 2019 §3.1; thesis Alg. 1) with the
    fused pass and the same Python loop a hand-written script would have; returns s/iteration."""
    dev = x.device
    gen, rng = torch.Generator(dev).manual_seed(1), torch.Generator(dev).manual_seed(2)
    theta = torch.tensor([0.0, 3.0], dtype=x.dtype, device=dev)
    prior_var = 1000.0
    ll, _ = pass_fn(x, theta, torch.zeros(x.shape[0], dtype=x.dtype, device=dev),
                    torch.zeros((), dtype=x.dtype, device=dev), inv_var)
    lp = -0.5 * float(theta @ theta) / prior_var
    t = time.perf_counter()
    for _ in range(n_iter):
        prop = theta + scale * torch.randn(2, generator=rng, dtype=x.dtype, device=dev)
        bound = llr_clip * torch.linalg.vector_norm(prop - theta)  # a tensor: no recompile per value
        ll_new, r = pass_fn(x, prop, ll, bound, inv_var)
        sd = nm * 2 * float(bound)  # substitute sensitivity 2b||θ'−θ|| (thesis §3.1)
        lp_new = -0.5 * float(prop @ prop) / prior_var
        lam = float(r) + sd * float(torch.randn((), generator=gen, dtype=x.dtype, device=dev)) + lp_new - lp
        if math.log(float(torch.rand((), generator=rng, device=dev))) < lam - 0.5 * sd * sd:  # penalty test
            theta, ll, lp = prop, ll_new, lp_new
    return (time.perf_counter() - t) / n_iter


# ---------------------------------------------------------------------------- models
def gauss_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype, device=y.device), 10.0))
    with pyro.plate("data", y.shape[0]) as idx:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[idx])


def logreg_indexed(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1], dtype=x.dtype, device=x.device), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=x[idx] @ w), obs=y[idx])


def logreg_usual(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1], dtype=x.dtype, device=x.device), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=x @ w), obs=y)


def logreg_pass(x, y, w, clip):
    logits = x @ w
    ll = y * logits - F.softplus(logits)
    r = y - torch.sigmoid(logits)
    f = torch.clamp(clip / (r.abs() * x.norm(dim=1)).clamp(min=1e-300), max=1.0)
    return ll, ((r * f).unsqueeze(1) * x).sum(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations, N = 1e6 instead of 1e7")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                    help="the data's and latents' dtype (float32 is the thesis JAX code's default)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    dt = getattr(torch, args.dtype)
    q = args.quick
    rows = []

    def row(name, eager, jit, baseline=None, base_name="", compile_s=None, note=""):
        rows.append((name, eager, jit, baseline, base_name, compile_s, note))
        e = "" if eager is None else f"{eager * 1e3:9.2f}"
        b = "" if baseline is None else f"{baseline * 1e3:9.3f} ({base_name})"
        ratio = "" if eager is None else f"{eager / jit:6.1f}x"
        ratio_b = "" if baseline is None else f"{jit / baseline:6.2f}"
        c = "" if compile_s is None else f"{compile_s:6.1f}"
        print(f"{name:46s} {e:>9s} {jit * 1e3:9.3f} {ratio:>8s} {b:>26s} {ratio_b:>7s} {c:>7s} {note}", flush=True)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device {dev}, {args.dtype}")
    print(f"{'what':46s} {'eager ms':>9s} {'jit ms':>9s} {'speedup':>8s} {'baseline ms':>26s} {'jit/bl':>7s} "
          f"{'compile s':>9s}")

    # ---- banana DP-HMC and DP penalty (thesis §6.1 hyperparameters as in the issue)
    X = make_banana_data(100_000, 2, seed=0, dtype=dt).to(dev)
    init = {"theta": torch.tensor([0.0, 3.0], dtype=dt, device=dev)}
    hmc_kw = dict(step_size=0.002, num_steps=10, grad_clip=3.0, llr_clip=5.0, grad_noise_multiplier=2.0,
                  llr_noise_multiplier=1.0, seed=0)
    n_hmc = 20 if q else 60
    _, eager = timed_runs(lambda: pyro_dp.DPHMC(banana_model, **hmc_kw), (X,), max(5, n_hmc // 4), init)
    comp, jit = timed_runs(lambda: pyro_dp.DPHMC(banana_model, jit_compile=True, **hmc_kw), (X,), n_hmc, init)
    inv_var = banana_lik_scale(2, dt).to(dev) ** -2
    fused = torch.compile(banana_pass, fullgraph=True, dynamic=False)
    fused_banana_hmc(fused, X, 2, 0.002, 10, 3.0, 2.0, 1.0, 5.0, inv_var)  # compile
    base = fused_banana_hmc(fused, X, n_hmc, 0.002, 10, 3.0, 2.0, 1.0, 5.0, inv_var)
    row("DPHMC banana d=2 n=1e5 L=10 (per iteration)", eager, jit, base, "hand-fused compiled", comp,
        "thesis JAX code: 31 ms")
    pen_kw = dict(proposal_scale=0.01, llr_clip=5.0, noise_multiplier=2.0, seed=0)
    n_pen = 200 if q else 1000
    _, eager = timed_runs(lambda: pyro_dp.DPPenalty(banana_model, **pen_kw), (X,), n_pen // 10, init)
    comp, jit = timed_runs(lambda: pyro_dp.DPPenalty(banana_model, jit_compile=True, **pen_kw), (X,), n_pen, init)
    fused_pen = torch.compile(banana_penalty_pass, fullgraph=True, dynamic=False)
    fused_banana_penalty(fused_pen, X, 5, 0.01, 5.0, 2.0, inv_var)  # compile
    base = fused_banana_penalty(fused_pen, X, n_pen, 0.01, 5.0, 2.0, inv_var)
    row("DPPenalty banana d=2 n=1e5 (per iteration)", eager, jit, base, "hand-fused compiled", comp,
        "thesis code: 0.89 ms")

    # ---- minibatch kernels at b = 1000
    n_big = 1_000_000 if q else 10_000_000
    g = torch.Generator().manual_seed(0)
    init1 = {"mu": torch.tensor(0.7, dtype=dt, device=dev)}
    mb = {
        "DPBarker": lambda jit: pyro_dp.DPBarker(gauss_model, 1000, 1e-3, seed=0, jit_compile=jit),
        "DPMinibatchPenalty": lambda jit: pyro_dp.DPMinibatchPenalty(gauss_model, 1000, 1e-3, llr_clip=2.0,
                                                                     noise_multiplier=1.0, seed=0, jit_compile=jit),
        "DPSGLD": lambda jit: pyro_dp.DPSGLD(gauss_model, 1000, 1e-6, 2.0, seed=0, jit_compile=jit),
    }
    n_mb = 200 if q else 1000
    ys = {n: (torch.randn(n, generator=g, dtype=dt) * 0.8 + 0.7).to(dev) for n in (100_000, n_big)}
    for name, make in mb.items():
        eager, comp, steps = {}, {}, []
        for n, y in ys.items():
            _, eager[n] = timed_runs(lambda: make(False), (y,), n_mb // 5, init1)
            # warm long enough that the batches have reached every size bucket they will reach
            first, step = prepared(lambda: make(True), (y,), init1, warm=300)
            comp[n] = max(first - 300 * step(n_mb // 5), 0.0)
            steps.append(step)
        per, blocks = interleaved(steps, n_mb)  # the two N in turn: their ratio is not a drift
        for (n, p), b in zip(zip(ys, per), blocks):
            row(f"{name} b=1000 N={n:.0e}", eager[n], p, None, "", comp[n],
                ("Heikkila et al. numpy: 1.2 ms; " if name == "DPBarker" and n == 100_000 else "")
                + f"blocks {min(b) * 1e3:.3f}-{max(b) * 1e3:.3f}")
        print(f"{'':46s} ratio N={n_big:.0e} / N=1e5 (compiled, medians of interleaved blocks): "
              f"{per[1] / per[0]:.2f}")

    # ---- logistic regression d = 10, per gradient evaluation
    D, N = 10, 100_000
    x = torch.randn(N, D, generator=g, dtype=dt) / math.sqrt(D)
    x = (x / x.norm(dim=1, keepdim=True).clamp(min=1.0)).to(dev)
    yb = torch.bernoulli(torch.sigmoid(x @ torch.randn(D, generator=g, dtype=dt).to(dev)))
    L = 5
    kw = dict(step_size=0.01, num_steps=L, grad_clip=1.0, llr_clip=1.0, grad_noise_multiplier=5.0,
              llr_noise_multiplier=2.0, seed=0)
    initw = {"w": torch.zeros(D, dtype=dt, device=dev)}
    n_lr = 20 if q else 60
    fused_lr = torch.compile(logreg_pass, fullgraph=True, dynamic=False)
    w0 = torch.zeros(D, dtype=dt, device=dev)
    fused_lr(x, yb, w0, 1.0)
    _sync(dev)
    t = time.perf_counter()
    for _ in range(200):
        fused_lr(x, yb, w0, 1.0)
    _sync(dev)  # CUDA launches are asynchronous: time the work, not the launches
    base = (time.perf_counter() - t) / 200
    res = {}
    for name, model in (("indexed", logreg_indexed), ("usual", logreg_usual)):
        _, eager = timed_runs(lambda: pyro_dp.DPHMC(model, **kw), (x, yb), max(3, n_lr // 6), initw)
        comp, jit = timed_runs(lambda: pyro_dp.DPHMC(model, jit_compile=True, **kw), (x, yb), n_lr, initw)
        res[name] = jit / L
        row(f"DPHMC logistic d=10 N=1e5, {name} (per grad)", eager / L, jit / L, base, "hand-fused compiled", comp)
    print(f"{'':46s} usual / indexed idiom (compiled): {res['usual'] / res['indexed']:.2f}")


if __name__ == "__main__":
    main()
