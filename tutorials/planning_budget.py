# ---
# jupyter:
#   jupytext:
#     formats: py:percent
# ---
# %% [markdown]
# # Planning a privacy budget
#
# Before you touch the data, decide three things: the budget (ε, δ), how many MCMC
# iterations you need, and how much noise each iteration must carry. They are tied
# together by the accountant, and `pyro_dp.accounting` answers each question given the
# other two — without any data, so planning is free.
#
# This tutorial covers
#
# 1. ε as a function of the number of iterations, for the three closed-form accountants
#    (`"gdp"`, `"zcdp"`, `"rdp"`), with `planned_epsilon`;
# 2. how many iterations fit a budget, with `max_iterations`;
# 3. choosing the noise for a planned run, with `calibrate_noise_multiplier`, and what it
#    means for DP-HMC, which releases more than one thing per iteration;
# 4. how to choose the clip, and what clipped fraction to aim for;
# 5. whether a run will be usable at your N and ε, and which kernel, with `feasibility`.
#
# Run it with `python tutorials/planning_budget.py` (`PYRO_DP_QUICK=1`: seconds).

# %%
import os

import torch

import pyro_dp
from pyro_dp.demo import logistic_model
from pyro_dp.accounting import calibrate_noise_multiplier, max_iterations, planned_epsilon
from pyro_dp.kernels.hmc import dphmc_events
from pyro_dp.mechanisms import GaussianEvent
from pyro_dp.private import reveal

QUICK = os.environ.get("PYRO_DP_QUICK", "") not in ("", "0")
DELTA = 1e-5
ACCOUNTANTS = ("gdp", "zcdp", "rdp")

# %% [markdown]
# ## 1. ε grows with the number of iterations
#
# One DP penalty iteration releases one Gaussian mechanism: the clipped log-likelihood
# ratio sum plus noise with noise multiplier `nm` (noise standard deviation divided by
# the sensitivity). Describe an iteration by its events and ask each accountant for the
# ε of `k` iterations. The `"gdp"` accountant composes Gaussian mechanisms **exactly**
# (Dong, Roth & Su 2019); zCDP and RDP are valid upper bounds, looser — they are there
# because the papers state their budgets in them.

# %%
nm = 50.0
per_iteration = GaussianEvent(noise_multiplier=nm)
iterations = [100, 1_000, 3_000, 10_000] if QUICK else [100, 300, 1_000, 3_000, 10_000, 30_000, 100_000]

print(f"DP penalty, noise multiplier {nm:g}, delta = {DELTA:g}: epsilon after k iterations")
print(f"{'k':>8} " + " ".join(f"{a:>8}" for a in ACCOUNTANTS))
table = {}
for k in iterations:
    row = [planned_epsilon(DELTA, k, per_iteration, accountant=a) for a in ACCOUNTANTS]
    table[k] = row
    print(f"{k:>8} " + " ".join(f"{e:8.3f}" for e in row))

