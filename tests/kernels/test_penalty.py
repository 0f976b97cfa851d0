"""DPPenalty: exactness (invariance + long-chain conjugate test, MCSE tolerances), a broken
variant that must fail, accounting against the closed form and dp_accounting, chains,
budget, reproducibility and bad inputs."""
import math
import pickle
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC
from pyro.ops.stats import effective_sample_size

import pyro_dp
from pyro_dp.mechanisms import ReproducibleNoiseWarning
import pyro_dp.kernels.penalty as penalty_mod
from pyro_dp import BudgetExhaustedWarning, DPPenalty
from tests.kernels.helpers import (
    gauss_model,
    gauss_model_2d,
    make_data,
    maybe_broken_fixture,
    mean_var_within_mcse,
    posterior,
)


maybe_broken = maybe_broken_fixture(penalty_mod)


# Noise large enough that a missing penalty shows: with proposal scale 0.15 and
# 2 * nm * llr_clip = 8, the noise std on the log ratio is ~1.2 per typical move.
SETTINGS = dict(llr_clip=4.0, noise_multiplier=1.0)


def _invariance_draws(kernel, y, start, steps):
    """Run `steps` kernel iterations from each start point; return the end points."""
    kernel.setup(0, y)
    ends = []
    for z0 in start:
        params = kernel.lik.unravel(z0.reshape(-1))
        kernel._state = kernel._init_state(z0.reshape(-1))
        for _ in range(steps):
            params = kernel.sample(params)
        ends.append(kernel.lik.flatten(params))
    return torch.stack(ends)


@pytest.mark.parametrize("mode", ["full", "ocu", "gwmh"])
def test_invariance(mode, maybe_broken):
    """K chains started at exact posterior draws must stay at the posterior (BlackJAX-style).

    The K end points are iid draws from pi if the kernel leaves pi invariant, so the
    tolerances are exact Monte Carlo standard errors (4 sd)."""
    two_d = mode != "full"
    y = make_data(100, 2 if two_d else None, seed=1)
    m, v = posterior(y)
    k = 400  # chains (was 600, for CI's time; at 400 every broken variant still fails and every correct one passes)
    g = torch.Generator().manual_seed(11)
    shape = (k, 2) if two_d else (k, 1)
    start = m + math.sqrt(v) * torch.randn(shape, generator=g, dtype=torch.float64)
    kernel = DPPenalty(
        gauss_model_2d if two_d else gauss_model,
        proposal_scale=0.15 if not two_d else 0.2,
        one_component=mode == "ocu",
        guided_walk=mode == "gwmh",
        seed=5,
        nonprivate_diagnostics=True,
        **SETTINGS,
    )
    ends = _invariance_draws(kernel, y, start, steps=15)
    ok, (m_hat, v_hat) = mean_var_within_mcse(ends, m, v)
    assert ok != maybe_broken, f"mode={mode} broken={maybe_broken}: mean {m_hat} vs {m}, var {v_hat} vs {v}"
    assert kernel.diagnostics()["non-private clipped fraction"] == 0.0


def _mcse_check(samples, mean, var, n_sd=4.0):
    """Long-chain check: MCSE from the effective sample size (Pyro's ESS estimator)."""
    x = samples.reshape(1, -1)
    ess = float(effective_sample_size(x, chain_dim=0, sample_dim=1))
    sq = (x - x.mean()) ** 2
    ess_sq = float(effective_sample_size(sq, chain_dim=0, sample_dim=1))
    mcse_m = math.sqrt(var / ess)
    mcse_v = float(sq.std()) / math.sqrt(ess_sq)
    ok = abs(float(x.mean()) - mean) <= n_sd * mcse_m and abs(float(x.var()) - var) <= n_sd * mcse_v
    return ok, (float(x.mean()), float(x.var()), ess)


