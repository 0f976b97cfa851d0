"""The vectorised DP-SGLD and DP-SGNHT runners (experiments.sgld_chains) are the kernels' chains.

With ``block=1`` their draws are DPSGLD's / DPSGNHT's, in the kernel's order, so each chain must
equal the kernel's (run through Pyro's MCMC, eager; the runner runs one compiled graph) to
rounding; a mutant update (SGLD: step η instead of η/2; SGNHT: no thermostat friction) or a
mutant momentum stream must not. With a larger block the draws are made in another order: the
law is the same, the values are not, and the ledger is the kernel's.
"""
from __future__ import annotations

import warnings
from functools import partial

import pytest
import torch

from pyro_dp.accounting import get_accountant
from experiments import sgld_chains as sc
from experiments.grid import run_kernel
from pyro_dp.kernels.base import kernel_chain_seed
from pyro_dp.kernels.sgmcmc import DPSGLD, DPSGNHT, SGNHTState
from pyro_dp.mechanisms import poisson_batches, poisson_subsample, poisson_subsamples
from pyro_dp.models import gmm_model, make_gmm_data

N, B, ETA, CLIP, T, ITERS = 2000, 40, 2e-3, 3.0, 0.5, 30
NM = 2.0  # above the Langevin noise's (0.3 substitute): explicit extra noise; a PLD at 0.3 needs gigabytes
_ACCOUNTANT = {"substitute": "pld", "add_remove": "rdp"}  # the Poisson-subsampled Gaussian's, per relation


def _kernel_chain(seed, start, relation="substitute", public=None):
    """DPSGLD's chain through Pyro's runner, eager (the runner's compiled graph must match it)."""
    k = DPSGLD(gmm_model, batch_size=B, step_size=ETA, grad_clip=CLIP, temperature=T, num_iterations=ITERS,
               noise_multiplier=NM, reference_delta=1e-6, seed=seed, noise_seed=seed, jit_compile=False,
               relation=relation, public_num_rows=public, accountant=_ACCOUNTANT[relation])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, diag = run_kernel(k, (make_gmm_data(N, seed=0),), num_samples=ITERS, initial_params={"theta": start})
    return k, s.double(), diag


def _noise_seed(kernel) -> int:
    """The seed of the kernel's first chain's privacy stream (DPKernel._chain_seed at chain 0)."""
    return kernel_chain_seed(kernel.noise_seed, 0, "noise")


@pytest.mark.parametrize("relation,public", [("substitute", None), ("add_remove", N)])
def test_block_one_is_the_kernels_chain(relation, public):
    starts = torch.tensor([[0.3, -0.2], [-0.5, 0.8]], dtype=torch.float64)
    kernels = [_kernel_chain(s, starts[i], relation, public) for i, s in enumerate((11, 12))]
    seeds = [_noise_seed(k) for k, _, _ in kernels]
    x = make_gmm_data(N, seed=0)
    run = partial(sc.run_sgld_chains, gmm_model, (x,), starts, num_iterations=ITERS, batch_size=B, step_size=ETA,
                  grad_clip=CLIP, noise_seeds=seeds, temperature=T, noise_multiplier=NM, relation=relation,
                  public_num_rows=public)
    out = run(block=1)
    for r, (k, s, diag) in enumerate(kernels):
        torch.testing.assert_close(out.draws[r], s, rtol=1e-9, atol=1e-12)
        assert out.ledgers[r].entries == k.ledger.entries  # the same events, the same count
        assert out.noise_multiplier == k.noise_multiplier
        eps = get_accountant(_ACCOUNTANT[relation], out.ledgers[r]).get_epsilon(1e-6)
        assert eps == pytest.approx(diag["epsilon_total"], rel=1e-12)
    # a larger block draws the same laws in another order: other values, the same ledger
    blocked = run(block=7)
    assert not torch.allclose(blocked.draws, out.draws)
    assert [led.entries for led in blocked.ledgers] == [led.entries for led in out.ledgers]


