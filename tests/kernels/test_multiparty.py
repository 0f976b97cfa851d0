"""DPMultiPartyPenalty (Yıldırım & Ermiş 2019, §3.2.2, Alg. 2): exactness (invariance against
the closed-form posterior, MCSE tolerances) with a broken variant that must fail, the total
acceptance noise (parties × one party's variance), per-party accounting (parallel
composition: equals a single-party run on that party's rows; dp_accounting), chains, bad inputs."""
import math
import warnings
from functools import partial

import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
import pyro_dp.kernels.multiparty as mp_mod
from pyro_dp import DPPenalty
from pyro_dp.kernels.mh import mh_step, random_walk_proposal, release_then_accept
from pyro_dp.kernels.multiparty import DPMultiPartyPenalty, multiparty_release, party_epsilon
from pyro_dp.mechanisms import GaussianEvent, NoiseSource
from pyro_dp.private import reveal
from tests.kernels.helpers import gauss_model, make_data, posterior, maybe_broken_fixture


maybe_broken = maybe_broken_fixture(mp_mod)


def _parties(n, p=3):
    return torch.arange(n) % p


def within_mcse(x, mean, var, n_sd=4.0):
    """iid draws x [K]: mean and variance vs the truth within n_sd Monte Carlo standard errors."""
    k = x.shape[0]
    m_hat, v_hat = float(x.mean()), float(x.var())
    mcse_v = float(((x - mean) ** 2).std()) / math.sqrt(k)
    ok = abs(m_hat - mean) <= n_sd * math.sqrt(var / k) and abs(v_hat - var) <= n_sd * mcse_v
    return ok, (m_hat, v_hat)


def test_invariance(maybe_broken):
    """Chains started at exact posterior draws stay at the posterior. Three parties, nm=2 each,
    2 nm b = 16: per-party noise sd ~3.8 per typical move (proposal 0.3), so dropping the penalty
    shows (variance z-score +6 to +7.5 over kernel seeds 5-7; the correct one stays within ±2.4)."""
    y = make_data(90, seed=1)
    m, v = posterior(y)
    k = 150
    g = torch.Generator().manual_seed(11)
    start = m + math.sqrt(v) * torch.randn(k, 1, generator=g, dtype=torch.float64)
    kernel = DPMultiPartyPenalty(gauss_model, _parties(90), proposal_scale=0.3, llr_clip=4.0, noise_multiplier=2.0, seed=5,
                                 nonprivate_diagnostics=True)
    kernel.setup(0, y)
    ends = []
    for z0 in start:
        params = kernel.lik.unravel(z0)
        kernel._state = kernel._init_state(z0)
        for _ in range(10):
            params = kernel.sample(params)
        ends.append(float(params["mu"]))
    ok, (m_hat, v_hat) = within_mcse(torch.tensor(ends, dtype=torch.float64), float(m), float(v))
    assert ok != maybe_broken, f"broken={maybe_broken}: mean {m_hat} vs {float(m)}, var {v_hat} vs {v}"
    assert kernel.diagnostics()["non-private clipped fraction"] == 0.0


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_total_noise_is_parties_times_one_party():
    """Alg. 2 step 2: the noise on Σ_j d̂^(j) has variance N_p σ² (exactly, from the step's
    record, and empirically over fresh noise at a fixed proposal); its mean is the exact ratio."""
    y = make_data(60, seed=2)
    kernel = DPMultiPartyPenalty(gauss_model, _parties(60), proposal_scale=0.3, llr_clip=4.0, noise_multiplier=0.5, seed=0)
    kernel.setup(0, y)
    state = kernel._state
    rng_state = kernel._rng.get_state()
    noise = NoiseSource(seed=3)
    draws = []
    for _ in range(300):
        kernel._rng.set_state(rng_state)  # same proposal every time, fresh privacy noise
        release = partial(multiparty_release, kernel.lik, parties=kernel._party_rows, llr_clip=4.0,
                          noise_multipliers=kernel.noise_multipliers)
        _, info = mh_step(kernel._rng, noise, state, propose=random_walk_proposal(0.3),
                          release_accept=release_then_accept(release, mp_mod.penalty_accept))
        draws.append(float(info.extra.log_ratio_hat))
    sigma = info.extra.party_noise_std
    assert len(sigma) == 3 and max(sigma) == pytest.approx(min(sigma))
    assert info.noise_std**2 == pytest.approx(3 * sigma[0] ** 2, rel=1e-12)
    kernel._rng.set_state(rng_state)
    from pyro_dp.kernels.proposals import random_walk

    z_new = random_walk(kernel._rng, state.z, 0.3, "full", state.direction).z
    exact = float(reveal((kernel.lik.per_example_loglik(z_new) - kernel.lik.per_example_loglik(state.z)).sum(),
                         reason="a test computes the exact log ratio"))
    ok, (m_hat, v_hat) = within_mcse(torch.tensor(draws, dtype=torch.float64), exact, 3 * sigma[0] ** 2)
    assert ok, (m_hat, exact, v_hat, 3 * sigma[0] ** 2)
    assert v_hat > 2 * sigma[0] ** 2  # not one party's variance