@pytest.mark.slow  # 12 000 iterations a variant; test_invariance (every proposal, with its mutant) covers the kernel in CI
def test_conjugate_posterior_long_chain(maybe_broken):
    y = make_data(100, seed=2)
    m, v = posterior(y)
    kernel = DPPenalty(gauss_model, proposal_scale=0.15, seed=3, **SETTINGS)
    mcmc = MCMC(kernel, num_samples=12000, warmup_steps=300, disable_progbar=True)
    mcmc.run(y)
    ok, stats = _mcse_check(mcmc.get_samples()["mu"], float(m), float(v))
    assert ok != maybe_broken, f"broken={maybe_broken}: (mean, var, ess)={stats} vs ({float(m)}, {v})"


# ---------------------------------------------------------------------------- accounting


def _gdp_reference(k, nm, delta):
    """Independent closed form: k Gaussian releases with noise multiplier nm are mu-GDP with
    mu = sqrt(k)/nm (Dong, Roth & Su 2019 Cor 3.3; thesis Thm 6 with PLD mean k/(2 nm^2));
    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)  (DRS Cor 2.13)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    mu = math.sqrt(k) / nm

    def d(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(d, 0.0, 500.0, xtol=1e-12)


def _pld_reference(k, nm, delta):
    """dp_accounting's PLD: its noise_multiplier is sigma / (add-remove sensitivity b) and
    REPLACE_ONE doubles the sensitivity, so our substitute nm = sigma/(2b) maps to 2*nm."""
    import dp_accounting

    acc = dp_accounting.pld.PLDAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4
    )
    acc.compose(dp_accounting.GaussianDpEvent(2 * nm), k)
    return acc.get_epsilon(delta)


def test_epsilon_matches_closed_form_and_pld_warmup_counts():
    y = make_data(50)
    kernel = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0)
    mcmc = MCMC(kernel, num_samples=70, warmup_steps=30, disable_progbar=True)
    mcmc.run(y)
    assert kernel.ledger.num_releases == 100  # warmup iterations count
    eps = kernel.get_epsilon(1e-6)
    ref = _gdp_reference(100, 3.0, 1e-6)
    assert abs(eps - ref) <= 1e-3 * ref and eps >= ref * (1 - 1e-9)
    assert abs(eps - _pld_reference(100, 3.0, 1e-6)) <= 1e-3 * ref
    assert pyro_dp.get_epsilon(mcmc, 1e-6) == pytest.approx(eps, rel=1e-12)
    diag = mcmc.diagnostics()
    assert diag["private iterations"] == {"chain 0": 100}
    assert diag["epsilon"]["chain 0"] == pytest.approx(kernel.get_epsilon(kernel.reference_delta))


def test_two_chains_cost_two_runs_sequential():
    y = make_data(50)
    kernel = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=40, warmup_steps=10, num_chains=2, disable_progbar=True)
        mcmc.run(y)
    eps2 = pyro_dp.get_epsilon(mcmc, 1e-5)
    assert pyro_dp.get_ledger(mcmc).num_releases == 100
    assert kernel.get_epsilon(1e-5) == pytest.approx(eps2, rel=1e-12)
    assert eps2 == pytest.approx(_gdp_reference(100, 3.0, 1e-5), rel=1e-3)
    # chains differ (independent streams per chain)
    s = mcmc.get_samples(group_by_chain=True)["mu"]
    assert not torch.equal(s[0], s[1])


def test_parallel_chains_compose_in_parent(monkeypatch):
    """Chains in worker processes: their ledgers come back through diagnostics()."""
    import pyro.infer.mcmc.api as api

    monkeypatch.setattr(api.mp, "cpu_count", lambda: 8)
    y = make_data(50)
    kernel = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0)
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=10, num_chains=2, disable_progbar=True)
    assert type(mcmc.sampler).__name__ == "_MultiSampler"
    mcmc.run(y)
    assert pyro_dp.get_ledger(mcmc).num_releases == 60
    assert pyro_dp.get_epsilon(mcmc, 1e-5) == pytest.approx(_gdp_reference(60, 3.0, 1e-5), rel=1e-3)
    # the parent's kernel never sampled, but the workers' chains were filed with it (#14 finding 2)
    assert kernel.ledger.num_releases == 60
    assert kernel.get_epsilon(1e-5) == pyro_dp.get_epsilon(mcmc, 1e-5)
    mcmc.run(y)  # a second run adds to the same kernel object's ledger
    assert pyro_dp.get_ledger(mcmc).num_releases == kernel.ledger.num_releases == 120
    assert pyro_dp.get_epsilon(mcmc, 1e-5) == pytest.approx(_gdp_reference(120, 3.0, 1e-5), rel=1e-3)


def test_kernel_pickles_after_setup():
    y = make_data(20)
    kernel = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0)
    kernel.setup(0, y)
    params = kernel.initial_params
    clone = pickle.loads(pickle.dumps(kernel))
    a = kernel.sample(params)["mu"]
    b = clone.sample(params)["mu"]
    assert torch.equal(a, b)


# ---------------------------------------------------------------------------- data access


class CountingNormal(dist.Normal):
    """A Normal likelihood that counts how often its density is evaluated on data (a fake
    tensor -- shapes only, as in the set-up's trace of which latents the likelihood reads,
    ``PrivateLikelihood.likelihood_sites`` -- holds no data and is not counted; nor are the
    set-up checks' stand-in data, ``PrivateLikelihood.rows_read_across``)."""

    calls = 0

    def log_prob(self, value):
        from torch._subclasses.fake_tensor import is_fake

        from pyro_dp.likelihood import on_stand_in

        if not is_fake(value) and not on_stand_in():
            CountingNormal.calls += 1
        return super().log_prob(value)


def counting_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 3.0))
    with pyro.plate("data", y.shape[0]) as idx:
        pyro.sample("obs", CountingNormal(mu, 1.0), obs=y[idx])