def test_a_wrong_update_is_not_the_kernels_chain(monkeypatch):
    """Mutant: the update with step η instead of η/2 (Welling & Teh eq. 4) must fail the comparison."""
    start = torch.tensor([0.3, -0.2], dtype=torch.float64)
    k, s, _ = _kernel_chain(11, start)
    monkeypatch.setattr(sc, "sgld_update", lambda z, g, eta: z + eta * g)
    out = sc.run_sgld_chains(gmm_model, (make_gmm_data(N, seed=0),), start[None], num_iterations=ITERS,
                             batch_size=B, step_size=ETA, grad_clip=CLIP, temperature=T, block=1, noise_multiplier=NM,
                             noise_seeds=[_noise_seed(k)])
    assert not torch.allclose(out.draws[0], s, rtol=1e-6, atol=1e-9)


H, A = 1e-3, 3.0  # DP-SGNHT's step h and thermostat A for the comparison below


def _sgnht_kernel_chain(seed, start):
    k = DPSGNHT(gmm_model, batch_size=B, step_size=H, grad_clip=CLIP, thermostat=A, temperature=T,
                num_iterations=ITERS, noise_multiplier=NM, reference_delta=1e-6, seed=seed, noise_seed=seed,
                jit_compile=False)  # eager, as DPSGLD's above: the runner's compiled graph must match it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, diag = run_kernel(k, (make_gmm_data(N, seed=0),), num_samples=ITERS, initial_params={"theta": start})
    return k, s.double(), diag


def _sgnht_run(starts, kernels, **kw):
    return sc.run_sgnht_chains(gmm_model, (make_gmm_data(N, seed=0),), starts, num_iterations=ITERS, batch_size=B,
                               step_size=H, grad_clip=CLIP, thermostat=A, temperature=T, noise_multiplier=NM,
                               noise_seeds=[_noise_seed(k) for k, _, _ in kernels],
                               algo_seeds=kw.pop("algo_seeds", [kernel_chain_seed(k.seed, 0, "algorithm")
                                                                for k, _, _ in kernels]), **kw)


def test_sgnht_block_one_is_the_kernels_chain():
    """DP-SGNHT: the momentum from the chain's algorithm stream (sgnht_init), the thermostat from A,
    then sgnht_update on DPSGNHT's private gradient: the kernel's chain to rounding, its ledger."""
    starts = torch.tensor([[0.3, -0.2], [-0.5, 0.8]], dtype=torch.float64)
    kernels = [_sgnht_kernel_chain(s, starts[i]) for i, s in enumerate((11, 12))]
    out = _sgnht_run(starts, kernels, block=1)
    for r, (k, s, diag) in enumerate(kernels):
        torch.testing.assert_close(out.draws[r], s, rtol=1e-9, atol=1e-12)
        assert out.ledgers[r].entries == k.ledger.entries
        assert out.noise_multiplier == k.noise_multiplier
        eps = get_accountant("pld", out.ledgers[r]).get_epsilon(1e-6)
        assert eps == pytest.approx(diag["epsilon_total"], rel=1e-12)
    blocked = _sgnht_run(starts, kernels, block=7)  # the same laws, drawn in another order
    assert not torch.allclose(blocked.draws, out.draws)
    assert [led.entries for led in blocked.ledgers] == [led.entries for led in out.ledgers]


def test_sgnht_mutants_are_not_the_kernels_chain(monkeypatch):
    """Mutants: the update without the thermostat's friction −hξp, and the momentum drawn from
    another algorithm seed, must each fail the comparison."""
    start = torch.tensor([[0.3, -0.2]], dtype=torch.float64)
    kernels = [_sgnht_kernel_chain(11, start[0])]
    s = kernels[0][1]
    other_seed = _sgnht_run(start, kernels, block=1, algo_seeds=[kernel_chain_seed(11, 1, "algorithm")])
    assert not torch.allclose(other_seed.draws[0], s, rtol=1e-6, atol=1e-9)

    def no_friction(state, g, h):
        p = state.momentum + h * g
        return SGNHTState(state.z + h * p, p, state.thermostat + h * (p.dot(p) / p.numel() - 1.0))

    monkeypatch.setattr(sc, "sgnht_update", no_friction)
    out = _sgnht_run(start, kernels, block=1)
    assert not torch.allclose(out.draws[0], s, rtol=1e-6, atol=1e-9)


