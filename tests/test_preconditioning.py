"""#40: posterior-shaped coordinates. A public affine change of the kernels' coordinates
(``pyro_dp.preconditioning``) and the default path's private covariance estimate that sets it
(``DPAutoTune(whiten=True)``, ``pyro_dp.default_path.whitening``)."""
import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.accounting.gdp import gdp_mu
from pyro_dp.default_path.tuning import DPAutoTune
from pyro_dp.default_path import whitening
from pyro_dp.default_path.whitening import (LOG_SCALE_BOUND, METRIC_SHARE, SCALE_SHARE, private_log_scales, private_metric,
                                       scaling_from_release, whitening_from_metric)
from pyro_dp.likelihood import PrivateLikelihood
from pyro_dp.mechanisms import GaussianEvent, NoiseSource
from pyro_dp.testing import check_kernel

pytestmark = pytest.mark.usefixtures("raw_values")  # checks the likelihood's values (conftest)


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


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
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


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
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
    assert evs[-2] == (GaussianEvent(t.scale_noise_multiplier), 1)
    assert 1 / t.scale_noise_multiplier ** 2 == pytest.approx(SCALE_SHARE * mu2)
    plain = DPAutoTune(num_steps=10)
    plain.configure(epsilon=2.0, delta=1e-5, num_chains=1)
    assert len(plain.events()) == 3  # unchanged without whiten


def _whitened_penalty():
    return pyro_dp.DPPenalty(logistic, epsilon=50.0, init=DPAutoTune(num_steps=10, whiten=True), inference="iterative")


def test_a_whitened_default_path_passes_the_kernel_contract():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = check_kernel(_whitened_penalty, data(), checks=["planned_equals_recorded", "copies", "per_row_rule"])
    assert "as planned" in report["planned_equals_recorded"]


def test_a_whitened_chain_runs_in_posterior_shaped_coordinates_and_reports_the_model_s():
    X, y = data(4000)
    k = pyro_dp.DPPenalty(logistic, epsilon=50.0, init=DPAutoTune(num_steps=30, whiten=True), seed=0, inference="iterative")
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
    k2 = pyro_dp.DPPenalty(logistic, epsilon=50.0, init=DPAutoTune(num_steps=30, whiten=True), seed=0, inference="iterative")
    k2.load_state_dict(state)
    k2.setup(0, X, y)
    torch.testing.assert_close(k2.lik.preconditioner[1], Lw)


def _spread_sentences(monkeypatch=None, factor=1.0):
    X, y = data(4000)
    if monkeypatch is not None:  # the mutant: a chain covering 1/factor of the spread the metric predicts
        from pyro_dp.default_path import tuning
        orig = tuning.metric_sd
        monkeypatch.setattr(tuning, "metric_sd", lambda lik, L: factor * orig(lik, L))
    k = pyro_dp.DPPenalty(logistic, epsilon=50.0, init=DPAutoTune(num_steps=30, whiten=True), seed=0, inference="iterative")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = MCMC(k, num_samples=300, warmup_steps=200, disable_progbar=True)
        mcmc.run(X, y)
    assert k.ledger.by_label()["tune:metric"] == 1
    problems = mcmc.diagnostics()["sampling problems"]["chain 0"]
    warned = [str(w.message) for w in caught if issubclass(w.category, pyro_dp.SamplingWarning)]
    return [p for p in problems if p.startswith("spread below")], [w for w in warned if "spread below" in w]


def test_a_whitened_chain_checks_its_spread_against_the_released_metric(monkeypatch):
    """The end-of-chain check compares each coordinate's sd with the posterior sd the released
    metric predicts (checks.MIN_SPREAD); a right chain passes, and the mutant whose spread is a
    third of the prediction fails it (and warns)."""
    assert _spread_sentences() == ([], [])
    problems, warned = _spread_sentences(monkeypatch, factor=3.0)
    assert problems and warned and "w[" in problems[0]


