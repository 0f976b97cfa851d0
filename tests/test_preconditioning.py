"""#40: posterior-shaped coordinates. A public affine change of the kernels' coordinates
(``pyro_dp.preconditioning``) and the default path's private covariance estimate that sets it
(``DPAutoTune(whiten=True)``, ``pyro_dp.kernels.whitening``)."""
import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.accounting.gdp import gdp_mu
from pyro_dp.kernels.tuning import DPAutoTune
from pyro_dp.kernels.whitening import METRIC_SHARE, private_metric, whitening_from_metric
from pyro_dp.likelihood import PrivateLikelihood
from pyro_dp.mechanisms import GaussianEvent, NoiseSource
from pyro_dp.testing import check_kernel

D = 3


def logistic(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(D, dtype=X.dtype), 2.0).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def data(n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = 0.8 * torch.ones(D, D, dtype=torch.float64) + 0.2 * torch.eye(D, dtype=torch.float64)
    X = torch.randn(n, D, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(c).T / math.sqrt(D)
    X = X / X.norm(dim=1, keepdim=True).clamp(min=1.0)
    y = torch.bernoulli(torch.sigmoid(X @ torch.tensor([1.0, -0.5, 0.8], dtype=torch.float64)), generator=g)
    return X, y


SHIFT = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
L = torch.tensor([[0.5, 0.0, 0.0], [0.2, 0.3, 0.0], [-0.1, 0.4, 0.7]], dtype=torch.float64)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "compiled"])
def test_the_kernels_coordinates_change_only_the_parametrisation(jit):
    X, y = data()
    kw = dict(jit_compile=True, jit_options={"backend": "graph"}) if jit else {}
    plain = PrivateLikelihood(logistic, (X, y), seed=0)
    lik = PrivateLikelihood(logistic, (X, y), seed=0, **kw)
    u = torch.tensor([0.4, -1.0, 0.5], dtype=torch.float64)
    z = SHIFT + L @ u
    lik.loglik_and_prior(u)  # a graph compiled before the preconditioner ...
    lik.set_preconditioner(SHIFT, L)
    # ... and after: the same per-example terms as the model at z = shift + L u
    torch.testing.assert_close(lik.per_example_loglik(u), plain.per_example_loglik(z), rtol=1e-12, atol=1e-12)
    ll, g = lik.per_example_grad(u)
    ll0, g0 = plain.per_example_grad(z)
    torch.testing.assert_close(g, g0 @ L, rtol=1e-12, atol=1e-12)  # chain rule: d l / d u = L^T g
    torch.testing.assert_close(lik.flatten(lik.unravel(u)), u, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lik.to_unconstrained(u.unsqueeze(0))[0], z, rtol=1e-12, atol=1e-12)
    # another chain's preconditioner: the compiled graphs read it as an input, not a constant
    n = lik.compiled.num_compiled if jit else 0
    lik.set_preconditioner(-SHIFT, 2 * L)
    torch.testing.assert_close(lik.per_example_loglik(u), plain.per_example_loglik(-SHIFT + 2 * L @ u),
                               rtol=1e-12, atol=1e-12)
    if jit:
        assert lik.compiled.num_compiled == n  # nothing recompiled
    lik.set_preconditioner(None)
    torch.testing.assert_close(lik.per_example_loglik(z), plain.per_example_loglik(z), rtol=1e-12, atol=1e-12)


def test_a_preconditioner_is_checked():
    lik = PrivateLikelihood(logistic, data(), seed=0)
    for shift, m in ((SHIFT[:2], L), (SHIFT, L.T), (SHIFT, -L), (SHIFT * float("nan"), L)):
        with pytest.raises(ValueError):
            lik.set_preconditioner(shift, m)


def test_the_metric_release_is_the_clipped_outer_product_sum_with_its_noise():
    X, y = data()
    X[5] = 1e6  # an adversarial row: its clipped gradient, not its size, reaches the sum
    lik = PrivateLikelihood(logistic, (X, y), seed=0)
    z = torch.zeros(D, dtype=torch.float64)
    events = []
    m0, s0 = private_metric(lik, z, 0.3, 0.0, NoiseSource(seed=0, warn=False), rows=[lik.per_example_grad(z)[1]])
    g = lik.per_example_grad(z)[1]
    g = g * torch.clamp(0.3 / g.norm(dim=1, keepdim=True), max=1.0)
    torch.testing.assert_close(m0, g.T @ g, rtol=1e-12, atol=1e-12)  # the oracle: sum of outer products
    assert s0 == 0.0
    m, s = private_metric(lik, z, 0.3, 4.0, NoiseSource(seed=1, warn=False), record=events.append,
                          rows=[lik.per_example_grad(z)[1]])
    assert events == [GaussianEvent(4.0)] and s == pytest.approx(4.0 * 2 * 0.3 ** 2)  # substitute: 2 c^2
    assert torch.equal(m, m.T) and not torch.equal(m, m0)


