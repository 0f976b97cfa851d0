"""DPFastMH (Zhang & Zhang 2023): exactness with noise on (invariance + long chain, MCSE
tolerances; a variant without the -sigma^2 Delta^2/2 correction must fail), batch-size law,
per-iteration privacy against Alg. 2 / Thm 2, composition over warmup and chains, bad inputs.

The statistical tests drive the pure step function with a closed-form likelihood of
``helpers.gauss_model`` (Pyro tracing costs ~ms per call); ``test_kernel_equals_pure_step``
shows the Pyro kernel takes exactly the same steps on the Pyro model, so they transfer.
Data are bounded (|y| <= 3) and the posterior is concentrated near 0.7, so
|l_i(mu') - l_i(mu)| = |mu' - mu| |y_i - (mu + mu')/2| <= 4 |mu' - mu| wherever the chain
goes: the bound c = 4 holds (asserted: nothing is clipped) and the target is exact.
"""
import math
import pickle
import warnings

import pytest
import torch
from pyro.infer import MCMC
from pyro.ops.stats import effective_sample_size
from scipy import integrate, stats

import pyro_dp.kernels.fastmh as fastmh_mod
from pyro_dp.accounting.composition import drv_epsilon
from pyro_dp.kernels.base import BudgetExhaustedWarning
from pyro_dp.kernels.fastmh import DPFastMH, FastMHConfig, fastmh_init, fastmh_step, fastmh_step_privacy
from pyro_dp.mechanisms import ApproxDPEvent, GaussianEvent, NoiseSource, NonPrivateEvent
from tests.kernels.helpers import (
    M0,
    ClippedGradSum,
    S,
    S0,
    gauss_model,
    make_data,
    maybe_broken_fixture,
    mean_var_within_mcse,
    posterior,
)

F64 = torch.float64


class GaussLik(ClippedGradSum):
    """Closed-form per-example terms of ``helpers.gauss_model`` (the PrivateLikelihood API)."""

    def __init__(self, y, temperature=1.0):
        self.y, self.num_rows, self.temperature = y, y.shape[0], temperature
        self.reads = 0

    def per_example_loglik(self, z, idx=None):
        yy = self.y if idx is None else self.y[idx]
        self.reads += yy.shape[0]
        return -0.5 * ((yy - z[0]) / S) ** 2 - math.log(S) - 0.5 * math.log(2 * math.pi)

    def log_prior(self, z):
        return -0.5 * ((z[0] - M0) / S0) ** 2 - math.log(S0) - 0.5 * math.log(2 * math.pi)

    def loglik_and_prior(self, z, idx=None):
        return self.per_example_loglik(z, idx), self.log_prior(z)


def config(full_batch=False, sigma1=0.5, sigma2=5.0, c=4.0, lam=20.0, k=100, free=False, t1=0.0, t2=0.0):
    """Noise scales set directly: exactness does not depend on how they were calibrated."""
    return FastMHConfig(c, lam, k, sigma1, sigma2, t1, t2, free, full_batch, NonPrivateEvent())


def run_chains(lik, start, steps, cfg, scale=0.02, seed=5):
    rng, noise = torch.Generator().manual_seed(seed), NoiseSource(seed=seed + 1)
    sc = torch.tensor(scale, dtype=F64)
    ends, infos = [], []
    for z0 in start:
        st = fastmh_init(lik, z0.reshape(1))
        for _ in range(steps):
            st, info = fastmh_step(rng, noise, st, lik, proposal_scale=sc, config=cfg)
            infos.append(info)
        ends.append(st.z)
    return torch.cat(ends), infos


maybe_broken = maybe_broken_fixture(fastmh_mod, "no_penalty")