def test_ledger_prefix():
    from pyro_dp.mechanisms import PrivacyLedger, subsampled_gaussian_event

    a, b = subsampled_gaussian_event(0.1, 2.0), subsampled_gaussian_event(0.1, 3.0)
    led = PrivacyLedger(relation="substitute")
    led.record(a, count=5)
    led.record(b, count=4)
    assert sc.ledger_prefix(led, 7).entries == ((a, 5), (b, 2))
    assert sc.ledger_prefix(led, 5).entries == ((a, 5),)
    assert sc.ledger_prefix(led, 9) == led
    with pytest.raises(ValueError, match="prefix"):
        sc.ledger_prefix(led, 10)


def test_bad_input_is_refused():
    x = make_gmm_data(100, seed=0)
    run = partial(sc.run_sgld_chains, gmm_model, (x,), num_iterations=5, batch_size=10, step_size=1e-3,
                  grad_clip=1.0)
    with pytest.raises(ValueError, match="one noise seed per chain"):
        run(torch.zeros(2, 2), noise_seeds=[0])
    with pytest.raises(ValueError, match=r"\[num_chains, d\]"):
        run(torch.zeros(2), noise_seeds=[0, 1])
    with pytest.raises(ValueError, match="public_num_rows"):
        run(torch.zeros(1, 2), noise_seeds=[0], relation="add_remove")
    with pytest.raises(ValueError, match="coordinates"):
        run(torch.zeros(1, 3), noise_seeds=[0])
    with pytest.raises(ValueError, match="one algorithm seed per chain"):
        sc.run_sgnht_chains(gmm_model, (x,), torch.zeros(2, 2), num_iterations=5, batch_size=10, step_size=1e-3,
                            grad_clip=1.0, noise_seeds=[0, 1], algo_seeds=[0])
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        sc.run_sgld_chains(gmm_model, (x,), torch.zeros(1, 2), num_iterations=5, batch_size=200, step_size=1e-3,
                           grad_clip=1.0, noise_seeds=[0])


def test_without_noise_seeds_each_chain_streams_from_os_entropy():
    """No ``noise_seeds``: every chain's privacy stream is seeded from OS entropy, as a kernel's, so
    two runs from the same starts differ (and two chains of one run too), with the same ledgers."""
    x = make_gmm_data(200, seed=0)
    run = partial(sc.run_sgld_chains, gmm_model, (x,), torch.zeros(2, 2), num_iterations=5, batch_size=20,
                  step_size=1e-3, grad_clip=1.0, block=5)
    a, b = run(), run()
    assert not torch.equal(a.draws, b.draws) and not torch.equal(a.draws[0], a.draws[1])
    assert [led.entries for led in a.ledgers] == [led.entries for led in b.ledgers]


# ------------------------------------------------------------------ many Poisson samples at once


def test_poisson_subsamples_one_is_poisson_subsample():
    """num = 1: the same draws from the same stream, in the same order."""
    for seed in range(10):
        a = poisson_subsample(torch.Generator().manual_seed(seed), 10**6, 1e-4)
        idx, k = poisson_subsamples(torch.Generator().manual_seed(seed), 10**6, 1e-4, 1)
        assert torch.equal(idx[0, :int(k[0])], a)


def test_poisson_subsamples_law():
    """Each row a Poisson sample: sizes Binomial(n, q) (mean and variance within 5 standard errors),
    every row included with probability q (within 5 binomial standard errors), rows distinct, padding 0."""
    n, q, m = 40, 0.15, 40_000
    idx, k = poisson_subsamples(torch.Generator().manual_seed(3), n, q, m)
    kd = k.double()
    assert abs(kd.mean() - n * q) < 5 * (n * q * (1 - q) / m) ** 0.5
    var = n * q * (1 - q)
    assert abs(kd.var() - var) < 5 * var * (2 / m) ** 0.5 * 1.1  # var of a sample variance ≈ 2σ⁴/m (near-normal)
    valid = torch.arange(idx.shape[1]) < k[:, None]
    freq = torch.zeros(n).index_add_(0, idx[valid], torch.ones(int(valid.sum()))) / m
    assert (freq - q).abs().max() < 5 * (q * (1 - q) / m) ** 0.5
    assert all(len(set(r[:kk].tolist())) == kk for r, kk in zip(idx[:3000], k[:3000].tolist()))
    assert bool((idx[~valid] == 0).all())


