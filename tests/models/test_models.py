"""Benchmark posteriors (thesis ch. 5, Table 6.1): exact samplers against closed forms and
grid quadrature, Pyro log densities against the closed-form posteriors.

Tolerances are 4.5 Monte Carlo standard errors computed from the *reference* moments
(grid quadrature or closed form), never hand-picked. Fixed seeds, float64.
"""
import math

import pytest
import torch

import pyro_dp
from pyro_dp.models import (
    TABLE_6_1,
    Banana,
    banana_model,
    banana_posterior,
    banana_reference_sample,
    circle_log_density,
    circle_model,
    circle_reference_sample,
    correlated_cov,
    diagonal_cov,
    gaussian_model,
    gaussian_posterior,
    gaussian_reference_sample,
    get_problem,
    make_banana_data,
    make_circle_data,
    make_gaussian_data,
)

pytestmark = pytest.mark.usefixtures("raw_values")  # checks the likelihood's values (conftest)

Z = 4.5  # MCSE multiplier
K = 20000  # reference draws


def _log_post_offsets(model, args, log_post, points, temperature=1.0, init_strategy=None):
    kw = {} if init_strategy is None else {"init_strategy": init_strategy}
    lik = pyro_dp.PrivateLikelihood(model, args, **kw)
    out = []
    for z in points:
        ll, lp = lik.loglik_and_prior(z)
        out.append(float(temperature * ll.sum() + lp - log_post(z)))
    return torch.tensor(out, dtype=torch.float64)


def _grid_moments(logp, xs, ys):
    """Normalised grid weights and E[f] for the rectangle rule on a uniform grid."""
    X, Y = torch.meshgrid(xs, ys, indexing="ij")
    lw = logp(torch.stack([X, Y], -1))
    w = torch.exp(lw - lw.max())
    w = w / w.sum()
    return X, Y, w


def _check_moments(draws, X, Y, w):
    """Sample mean, variance and CDF at the quartiles vs grid quadrature, within Z MCSE."""
    k = draws.shape[0]
    for coord, G in ((0, X), (1, Y)):
        x = draws[:, coord]
        m = float((w * G).sum())
        v = float((w * (G - m) ** 2).sum())
        mu4 = float((w * (G - m) ** 4).sum())
        assert abs(float(x.mean()) - m) <= Z * math.sqrt(v / k), (coord, float(x.mean()), m)
        assert abs(float(x.var()) - v) <= Z * math.sqrt((mu4 - v * v) / k), (coord, float(x.var()), v)
        nodes = G[:, 0] if coord == 0 else G[0, :]
        mids = 0.5 * (nodes[1:] + nodes[:-1])  # cell edges: the rectangle rule is exact to O(h^2) there
        for q in (-1.0, 0.0, 1.0):  # marginal CDF near m + q sd (histogram-style check)
            t = float(mids[(mids - (m + q * math.sqrt(v))).abs().argmin()])
            p = float(w[G <= t].sum())
            assert abs(float((x <= t).double().mean()) - p) <= Z * math.sqrt(p * (1 - p) / k), (coord, q)


# ---------------------------------------------------------------- Gaussian (thesis §5.1)


def test_gaussian_sampler_matches_closed_form_moments():
    cov = correlated_cov(0.999)
    X = make_gaussian_data(1000, cov, seed=1)
    post = gaussian_posterior(X, cov, prior_var=100.0)
    draws = gaussian_reference_sample(post, K, seed=2)
    # whiten with the closed form: iid N(0, I) if the sampler is right
    w = torch.linalg.solve_triangular(post.scale_tril, (draws - post.loc).T, upper=False).T
    assert (w.mean(0).abs() <= Z / math.sqrt(K)).all()
    assert ((w.var(0) - 1).abs() <= Z * math.sqrt(2 / (K - 1))).all()
    assert abs(float((w[:, 0] * w[:, 1]).mean())) <= Z / math.sqrt(K)
    # reproducible
    assert torch.equal(draws, gaussian_reference_sample(post, K, seed=2))


def test_gaussian_posterior_closed_form_in_1d():
    # BDA3 §2.5: v = 1/(1/s0^2 + n/s^2), m = v * sum(x)/s^2 (prior mean 0)
    X = make_gaussian_data(50, torch.eye(1) * 4.0, theta=[1.5], seed=3)
    post = gaussian_posterior(X, torch.eye(1) * 4.0, prior_var=9.0, temperature=0.5)
    v = 1 / (1 / 9.0 + 0.5 * 50 / 4.0)
    assert float(post.covariance_matrix[0, 0]) == pytest.approx(v, rel=1e-12)
    assert float(post.loc[0]) == pytest.approx(v * 0.5 * float(X.sum()) / 4.0, rel=1e-12)