# ---------------------------------------------------------------------------- accounting


def _run(kernel, y, n=40, chains=1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "chains drawn sequentially"
        mcmc = MCMC(kernel, num_samples=n - 10, warmup_steps=10, num_chains=chains, disable_progbar=True)
        mcmc.run(y)
    return mcmc


def test_party_epsilon_equals_single_party_run_and_dp_accounting():
    import dp_accounting

    y = make_data(60, seed=3)
    party = _parties(60)
    kernel = DPMultiPartyPenalty(gauss_model, party, 0.2, llr_clip=1.0, noise_multiplier=[2.0, 3.0, 5.0], seed=0)
    _run(kernel, y)
    for j, nm in enumerate([2.0, 3.0, 5.0]):
        assert kernel.party_ledger(j).entries[0] == (GaussianEvent(nm), 40)
        single = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=nm, seed=1)
        _run(single, y[party == j])
        eps_j = kernel.get_epsilon(1e-5, party=j)
        assert eps_j == pytest.approx(single.get_epsilon(1e-5), rel=1e-12)
        acc = dp_accounting.pld.PLDAccountant(
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-3
        )
        acc.compose(dp_accounting.GaussianDpEvent(2 * nm), 40)  # substitute nm -> 2*nm (REPLACE_ONE)
        assert eps_j == pytest.approx(acc.get_epsilon(1e-5), rel=1e-3)
    # the run as a whole: one Gaussian per row and iteration (parallel composition), worst party
    assert kernel.ledger.num_releases == 40
    assert kernel.get_epsilon(1e-5) == pytest.approx(kernel.get_epsilon(1e-5, party=0), rel=1e-12)


def test_sequential_chains_compose_per_party():
    y = make_data(30, seed=4)
    kernel = DPMultiPartyPenalty(gauss_model, _parties(30, 2), 0.2, llr_clip=1.0, noise_multiplier=[2.0, 4.0], seed=0)
    mcmc = _run(kernel, y, n=20, chains=2)
    assert kernel.party_ledger(1).num_releases == 40
    assert party_epsilon(mcmc, 1e-5, 1) == pytest.approx(kernel.get_epsilon(1e-5, party=1), rel=1e-12)
    assert pyro_dp.get_epsilon(mcmc, 1e-5) == pytest.approx(kernel.get_epsilon(1e-5, party=0), rel=1e-12)