def test_poisson_subsamples_mutant_fails_the_law_test(monkeypatch):
    """Mutant: draws kept with repeats (no first-occurrence rule) must fail the distinctness check."""
    import pyro_dp.mechanisms.batches as bt

    orig = bt.poisson_subsamples

    def mutant(rng, n, q, num, device=None):
        sizes = torch.binomial(torch.full((num,), float(n)), torch.full((num,), float(q)), generator=rng).long()
        w = int(sizes.max())
        idx = torch.randint(n, (num, w), generator=rng)
        return torch.where(torch.arange(w) < sizes[:, None], idx, 0), sizes

    monkeypatch.setattr(bt, "poisson_subsamples", mutant)
    idx, k = bt.poisson_subsamples(torch.Generator().manual_seed(3), 40, 0.15, 3000)
    assert not all(len(set(r[:kk].tolist())) == kk for r, kk in zip(idx, k.tolist()))
    assert bt.poisson_subsamples is not orig


def test_poisson_subsamples_dense_and_empty_and_bad_input():
    idx, k = poisson_subsamples(torch.Generator().manual_seed(0), 10, 0.9, 50)  # 2 max(k) > n: row by row
    assert all(len(set(r[:kk].tolist())) == kk for r, kk in zip(idx, k.tolist()))
    idx, k = poisson_subsamples(torch.Generator().manual_seed(0), 10, 1e-9, 4)
    assert idx.shape == (4, 0) and k.tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="num"):
        poisson_subsamples(torch.Generator(), 10, 0.5, 0)
    with pytest.raises(ValueError, match="sample rate"):
        poisson_subsamples(torch.Generator(), 10, 1.5, 1)


def test_poisson_batches_draws_from_the_noise_source():
    from pyro_dp.mechanisms import NoiseSource

    a, b = NoiseSource(seed=5, warn=False), NoiseSource(seed=5, warn=False)
    i1, k1 = poisson_batches(a, 1000, 0.05, 4)
    i2, k2 = poisson_subsamples(b.generator, 1000, 0.05, 4)
    assert torch.equal(i1, i2) and torch.equal(k1, k2)


def test_first_occurrence_mask_numpy_and_torch_agree():
    """The CPU (numpy key sort) and the device (torch stable sort) branches give the same mask; n
    near 2**62 forces the torch branch (the key would overflow)."""
    from pyro_dp.mechanisms.batches import _first_occurrence_mask

    draws = torch.randint(30, (500, 40), generator=torch.Generator().manual_seed(0))  # many repeats
    a, b = _first_occurrence_mask(draws, 30), _first_occurrence_mask(draws, 2**62)
    assert torch.equal(a, b)
    row = draws[0].tolist()
    assert a[0].tolist() == [row.index(v) == j for j, v in enumerate(row)]


def test_kernel_chain_seed_is_the_kernel_s_and_refuses_an_unknown_stream():
    """``kernel_chain_seed`` gives the seeds the kernel's own chains use (its private
    ``_chain_seed``), per chain and stream; an unknown stream is refused."""
    k = DPSGLD(gmm_model, batch_size=B, step_size=ETA, grad_clip=CLIP, num_iterations=ITERS, seed=5, noise_seed=9)
    for chain in (0, 3):
        k._chain_index = chain
        assert kernel_chain_seed(5, chain, "algorithm") == k.randomness.chain_seed(2)
        assert kernel_chain_seed(5, chain, "init") == k.randomness.chain_seed(1)
        assert kernel_chain_seed(9, chain, "noise") == k.randomness.chain_seed(3, base=9)
    assert len({kernel_chain_seed(5, 0, s) for s in ("init", "algorithm", "noise")}) == 3
    with pytest.raises(ValueError, match="stream"):
        kernel_chain_seed(5, 0, "momentum")