@pytest.mark.parametrize("temperature", [1.0, 0.1])
def test_gaussian_model_log_density_matches_posterior(temperature):
    cov = correlated_cov(0.999)
    X = make_gaussian_data(200, cov, seed=4)
    post = gaussian_posterior(X, cov, prior_var=100.0, temperature=temperature)
    pts = gaussian_reference_sample(post, 5, seed=5) + torch.tensor([0.3, -0.2], dtype=torch.float64)
    off = _log_post_offsets(lambda X: gaussian_model(X, cov, prior_var=100.0), (X,), post.log_prob, pts,
                            temperature)
    assert float(off.max() - off.min()) < 1e-8 * float(off.abs().max())


def test_gaussian_diag_model_is_gaussian_model_with_a_diagonal_covariance():
    """The 30-d benchmark's model (independent Normals) against ``gaussian_model``'s
    ``MultivariateNormal`` with the same diagonal covariance: the same per-example
    log-likelihoods and log prior at several points, to rounding."""
    from pyro_dp.likelihood import PrivateLikelihood
    from pyro_dp.models import get_problem
    from pyro_dp.models.gaussian import gaussian_diag_model

    cov = diagonal_cov(30)
    X = make_gaussian_data(50, cov, seed=2)
    diag = PrivateLikelihood(gaussian_diag_model, (X, cov.diagonal().sqrt()), seed=0)
    full = PrivateLikelihood(lambda X: gaussian_model(X, cov), (X,), seed=0)
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        z = torch.randn(30, generator=g, dtype=torch.float64) * 2.0
        a, b = diag.loglik_and_prior(z), full.loglik_and_prior(z)
        torch.testing.assert_close(a[0], b[0], rtol=1e-12, atol=0.0)
        torch.testing.assert_close(a[1], b[1], rtol=1e-12, atol=0.0)
    assert get_problem("gauss-30d", n=100).model.func is gaussian_diag_model
    assert get_problem("correlated-gauss", n=100).model.func is gaussian_model


# ---------------------------------------------------------------- banana (thesis Thm 12)


def _banana_log_post_independent(theta, X, a, s0sq, lik_var, T):
    """Prior Ban(0, s0^2 I, a) and likelihood written out row by row (not via Thm 12)."""
    t1, t2 = theta[..., 0], theta[..., 1]
    u = t2 + a * t1**2
    lp = -0.5 * (t1**2 + u**2) / s0sq
    ll = -0.5 * ((X[:, 0] - t1[..., None]) ** 2).sum(-1) / lik_var[0]
    ll = ll - 0.5 * ((X[:, 1] - u[..., None]) ** 2).sum(-1) / lik_var[1]
    return lp + T * ll


@pytest.mark.parametrize("temperature", [1.0, 0.2])
def test_banana_sampler_matches_grid_quadrature(temperature):
    a, s0sq, lik_var = 1.0, 1000.0, torch.tensor([20.0, 2.5], dtype=torch.float64)
    X = make_banana_data(40, dim=2, a=a, seed=6)
    post = banana_posterior(X, a=a, sigma0_sq=s0sq, temperature=temperature)
    m1, s1, m2, s2 = (float(post.loc[0]), float(post.scale[0]), float(post.loc[1]), float(post.scale[1]))
    xs = torch.linspace(m1 - 9 * s1, m1 + 9 * s1, 400, dtype=torch.float64)
    lo = m2 - a * (abs(m1) + 9 * s1) ** 2 - 9 * s2
    ys = torch.linspace(lo, m2 + 9 * s2, 600, dtype=torch.float64)
    Xg, Yg, w = _grid_moments(
        lambda th: _banana_log_post_independent(th, X, a, s0sq, lik_var, temperature),
        xs, ys)
    # the closed-form moments of Ban(mu, Sigma) agree with the quadrature of the Bayesian posterior
    gm = torch.tensor([float((w * Xg).sum()), float((w * Yg).sum())], dtype=torch.float64)
    gv = torch.tensor([float((w * (Xg - gm[0]) ** 2).sum()), float((w * (Yg - gm[1]) ** 2).sum())],
                      dtype=torch.float64)
    assert torch.allclose(post.mean, gm, rtol=1e-4, atol=1e-4 * float(gv.sqrt().max()))
    assert torch.allclose(post.variance, gv, rtol=1e-3)
    draws = banana_reference_sample(post, K, seed=7)
    _check_moments(draws, Xg, Yg, w)