# ---------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("variant", ["minibatch", "full_batch"])
@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_invariance(variant, maybe_broken):
    """Chains started at exact posterior draws stay at the posterior (iid ends: exact MCSE).

    Minibatch settings: E[B] = 20 + 4000 * 0.02 * sqrt(2/pi) = 84 against K = 100, so both
    branches run; noise std on the log ratio ~2 (minibatch) and ~1.3 (full batch). Seeds are
    fixed; the broken variant's variance sits > 6 MCSE off (checked over seeds)."""
    y = make_data(1000, seed=1)
    m, v = posterior(y)
    k, steps = (300, 12) if variant == "full_batch" else (500, 16)
    start = m + math.sqrt(v) * torch.randn(k, generator=torch.Generator().manual_seed(11), dtype=F64)
    cfg = config(full_batch=True, sigma2=10.0) if variant == "full_batch" else config(sigma1=0.8)
    ends, infos = run_chains(GaussLik(y), start, steps, cfg)
    ok, (m_hat, v_hat) = mean_var_within_mcse(ends.unsqueeze(-1), m, v)
    assert ok != maybe_broken, f"{variant} broken={maybe_broken}: mean {m_hat} vs {m}, var {v_hat} vs {v}"
    assert all(i.clipped_fraction == 0.0 for i in infos)
    full = sum(i.full_batch for i in infos) / len(infos)
    assert full == 1.0 if variant == "full_batch" else 0.05 < full < 0.6


def _mcse_check(samples, mean, var, n_sd=4.0):
    """Long-chain check: MCSE from the effective sample size (Pyro's ESS estimator)."""
    x = samples.reshape(1, -1)
    ess = float(effective_sample_size(x, chain_dim=0, sample_dim=1))
    sq = (x - x.mean()) ** 2
    ess_sq = float(effective_sample_size(sq, chain_dim=0, sample_dim=1))
    mcse_m, mcse_v = math.sqrt(var / ess), float(sq.std()) / math.sqrt(ess_sq)
    ok = abs(float(x.mean()) - mean) <= n_sd * mcse_m and abs(float(x.var()) - var) <= n_sd * mcse_v
    return ok, (float(x.mean()), float(x.var()), ess)


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_conjugate_posterior_long_chain(maybe_broken):
    y = make_data(1000, seed=2)
    m, v = posterior(y)
    lik = GaussLik(y)
    rng, noise = torch.Generator().manual_seed(3), NoiseSource(seed=4)
    st = fastmh_init(lik, m.reshape(1).clone())
    cfg, sc = config(sigma1=0.6), torch.tensor(0.03, dtype=F64)
    out = []
    for _ in range(4000):
        st, _ = fastmh_step(rng, noise, st, lik, proposal_scale=sc, config=cfg)
        out.append(st.z)
    ok, stats_ = _mcse_check(torch.cat(out)[200:], float(m), float(v))
    assert ok != maybe_broken, f"broken={maybe_broken}: (mean, var, ess)={stats_} vs ({float(m)}, {v})"


# ---------------------------------------------------------------------------- batch size


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_mean_batch_size_is_poisson_mean_and_cost_is_B():
    """E[B] = lambda + C E[M] (Alg. 1) with M = s|xi| in 1-d: E[M] = s sqrt(2/pi); the
    full-batch fraction is P(B >= K) = E_M[Poisson sf]; minibatch steps read only B rows."""
    n, c, lam, kk, s = 5000, 4.0, 30.0, 120, 0.004
    y = make_data(n, seed=3)
    lik = GaussLik(y)
    cfg = config(c=c, lam=lam, k=kk, sigma1=0.0, sigma2=0.0)
    _, infos = run_chains(lik, posterior(y)[0].reshape(1, 1), 3000, cfg, scale=s)
    b = torch.tensor([i.batch_size for i in infos], dtype=F64)
    big_c = n * c
    mean_m, var_m = s * math.sqrt(2 / math.pi), s * s * (1 - 2 / math.pi)
    mean_b = lam + big_c * mean_m
    var_b = mean_b + big_c**2 * var_m  # law of total variance
    assert abs(float(b.mean()) - mean_b) <= 4 * math.sqrt(var_b / len(b)), (float(b.mean()), mean_b)
    p_full, _ = integrate.quad(
        lambda x: 2 * stats.norm.pdf(x) * stats.poisson.sf(kk - 1, lam + big_c * s * x), 0, 12
    )
    frac = sum(i.full_batch for i in infos) / len(infos)
    assert abs(frac - p_full) <= 4 * math.sqrt(p_full * (1 - p_full) / len(infos)), (frac, p_full)
    assert all(i.rows_read == (n if i.full_batch else i.batch_size) for i in infos)


# ---------------------------------------------------------------------------- the Pyro kernel