def test_setup_is_data_free_and_costs_nothing():
    """setup() (run twice, as MCMC may) evaluates no data density and records nothing;
    the likelihood is first read inside the first iteration's release."""
    y = make_data(30)
    kernel = DPPenalty(counting_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0)
    CountingNormal.calls = 0
    kernel.setup(10, y)
    kernel.setup(0, y)
    assert CountingNormal.calls == 0
    assert not kernel.ledger
    kernel.sample(kernel.initial_params)
    assert CountingNormal.calls == 2  # l(theta) and l(theta'), inside one recorded release
    assert kernel.ledger.num_releases == 1


def test_budget_calibrates_and_stops_reading_data():
    y = make_data(30)
    kernel = DPPenalty(
        counting_model, 0.2, llr_clip=1.0, epsilon=1.0, delta=1e-5, num_iterations=50, seed=0
    )
    assert kernel.noise_multiplier is None
    CountingNormal.calls = 0
    with pytest.warns(BudgetExhaustedWarning, match="STOPPED READING DATA"):
        mcmc = MCMC(kernel, num_samples=60, warmup_steps=10, disable_progbar=True)
        mcmc.run(y)
    assert kernel.noise_multiplier > 0
    assert kernel.ledger.num_releases >= 50
    eps = kernel.get_epsilon(1e-5)
    assert eps <= 1.0
    diag = mcmc.diagnostics()
    assert diag["budget exhausted"]["chain 0"]
    n_priv = diag["private iterations"]["chain 0"]
    assert CountingNormal.calls == n_priv + 1  # no data read after the budget ran out
    s = mcmc.get_samples()["mu"]
    assert s.shape == (60,)
    assert torch.all(s[n_priv - 10 :] == s[-1])  # the tail repeats the last state