try:  # the thesis Fig 6.2-style picture, when matplotlib is installed
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for j, a in enumerate(ACCOUNTANTS):
        ax.loglog(iterations, [table[k][j] for k in iterations], marker="o", label=a)
    ax.set_xlabel("iterations k")
    ax.set_ylabel(f"epsilon at delta = {DELTA:g}")
    ax.set_title(f"DP penalty, noise multiplier {nm:g}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(os.environ.get("PYRO_DP_FIGURES", "."), "planning_budget.png"))
except ImportError:
    pass

# %% [markdown]
# ε grows sublinearly in k: k iterations are μ-GDP with μ = √k / nm, so while ε is
# moderate, doubling the run costs roughly 40 % more ε, not 100 % (for large μ the
# growth approaches μ²/2, linear in k). Several chains read the same data: pass `num_chains` and
# every count is multiplied.

# %%
for chains in (1, 4):
    eps = planned_epsilon(DELTA, 3_000, per_iteration, num_chains=chains)
    print(f"3000 iterations x {chains} chain(s): epsilon = {eps:.3f}")

# %% [markdown]
# ## 2. How many iterations fit the budget?
#
# `max_iterations` is an exact integer search on the accountant's own ε: `k` fits and
# `k + 1` does not. The tighter accountant buys more iterations for the same guarantee.

# %%
for epsilon in (1.0, 4.0):
    ks = {a: max_iterations(epsilon, DELTA, per_iteration, accountant=a) for a in ACCOUNTANTS}
    print(f"budget ({epsilon:g}, {DELTA:g}), nm = {nm:g}: " + ", ".join(f"{a} {k}" for a, k in ks.items()))

# %% [markdown]
# ## 3. Choosing the noise for a planned run
#
# Usually you know how many iterations you need (warmup included: it reads the data like
# sampling does) and the budget; `calibrate_noise_multiplier` gives the smallest noise
# multiplier that fits, rounded up and verified. This is what a kernel does for you when
# you pass `epsilon`, `delta` and `num_iterations`.

# %%
num_iterations = 3_000
for epsilon in (1.0, 4.0):
    nms = {a: calibrate_noise_multiplier(epsilon, DELTA, num_iterations, accountant=a) for a in ACCOUNTANTS}
    print(f"({epsilon:g}, {DELTA:g}) over {num_iterations} iterations: noise multiplier "
          + ", ".join(f"{a} {v:.1f}" for a, v in nms.items()))

nm_gdp = calibrate_noise_multiplier(4.0, DELTA, num_iterations)
assert planned_epsilon(DELTA, num_iterations, GaussianEvent(nm_gdp)) <= 4.0

# %% [markdown]
# Is that much noise a problem? The penalty rule accepts with probability about
# `exp(λ̂ - σ²/2)`, where `σ = nm · 2b‖θ' - θ‖`: the penalty `σ²/2` is what you pay in
# log acceptance. Below, `b = 1`: keep the penalty below ~1 by shrinking the step (more
# iterations for the same distance) — and remember that the posterior itself narrows like
# 1/√N, while the noise does not depend on N: DP MCMC works best with many rows.

# %%
for step in (0.01, 0.05, 0.1):
    sigma = nm_gdp * 2 * 1.0 * step
    print(f"step {step:g}: noise std on the log ratio {sigma:.2f}, penalty sigma^2/2 = {sigma ** 2 / 2:.2f}")

# %% [markdown]
# DP-HMC releases `L` noisy gradient sums and one noisy ratio sum per iteration (and one
# gradient once per chain). The planning functions take a list of `(event, count)` pairs;
# `pyro_dp.kernels.hmc.dphmc_events` builds it. Gradient noise only slows mixing (it
# changes the proposal, not the target), so it can be larger than the ratio noise.

# %%
L = 5
for ratio in (1.0, 3.0):
    llr_nm = 50.0
    fixed, per_it = dphmc_events(L, llr_noise_multiplier=llr_nm, grad_noise_multiplier=ratio * llr_nm)
    k = max_iterations(4.0, DELTA, per_it, fixed=fixed)
    print(f"DP-HMC, L = {L}, ratio nm {llr_nm:g}, gradient nm {ratio * llr_nm:g}: {k} iterations fit (4, 1e-5)")

# %% [markdown]
# ## 4. Choosing the clip
#
# The clip `b` (`llr_clip`) bounds each row's log-likelihood ratio by `b‖θ' - θ‖`. It sets
# the sensitivity, hence the noise (`σ ∝ b`): a larger clip costs acceptance. A smaller
# clip **biases** the chain as soon as it binds. If a public bound on the data domain makes
# the log-likelihood `b`-Lipschitz (logistic regression with `‖x‖ ≤ 1`: `b = 1`), use it:
# nothing is ever clipped and the chain is exact.
#
# Otherwise, tune `b` on public or synthetic data resembling yours (the clipped fraction
# of the real data is **not private**: `diagnostics()["non-private clipped fraction"]`, opt-in with
# `nonprivate_diagnostics=True`, is for the data
# holder's eyes only). Aim for a clipped fraction of **at most a few percent**; beyond
# that the bias usually outweighs the noise you save. Here: logistic regression with
# Gaussian features, not bounded, at proposals around a typical posterior point.

# %%
g = torch.Generator().manual_seed(0)
n, d = (2_000, 3) if QUICK else (20_000, 3)
X = torch.randn(n, d, generator=g, dtype=torch.float64)
w0 = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
y = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(X @ w0)).to(X.dtype)
lik = pyro_dp.PrivateLikelihood(logistic_model, (X, y), seed=0)
theta = w0.clone()
steps = 0.05 * torch.randn(20, d, generator=g, dtype=torch.float64)
ratios = torch.stack([lik.per_example_loglik(theta + s) - lik.per_example_loglik(theta) for s in steps])
# the likelihood's per-row terms are private (pyro_dp.private): this look at the raw data is the data
# holder's own, for planning, never published, so it says so to read them
ratios = reveal(ratios, reason="the tutorial's non-private look at how many ratios a clip cuts")
step_norm = steps.norm(dim=1, keepdim=True)
print(f"{'clip b':>7} {'clipped fraction':>17} {'penalty sigma^2/2 at nm=%g' % round(nm_gdp, 1):>28}")
for b in (0.5, 1.0, 2.0, 3.0, 4.0):
    frac = float((ratios.abs() > b * step_norm).double().mean())
    penalty = float(((nm_gdp * 2 * b * step_norm) ** 2 / 2).mean())
    print(f"{b:7.1f} {frac:17.4f} {penalty:28.2f}")

# %% [markdown]
# Here `|ℓ_i(θ') - ℓ_i(θ)| ≤ |x_i·(θ' - θ)|`, so the ratios are clipped only for rows
# with large features in the direction of the step: `b = 1` clips a few percent of the
# terms, `b = 2` about a thousandth, at four times the penalty (the penalty grows like
# `b²`), which you then pay back with steps half as long. Here `b ≈ 2` is the sensible
# choice. The budget summary of this tutorial:

# %%
print(f"epsilon 4.0 for {num_iterations} iterations needs noise multiplier {nm_gdp:.1f} (gdp accountant)")

# %% [markdown]
# ## 5. Will a run be usable at this N and ε?
#
# `pyro_dp.feasibility` predicts, from N, the budget, the run length and the model's shape
# (a built-in profile here; no data), how many effective samples a default-path run will
# deliver. Below, linear regression with 5·10⁴ rows at ε = 2. The accept-test kernels are
# *noise-limited* here: the noise of their ratio release grows with the move, so they can
# only take small moves. `DPSGLD(model, epsilon=ε)` has no accept test. Its release noise is
# part of the Langevin diffusion it needs anyway, so the noise costs step length, not rejected
# moves, and it delivers several times the effective samples on the same budget (it also
# spends most of the warmup's share on the draws: only a short burn-in of the warmup reads the
# data, and it clips around a private centre where the gradients are skewed, which this
# data-free forecast leaves out). It is an unadjusted chain, with a small bias nothing
# corrects (docs/tuning.md, "Without an accept test").

# %%
for kernel in ("DPPenalty", "DPHMC", "DPSGLD"):
    f = pyro_dp.feasibility("linear", num_rows=50_000, epsilon=2.0, kernel=kernel, num_samples=1000,
                            warmup_steps=500)
    print(f"{kernel:10s} predicted effective sample size {f.ess:5.1f} (noise-free: {f.ess_ceiling:.0f})")