KW = dict(lipschitz=4.0, lam=20.0, max_batch_size=100, step_epsilon=0.9, step_delta=1e-3)


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_kernel_equals_pure_step_on_pyro_model():
    """Same generators, same config: the Pyro kernel and the closed-form step agree."""
    y = make_data(1000, seed=4)
    kernel = DPFastMH(gauss_model, 0.02, seed=7, nonprivate_diagnostics=True, **KW)
    kernel.setup(0, y)
    z0 = posterior(y)[0].reshape(1).clone()
    params = kernel.lik.unravel(z0)
    kernel._state = kernel._init_state(z0)
    rng = torch.Generator()
    rng.set_state(kernel._rng.get_state())
    noise = pickle.loads(pickle.dumps(kernel._noise))
    lik, st, cfg = GaussLik(y), fastmh_init(GaussLik(y), z0), kernel._config()
    for _ in range(40):
        params = kernel.sample(params)
        st, info = fastmh_step(rng, noise, st, lik, proposal_scale=kernel.adapted_proposal_scale, config=cfg)
        assert torch.allclose(kernel.lik.flatten(params), st.z, rtol=0, atol=1e-12)
    d = kernel.diagnostics()
    assert d["private iterations"] == 40 and d["non-private clipped fraction"] == 0.0
    assert 0.0 <= d["full-batch fraction"] <= 1.0 and d["mean batch size"] > 0


def test_epsilon_composes_warmup_and_chains():
    """2 sequential chains x (10 warmup + 15 samples): 50 releases of Thm 2's (eps, delta),
    composed by advanced composition (the paper, App. B) and exactly (KOV Thm 3.3)."""
    y = make_data(300, seed=5)
    kw = dict(KW, max_batch_size=60, step_delta=1e-8)
    kernel = DPFastMH(gauss_model, 0.02, seed=1, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "chains drawn sequentially"
        mcmc = MCMC(kernel, num_samples=15, warmup_steps=10, num_chains=2, disable_progbar=True)
        mcmc.run(y)
    import pyro_dp

    ledger = pyro_dp.get_ledger(mcmc)
    ev = ApproxDPEvent(0.9, 1e-8)
    assert ledger.entries == ((ev, 50),)  # warmup counts, every chain counts
    rep = kernel.privacy_report(1e-5)
    # advanced composition, closed form of the paper (App. B) with delta' = 1e-5 - 50e-8
    paper = math.sqrt(2 * 50 * math.log(1 / (1e-5 - 50e-8))) * 0.9 + 50 * 0.9 * math.expm1(0.9)
    assert rep["advanced"] <= paper * (1 + 1e-9)
    assert drv_epsilon(0.9, 1e-8, 50, 1e-5) == pytest.approx(paper, rel=1e-12)
    assert rep["optimal"] < rep["advanced"]
    assert pyro_dp.get_epsilon(mcmc, 1e-5) == pytest.approx(rep["optimal"], rel=1e-12)
    assert kernel.get_epsilon(1e-5) == min(rep.values())
    # dp_accounting's PLD of the same events agrees with the exact optimal composition
    from pyro_dp.accounting import get_accountant

    pld = get_accountant("pld", ledger).get_epsilon(1e-5)
    assert rep["optimal"] <= pld * (1 + 1e-9) and pld <= rep["optimal"] + 0.01


def test_full_batch_variant_records_the_gaussian():
    y = make_data(200, seed=6)
    kernel = DPFastMH(gauss_model, 0.02, lipschitz=4.0, step_epsilon=0.5, step_delta=1e-6, full_batch=True, seed=0)
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=5, disable_progbar=True)
    mcmc.run(y)
    sigma2 = math.sqrt(2 * math.log(1.25 / 1e-6)) / 0.5  # Alg. 2
    assert kernel.ledger.entries == ((GaussianEvent(sigma2), 25),)
    rep = kernel.privacy_report(1e-4)  # 25 x delta_step = 2.5e-5 < 1e-4
    assert rep["gdp"] < rep["optimal"] < rep["advanced"] < math.inf
    assert kernel.get_epsilon(1e-4) == rep["gdp"]
    assert mcmc.diagnostics()["full-batch fraction"]["chain 0"] == 1.0