@pytest.mark.fresh_noise
def test_reproducible_only_with_an_explicit_noise_seed():
    """#14 finding 4: ``seed`` alone does not make the noise replayable; ``noise_seed`` does (and warns)."""
    y = make_data(30)

    def run(seed, noise_seed=None):
        k = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=2.0, seed=seed, noise_seed=noise_seed)
        m = MCMC(k, num_samples=30, warmup_steps=5, disable_progbar=True)
        m.run(y)
        # The next draw of the secret stream: equal iff the stream was replayed.  (Comparing the
        # samples alone can coincide by chance: the noise reaches them only through the 35
        # accept decisions, which a CI run once saw agree.)
        return m.get_samples()["mu"], k._noise.normal(1.0, (4,))

    (a, na), (b, nb), (c, _) = run(1, 7), run(1, 7), run(2, 7)
    assert torch.equal(a, b) and torch.equal(na, nb) and not torch.equal(a, c)
    assert not torch.equal(run(1)[1], run(1)[1])  # the user's seed alone: fresh OS noise every run
    with pytest.warns(ReproducibleNoiseWarning, match="tests only"):
        DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=2.0, noise_seed=0)
    with pytest.raises(ValueError, match="noise_seed"):
        DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=2.0, noise_seed=0, secure_mode=True)


def test_constrained_latent_and_float32():
    y = (torch.randn(200, generator=torch.Generator().manual_seed(0)) * 2.0).clamp(-6, 6)

    def model(y):
        s = pyro.sample("s", dist.HalfCauchy(5.0))
        with pyro.plate("data", y.shape[0]) as idx:
            pyro.sample("obs", dist.Normal(0.0, s), obs=y[idx])

    kernel = DPPenalty(model, 0.05, llr_clip=5.0, noise_multiplier=1.0, seed=0)
    mcmc = MCMC(kernel, num_samples=400, warmup_steps=200, disable_progbar=True)
    mcmc.run(y)
    s = mcmc.get_samples()["s"]
    assert s.dtype == torch.float32 and bool((s > 0).all())
    assert abs(float(s[200:].mean()) - float(y.std())) < 0.4


# ---------------------------------------------------------------------------- bad inputs


def _no_plate(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    pyro.sample("obs", dist.Normal(mu, 1.0).expand([len(y)]).to_event(1), obs=y)


def _outside(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    pyro.sample("extra", dist.Normal(mu, 1.0), obs=torch.tensor(0.0))
    with pyro.plate("data", len(y)) as idx:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[idx])


def _discrete(y):
    k = pyro.sample("k", dist.Categorical(torch.ones(3) / 3))
    with pyro.plate("data", len(y)) as idx:
        pyro.sample("obs", dist.Normal(k.float(), 1.0), obs=y[idx])


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(llr_clip=0.0, noise_multiplier=1.0), ValueError, "llr_clip"),
        (dict(llr_clip=-1.0, noise_multiplier=1.0), ValueError, "llr_clip"),
        (dict(llr_clip=1.0, noise_multiplier=0.0), ValueError, "noise_multiplier"),
        (dict(llr_clip=1.0, noise_multiplier=-2.0), ValueError, "noise_multiplier"),
        (dict(llr_clip=1.0, non_private=True), ValueError, "noise-free test mode"),  # no noise, no budget: default budget (#16)
        (dict(llr_clip=1.0, epsilon=0.0, delta=1e-5, num_iterations=10), ValueError, "epsilon"),
        (dict(llr_clip=1.0, epsilon=-1.0, delta=1e-5, num_iterations=10), ValueError, "epsilon"),
        (dict(llr_clip=1.0, epsilon=1.0, delta=0.0, num_iterations=10), ValueError, "delta"),
        (dict(llr_clip=1.0, epsilon=1.0, delta=1.0, num_iterations=10), ValueError, "delta"),
        (dict(llr_clip=1.0, delta=1e-5, num_iterations=10), ValueError, "delta alone"),  # epsilon alone: delta 1e-5
        (dict(llr_clip=1.0, noise_multiplier=1.0, temperature=0.0), ValueError, "temperature"),
        (dict(llr_clip="a", noise_multiplier=1.0), TypeError, "llr_clip"),
        (dict(llr_clip=1.0, noise_multiplier=1.0, accountant="nope"), ValueError, "nope"),
    ],
)
def test_bad_hyperparameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        DPPenalty(gauss_model, 0.1, **kwargs)
    with pytest.raises(ValueError, match="proposal_scale"):
        DPPenalty(gauss_model, 0.0, llr_clip=1.0, noise_multiplier=1.0)