@pytest.mark.parametrize("dim,n0", [(2, None), (10, None), (2, 100), (10, 100)])
def test_banana_model_log_density_matches_thm12(dim, n0):
    n = 300
    T = 1.0 if n0 is None else n0 / n
    X = make_banana_data(n, dim=dim, a=20.0, seed=8)
    post = banana_posterior(X, a=20.0, sigma0_sq=1000.0, temperature=T)
    pts = banana_reference_sample(post, 4, seed=9) + 0.05
    off = _log_post_offsets(lambda X: banana_model(X, a=20.0, sigma0_sq=1000.0), (X,), post.log_prob, pts, T)
    assert float(off.max() - off.min()) < 1e-8 * float(off.abs().max())


def test_banana_10d_sampler_moments():
    X = make_banana_data(500, dim=10, a=20.0, seed=10)
    post = banana_posterior(X, a=20.0, temperature=0.5)
    draws = banana_reference_sample(post, K, seed=11)
    mean, var = post.mean, post.variance
    assert ((draws.mean(0) - mean).abs() <= Z * (var / K).sqrt()).all()
    # Gaussian coordinates: MCSE of the variance var*sqrt(2/(K-1)); the banana one is checked on the grid
    assert ((draws.var(0)[2:] - var[2:]).abs() <= Z * var[2:] * math.sqrt(2 / (K - 1))).all()


def test_banana_is_a_distribution():
    b = Banana(torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64), a=2.0)
    th = torch.tensor([[0.5, -1.0], [1.0, 2.0]], dtype=torch.float64)
    assert torch.allclose(b.g(b.g_inv(th)), th)
    ref = torch.distributions.Normal(0.0, 1.0).log_prob(b.g_inv(th)).sum(-1)
    assert torch.allclose(b.log_prob(th), ref)
    assert b.expand((3,)).batch_shape == (3,)
    with pytest.raises(ValueError):
        Banana(torch.zeros(1), torch.ones(1))


# ---------------------------------------------------------------- circle (thesis §5.3)


def test_circle_sampler_matches_grid_quadrature():
    a, r = 0.01, make_circle_data(20, seed=12)
    xs = torch.linspace(-5.5, 5.5, 800, dtype=torch.float64)
    Xg, Yg, w = _grid_moments(lambda th: circle_log_density(th, r, a=a), xs, xs)
    assert float(w[0, :].sum() + w[-1, :].sum() + w[:, 0].sum() + w[:, -1].sum()) < 1e-12  # mass inside
    draws = circle_reference_sample(r, K, a=a, seed=13)
    _check_moments(draws, Xg, Yg, w)
    # radius^2: mean and variance vs quadrature
    U, u = Xg**2 + Yg**2, draws.pow(2).sum(-1)
    m, v = float((w * U).sum()), float((w * (U - (w * U).sum()) ** 2).sum())
    mu4 = float((w * (U - m) ** 4).sum())
    assert abs(float(u.mean()) - m) <= Z * math.sqrt(v / K)
    assert abs(float(u.var()) - v) <= Z * math.sqrt((mu4 - v * v) / K)


def test_circle_model_log_density():
    r = make_circle_data(100, seed=14)
    pts = circle_reference_sample(r, 4, a=1e-3, seed=15) * 1.1
    from pyro.infer.autoguide.initialization import init_to_value

    init = init_to_value(values={"theta": torch.tensor([0.0, 1.0], dtype=torch.float64)})
    off = _log_post_offsets(lambda r: circle_model(r, a=1e-3), (r,),
                            lambda z: circle_log_density(z, r, a=1e-3), pts, init_strategy=init)
    assert float(off.abs().max()) < 1e-9  # flat prior: no constant at all


# ---------------------------------------------------------------- Table 6.1


@pytest.mark.parametrize("name", sorted(TABLE_6_1))
def test_table_6_1_problems_build(name):
    p = get_problem(name, n=200)
    lik = pyro_dp.PrivateLikelihood(p.model, p.args, init_strategy=p.init_strategy())
    assert lik.num_rows == 200
    ll, lp = lik.loglik_and_prior(lik.flatten({"theta": p.start}))
    assert ll.shape == (200,) and torch.isfinite(ll).all() and torch.isfinite(lp)
    draws = p.reference_sample(3, seed=0)
    assert draws.shape == (3, TABLE_6_1[name][1]) and draws.dtype == torch.float64
    if TABLE_6_1[name][3] is not None:
        assert p.temperature == pytest.approx(TABLE_6_1[name][3] / 200)