@pytest.mark.parametrize("full_batch", [True, False], ids=["full-batch", "minibatch"])
def test_private_init_releases_are_counted(full_batch):
    """2026-11-26 audit: with ``init=DPGradientInit(...)`` the paper's compositions counted the
    init's Gaussian sums as Fast MH steps, and ``get_epsilon`` (the smallest of the reports)
    returned 14.5 for a ledger that composes to 1190; the minibatch variant's default accountant
    could not compose them at all, and the run failed after reading the data. Now the paper's
    compositions are left out for such a ledger, the minibatch variant's default accountant is
    dp_accounting's PLD, and ε is checked against an independent dp_accounting computation."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    from pyro_dp.default_path.private_init import DPGradientInit

    y = make_data(300, seed=5)
    kw = dict(full_batch=True) if full_batch else dict(lam=20.0, max_batch_size=60)
    kernel = DPFastMH(gauss_model, 0.02, lipschitz=4.0, step_epsilon=0.5, step_delta=1e-9, seed=0,
                      init=DPGradientInit(num_steps=5, step_size=0.1, grad_clip=1.0, noise_multiplier=2.0), **kw)
    assert kernel.accountant == ("gdp" if full_batch else "pld")
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=10, disable_progbar=True,
                initial_params={"mu": torch.tensor(0.0, dtype=F64)})
    mcmc.run(y)
    (init_ev, n_init), (step_ev, n_steps) = kernel.ledger.entries
    assert (init_ev, n_init, n_steps) == (GaussianEvent(2.0), 5, 30)
    rep = kernel.privacy_report(1e-5)
    assert "optimal" not in rep and "advanced" not in rep
    eps = kernel.get_epsilon(1e-5)
    init_only = pyro_dp_ledger_epsilon([(GaussianEvent(2.0), 5)], 1e-5)
    assert eps > init_only  # the steps add to the init's epsilon, never replace it
    if full_batch:
        # the oracle: dp_accounting's own PLD accountant (REPLACE_ONE: our noise multiplier nm is its 2 nm)
        acc = pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
        acc.compose(dp_accounting.GaussianDpEvent(2 * 2.0), 5)
        acc.compose(dp_accounting.GaussianDpEvent(2 * step_ev.noise_multiplier), 30)
        oracle = acc.get_epsilon(1e-5)
        assert oracle - 0.02 <= eps <= oracle + 0.02
    else:
        # bounds from other code: at least the steps' exact optimal composition (KOV Thm 3.3),
        # at most that and the init's exact GDP epsilon at delta / 2 each (basic composition)
        steps = pyro_dp_ledger_epsilon([(step_ev, 30)], 1e-5, "optimal")
        basic = (pyro_dp_ledger_epsilon([(GaussianEvent(2.0), 5)], 5e-6)
                 + pyro_dp_ledger_epsilon([(step_ev, 30)], 5e-6, "optimal"))
        assert max(steps, init_only) < eps <= basic
    import pyro_dp

    assert pyro_dp.get_epsilon(mcmc, 1e-5) == pytest.approx(eps, rel=1e-12)


def pyro_dp_ledger_epsilon(entries, delta, accountant="gdp"):
    from pyro_dp.accounting import get_accountant
    from pyro_dp.mechanisms import PrivacyLedger

    ledger = PrivacyLedger()
    for ev, n in entries:
        ledger.record(ev, n)
    return get_accountant(accountant, ledger).get_epsilon(delta)


def test_an_accountant_that_cannot_compose_the_plan_is_refused_before_data():
    """An accountant that cannot compose a planned release (here the private init's Gaussian
    sums under exact (ε, δ) composition) is refused at set-up, before any data access; before,
    the chain ran and only its ε report failed."""
    from pyro_dp.accounting import UnsupportedEventError
    from pyro_dp.default_path.private_init import DPGradientInit

    kernel = DPFastMH(gauss_model, 0.02, lipschitz=4.0, lam=20.0, max_batch_size=60, step_epsilon=0.5,
                      step_delta=1e-9, accountant="optimal",
                      init=DPGradientInit(num_steps=5, step_size=0.1, grad_clip=1.0, noise_multiplier=2.0))
    with pytest.raises(UnsupportedEventError, match="'pld'"):
        kernel.setup(0, make_data(100))
    assert not kernel.ledger


# ---------------------------------------------------------------------------- per-iteration privacy


@pytest.mark.parametrize("n, k, eps, delta", [(10_000, 1000, 0.5, 1e-6), (1_000, 100, 0.9, 1e-3), (10**6, 20000, 0.1, 1e-9)])
def test_step_privacy_is_alg2(n, k, eps, delta):
    c = 2.5  # one bound for every row: max_i c_i = c, C = N c
    big_c = n * c
    sp = fastmh_step_privacy(eps, delta, k, c / big_c)
    # Alg. 2, first line, verbatim
    assert sp.sigma2 == pytest.approx(math.sqrt(2 * math.log(1.25 / delta)) / eps, rel=1e-12)
    s1 = 6 * k * c * math.sqrt(2 * math.log(2.5 * k * c / (delta * big_c))) / (eps * big_c)
    assert sp.sigma1 == pytest.approx(s1, rel=1e-12)
    assert sp.threshold1 == pytest.approx(eps * big_c / (6 * k * c)) and sp.threshold2 == eps
    # Thm 2 re-derived: certified, so the recorded event is (eps, delta)
    assert sp.certified_epsilon <= eps and sp.certified_delta <= delta
    assert sp.event == ApproxDPEvent(eps, delta)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_noise_std_is_sigma_times_lemma1_sensitivity(temperature):
    """Energies are tempered, U_i = -T l_i, so the bound in energy units is c_i = T c."""
    y = make_data(1000, seed=7)
    cfg = config(sigma1=1.7, sigma2=3.1)
    _, infos = run_chains(GaussLik(y, temperature), posterior(y)[0].reshape(1, 1), 300, cfg, scale=0.02 / temperature)
    c = 4.0 * temperature
    big_c = 1000 * c
    for i in infos:
        if i.full_batch:  # Lemma 1 eq. (2): 2 max c_i M
            assert i.noise_std == pytest.approx(3.1 * 2 * c * i.distance, rel=1e-9)
        else:  # Lemma 1 eq. (1): 2 log(1 + C M / lambda)
            assert i.noise_std == pytest.approx(1.7 * 2 * math.log1p(big_c * i.distance / 20.0), rel=1e-9)
    assert {i.full_batch for i in infos} == {True, False}


def test_uncertified_configuration_records_the_certified_event():
    """K below eps N / 17: eps0 = eps/(6Kp) = 3 and App. B's 6Kp eps0 bound fails."""
    with pytest.warns(UserWarning, match="does not hold"):
        kernel = DPFastMH(gauss_model, 0.02, lipschitz=4.0, lam=5.0, max_batch_size=100, step_epsilon=0.9,
                          step_delta=1e-6, seed=0)
        kernel.setup(0, make_data(2000))
    ev = kernel.releases().per_iteration[0]
    assert ev == ApproxDPEvent(kernel.step_privacy.certified_epsilon, 1e-6) and ev.epsilon > 0.9
    with pytest.raises(ValueError, match="no per-iteration guarantee"):  # eps0 = 15: vacuous
        DPFastMH(gauss_model, 0.02, **dict(KW, max_batch_size=10, step_delta=1e-6)).setup(0, make_data(2000))


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_privacy_for_free_is_accounted_honestly():
    """An un-noised MH accept bit is not (eps, small delta)-DP: with log ratios 0 and -Delta
    on neighbours, the reject probability goes from 0 to 1 - e^-Delta."""
    delta_l = 0.3
    th = fastmh_mod.penalty_accept.__globals__["penalty_log_accept_threshold"]
    reject = [1 - math.exp(float(th(torch.tensor(x), torch.tensor(0.0)))) for x in (0.0, -delta_l)]
    assert reject[0] == 0.0 and reject[1] == pytest.approx(1 - math.exp(-delta_l))
    sp = fastmh_step_privacy(0.5, 1e-6, 1000, 1e-4, privacy_for_free=True)
    assert sp.event.delta >= -math.expm1(-0.5)  # (0, 1 - e^-eps) at the threshold Delta(l2) = eps
    # the free branch runs (tiny moves) and is reported
    y = make_data(1000, seed=8)
    cfg = config(free=True, t1=0.05, t2=0.5)
    _, infos = run_chains(GaussLik(y), posterior(y)[0].reshape(1, 1), 200, cfg, scale=1e-6)
    assert all(i.free and i.noise_std == 0.0 for i in infos)