def test_the_default_paths_whiten_where_it_applies_and_plan_nothing_elsewhere():
    from pyro_dp.models.examples import normal_mean_model

    X, y = data(4000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = pyro_dp.DPPenalty(logistic, epsilon=20.0, num_iterations=20, inference="iterative")
        MCMC(k, num_samples=10, warmup_steps=10, disable_progbar=True).run(X, y)
        assert k.init.whiten and k.ledger.by_label()["tune:metric"] == 1 and k.ledger.by_label()["tune:scale"] == 1
        assert k.lik.preconditioner is not None  # the released matrix stands above its noise here
        one = pyro_dp.DPPenalty(normal_mean_model, epsilon=20.0, num_iterations=20, inference="iterative")  # one latent coordinate
        MCMC(one, num_samples=10, warmup_steps=10, disable_progbar=True).run(y)
        assert not one.init.whiten and not {"tune:metric", "tune:scale"} & set(one.ledger.by_label())
        assert len(one.init.events()) == 3  # nothing planned for it either
        hmc = pyro_dp.DPHMC(logistic, epsilon=20.0, num_iterations=20, inference="iterative")  # DPHMC's default whitens too (2026-11-27)
        MCMC(hmc, num_samples=10, warmup_steps=10, disable_progbar=True).run(X, y)
        assert hmc.init.whiten and hmc.init.scale and hmc.ledger.by_label()["tune:metric"] == 1
        assert hmc.ledger.by_label()["tune:scale"] == 1 and hmc.lik.preconditioner is not None
        scaled = pyro_dp.DPHMC(logistic, epsilon=20.0, num_iterations=20, init=DPAutoTune(scale=True), inference="iterative")
        MCMC(scaled, num_samples=10, warmup_steps=10, disable_progbar=True).run(X, y)
        # columns on one scale (the unit ball): the released sizes spread less than MIN_SCALE_SPREAD,
        # so without the metric the coordinates stay the model's own (post-processing)
        assert not scaled.init.whiten and scaled.lik.preconditioner is None


# ---- per-coordinate scales (unscaled covariates): private_log_scales, scaling_from_release
SCALES = torch.tensor([1.0, 30.0, 1000.0], dtype=torch.float64)


def _sums(grads, d=D):
    """The noise-free release (noise multiplier 0: the documented test mode) of these per-example
    gradient rows, as the one vector the Gaussian mechanism perturbs."""
    class _Lik:
        dim = d
    S, C, _ = private_log_scales(_Lik(), torch.zeros(d, dtype=torch.float64), 0.0, NoiseSource(seed=0, warn=False),
                                 rows=[grads])
    return torch.cat([S, LOG_SCALE_BOUND * C])


@pytest.mark.parametrize("mutant", [False, True], ids=["clamped", "mutant-unclamped"])
@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_one_rows_change_moves_the_log_scales_release_by_at_most_its_sensitivity(mutant, monkeypatch):
    """Substituting one row by an adversarial one (huge, tiny, zero, NaN, ±inf entries) moves the
    released vector by at most the stated substitute sensitivity 2A sqrt(2D) (private_log_scales'
    docstring). The mutant that neither clips the logs to [-A, A] nor the vector to its L2
    bound (either alone keeps the bound) breaks it."""
    if mutant:
        from pyro_dp.mechanisms import ClippedSum

        monkeypatch.setattr(whitening, "clip_and_sum", lambda v, clip: ClippedSum(v.sum(0), 0, v.shape[0]))

        def unclamped(g, a):
            g = whitening.finite_rows(g)
            nz = g != 0
            logs = torch.where(nz, torch.log(torch.where(nz, g.abs(), torch.ones_like(g))), torch.zeros_like(g))
            return torch.cat([logs, a * nz.to(g.dtype)], dim=-1)
        monkeypatch.setattr(whitening, "_log_magnitude_rows", unclamped)
    g = torch.randn(50, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * SCALES
    base = _sums(g)
    bound = 2 * LOG_SCALE_BOUND * math.sqrt(2 * D)
    worst = 0.0
    for row in ([1e300, 1e-300, 0.0], [float("nan"), 1.0, 1.0], [float("inf"), -float("inf"), 0.0], [0.0, 0.0, 0.0],
                [-1e200, 1e200, 1e-200]):
        g2 = g.clone()
        g2[7] = torch.tensor(row, dtype=torch.float64)
        diff = float(torch.linalg.vector_norm(_sums(g2) - base))
        assert math.isfinite(diff)
        worst = max(worst, diff)
    assert (worst > bound) if mutant else (worst <= bound)


def _logistic_columns(n=20000, seed=0, scales=SCALES):
    g = torch.Generator().manual_seed(seed)
    X, y = data(n, seed)
    X = X * scales
    y = torch.bernoulli(torch.sigmoid(X @ (torch.tensor([1.0, -0.5, 0.8], dtype=torch.float64) / scales)), generator=g)
    return X, y


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_the_scales_release_finds_the_columns_scales_without_reading_them():
    """At the data-free start w = 0 a logistic row's gradient is (y - 1/2) x: the released
    geometric magnitudes give coordinates whose gradients have one size, i.e. l_j * scale_j
    the same for every column (exact up to the columns' own spread)."""
    X, y = _logistic_columns()
    lik = PrivateLikelihood(logistic, (X, y), seed=0)
    z = torch.zeros(D, dtype=torch.float64)
    S, C, c_std = private_log_scales(lik, z, 0.0, NoiseSource(seed=0, warn=False), rows=[lik.per_example_grad(z)[1]])
    assert c_std == 0 and torch.equal(C, torch.full((D,), float(len(y)), dtype=torch.float64))
    l = scaling_from_release(S, C, c_std)
    ratio = l * SCALES
    assert float(ratio.max() / ratio.min()) < 1.2
    # in u, a row's gradient has about unit norm (the unit-ball setting the defaults are tuned for)
    norms = (lik.per_example_grad(z)[1] * l).norm(dim=1)
    assert 0.5 < float(norms.median()) < 2.0
    # a coordinate no row moves (or one under the noise) keeps its own scale
    assert torch.equal(scaling_from_release(S, torch.tensor([0.0, 5.0, 1e4], dtype=torch.float64), 2.0)[:2],
                       torch.ones(2, dtype=torch.float64))


@pytest.mark.parametrize("mutant", [False, True], ids=["scaled", "mutant-unscaled"])
def test_the_default_path_is_right_on_unscaled_covariates(mutant, monkeypatch):
    """#40: covariates on scales 1, 30 and 1 000 (N = 2·10⁴, ε = 8, the card's line with
    ``epsilon=`` only): every posterior mean within 1 reference sd of the Laplace reference (at
    this N within a few percent of the posterior). The mutant that skips the scales (the model's
    own coordinates before the metric, as before) is many sds off: one clip serves the largest
    column only. (Release noise seeded: ``noise_seed``, a test option.)"""
    if mutant:
        monkeypatch.setattr("pyro_dp.default_path.tuning.scaling_from_release",
                            lambda S, C, c_std, n=None: torch.ones_like(S))
    X, y = _logistic_columns()
    w = torch.zeros(D, dtype=torch.float64)

    def nlp(w):
        return -(dist.Bernoulli(logits=X @ w).log_prob(y).sum() + dist.Normal(0, 2.0).log_prob(w).sum())

    for _ in range(40):  # Newton: the MAP and the inverse Hessian (Laplace)
        H = torch.autograd.functional.hessian(nlp, w)
        w = w - torch.linalg.solve(H, torch.autograd.functional.jacobian(nlp, w))
    sd = torch.linalg.inv(torch.autograd.functional.hessian(nlp, w)).diagonal().sqrt()
    k = pyro_dp.DPPenalty(logistic, epsilon=8.0, seed=0, noise_seed=1, inference="iterative")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(k, num_samples=600, warmup_steps=300, disable_progbar=True)
        mcmc.run(X, y)
    err = float(((mcmc.get_samples()["w"].mean(0) - w).abs() / sd).max())
    assert (err > 3.0) if mutant else (err < 1.0)


def test_a_coordinate_few_rows_move_is_shrunk_towards_the_others_scale():
    """A sparse coordinate's mean log-magnitude carries noise A·σ_C/C_j (a group intercept
    moved by N/G rows): it is shrunk towards the precision-weighted mean of all coordinates,
    while precise ones keep their own; with k = ΣC/N coordinates per row, a row's gradient
    has about unit norm in u."""
    m = torch.tensor([0.0, math.log(100.0), 3.0], dtype=torch.float64) - 0.6352
    counts = torch.tensor([1e4, 1e4, 20.0], dtype=torch.float64)
    l = scaling_from_release(m * counts, counts, 5.0, num_rows=10000)  # k = 2.002 rows' coordinates
    k = float(counts.sum()) / 1e4
    assert float(l[0]) * math.sqrt(k) == pytest.approx(1.0, rel=1e-3)  # precise: its own
    assert float(l[1]) * math.sqrt(k) == pytest.approx(0.01, rel=1e-3)
    pooled = math.exp(-(math.log(100.0) / 2))  # the two precise coordinates' mean log-magnitude
    assert float(l[2]) * math.sqrt(k) == pytest.approx(pooled, rel=0.3)  # noisy (se 4): near the pooled
    assert float(l[2]) * math.sqrt(k) > 1.5 * math.exp(-3.0)  # not its own noisy value (0.05)
    # noise-free: every coordinate its own
    l0 = scaling_from_release(m * counts, counts, 0.0, num_rows=10000)
    assert float(l0[2]) * math.sqrt(k) == pytest.approx(math.exp(-3.0), rel=1e-3)


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_the_metric_of_the_likelihoods_coordinates_leaves_the_others_alone():
    """``coords``: the metric of the likelihood's coordinates only, and an L that is the identity
    elsewhere and still lower-triangular (ascending indices). The default path does not whiten
    such models (``whitening.whitens``, measured: no gain), a tuner may."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(3000, 2, generator=g, dtype=torch.float64)
    y = X @ torch.tensor([0.5, -0.3], dtype=torch.float64) + torch.randn(3000, generator=g, dtype=torch.float64)

    def model(X, y):
        tau = pyro.sample("tau", dist.Normal(torch.tensor(0.0, dtype=X.dtype), 1.0))  # prior only
        w = pyro.sample("w", dist.Normal(tau * torch.ones(2, dtype=X.dtype), 10.0).to_event(1))
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Normal(X @ w, 1.0), obs=y)

    lik = PrivateLikelihood(model, (X, y), seed=0)
    coords = whitening.likelihood_coordinates(lik)
    assert coords.tolist() == [1, 2] and whitening.reshapes(lik) and not whitening.whitens(lik)
    z = torch.tensor([0.0, 0.5, -0.3], dtype=torch.float64)
    m, s = private_metric(lik, z, 1e6, 0.0, NoiseSource(seed=0, warn=False), rows=[lik.per_example_grad(z)[1]],
                          coords=coords)
    assert m.shape == (2, 2)
    L, f = whitening_from_metric(lik, z, m, s, coords)
    assert L.shape == (3, 3) and torch.equal(L, torch.tril(L)) and L[0, 0] == 1 and (L[1:, 0] == 0).all()
    exact = torch.linalg.inv(X.T @ X + torch.eye(2, dtype=torch.float64) / 100)
    torch.testing.assert_close(L[1:, 1:] @ L[1:, 1:].T, exact, rtol=0.1, atol=0.1 * float(exact.diagonal().min()))
