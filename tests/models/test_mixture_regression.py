"""Gaussian mixtures (Heikkilä et al. 2019 §4; Zhang & Zhang 2023 App. E.1) and the regression
benchmarks.

The grid reference is checked against an independent exact computation: self-normalised
importance sampling (SNIS) from a broad Gaussian, whose Monte Carlo standard error is
estimated from the draws (delta method). Tolerances are 4.5 MCSE. Fixed seeds, float64.
"""
import math

import pytest
import torch

import pyro_dp
from pyro_dp.models import (
    EXTRA_PROBLEMS,
    get_problem,
    gmm_log_posterior,
    gmm_loglik,
    gmm_model,
    gmm_reference,
    make_gmm_data,
    make_truncated_gmm_data,
    truncated_gmm_bounds,
    truncated_gmm_lipschitz,
    truncated_gmm_model,
    truncated_gmm_reference,
)

pytestmark = pytest.mark.usefixtures("raw_values")  # checks the likelihood's values (conftest)

Z = 4.5


def _snis_moments(log_post, k=60_000, loc=(0.5, 0.0), scale=(1.5, 2.0), seed=0):
    """SNIS estimates of E[theta], E[theta^2] and their MCSEs (delta method)."""
    g = torch.Generator().manual_seed(seed)
    loc, scale = torch.tensor(loc, dtype=torch.float64), torch.tensor(scale, dtype=torch.float64)
    th = loc + scale * torch.randn(k, 2, generator=g, dtype=torch.float64)
    lq = torch.distributions.Normal(loc, scale).log_prob(th).sum(-1)
    lw = torch.cat([log_post(th[i:i + 4096]) for i in range(0, k, 4096)]) - lq
    w = torch.exp(lw - lw.max())
    w = w / w.sum()
    out = []
    for f in (th, th ** 2):
        est = (w[:, None] * f).sum(0)
        se = torch.sqrt((w[:, None] ** 2 * (f - est) ** 2).sum(0))
        out.append((est, se))
    return out, float(1 / (w ** 2).sum())


def _check_grid_against_snis(grid, log_post, **kw):
    ((m, sm), (m2, sm2)), ess = _snis_moments(log_post, **kw)
    assert ess > 1000  # the proposal covers the posterior
    gm = grid.mean()
    gv = grid.variance()
    assert ((gm - m).abs() <= Z * sm).all(), (gm, m, sm)
    assert ((gv + gm ** 2 - m2).abs() <= Z * sm2 + 2 * grid.hx ** 2).all(), (gv + gm ** 2, m2, sm2)
    # and the grid's draws match the grid's own quadrature (sampler wiring)
    d = grid.sample(20000, seed=5)
    assert ((d.mean(0) - gm).abs() <= Z * (gv / 20000).sqrt()).all()


def test_heikkila_gmm_grid_reference_matches_importance_sampling():
    x = make_gmm_data(800, seed=1)
    T = 100 / 800
    grid = gmm_reference(x, T, num_cells=200, num_bins=None)  # exact rows
    _check_grid_against_snis(grid, lambda th: gmm_log_posterior(th, x, T))
    # bimodal: both modes (0, 1) and (1, -1) carry mass
    d = grid.sample(20000, seed=6)
    assert float((d[:, 1] > 0).double().mean()) > 0.05 and float((d[:, 1] < 0).double().mean()) > 0.05


def test_truncated_gmm_grid_reference_matches_importance_sampling():
    x = make_truncated_gmm_data(800, seed=2)
    T = 100 / 800
    grid = truncated_gmm_reference(x, T, num_cells=200, num_bins=None)
    box = lambda th: torch.where((th.abs() <= 3).all(-1), gmm_log_posterior(th, x, T, None),  # noqa: E731
                                 torch.tensor(-math.inf, dtype=th.dtype))
    _check_grid_against_snis(grid, box)


def test_binned_log_posterior_is_the_exact_one_up_to_a_constant():
    x = make_gmm_data(50_000, seed=3)
    th = torch.tensor([[0.0, 1.0], [1.0, -1.0], [0.4, 0.2], [-1.0, 2.0]], dtype=torch.float64)
    T = 100 / 50_000
    diff = gmm_log_posterior(th, x, T, num_bins=2048) - gmm_log_posterior(th, x, T)
    assert float(diff.max() - diff.min()) < 1e-4  # module docstring's bound


@pytest.mark.parametrize("model,data,init", [
    (gmm_model, make_gmm_data, None),
    (truncated_gmm_model, make_truncated_gmm_data, None),
])
def test_pyro_log_density_matches_hand_written(model, data, init):
    x = data(300, seed=4)
    lik = pyro_dp.PrivateLikelihood(model, (x,))
    pts = torch.tensor([[0.1, 0.9], [0.8, -1.2], [-0.5, 0.3]], dtype=torch.float64)
    to_z = (lambda th: th) if model is gmm_model else (lambda th: torch.logit((th + 3) / 6))  # unconstrained
    for th in pts:
        z = lik.flatten({"theta": to_z(th)})
        assert torch.allclose(lik.constrain(z)["theta"], th)
        ll, lp = lik.loglik_and_prior(z)
        assert torch.allclose(ll, gmm_loglik(th, x), rtol=1e-12, atol=1e-12)
    # per-example gradient (DP-SGLD) equals autograd of the hand-written row term
    z = lik.flatten({"theta": to_z(pts[0])})
    _, g = lik.per_example_grad(z, torch.arange(5))
    th = pts[0].clone().requires_grad_(True)
    if model is gmm_model:
        want = torch.stack([torch.autograd.grad(gmm_loglik(th, x[i:i + 1])[0], th)[0] for i in range(5)])
        assert torch.allclose(g, want, rtol=1e-10, atol=1e-12)