def test_wrong_bound_is_clipped_not_leaked():
    y = make_data(1000, seed=9)
    kernel = DPFastMH(gauss_model, 0.05, seed=2, nonprivate_diagnostics=True, **dict(KW, lipschitz=0.05))
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=0, disable_progbar=True)
    mcmc.run(y)
    assert mcmc.diagnostics()["non-private clipped fraction"]["chain 0"] > 0.5
    assert kernel.ledger.entries == ((kernel.step_privacy.event, 20),)  # privacy unchanged


def test_setup_twice_costs_nothing_and_pickles():
    y = make_data(200)
    kernel = DPFastMH(gauss_model, 0.02, seed=0, **dict(KW, max_batch_size=50))
    kernel.setup(10, y)
    kernel.setup(0, y)
    assert not kernel.ledger
    params = kernel.initial_params
    clone = pickle.loads(pickle.dumps(kernel))
    assert torch.equal(kernel.sample(params)["mu"], clone.sample(params)["mu"])


def test_budget_stops_reading_data():
    y = make_data(300)
    kernel = DPFastMH(gauss_model, 0.02, seed=0, epsilon=5.0, delta=1e-5, **dict(KW, max_batch_size=60, step_delta=1e-9))
    with pytest.warns(BudgetExhaustedWarning, match="STOPPED READING DATA"):
        mcmc = MCMC(kernel, num_samples=40, warmup_steps=0, disable_progbar=True)
        mcmc.run(y)
    n_priv = mcmc.diagnostics()["private iterations"]["chain 0"]
    assert 0 < n_priv < 40 and kernel.get_epsilon(1e-5) <= 5.0