@pytest.mark.parametrize(
    "model, data, exc, match",
    [
        (_no_plate, make_data(10), ValueError, "plate"),
        (_outside, make_data(10), ValueError, "'extra'"),
        (_discrete, make_data(10), TypeError, "discrete"),
    ],
)
def test_bad_models_raise_before_data_is_read(model, data, exc, match):
    kernel = DPPenalty(model, 0.1, llr_clip=1.0, noise_multiplier=1.0)
    mcmc = MCMC(kernel, num_samples=5, warmup_steps=0, disable_progbar=True)
    with pytest.raises(exc, match=match):
        mcmc.run(data)
    assert not kernel.ledger


@pytest.mark.fresh_noise
def test_secure_mode_noise_is_not_reproducible_but_proposals_are():
    """secure_mode seeds the noise from the OS: same seed, different noise; the proposal
    stream (not privacy-relevant) still follows the seed."""
    y = make_data(30)

    def released(secure):
        k = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=2.0, seed=4, secure_mode=secure)
        k.setup(0, y)
        return k._noise.normal(1.0, (5,), like=y), k._rng.initial_seed()

    (a, ra), (b, rb) = released(True), released(True)
    assert not torch.equal(a, b) and ra == rb
    (c, rc), (d, rd) = released(False), released(False)  # the default is OS-seeded noise too
    assert not torch.equal(c, d) and rc == rd


def test_parallel_chains_beyond_the_budgeted_number_are_refused(monkeypatch):
    """A budget planned for one chain must not be spent once per parallel worker: the second
    worker refuses before reading data and stops like an exhausted chain (it does not raise:
    Pyro would then kill its sibling, whose releases would never come back)."""
    import pyro.infer.mcmc.api as api

    monkeypatch.setattr(api.mp, "cpu_count", lambda: 8)
    y = make_data(50)
    kernel = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0, epsilon=5.0, delta=1e-5,
                       num_chains=1)
    mcmc = MCMC(kernel, num_samples=10, warmup_steps=5, num_chains=2, disable_progbar=True)
    assert type(mcmc.sampler).__name__ == "_MultiSampler"
    mcmc.run(y)
    diag = mcmc.diagnostics()
    k = kernel.privacy.steps_allowed  # 11 iterations of nm = 3 fit epsilon = 5
    assert sorted(diag["private iterations"].values()) == [0, k]
    assert list(diag["budget exhausted"].values()) == [True, True]  # chain 0 used its plan; chain 1 had none
    assert kernel.ledger.num_releases == k and pyro_dp.get_epsilon(mcmc, 1e-5) <= 5.0
    # planned for two chains: both run, and the total stays within the budget
    kernel = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0, epsilon=5.0, delta=1e-5,
                       num_chains=2)
    mcmc = MCMC(kernel, num_samples=10, warmup_steps=5, num_chains=2, disable_progbar=True)
    mcmc.run(y)
    assert pyro_dp.get_epsilon(mcmc, 1e-5) <= 5.0
    # num_chains not given (#16): a forked worker reads it from the MCMC that started it (the
    # parent's frames are on its stack): both chains run, each on its share, within the budget
    kernel = DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0, epsilon=5.0)
    mcmc = MCMC(kernel, num_samples=10, warmup_steps=5, num_chains=2, disable_progbar=True, mp_context="fork")
    mcmc.run(y)
    diag = mcmc.diagnostics()
    assert all(v > 0 for v in diag["private iterations"].values())
    assert pyro_dp.get_epsilon(mcmc, 1e-5) <= 5.0