def test_party_epsilon_counts_every_run_and_worker_chain(monkeypatch):
    """2026-11-26 audit: ``party_epsilon(mcmc, ...)`` read only the last run's chains (Pyro's
    ``MCMC._diagnostics``): two runs of 30 iterations gave party 0 epsilon 4.87 instead of 7.33.
    Now every run counts, chains in worker processes included (their party ledgers file
    themselves when they come back), also after a later run has replaced them in Pyro's list."""
    import dp_accounting
    import pyro.infer.mcmc.api as api

    y = make_data(40, seed=6)
    kernel = DPMultiPartyPenalty(gauss_model, _parties(40, 2), 0.2, llr_clip=1.0, noise_multiplier=[2.0, 4.0], seed=0)
    mcmc = _run(kernel, y, n=30)
    mcmc = _run(kernel, y, n=30)  # a second run of the same MCMC object
    monkeypatch.setattr(api.mp, "cpu_count", lambda: 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        workers = MCMC(kernel, num_samples=20, warmup_steps=10, num_chains=2, disable_progbar=True)
        assert type(workers.sampler).__name__ == "_MultiSampler"
        workers.run(y)  # two chains in worker processes
    last = _run(kernel, y, n=30)  # and one more in this process: Pyro's list now holds only it
    for j, nm in enumerate([2.0, 4.0]):
        assert kernel.party_ledger(j).entries == ((GaussianEvent(nm), 30 * 3 + 2 * 30),)
        acc = dp_accounting.pld.PLDAccountant(
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-3
        )
        acc.compose(dp_accounting.GaussianDpEvent(2 * nm), 150)  # substitute nm -> 2*nm (REPLACE_ONE)
        for m in (mcmc, workers, last):
            assert party_epsilon(m, 1e-5, j) == pytest.approx(kernel.get_epsilon(1e-5, party=j), rel=1e-12)
        assert kernel.get_epsilon(1e-5, party=j) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-3)


def test_budget_calibrates_each_party():
    y = make_data(30, seed=5)
    kernel = DPMultiPartyPenalty(gauss_model, _parties(30), 0.2, llr_clip=1.0, epsilon=1.0, delta=1e-5,
                                 num_iterations=40, seed=0)
    _run(kernel, y)
    assert len(set(kernel.noise_multipliers)) == 1
    assert all(kernel.get_epsilon(1e-5, party=j) <= 1.0 for j in range(3))


# ---------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "party, kwargs, exc, match",
    [
        (torch.tensor([0, 0, 2, 2]), {}, ValueError, r"parties \[1\] have no rows"),
        (torch.tensor([0, 1, 0, 1]), dict(num_parties=3), ValueError, r"parties \[2\] have no rows"),
        (torch.tensor([0, 1, 2, 1]), dict(num_parties=2), ValueError, "out of range"),
        (torch.tensor([0.0, 1.0]), {}, TypeError, "integer"),
        (torch.tensor([0, -1]), {}, ValueError, ">= 0"),
        (torch.tensor([], dtype=torch.long), {}, ValueError, "non-empty"),
        (None, {}, ValueError, "party must be given"),
        (torch.tensor([0, 1]), dict(noise_multiplier=[1.0, 2.0, 3.0]), ValueError, "3 entries for 2 parties"),
        (torch.tensor([0, 1]), dict(noise_multiplier=[1.0, -2.0]), ValueError, "noise_multiplier"),
        (torch.tensor([0, 1]), dict(noise_multiplier=None, non_private=True), ValueError, "noise-free test mode"),
        (torch.tensor([0, 1]), dict(llr_clip=0.0), ValueError, "llr_clip"),
    ],
)
def test_bad_inputs(party, kwargs, exc, match):
    args = dict(proposal_scale=0.1, llr_clip=1.0, noise_multiplier=1.0)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        DPMultiPartyPenalty(gauss_model, party, **args)


def test_party_length_must_match_data_plate():
    kernel = DPMultiPartyPenalty(gauss_model, _parties(10), 0.1, llr_clip=1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="assigns 10 rows .* has 12"):
        _run(kernel, make_data(12), n=12)
    assert not kernel.ledger
    with pytest.raises(ValueError, match="party must be an integer"):
        kernel.get_epsilon(1e-5, party=3)


def test_kernel_pickles_after_setup():
    import pickle

    y = make_data(20)
    kernel = DPMultiPartyPenalty(gauss_model, _parties(20), 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0)
    kernel.setup(0, y)
    params = kernel.sample(kernel.initial_params)
    clone = pickle.loads(pickle.dumps(kernel))
    assert torch.equal(kernel.sample(params)["mu"], clone.sample(params)["mu"])
    assert clone.party_ledger(0) == kernel.party_ledger(0)