# ---------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(max_batch_size=0), ValueError, "max_batch_size"),
        (dict(max_batch_size=-3), ValueError, "max_batch_size"),
        (dict(max_batch_size=2.5), TypeError, "max_batch_size"),
        (dict(lam=0.0), ValueError, "lam"),
        (dict(lam=-1.0), ValueError, "lam"),
        (dict(lam=None), ValueError, "lam and max_batch_size"),
        (dict(lipschitz=0.0), ValueError, "lipschitz"),
        (dict(lipschitz=-1.0), ValueError, "lipschitz"),
        (dict(lipschitz=torch.tensor([1.0, 2.0])), ValueError, "per-row bounds"),
        (dict(lipschitz=[1.0, 2.0]), ValueError, "per-row bounds"),
        (dict(step_epsilon=0.0), ValueError, "step_epsilon"),
        (dict(step_epsilon=1.0), ValueError, "step_epsilon"),
        (dict(step_epsilon=-0.1), ValueError, "step_epsilon"),
        (dict(step_delta=0.0), ValueError, "step_delta"),
        (dict(step_delta=1.0), ValueError, "step_delta"),
        (dict(step_delta=None), ValueError, "step_epsilon and step_delta"),
        (dict(non_private=True), ValueError, "non_private"),
        (dict(delta=1e-5), ValueError, "delta alone"),  # epsilon alone is a budget (delta 1e-5, #16)
    ],
)
def test_bad_inputs(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        DPFastMH(gauss_model, 0.02, **dict(KW, **kwargs))


def test_bad_inputs_known_at_setup():
    y = make_data(100)
    with pytest.raises(ValueError, match="lipschitz"):
        DPFastMH(gauss_model, 0.02, **dict(KW, lipschitz=lambda num_rows, dim: -1.0)).setup(0, y)
    with pytest.raises(ValueError, match="step_delta=0.5 is too large"):
        DPFastMH(gauss_model, 0.02, **dict(KW, max_batch_size=10, step_delta=0.5)).setup(0, y)
    with pytest.raises(ValueError, match="proposal_scale"):
        DPFastMH(gauss_model, 0.0, **KW)
    kernel = DPFastMH(gauss_model, 0.02, **dict(KW, lipschitz=lambda num_rows, dim: 4.0))
    with pytest.raises(RuntimeError, match="setup"):
        kernel.releases()
    kernel.setup(0, y)
    assert kernel._c == 4.0


def test_non_private_mode_and_logging():
    import json

    y = make_data(200)
    kernel = DPFastMH(gauss_model, 0.02, lipschitz=4.0, lam=20.0, max_batch_size=50, non_private=True, seed=0)
    kernel.setup(0, y)
    params = kernel.initial_params
    for _ in range(5):
        params = kernel.sample(params)
        json.dumps(kernel.logging())
    assert kernel.ledger.entries == ((NonPrivateEvent(), 5),)
    assert kernel.get_epsilon(1e-5) == math.inf and kernel.privacy_report(1e-5)["advanced"] == math.inf
