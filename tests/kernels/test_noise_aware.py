"""DPNoiseAware (issue 62's one-release mode, ``pyro_dp/default_path/noise_aware.py``): the sampler
targets the noise-aware posterior of its releases (within Monte Carlo error, with mutants that
must fail), the ledger holds exactly the planned releases and composes to the budget (against the
analytic Gaussian mechanism of ``dp_accounting``), the release noise has the stated shape, the
kernel passes the contract kit's checks that apply to a one-release kernel, warns where the
quadratic is poor, and refuses bad settings."""
import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from dp_accounting import get_epsilon_gaussian
from pyro.infer import MCMC
from pyro.ops.stats import effective_sample_size

import pyro_dp
import pyro_dp.default_path.noise_aware as na
from pyro_dp.kernels import DPAutoTune
from pyro_dp.default_path.noise_aware import (APPROXIMATION, DPNoiseAware, PoorApproximationWarning, QuadraticRelease,
                                         approximation_problems, noise_aware_loglik, symmetric_to_vector,
                                         vector_to_symmetric)
from pyro_dp.mechanisms import GaussianEvent
from pyro_dp.models.examples import normal_mean_model as model
from pyro_dp.testing import check_kernel

N = 200
Y = torch.randn(N, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1.0
PRIOR_SD = 10.0  # normal_mean_model's prior scale


def _tuner(nm=0.0, steps=5):
    return DPAutoTune(num_steps=steps, noise_multipliers=(nm, nm, nm))


def _far_tuner():
    """A tuner that stays at the data-free start (mu = 0, about 1 from the posterior, 14 of its sds):
    the quadratic's Newton step then carries the posterior mean."""
    return DPAutoTune(num_steps=1, noise_multipliers=(0.0, 0.0, 0.0), learning_rate=(1e-9, 1e-9))


def _run(kernel, y=Y, warmup=200, samples=1500):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True)
        mcmc.run(y)
    return mcmc


def _grid_moments(release, lo, hi, n=20001):
    """Mean and variance of prior(mu) x L(mu) for the 1-d normal-mean model, by quadrature."""
    mu = torch.linspace(lo, hi, n, dtype=torch.float64)
    logp = torch.stack([noise_aware_loglik(release, m.reshape(1)) for m in mu]) - 0.5 * (mu / PRIOR_SD) ** 2
    w = torch.softmax(logp, 0)
    mean = float((w * mu).sum())
    return mean, float((w * (mu - mean) ** 2).sum())


def _mcse_z(draws, mean, var):
    """(mean, variance) discrepancies in Monte Carlo standard errors (ESS from Pyro)."""
    ess = float(effective_sample_size(draws.reshape(1, -1, 1)).squeeze())
    m, v = float(draws.mean()), float(draws.var())
    return abs(m - mean) / math.sqrt(var / ess), abs(v - var) / (math.sqrt(2.0 / ess) * var)


# ----------------------------------------------------------------------------- the target


def test_non_private_is_the_exact_posterior_of_a_normal_mean():
    """Without noise and clipping, the quadratic of a normal-mean likelihood is exact: the draws
    are the conjugate posterior (BDA3 §2.5) within 4 MCSE; the sign-flipped mean (mutant) is not."""
    post_var = 1.0 / (1.0 / PRIOR_SD ** 2 + N)
    post_mean = post_var * float(Y.sum())
    k = DPNoiseAware(model, grad_clip=50.0, curvature_clip=50.0, noise_multiplier=0.0, curvature_noise_multiplier=0.0,
                     non_private=True, init=_far_tuner(), seed=1)
    draws = _run(k, samples=1000).get_samples()["mu"]
    zm, zv = _mcse_z(draws, post_mean, post_var)
    assert zm < 4 and zv < 4, (zm, zv)
    assert torch.allclose(k.release.curvature, torch.tensor([[float(N)]], dtype=torch.float64))


def test_mutant_sign_flip_fails(monkeypatch):
    post_var = 1.0 / (1.0 / PRIOR_SD ** 2 + N)
    post_mean = post_var * float(Y.sum())
    right = na.noise_aware_loglik

    def flipped(release, z, curvature_psd=None):  # mean +H delta instead of -H delta
        return right(release._replace(score=-release.score), z, curvature_psd)

    monkeypatch.setattr(na, "noise_aware_loglik", flipped)
    k = DPNoiseAware(model, grad_clip=50.0, curvature_clip=50.0, noise_multiplier=0.0, curvature_noise_multiplier=0.0,
                     non_private=True, init=_far_tuner(), seed=1)
    draws = _run(k, warmup=100, samples=400).get_samples()["mu"]
    zm, _ = _mcse_z(draws, post_mean, post_var)
    assert zm > 4, zm