def test_whitening_gives_the_posterior_covariance_of_a_gaussian_model():
    """For a linear-Gaussian model the posterior precision is T X^T X / s^2 + prior precision;
    the outer products of the per-example gradients at the posterior mean estimate X^T X / s^2."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(5000, 2, generator=g, dtype=torch.float64) @ torch.tensor([[1.0, 0.0], [0.9, 0.4]],
                                                                              dtype=torch.float64).T
    y = X @ torch.tensor([0.5, -0.3], dtype=torch.float64) + torch.randn(5000, generator=g, dtype=torch.float64)

    def linear(X, y):
        w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=X.dtype), 10.0).to_event(1))
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Normal(X @ w, 1.0), obs=y)

    lik = PrivateLikelihood(linear, (X, y), seed=0)
    z = torch.linalg.solve(X.T @ X, X.T @ y)
    m, s = private_metric(lik, z, 1e6, 0.0, NoiseSource(seed=0, warn=False), rows=[lik.per_example_grad(z)[1]])
    Lw, f = whitening_from_metric(lik, z, m, s)
    exact = torch.linalg.inv(X.T @ X + torch.eye(2, dtype=torch.float64) / 100)
    torch.testing.assert_close(Lw @ Lw.T, exact, rtol=0.05, atol=0)  # sum r_i^2 x x^T / N ~ X^T X (E r^2 = 1)
    assert 0 < f < 1


def test_the_tuning_plans_and_spends_the_metric_share():
    t = DPAutoTune(num_steps=10, whiten=True)
    t.configure(epsilon=2.0, delta=1e-5, num_chains=1)
    evs = t.events()
    assert evs[-1] == (GaussianEvent(t.metric_noise_multiplier), 1)
    # Gaussian DP: mu^2 = sum 1/nm^2 (Dong, Roth & Su 2022 Cor. 3.3), the tuning's share in all
    mu2 = sum(n / e.noise_multiplier ** 2 for e, n in evs)
    assert mu2 == pytest.approx(gdp_mu(2.0, 1e-5) ** 2 * t.share)
    assert 1 / t.metric_noise_multiplier ** 2 == pytest.approx(METRIC_SHARE * mu2)
    plain = DPAutoTune(num_steps=10)
    plain.configure(epsilon=2.0, delta=1e-5, num_chains=1)
    assert len(plain.events()) == 3  # unchanged without whiten


def _whitened_penalty():
    return pyro_dp.DPPenalty(logistic, epsilon=50.0, init=DPAutoTune(num_steps=10, whiten=True))


def test_a_whitened_default_path_passes_the_kernel_contract():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = check_kernel(_whitened_penalty, data(), checks=["planned_equals_recorded", "copies", "per_row_rule"])
    assert "as planned" in report["planned_equals_recorded"]


def test_a_whitened_chain_runs_in_posterior_shaped_coordinates_and_reports_the_model_s():
    X, y = data(4000)
    k = pyro_dp.DPPenalty(logistic, epsilon=50.0, init=DPAutoTune(num_steps=30, whiten=True), seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(k, num_samples=300, warmup_steps=200, disable_progbar=True)
        mcmc.run(X, y)
    assert "tune:metric" in k.ledger.by_label()
    shift, Lw = k.lik.preconditioner
    assert torch.equal(Lw, torch.tril(Lw)) and bool((torch.diagonal(Lw) > 0).all())
    w = mcmc.get_samples()["w"]
    # the samples are the model's w (not the whitened u): near the MAP, within a few posterior sds
    assert float(((w.mean(0) - shift).abs() / w.std(0)).max()) < 4
    # the state checkpoint carries the coordinates: a resumed kernel continues in them
    state = k.state_dict()
    k2 = pyro_dp.DPPenalty(logistic, epsilon=50.0, init=DPAutoTune(num_steps=30, whiten=True), seed=0)
    k2.load_state_dict(state)
    k2.setup(0, X, y)
    torch.testing.assert_close(k2.lik.preconditioner[1], Lw)


def test_dppenalty_s_default_path_whitens_where_it_applies_and_plans_nothing_elsewhere():
    from pyro_dp.models.examples import normal_mean_model

    X, y = data(4000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = pyro_dp.DPPenalty(logistic, epsilon=20.0, num_iterations=20)
        MCMC(k, num_samples=10, warmup_steps=10, disable_progbar=True).run(X, y)
        assert k.init.whiten and k.ledger.by_label()["tune:metric"] == 1
        assert k.lik.preconditioner is not None  # the released matrix stands above its noise here
        one = pyro_dp.DPPenalty(normal_mean_model, epsilon=20.0, num_iterations=20)  # one latent coordinate
        MCMC(one, num_samples=10, warmup_steps=10, disable_progbar=True).run(y)
        assert not one.init.whiten and "tune:metric" not in one.ledger.by_label()
        assert len(one.init.events()) == 3  # nothing planned for it either
        hmc = pyro_dp.DPHMC(logistic, epsilon=20.0, num_iterations=20)  # not DPHMC's default (yet)
        MCMC(hmc, num_samples=10, warmup_steps=10, disable_progbar=True).run(X, y)
        assert not hmc.init.whiten and hmc.lik.preconditioner is None
