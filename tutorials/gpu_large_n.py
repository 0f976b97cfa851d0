# ---
# jupyter:
#   jupytext:
#     formats: py:percent
# ---
# %% [markdown]
# # Large N on a GPU
#
# DP MCMC gets *better* with more rows: the log-likelihood ratio grows with N while the
# privacy noise does not, so for the same ε the chain accepts more and the private
# posterior approaches the non-private one. The price is compute: `DPPenalty` evaluates
# every row's log-likelihood twice per iteration. That is one big vectorised sum, which a
# GPU does well.
#
# This script runs a private logistic regression on as many rows as the device handles,
# on CUDA when it is available and on the CPU otherwise. Nothing in `pyro_dp` is
# device-specific: put the data on the device, write the model so that its tensors
# follow the data (`torch.zeros(..., device=X.device)`), and the kernel, its generators
# and its noise live there too.
#
# `python tutorials/gpu_large_n.py` (`PYRO_DP_QUICK=1`: a small N on the CPU or GPU in
# seconds; `PYRO_DP_N=...` to choose N yourself).

# %%
import os
import time

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp

QUICK = os.environ.get("PYRO_DP_QUICK", "") not in ("", "0")
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
default_n = {(True, "cpu"): 20_000, (True, "cuda"): 200_000, (False, "cpu"): 500_000, (False, "cuda"): 10_000_000}
n = int(os.environ.get("PYRO_DP_N", default_n[(QUICK, device.type)]))
print(f"device: {device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))

# %% [markdown]
# ## Data made on the device
#
# Ten features scaled into the unit ball, so `llr_clip=1` never clips and the chain is
# exact. Generating the data directly on the device avoids a host-to-device copy of a
# large table; with real data, move it once (`X.to(device)`) before calling `mcmc.run`.

# %%
d = 10
g = torch.Generator(device=device).manual_seed(0)
X = torch.randn(n, d, generator=g, device=device, dtype=torch.float64)
X[:, 0] = 1.0
X = X / X.norm(dim=1, keepdim=True).clamp(min=3.0)
w_true = torch.linspace(-2.0, 2.0, d, dtype=torch.float64, device=device)
y = (torch.rand(n, generator=g, device=device, dtype=torch.float64) < torch.sigmoid(X @ w_true)).to(X.dtype)


def model(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype, device=X.device), 2.0).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


# %% [markdown]
# ## The private run
#
# The budget is the same whatever N; the proposal scale is adapted during warmup (free:
# it uses the released accept decisions only), so it shrinks with the posterior.

# %%
num_samples, warmup = (100, 100) if QUICK else (2000, 1000)
kernel = pyro_dp.DPPenalty(
    model,
    proposal_scale=0.05,
    llr_clip=1.0,
    guided_walk=True,
    adapt_proposal=True,
    init_strategy=init_to_mean,
    epsilon=1.0,
    delta=1e-6,
    num_iterations=num_samples + warmup,
    seed=0,
)
mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=QUICK)
if device.type == "cuda":
    torch.cuda.synchronize()
start = time.perf_counter()
mcmc.run(X, y)
if device.type == "cuda":
    torch.cuda.synchronize()
seconds = time.perf_counter() - start

# %% [markdown]
# ## Results

# %%
w = mcmc.get_samples()["w"]
eps = pyro_dp.get_epsilon(mcmc, delta=1e-6)
accept = float(mcmc.diagnostics()["acceptance rate"]["chain 0"])
print(f"N = {n:,} rows on {device}: {seconds:.1f} s, {1e3 * seconds / (num_samples + warmup):.2f} ms per iteration")
print(f"epsilon spent: {eps:.3f} (delta = 1e-6), noise multiplier {kernel.noise_multiplier:.1f}, acceptance {accept:.2f}")
err = (w.mean(0) - w_true).abs().max()
print(f"largest |posterior mean - true coefficient|: {float(err):.3f} (posterior sd ~ {float(w.std(0).mean()):.3f})")

# %% [markdown]
# Tips for large N:
#
# * Memory: `DPPenalty` and `DPExpFamPenalty` need only per-example log-likelihoods (a
#   vector of N), `DPHMC` per-example gradients (N × D); `PrivateLikelihood` takes
#   `vmap_chunk_size` to bound the memory of the latter.
# * When even one pass per iteration is too slow, the minibatch kernels (`DPBarker`,
#   `DPMinibatchPenalty`, `DPFastMH`) read a batch per iteration; their cost does not
#   grow with N (the index sampling is O(batch)), at the price of an approximate chain
#   (or, for DP-Fast MH, a public Lipschitz bound).
# * Several chains on one GPU: CUDA and Pyro's multiprocessing chains (`num_chains > 1`)
#   need the `spawn` start method; running chains one after the other in one process is
#   the simple alternative. Either way, `pyro_dp.get_epsilon` must compose every chain.