def _private_kernel(**kw):
    # nm_s = 2, clip 5: score noise sd 20, variance 400 against H = 200: the noise-aware posterior
    # is about 3 times wider than one that ignores the release noise
    return DPNoiseAware(model, grad_clip=5.0, curvature_clip=5.0, noise_multiplier=2.0, curvature_noise_multiplier=2.0,
                        init=_tuner(nm=2.0), seed=3, noise_seed=11, **kw)


def test_private_draws_follow_the_noise_aware_posterior_of_their_release():
    k = _private_kernel()
    draws = _run(k).get_samples()["mu"]
    r = k.release
    assert r.score_std == pytest.approx(2.0 * 2 * 5.0) and r.curvature_std == pytest.approx(2.0 * 2 * 5.0)
    mean, var = _grid_moments(r, float(r.centre) - 3.0, float(r.centre) + 3.0)
    zm, zv = _mcse_z(draws, mean, var)
    assert zm < 4 and zv < 4, (zm, zv)
    assert var > 2.0 / N  # the release noise widens it (H = N alone gives 1/N)


def test_mutant_ignoring_the_release_noise_fails(monkeypatch):
    right = na.noise_aware_loglik

    def noise_blind(release, z, curvature_psd=None):
        return right(release._replace(score_std=0.0, curvature_std=0.0), z, curvature_psd)

    k = _private_kernel()
    monkeypatch.setattr(na, "noise_aware_loglik", noise_blind)
    draws = _run(k, samples=800).get_samples()["mu"]
    monkeypatch.setattr(na, "noise_aware_loglik", right)
    r = k.release
    mean, var = _grid_moments(r, float(r.centre) - 3.0, float(r.centre) + 3.0)
    _, zv = _mcse_z(draws, mean, var)
    assert zv > 4, zv


def test_curvature_noise_covariance_matches_the_formula():
    """W delta for the released symmetric noise has covariance sigma^2/2 (|delta|^2 I + delta delta^T)
    (the module docstring's marginalisation); checked by Monte Carlo within 5 standard errors."""
    g = torch.Generator().manual_seed(0)
    d, sigma, n = 3, 1.5, 40_000
    delta = torch.tensor([0.3, -1.0, 0.5], dtype=torch.float64)
    v = torch.randn(n, d * (d + 1) // 2, generator=g, dtype=torch.float64) * sigma
    wd = torch.stack([vector_to_symmetric(x, d) @ delta for x in v])
    emp = wd.T @ wd / n
    want = 0.5 * sigma ** 2 * (delta.dot(delta) * torch.eye(d, dtype=torch.float64) + torch.outer(delta, delta))
    se = torch.sqrt((want.diagonal().unsqueeze(0) * want.diagonal().unsqueeze(1) + want ** 2) / n)
    assert bool(((emp - want).abs() < 5 * se).all()), (emp, want)


def test_vector_norm_is_frobenius_norm():
    m = torch.randn(4, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    m = m + m.T
    assert float(symmetric_to_vector(m).norm()) == pytest.approx(float(m.norm()))
    assert torch.allclose(vector_to_symmetric(symmetric_to_vector(m), 4), m)


# ----------------------------------------------------------------------------- privacy


def test_ledger_is_the_plan_and_composes_to_the_budget():
    eps, delta = 1.0, 1e-5
    k = DPNoiseAware(model, epsilon=eps, delta=delta, init=DPAutoTune(num_steps=10), seed=0, noise_seed=5)
    mcmc = _run(k, warmup=10, samples=10)
    fixed, per_iteration = k.planned_events()
    planned = {}
    for e in list(fixed) + list(per_iteration):
        ev, c = e if isinstance(e, tuple) else (e, 1)
        planned[ev] = planned.get(ev, 0) + c
    assert dict(k.ledger.aggregate().items()) == planned
    # the independent oracle: Gaussian mechanisms compose to mu = sqrt(sum count / nm^2) (Dong, Roth & Su
    # 2022 Cor. 3.3); epsilon of mu-GDP from the analytic Gaussian mechanism (Balle & Wang 2018)
    mu = math.sqrt(sum(c / ev.noise_multiplier ** 2 for ev, c in planned.items()))
    oracle = get_epsilon_gaussian(1.0 / mu, delta)
    assert pyro_dp.get_epsilon(mcmc, delta) == pytest.approx(oracle, rel=1e-6)
    assert oracle <= eps * (1 + 1e-6)
    # the two releases: sensitivity 2C under substitution, noise sd nm * 2C
    assert k.release.score_std == pytest.approx(k.noise_multiplier * 2 * k.grad_clip)
    assert k.release.curvature_std == pytest.approx(k.curvature_noise_multiplier * 2 * k.curvature_clip)
    assert k.release.events == (GaussianEvent(k.noise_multiplier), GaussianEvent(k.curvature_noise_multiplier))
    # named as an approximation: the report's groups and the diagnostics
    labels = {g.label for g in pyro_dp.privacy_report(mcmc).mechanisms}
    assert APPROXIMATION in labels
    assert mcmc.diagnostics()["approximation"]["chain 0"].startswith(APPROXIMATION)


def test_a_budget_the_releases_do_not_fit_is_refused_before_reading():
    """Noise multipliers given with a budget they exceed: refused at set-up (data-free), nothing released."""
    k = DPNoiseAware(model, epsilon=0.1, delta=1e-5, noise_multiplier=1.0, curvature_noise_multiplier=1.0,
                     init=_tuner(nm=50.0), seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="exceed the privacy budget"):
            MCMC(k, num_samples=5, warmup_steps=0, disable_progbar=True).run(Y)
    assert k.ledger.num_releases == 0 and k.release is None


def test_contract_kit():
    make = lambda: DPNoiseAware(model, noise_multiplier=2.0, curvature_noise_multiplier=3.0,  # noqa: E731
                                init=_tuner(nm=5.0))
    y = Y[:100]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = check_kernel(make, y, checks=["setup_is_data_free", "copies", "per_row_rule",
                                               "reads_only_through_releases", "audit_hooks"])
        # one releasing iteration per chain: later iterations release nothing (fewer than "per iteration")
        report.update(check_kernel(make, y, checks=["planned_equals_recorded"], fewer_releases_ok=True))
    assert len(report) == 6


# ----------------------------------------------------------------------------- warnings and refusals


def squared_mean_model(y):
    """y_i ~ N(mu^2, 1): for positive data two symmetric modes, and a log-likelihood that curves
    upwards at mu = 0 (a mixture's label switching in one dimension)."""
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 3.0))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(mu * mu, 1.0), obs=y)


