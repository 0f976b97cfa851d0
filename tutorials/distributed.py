# ---
# jupyter:
#   jupytext:
#     formats: py:percent
# ---
# %% [markdown]
# # Scaling out: DP-HMC over sharded data
#
# When the rows outgrow one machine (or one GPU), shard them: each process (*rank*) holds
# only its own rows, runs the ordinary Pyro model on them, and every DP release becomes one
# `all_reduce` of the ranks' clipped sums, with the privacy noise added once, by rank 0,
# inside the reduction. Every rank then holds the same released values, takes the same
# accept decisions and records the same ledger (`docs/scaling_out.md`).
#
# Launch with `torchrun --nproc_per_node=2 tutorials/distributed.py` (gloo on CPU). Run as
# `python tutorials/distributed.py` it starts two gloo processes on this machine itself.
# `PYRO_DP_QUICK=1` makes it a smoke run of about 20 s, most of it starting the two processes
# (what CI and the docs build run); the full run (200 000 rows, 1 500 iterations) took 6 minutes
# on 2 CPU cores shared with other work.

# %%
import datetime
import os
import socket
import sys
import time

import pyro
import pyro.distributions as dist
import torch
import torch.distributed as tdist
import torch.multiprocessing as mp
from pyro.infer import MCMC

import pyro_dp

QUICK = os.environ.get("PYRO_DP_QUICK", "") not in ("", "0")
N, D = (10_000, 4) if QUICK else (200_000, 4)  # rows in all (public), features
WARMUP, SAMPLES = (60, 60) if QUICK else (500, 1000)
BETA = torch.tensor([1.0, -2.0, 0.5, 0.0], dtype=torch.float64)  # the simulation's truth


# %% [markdown]
# ## The model and one rank's rows
#
# A Bayesian linear regression with a known noise scale, features in the unit ball and
# responses clamped to a public range, so that per-example gradients and log-likelihood
# ratios are bounded and the clips rarely bind. The model is the ordinary Pyro model:
# nothing in it knows about ranks.
#
# Each rank reads only its own rows. With real data that is its own file or partition;
# here rank `r` of `W` simulates its `N / W` rows from its own seed, so no process ever
# makes another rank's rows.

# %%
def model(X, y):
    beta = pyro.sample("beta", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype, device=X.device), 2.0).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("y", dist.Normal(X[idx] @ beta, 1.0), obs=y[idx])


def my_rows(rank, world):
    """This rank's rows only: ``N // world`` of them (one more on the first ``N % world`` ranks)."""
    n = N // world + (rank < N % world)
    g = torch.Generator().manual_seed(1000 + rank)
    X = torch.randn(n, D, generator=g, dtype=torch.float64)
    X = X / X.norm(dim=1, keepdim=True).clamp(min=1.0)
    y = (X @ BETA + torch.randn(n, generator=g, dtype=torch.float64)).clamp(-4.0, 4.0)
    return X, y


# %% [markdown]
# ## One DP-HMC run per rank
#
# `distributed=True` is the only change from a single-process run. Every rank builds the
# kernel with the same settings; the data-free `seed` (proposals, momenta, accept uniforms)
# is rank 0's on every rank, so the ranks take the same decisions, while the privacy noise
# comes from rank 0's secret, OS-seeded stream. The budget (ε = 3 at δ = 1e-6) covers the
# whole job: the private start (`DPGradientInit`, 20 noisy gradient steps from the public
# point 0) and every iteration, over all `N` rows. Each rank reports its ε; rank 0 prints
# them all.

# %%
def run(rank, world):
    torch.set_num_threads(1)
    X, y = my_rows(rank, world)
    kernel = pyro_dp.DPHMC(
        model, step_size=0.01, num_steps=3, grad_clip=3.0, llr_clip=3.0, adapt_step_size=True,
        epsilon=3.0, delta=1e-6, num_iterations=WARMUP + SAMPLES,
        init=pyro_dp.DPGradientInit(num_steps=20, step_size=3.0, grad_clip=3.0, noise_multiplier=15.0),
        distributed=True, seed=0,
    )
    mcmc = MCMC(kernel, num_samples=SAMPLES, warmup_steps=WARMUP, disable_progbar=True,
                initial_params={"beta": torch.zeros(D, dtype=torch.float64)})  # public, data-free
    start = time.perf_counter()
    mcmc.run(X, y)
    seconds = time.perf_counter() - start
    beta = mcmc.get_samples()["beta"]
    eps = kernel.get_epsilon(1e-6)
    every_eps = [None] * world
    tdist.all_gather_object(every_eps, eps)  # for this printout only (ε is public)
    if rank == 0:
        accept = float(mcmc.diagnostics()["acceptance rate"]["chain 0"])
        print(f"{world} ranks: {X.shape[0]} rows on rank 0, {kernel.lik.global_num_rows} in all; "
              f"{WARMUP + SAMPLES} iterations in {seconds:.1f} s, acceptance {accept:.2f}")
        print(f"posterior mean of beta: {[round(v, 3) for v in beta.mean(0).tolist()]} "
              f"(simulated from {BETA.tolist()})")
        print(f"epsilon at delta = 1e-6 on each rank: {[round(e, 4) for e in every_eps]} "
              f"({kernel.ledger.num_releases} releases in the ledger)")


# %% [markdown]
# ## Launching
#
# Under `torchrun` the environment names the rank, the world size and the rendezvous, and
# `init_process_group` reads them. Started with plain `python`, the script starts two gloo
# processes on this machine. The process group's `timeout` bounds how long a rank waits for
# a peer that failed: it then raises instead of hanging, and nothing more is released. On
# GPUs, use NCCL for the CUDA tensors (`docs/scaling_out.md`, "Launching").

# %%
TIMEOUT = datetime.timedelta(seconds=120)


def _run_and_close(rank, world):
    """Run, then tear the group down once every rank has finished (the barrier: no rank closes
    its connections while a peer is still in its last collective)."""
    try:
        run(rank, world)
        tdist.barrier()
    finally:
        tdist.destroy_process_group()


def _spawned(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    tdist.init_process_group("gloo", rank=rank, world_size=world, timeout=TIMEOUT)
    _run_and_close(rank, world)


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by torchrun
        tdist.init_process_group("gloo", timeout=TIMEOUT)
        _run_and_close(tdist.get_rank(), tdist.get_world_size())
        # End without the interpreter's teardown: about one run in 40 on this machine, a rank
        # that had finished everything was aborted while exiting ("terminate called without an
        # active exception", from torch's C++ side). Everything was printed before this line.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    else:  # plain python: two local gloo processes
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        # fork where it is safe (Linux; the parent has run no torch work yet): forked workers end
        # with os._exit, skipping the interpreter teardown described above; spawn elsewhere
        method = "fork" if sys.platform.startswith("linux") else "spawn"
        mp.start_processes(_spawned, args=(2, port), nprocs=2, start_method=method)