def test_truncated_gmm_data_and_bounds():
    x = make_truncated_gmm_data(20000, seed=7)
    assert float(x.abs().max()) <= 3.0 and torch.equal(x, make_truncated_gmm_data(20000, seed=7))
    c = truncated_gmm_bounds(x)
    cmax = truncated_gmm_lipschitz(unconstrained=False)
    assert float(c.max()) <= cmax == pytest.approx(math.sqrt(7.5 ** 2 + 4.5 ** 2))
    # the bound holds: random pairs in the box, |l_i(th) - l_i(th')| <= c_i ||th - th'||
    g = torch.Generator().manual_seed(8)
    a, b = (torch.rand(200, 2, generator=g, dtype=torch.float64) * 6 - 3 for _ in range(2))
    dl = (gmm_loglik(a[:, None, :].expand(-1, 1, 2).squeeze(1), x[:500]) - gmm_loglik(b, x[:500])).abs()
    assert (dl <= c[:500] * (a - b).norm(dim=-1, keepdim=True) + 1e-12).all()
    # unconstrained space: the logit transform of Uniform(-3, 3) stretches by at most 1.5
    assert truncated_gmm_lipschitz() == pytest.approx(1.5 * cmax)
    lik = pyro_dp.PrivateLikelihood(truncated_gmm_model, (x[:500],))
    za, zb = (torch.randn(200, 2, generator=g, dtype=torch.float64) * 2 for _ in range(2))
    for z1, z2 in zip(za, zb):
        d = (lik.per_example_loglik(z1) - lik.per_example_loglik(z2)).abs()
        assert (d <= truncated_gmm_lipschitz() * (z1 - z2).norm() + 1e-12).all()


@pytest.mark.parametrize("name", ["gmm-heikkila", "gmm-truncated", "logistic"])
def test_extra_problems_build(name):
    p = get_problem(name, n=300)
    lik = pyro_dp.PrivateLikelihood(p.model, p.args, init_strategy=p.init_strategy())
    assert lik.num_rows == 300
    ll, lp = lik.loglik_and_prior(lik.flatten({p.site: p.start}))
    assert ll.shape == (300,) and torch.isfinite(ll).all() and torch.isfinite(lp)
    assert p.temperature == pytest.approx(1.0 if EXTRA_PROBLEMS[name][1] is None else EXTRA_PROBLEMS[name][1] / 300)
    if name.startswith("gmm"):
        assert p.reference_sample(4, seed=0).shape == (4, 2)


def test_randhie_loader_uses_public_scaling():
    pytest.importorskip("statsmodels")
    from pyro_dp.models import load_randhie

    X, y = load_randhie()
    assert X.shape == (20190, 8) and y.shape == (20190,)
    assert float(X.norm(dim=1).max()) <= 1 + 1e-12 and float(X.min()) >= 0
    assert torch.allclose(X[:, 0], torch.full_like(X[:, 0], 1 / math.sqrt(8)))
    Xs, ys = load_randhie(n=100, seed=1)
    assert Xs.shape == (100, 8) and torch.equal(Xs, load_randhie(n=100, seed=1)[0])
    with pytest.raises(ValueError, match="public scaling"):
        load_randhie(covariates=("lpi",))
    p = get_problem("randhie-poisson", n=200)
    lik = pyro_dp.PrivateLikelihood(p.model, p.args, init_strategy=p.init_strategy())
    ll, _ = lik.loglik_and_prior(lik.flatten({"w": p.start}))
    assert ll.shape == (200,) and torch.isfinite(ll).all()


def test_unknown_problem_is_refused():
    with pytest.raises(KeyError, match="gmm-heikkila"):
        get_problem("gmm")


@pytest.mark.slow
def test_randhie_nuts_reference_on_full_data():
    """NUTS on all 20 190 rows: the posterior mean agrees with a Laplace approximation (the
    posterior is nearly Gaussian at this n) within 4.5 MCSE + the Laplace error scale."""
    pytest.importorskip("statsmodels")
    from pyro_dp.models import load_randhie, nuts_reference_sample, poisson_model

    X, y = load_randhie()
    draws = nuts_reference_sample(poisson_model, (X, y), 500, warmup_steps=300, seed=0)
    w = torch.zeros(X.shape[1], dtype=X.dtype, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")

    def nlp():
        opt.zero_grad()
        loss = -(torch.distributions.Poisson(torch.exp(X @ w)).log_prob(y).sum()
                 + torch.distributions.Normal(0.0, 5.0).log_prob(w).sum())
        loss.backward()
        return loss

    opt.step(nlp)
    sd = draws.std(0)
    assert ((draws.mean(0) - w.detach()).abs() <= Z * sd / math.sqrt(100) + 0.05 * sd).all()