def test_warns_where_the_quadratic_cannot_hold():
    k = DPNoiseAware(squared_mean_model, grad_clip=20.0, curvature_clip=20.0, noise_multiplier=1.0,
                     curvature_noise_multiplier=1.0, init=DPAutoTune(num_steps=1, noise_multipliers=(1.0, 1.0, 1.0),
                                                                     learning_rate=(1e-9, 1e-9)), seed=0)
    with pytest.warns(PoorApproximationWarning, match="not concave at the centre"):
        mcmc = MCMC(k, num_samples=5, warmup_steps=5, disable_progbar=True)
        mcmc.run(Y)
    assert mcmc.diagnostics()["approximation problems"]["chain 0"]


def test_approximation_problems_far_centre():
    r = QuadraticRelease(torch.zeros(1), torch.tensor([1000.0]), torch.tensor([[100.0]]), 1.0, 1.0, 1.0, 1.0, ())
    assert [p.split(":")[0] for p in approximation_problems(r)] == ["far from the centre"]
    assert approximation_problems(r._replace(score=torch.tensor([5.0]))) == []


@pytest.mark.parametrize("kwargs, match", [
    ({"num_iterations": 10}, "one releasing iteration"),
    ({"init": DPAutoTune(whiten=True)}, "unwhitened DPAutoTune"),
    ({"init": pyro_dp.DPGradientInit(5, 0.1, 1.0, 1.0)}, "unwhitened DPAutoTune"),
    ({"noise_multiplier": 1.0}, "give both"),
    ({"score_share": 1.0}, "score_share"),
    ({"grad_clip": -1.0}, "grad_clip"),
])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DPNoiseAware(model, epsilon=1.0, **kwargs)


def mixture_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.zeros(2, dtype=y.dtype), 3.0).to_event(1))
    weights = dist.Categorical(probs=torch.full((2,), 0.5, dtype=y.dtype))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.MixtureSameFamily(weights, dist.Normal(mu, 1.0)), obs=y)


def test_a_mixture_likelihood_warns_at_set_up_without_reading_data():
    """Decided from the model's code (a stand-in row): NaN data warn the same, and nothing is released."""
    for y in (Y, torch.full_like(Y, float("nan"))):
        k = DPNoiseAware(mixture_model, epsilon=1.0, delta=1e-5, seed=0)
        with pytest.warns(PoorApproximationWarning, match="mixture likelihood at \\['y'\\]"):
            k.setup(0, y)
        assert k.ledger.num_releases == 0 and k.structure_problems
    k = DPNoiseAware(model, epsilon=1.0, delta=1e-5, seed=0)  # the normal-mean model: no mixture
    with warnings.catch_warnings():
        warnings.simplefilter("error", PoorApproximationWarning)
        warnings.simplefilter("ignore", pyro_dp.PrivacyNotice)
        k.setup(0, Y)
