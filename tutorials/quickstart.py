# ---
# jupyter:
#   jupytext:
#     formats: py:percent
# ---
# %% [markdown]
# # Quickstart: a private posterior in five steps
#
# You have a table of sensitive records and a Bayesian model written in Pyro. You want
# posterior samples that you can publish, with a guarantee that no single person's row
# changes what you publish by much. That guarantee is *differential privacy* (DP),
# measured by two numbers (ε, δ): smaller is more private.
#
# `pyro_dp` gives you MCMC kernels that read the data only through noisy, clipped sums
# and keep a ledger of every such release, so the (ε, δ) it reports covers everything
# the run did: warmup, sampling, every chain.
#
# Run this file with `python tutorials/quickstart.py` (set `PYRO_DP_QUICK=1` for a
# seconds-long smoke run, which is what CI does).

# %%
import os

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
from pyro_dp.demo import make_logistic_data

QUICK = os.environ.get("PYRO_DP_QUICK", "") not in ("", "0")

# %% [markdown]
# ## 1. The model: an ordinary Pyro model with a data plate
#
# Every observed site sits inside one `pyro.plate` over the rows — that is how `pyro_dp`
# knows what "one person's row" is. Index the data with the plate's indices
# (`X[idx]`, `y[idx]`): it lets the library evaluate single rows (per-example gradients,
# minibatches).

# %%
def model(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype), 2.0).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


n = 5_000 if QUICK else 50_000
X, y, w_true = make_logistic_data(n, seed=1)

# %% [markdown]
# ## 2. Choose the budget and the clip
#
# The DP penalty algorithm compares the log-likelihood at the current and the proposed
# parameters, row by row, clips each row's difference to `±llr_clip · ‖θ' − θ‖`, sums,
# and adds Gaussian noise scaled to that clip. Here every feature vector has norm ≤ 1,
# so a row's log-likelihood cannot move by more than `‖θ' − θ‖`: `llr_clip=1` never
# clips, and the sampler is exact. With other data, choose the clip so that the
# (non-private, for your eyes only) clipped fraction in `diagnostics()` stays small.
#
# Give the budget `(epsilon, delta)` and the number of iterations; the kernel computes
# the noise it needs.

# %%
num_samples, warmup = (300, 200) if QUICK else (2000, 1000)
kernel = pyro_dp.DPPenalty(
    model,
    proposal_scale=0.05,
    llr_clip=1.0,
    guided_walk=True,        # one coordinate at a time, in a remembered direction
    adapt_proposal=True,     # tune the step during warmup (free: uses released decisions only)
    init_strategy=init_to_mean,  # start at the prior mean: never look at the data to start
    epsilon=4.0,
    delta=1e-5,
    num_iterations=num_samples + warmup,
    seed=0,
)

# %% [markdown]
# ## 3. Run it like any Pyro MCMC kernel

# %%
mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup, disable_progbar=QUICK)
mcmc.run(X, y)
mcmc.summary()

# %% [markdown]
# ## 4. Report the privacy you spent
#
# `pyro_dp.get_epsilon(mcmc, delta)` composes the ledgers of all chains. It is at most
# the budget you set; the kernel would have stopped reading data rather than exceed it.

# %%
eps = pyro_dp.get_epsilon(mcmc, delta=1e-5)
print(f"epsilon spent: {eps:.3f} (delta = 1e-5), noise multiplier {kernel.noise_multiplier:.1f}")
print("ledger:", pyro_dp.get_ledger(mcmc).entries)

# %% [markdown]
# ## 5. Compare with the truth
#
# The data are synthetic, so we know the coefficients that generated them.

# %%
w = mcmc.get_samples()["w"]
for j in range(w.shape[1]):
    print(f"w[{j}]: true {float(w_true[j]):+.2f}, private posterior {float(w[:, j].mean()):+.2f} ± {float(w[:, j].std()):.2f}")

try:  # a picture, when matplotlib is installed (pip install -e ".[tutorials]")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, w.shape[1], figsize=(10, 3))
    for j, ax in enumerate(axes):
        ax.hist(w[:, j].numpy(), bins=40, density=True)
        ax.axvline(float(w_true[j]), color="k", linestyle="--")
        ax.set_title(f"w[{j}]")
    fig.suptitle(f"DP posterior, epsilon = {eps:.2f}")
    fig.tight_layout()
    out = os.environ.get("PYRO_DP_FIGURES", ".")
    fig.savefig(os.path.join(out, "quickstart.png"))
except ImportError:
    pass
