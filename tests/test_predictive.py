"""Issue 61, item 4: posterior predictive draws that never echo the observed data, with the
README's model as written (``y=None`` included)."""
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Predictive

import pyro_dp
from pyro_dp.models.examples import logistic_model, make_logistic_data, normal_mean_model


def readme_model(X, y):  # the README's quick start model, verbatim
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype, device=X.device), 2.0).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def _samples(w, num):
    return {"w": w.expand(num, -1).clone()}


def test_readme_model_with_none_and_with_the_data_never_returns_the_data():
    X, y, w_true = make_logistic_data(300)
    pyro.set_rng_seed(0)
    samples = _samples(w_true, 50)
    with pytest.raises(TypeError, match="not subscriptable"):  # the trap the issue met, in Pyro itself
        Predictive(readme_model, samples)(X, None)
    echoed = Predictive(readme_model, samples)(X, y)["y"]
    assert all(torch.equal(d, y) for d in echoed)  # ... and the other: Pyro returns the raw y in every draw
    for outcome in (None, y):
        draws = pyro_dp.posterior_predictive(readme_model, samples, X, outcome)
        assert list(draws) == ["y"] and draws["y"].shape == (50, 300)
        assert set(draws["y"].unique().tolist()) <= {0.0, 1.0}
        assert not any(torch.equal(d, y) for d in draws["y"])


def test_draws_follow_the_posterior_samples():
    """Every draw is y ~ Bernoulli(sigmoid(X w)) at its sample: the mean of 4 000 draws per row is
    within 5 standard errors of sigmoid(X w) (fixed seed)."""
    X, y, w_true = make_logistic_data(40)
    pyro.set_rng_seed(1)
    draws = pyro_dp.posterior_predictive(logistic_model, _samples(w_true, 4000), X, None)["y"]
    p = torch.sigmoid(X @ w_true)
    se = (p * (1 - p) / 4000).sqrt()
    assert bool(((draws.mean(0) - p).abs() <= 5 * se).all())


def test_continuous_outcome_is_never_echoed_and_a_model_reading_more_than_an_index_says_what_to_pass():
    y = torch.randn(100, dtype=torch.float64)
    samples = {"mu": torch.linspace(-1, 1, 30, dtype=torch.float64)}
    draws = pyro_dp.posterior_predictive(normal_mean_model, samples, y)["obs"]
    assert draws.shape == (30, 100) and not bool((draws == y).any())
    draws = pyro_dp.posterior_predictive(normal_mean_model, samples, torch.zeros(100, dtype=torch.float64))["obs"]
    assert not bool((draws == 0).any())  # a placeholder's values are never returned either
    with pytest.raises(TypeError, match=r"^the model reads 'dtype' of the positional argument 0, passed as None"):
        pyro_dp.posterior_predictive(normal_mean_model, samples, None)


def test_refuses_samples_that_hold_an_observed_site_and_empty_samples():
    X, y, w_true = make_logistic_data(20)
    with pytest.raises(ValueError, match=r"^samples holds \['y'\], observed site"):
        pyro_dp.posterior_predictive(logistic_model, {**_samples(w_true, 3), "y": y.expand(3, -1)}, X, y)
    with pytest.raises(ValueError, match="^samples must be a non-empty dict"):
        pyro_dp.posterior_predictive(logistic_model, {}, X, None)
