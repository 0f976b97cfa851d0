r"""Many DP-SGLD or DP-SGNHT chains as one vectorised loop, for reproductions too long for Pyro's runner.

Heikkilä et al. (2019, §4, Fig. 3) run DP-SGLD for :math:`6\cdot10^6` iterations × 20 repeats.
Through :class:`pyro.infer.MCMC` one :class:`~pyro_dp.kernels.sgmcmc.DPSGLD` iteration costs
~1.7 ms here (Pyro's per-sample bookkeeping dominates a 100-row step), so that run is 56 CPU-hours;
:func:`run_sgld_chains` runs the same chains, all repeats of a setting together, in ~40 µs an
iteration (one compiled graph per step for every chain).

**The step is the kernel's, not a copy.** Each iteration applies
:func:`~pyro_dp.kernels.sgmcmc.private_gradient_fn` — the function
:func:`~pyro_dp.kernels.sgmcmc.sgld_step` runs — under :func:`torch.func.vmap` over the chains,
followed by :func:`~pyro_dp.kernels.sgmcmc.sgld_update` (Welling & Teh 2011, eq. 4), traced
into one graph by :meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph` exactly as the
kernel's compiled path traces one chain's step. Per chain the randomness is the kernel's: the
Poisson batch (:func:`~pyro_dp.mechanisms.poisson_batches`, the law of
:func:`~pyro_dp.mechanisms.poisson_batch`) and the release's standard normals
(:meth:`~pyro_dp.mechanisms.GaussianReleaseSpec.draw`), both from the chain's own
:class:`~pyro_dp.mechanisms.NoiseSource`. They are drawn a block of ``block`` iterations at a
time (the block's batches, then its normals); with ``block=1`` the draws are the kernel's in the
kernel's order, and ``tests/experiments/test_sgld_chains.py`` checks that the chain is then the
kernel's chain (to rounding). A larger block changes the chain's values, not its law: no draw
depends on the chain's state (the batch law depends on ``N`` and ``q``, the normals on nothing),
so all of them are i.i.d. whichever order the stream hands them out in.

**Privacy.** Every chain has its own :class:`~pyro_dp.mechanisms.PrivacyLedger`, which records
:func:`~pyro_dp.mechanisms.subsampled_gaussian_event` ``(q, nm, "poisson")`` once per iteration
(in blocks: ``count=block``), the event the kernel records. The chains are separate runs (each a
repeat of the experiment on the same data); their ε is per chain, as each repeat's is in the
paper. Batch sizes, block widths and compiled shapes depend on the stream, ``N`` and ``q`` only.
Each chain's privacy stream is seeded from OS entropy, as a kernel's, unless ``noise_seeds`` makes
it reproducible (the reproductions do, to re-run true; anyone who knows a seed can replay it).
This runner is a reproduction tool: it has no budget stop, no default path and no checkpoint —
the kernel (:class:`~pyro_dp.kernels.sgmcmc.DPSGLD`) is what users run.

**DP-SGNHT** (:func:`run_sgnht_chains`, Ding et al. 2014, Alg. 1) runs in the same loop: only
the state and the update differ. A chain's state is :class:`~pyro_dp.kernels.sgmcmc.DPSGNHT`'s
(point, momentum, thermostat; :func:`~pyro_dp.kernels.sgmcmc.sgnht_init`, the momentum drawn
from the chain's *algorithm* generator, data-free, as the kernel draws it), and each iteration
applies :func:`~pyro_dp.kernels.sgmcmc.sgnht_update` — the update
:func:`~pyro_dp.kernels.sgmcmc.sgnht_step` applies — to the same private gradient; with
``block=1`` the chain is the kernel's (the same test). :func:`ledger_prefix` gives the ledger
of a chain's first ``t`` iterations, for experiments that score prefixes of one long run.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Callable, List, NamedTuple, Optional, Sequence

import torch

from pyro_dp.compiled import bucket_size
from pyro_dp.kernels.sgmcmc import (SGNHTState, langevin_noise_multiplier, private_gradient_fn, sgld_update, sgnht_init,
                              sgnht_update)
from pyro_dp.likelihood import PrivateLikelihood
from pyro_dp.mechanisms.release import graph_release
from pyro_dp.mechanisms import (NoiseSource, PrivacyLedger, gaussian_release_spec, poisson_batches, recording,
                          subsampled_gaussian_event)

__all__ = ["SGLDChains", "run_sgld_chains", "run_sgnht_chains", "ledger_prefix"]


class SGLDChains(NamedTuple):
    """What :func:`run_sgld_chains` returns.

    :ivar draws: ``[R, T, d]`` float64: chain ``r``'s point after each of its ``T`` iterations
        (unconstrained coordinates, as :class:`~pyro_dp.likelihood.PrivateLikelihood` flattens them).
    :ivar ledgers: one :class:`~pyro_dp.mechanisms.PrivacyLedger` per chain.
    :ivar clipped_fraction: ``[R]``: the share of sampled rows whose gradient was clipped
        (non-private diagnostic).
    :ivar noise_multiplier: the release's noise multiplier under ``relation``.
    :ivar seconds: wall time of the loop (compilation included).
    """

    draws: torch.Tensor
    ledgers: List[PrivacyLedger]
    clipped_fraction: torch.Tensor
    noise_multiplier: float
    seconds: float


def run_sgld_chains(model: Callable, args: tuple, starts: torch.Tensor, *, num_iterations: int, batch_size: int,
                    step_size: float, grad_clip: float, noise_seeds: Optional[Sequence[int]] = None,
                    temperature: float = 1.0,
                    noise_multiplier: Optional[float] = None, relation: str = "substitute",
                    public_num_rows: Optional[int] = None, block: int = 1000,
                    log: Optional[Callable[[str], None]] = None, log_every: int = 500_000) -> SGLDChains:
    r"""Run ``len(starts)`` DP-SGLD chains of ``model`` on ``args`` for ``num_iterations`` each,
    vectorised (module doc). The parameters are :class:`~pyro_dp.kernels.sgmcmc.DPSGLD`'s:
    ``batch_size`` is the expected Poisson batch :math:`b` (:math:`q = b/N`, or
    :math:`b/M` with ``public_num_rows=M``, which ``relation="add_remove"`` requires, as the
    kernel does, issue #38), ``noise_multiplier`` defaults to the Langevin noise's
    (:func:`~pyro_dp.kernels.sgmcmc.langevin_noise_multiplier`; as in the kernel, a larger one
    adds the missing noise explicitly and a smaller one is raised to it), ``starts`` is ``[R, d]`` in unconstrained coordinates and
    ``noise_seeds`` gives each chain a reproducible privacy stream (for experiments only: anyone
    who knows a seed can replay the noise); without it each chain's stream is seeded from OS
    entropy, as a kernel's is.

    >>> import torch
    >>> from pyro_dp.models import gmm_model, make_gmm_data
    >>> out = run_sgld_chains(gmm_model, (make_gmm_data(500, seed=0),), torch.zeros(2, 2), num_iterations=20,
    ...                       batch_size=50, step_size=1e-3, grad_clip=5.0, noise_seeds=[0, 1], block=10)
    >>> out.draws.shape, [led.entries[0].count for led in out.ledgers]
    (torch.Size([2, 20, 2]), [20, 20])
    """
    def init(z):  # SGLD's state is the point (sgld_init)
        return (z,)

    def update(state, grad):  # Welling & Teh 2011, eq. 4; read at call time (the test's mutant patches it)
        return (sgld_update(state[0], grad, step_size),)

    return _run_chains("sgld", init, update, model, args, starts, num_iterations=num_iterations,
                       batch_size=batch_size, step_size=step_size, grad_clip=grad_clip, noise_seeds=noise_seeds,
                       temperature=temperature, noise_multiplier=noise_multiplier, relation=relation,
                       public_num_rows=public_num_rows, block=block, log=log, log_every=log_every)


def run_sgnht_chains(model: Callable, args: tuple, starts: torch.Tensor, *, num_iterations: int, batch_size: int,
                     step_size: float, grad_clip: float, algo_seeds: Sequence[int],
                     noise_seeds: Optional[Sequence[int]] = None,
                     thermostat: float = 1.0, temperature: float = 1.0, noise_multiplier: Optional[float] = None,
                     relation: str = "substitute", public_num_rows: Optional[int] = None, block: int = 1000,
                     log: Optional[Callable[[str], None]] = None, log_every: int = 500_000,
                     update: Optional[Callable] = None) -> SGLDChains:
    r"""Run ``len(starts)`` DP-SGNHT chains (Ding et al. 2014, Alg. 1), vectorised as
    :func:`run_sgld_chains` (the same loop, draws and ledgers; module doc), with
    :class:`~pyro_dp.kernels.sgmcmc.DPSGNHT`'s parameters (``step_size`` :math:`h`,
    ``thermostat`` :math:`A`). Each chain's state is the kernel's
    (:func:`~pyro_dp.kernels.sgmcmc.sgnht_init`): its momentum :math:`p \sim \mathcal N(0, I)`
    is drawn from the chain's *algorithm* generator seeded by ``algo_seeds[r]`` (data-free, not a
    release; the kernel's ``"algorithm"`` stream, :func:`~pyro_dp.kernels.base.kernel_chain_seed`), its thermostat starts at :math:`A`; each
    iteration applies :func:`~pyro_dp.kernels.sgmcmc.sgnht_update` to the private gradient.
    ``draws`` holds the points :math:`\theta`. ``update(state, g̃, h)`` (default ``None``: Alg. 1) replaces
    :func:`~pyro_dp.kernels.sgmcmc.sgnht_update` for an experiment that post-processes the same
    release otherwise (the DP-HMC paper's code: :func:`experiments.dphmc_fig1.sgnht_update_authors`);
    the release, its event and the ledgers are unchanged.

    >>> import torch
    >>> from pyro_dp.models import gmm_model, make_gmm_data
    >>> out = run_sgnht_chains(gmm_model, (make_gmm_data(500, seed=0),), torch.zeros(2, 2), num_iterations=20,
    ...                        batch_size=50, step_size=1e-3, grad_clip=5.0, thermostat=2.0, noise_seeds=[0, 1],
    ...                        algo_seeds=[5, 6], block=10)
    >>> out.draws.shape, out.ledgers[1].entries[0].count
    (torch.Size([2, 20, 2]), 20)
    """
    if len(algo_seeds) != len(starts):
        raise ValueError(f"need one algorithm seed per chain: {len(starts)} starts, {len(algo_seeds)} seeds")

    def init(z):  # per chain the kernel's sgnht_init, from its own algorithm generator
        states = []
        for r in range(len(z)):
            rng = torch.Generator(device=z.device)
            rng.manual_seed(int(algo_seeds[r]))
            states.append(sgnht_init(None, z[r], rng, thermostat))
        return tuple(torch.stack(x) for x in zip(*states))

    def update_chain(state, grad):  # sgnht_update read at call time (the test's mutant patches it)
        return tuple((update or sgnht_update)(SGNHTState(*state), grad, step_size))

    return _run_chains("sgnht", init, update_chain, model, args, starts, num_iterations=num_iterations,
                       batch_size=batch_size, step_size=step_size, grad_clip=grad_clip, noise_seeds=noise_seeds,
                       temperature=temperature, noise_multiplier=noise_multiplier, relation=relation,
                       public_num_rows=public_num_rows, block=block, log=log, log_every=log_every,
                       thermostat=thermostat,
                       tag="" if update is None else f",update={update.__module__}.{update.__qualname__}")


def ledger_prefix(ledger: PrivacyLedger, num_iterations: int) -> PrivacyLedger:
    """The ledger of a chain's first ``num_iterations`` iterations (one release an iteration, as
    :func:`run_sgld_chains` records): its entries cut after that many releases, so the ε of a
    prefix of a chain (a shorter run on the same streams) comes from the run's own ledger.

    >>> from pyro_dp.mechanisms import subsampled_gaussian_event
    >>> led = PrivacyLedger(relation="substitute")
    >>> led.record(subsampled_gaussian_event(0.01, 2.0), count=1000)
    >>> ledger_prefix(led, 300).entries[0].count, ledger_prefix(led, 300).relation
    (300, 'substitute')
    """
    left = int(num_iterations)
    if not 0 <= left <= ledger.num_releases:
        raise ValueError(f"a prefix of {left} iterations of a ledger of {ledger.num_releases} releases")
    out = PrivacyLedger(relation=ledger.relation)
    for entry in ledger.entries:
        take = min(left, entry.count)
        if take:
            out.record(entry.event, count=take)
        left -= take
    return out


def _run_chains(kind: str, init: Callable, update: Callable, model: Callable, args: tuple, starts: torch.Tensor, *,
                num_iterations: int, batch_size: int, step_size: float, grad_clip: float,
                noise_seeds: Optional[Sequence[int]],
                temperature: float, noise_multiplier: Optional[float], relation: str, public_num_rows: Optional[int],
                block: int, log: Optional[Callable[[str], None]], log_every: int,
                thermostat: float = 1.0, tag: str = "") -> SGLDChains:
    """The one loop of :func:`run_sgld_chains` and :func:`run_sgnht_chains`: ``init(z [R, d])``
    gives the chains' state (a tuple of tensors with a leading chain dimension, the point first)
    and ``update(state, g̃)`` one chain's next state from its private gradient (under ``vmap``);
    ``tag`` names a non-default update in the compiled graph's cache key."""
    t_start = time.perf_counter()
    starts = torch.as_tensor(starts)
    if starts.dim() != 2:
        raise ValueError(f"starts must be [num_chains, d], got shape {tuple(starts.shape)}")
    num_chains, num_iterations, block = starts.shape[0], int(num_iterations), int(block)
    if noise_seeds is not None and len(noise_seeds) != num_chains:
        raise ValueError(f"need one noise seed per chain: {num_chains} starts, {len(noise_seeds)} seeds")
    if num_iterations < 1 or block < 1:
        raise ValueError(f"num_iterations and block must be >= 1, got {num_iterations}, {block}")
    if relation == "add_remove" and public_num_rows is None:
        raise ValueError("relation='add_remove' needs public_num_rows (as DPSGLD: N itself is private there, #38)")
    lik = PrivateLikelihood(model, args, temperature=temperature, jit_compile=True)
    dev, d, n = lik.device, lik.dim, lik.num_rows
    if starts.shape[1] != d:
        raise ValueError(f"starts have {starts.shape[1]} coordinates, the model has {d}")
    q = float(batch_size) / float(public_num_rows if public_num_rows is not None else n)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"batch_size / N must be in (0, 1], got {q!r}")
    nm_l = langevin_noise_multiplier(kind, step_size=step_size, sample_rate=q, grad_clip=grad_clip,
                                     temperature=temperature, thermostat=thermostat, relation=relation)
    nm = nm_l if noise_multiplier is None else max(nm_l, float(noise_multiplier))  # as _SGMCMC._calibrate
    spec, event = gaussian_release_spec(nm, relation), subsampled_gaussian_event(q, nm, "poisson")
    cl = lik.compiled
    gradient = private_gradient_fn(lik, temperature, q, spec, lambda *a: cl.clipped_grad_terms(*a)[1],
                                   lambda zz: cl.log_prior_terms(zz)[1], padded=True)
    state = init(starts.to(dev, torch.float64).clone())
    width_of_state = len(state)

    def one_chain(*xs):  # one chain's step: the kernel's private gradient, then the kind's update
        st, (clip, idx, k, xi) = xs[:width_of_state], xs[width_of_state:]
        grad, flags = gradient(st[0], clip, idx, k, xi)
        return tuple(update(st, grad)) + (flags,)

    # every chain's step, from draws made before it: (*state, clip, idx, k, xi) -> (*state', flags), flat
    step = torch.func.vmap(one_chain, in_dims=(0,) * width_of_state + (None, 0, 0, 0))

    extra = (f",A={float(thermostat)!r}" if kind == "sgnht" else "") + tag
    name = (f"{kind}_chains[R={num_chains},n={n},q={q!r},T={float(temperature)!r},nm={nm!r},rel={relation},"
            f"eta={float(step_size)!r}{extra}]")
    graphs = {}

    def graph_for(width):
        if width not in graphs:
            example = tuple(state) + (
                torch.tensor(float(grad_clip), dtype=torch.float64, device=dev),
                torch.zeros((num_chains, width), dtype=torch.long, device=dev),
                torch.zeros((num_chains,), dtype=torch.long, device=dev),
                torch.zeros((num_chains, d), dtype=torch.float64, device=dev))
            # outputs: the chains' states (post-processing of the released gradient: public), the clipped-row
            # counts (a diagnostic); the released gradient depends on the noise input xi (issue 58's taint)
            graphs[width] = cl.fused_graph(name, step, example, full_data=False, bucket=width,
                                           released=tuple(range(width_of_state)), diagnostic=(width_of_state,),
                                           noise=(width_of_state + 3,) * spec.adds_noise, release=graph_release) or step
        return graphs[width]

    seeds = [None] * num_chains if noise_seeds is None else [int(s) for s in noise_seeds]
    noises = [NoiseSource(seed=s, device=dev, warn=False) for s in seeds]  # None: OS entropy
    ledgers = [PrivacyLedger(relation=relation) for _ in range(num_chains)]
    draws = torch.empty((num_chains, num_iterations, d), dtype=torch.float64)
    clip = torch.tensor(float(grad_clip), dtype=torch.float64, device=dev)
    flags = torch.zeros((num_chains, 3), dtype=torch.float64, device=dev)
    t = 0
    while t < num_iterations:
        m = min(block, num_iterations - t)
        drawn, recorded = [], []
        for noise in noises:  # per chain, in the kernel's order: the block's batches, then its normals
            idx, k = poisson_batches(noise, n, q, m, device=dev)
            with recording() as rec:  # the block's m releases record their event as they are drawn
                drawn.append((idx, k, spec.draw(noise, (m, d), device=dev, event=event, releases=m)))
            recorded.append(rec.events)
        width = bucket_size(max(1, max(int(i.shape[1]) for i, _, _ in drawn)))
        idx = torch.zeros((m, num_chains, width), dtype=torch.long, device=dev)  # padding: row 0, masked by k
        for r, (i, _, _) in enumerate(drawn):
            idx[:, r, :i.shape[1]] = i
        ks = torch.stack([k for _, k, _ in drawn], 1)
        xis = torch.stack([x for _, _, x in drawn], 1)
        g = graph_for(width)
        for j in range(m):
            *state, f = g(*state, clip, idx[j], ks[j], xis[j])
            flags += f
            draws[:, t + j] = state[0].to("cpu")
        for led, events in zip(ledgers, recorded):  # each chain's ledger from what its releases recorded
            for ev, c in Counter(events).items():
                led.record(ev, count=c)
        if log is not None and (t + m) // log_every > t // log_every:
            log(f"{kind}_chains: {t + m:,} of {num_iterations:,} iterations, {time.perf_counter() - t_start:.0f} s")
        t += m
    rows = flags[:, 1].clamp(min=1.0)
    return SGLDChains(draws, ledgers, (flags[:, 0] / rows).cpu(), nm, time.perf_counter() - t_start)
