"""PrivateLikelihood: plate discovery, per-example terms and gradients, bad inputs."""
import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyro_dp.likelihood import PrivateLikelihood
from pyro_dp.private import Private, reveal


def raw(x):
    """The likelihood's private values (pyro_dp.private), read by a test."""
    return reveal(x, reason="a test reads the likelihood's values")


def gauss_model(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    s = pyro.sample("s", dist.HalfNormal(2.0))
    with pyro.plate("data", len(y)) as idx:
        pyro.sample("obs", dist.Normal(mu, s), obs=y[idx])


def gauss_model_unindexed(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    s = pyro.sample("s", dist.HalfNormal(2.0))
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(mu, s), obs=y)


def logistic_model(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype), 1.0).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


@pytest.fixture
def y64():
    return torch.randn(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_plate_discovery_and_layout(y64):
    lik = PrivateLikelihood(gauss_model, (y64,), seed=0)
    assert lik.data_plate == "data" and lik.num_rows == 50
    assert lik.latent_names == ("mu", "s") and lik.dim == 2
    assert lik.dtype == torch.float64
    z = torch.tensor([0.3, -0.1], dtype=torch.float64)
    params = lik.unravel(z)
    assert torch.equal(lik.flatten(params), z)
    c = lik.constrain(z)
    assert torch.allclose(c["s"], torch.exp(torch.tensor(-0.1, dtype=torch.float64)))


def test_loglik_matches_closed_form(y64):
    lik = PrivateLikelihood(gauss_model, (y64,), seed=0)
    z = torch.tensor([0.3, 0.2], dtype=torch.float64)
    s = torch.exp(torch.tensor(0.2, dtype=torch.float64))
    expected = dist.Normal(0.3, s).log_prob(y64)
    assert isinstance(lik.per_example_loglik(z), Private)  # issue 58: per-row terms leave private
    assert torch.allclose(raw(lik.per_example_loglik(z)), expected)
    # prior + log-Jacobian of s = exp(u): log HalfNormal(s) + u
    lp = dist.Normal(0.0, 10.0).log_prob(torch.tensor(0.3)) + dist.HalfNormal(2.0).log_prob(s) + 0.2
    assert torch.allclose(lik.log_prior(z), lp.double())
    idx = torch.tensor([3, 7])
    assert torch.allclose(raw(lik.per_example_loglik(z, idx)), expected[idx])


def gauss_model_fixed_size(y, n):
    """The plate's size is an argument, not the data's length: neither indexing nor slicing
    the data gives a model of fewer rows."""
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    s = pyro.sample("s", dist.HalfNormal(2.0))
    with pyro.plate("data", n):
        pyro.sample("obs", dist.Normal(mu, s), obs=y)


def test_usual_idiom_is_evaluated_by_slicing_its_arguments(y64):
    """#17: `pyro.plate("data", len(y))` with `obs=y` (no indexing) gets row subsets and the
    per-row gradient path by slicing the row-aligned arguments; same values as indexing."""
    a = PrivateLikelihood(gauss_model, (y64,), seed=0)
    b = PrivateLikelihood(gauss_model_unindexed, (y64,), seed=0)
    assert (a.row_access, b.row_access) == ("isolated", "isolated") and b.indexable
    z = torch.tensor([0.3, 0.2], dtype=torch.float64)
    for idx in (None, torch.tensor([4, 0, 9])):
        for f in ("loglik_and_prior", "per_example_grad"):
            for u, v in zip(raw(getattr(a, f)(z, idx)), raw(getattr(b, f)(z, idx))):
                assert torch.equal(u, v)


def test_per_example_grad_matches_autograd_and_fallback(y64):
    """A plate sized by an int argument equal to N: each row is evaluated with it set to 1
    (pyro_dp.arguments), so this model gets the same per-row path and values as the indexed one."""
    lik = PrivateLikelihood(gauss_model, (y64,), seed=0)
    lik2 = PrivateLikelihood(gauss_model_fixed_size, (y64, len(y64)), seed=0)
    assert lik2.arguments.describe()["row count"] == ["argument 1"]
    z = torch.tensor([0.3, 0.2], dtype=torch.float64)
    ll, g = raw(lik.per_example_grad(z))
    ll2, g2 = raw(lik2.per_example_grad(z))
    assert torch.allclose(ll, ll2) and torch.allclose(g, g2)
    for i in (0, 17):
        zz = z.clone().requires_grad_()
        s = torch.exp(zz[1])
        dist.Normal(zz[0], s).log_prob(y64[i]).backward()
        assert torch.allclose(g[i], zz.grad)
    assert torch.allclose(raw(lik2.per_example_loglik(z, torch.tensor([17]))), ll[17:18])


def test_float32_logistic_subset():
    X = torch.rand(200, 3) - 0.5
    y = (torch.rand(200) < 0.5).float()
    lik = PrivateLikelihood(logistic_model, (X, y), seed=0)
    assert lik.dtype == torch.float32 and lik.dim == 3
    z = torch.tensor([0.5, -1.0, 2.0])
    ll, g = raw(lik.per_example_grad(z, torch.arange(10, 20)))
    assert ll.shape == (10,) and g.shape == (10, 3) and g.dtype == torch.float32
    # d/dw log sigmoid((2y-1) x.w) = (y - sigmoid(x.w)) x
    expected = (y[10:20] - torch.sigmoid(X[10:20] @ z)).unsqueeze(-1) * X[10:20]
    assert torch.allclose(g, expected, atol=1e-6)


def test_setup_is_data_free_and_reproducible(y64):
    calls = []

    def spy(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(y)) as idx:
            d = dist.Normal(mu, 1.0)
            pyro.sample("obs", d, obs=y[idx])

    state = torch.get_rng_state()
    a = PrivateLikelihood(spy, (y64,), seed=3).prototype_params["mu"]
    b = PrivateLikelihood(spy, (y64,), seed=3).prototype_params["mu"]
    assert torch.equal(a, b)
    assert torch.equal(state, torch.get_rng_state()), "global RNG must be left untouched"
    assert not calls


def two_plates(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("a", len(y), dim=-1):
        with pyro.plate("b", 1, dim=-2):
            pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


def outside(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    pyro.sample("extra", dist.Normal(mu, 1.0), obs=torch.tensor(0.0))
    with pyro.plate("data", len(y)) as idx:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[idx])


def no_plate(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    pyro.sample("obs", dist.Normal(mu, 1.0).expand([len(y)]).to_event(1), obs=y)


def no_obs(y):
    pyro.sample("mu", dist.Normal(0.0, 1.0))


def discrete(y):
    k = pyro.sample("k", dist.Bernoulli(0.5))
    with pyro.plate("data", len(y)) as idx:
        pyro.sample("obs", dist.Normal(k, 1.0), obs=y[idx])


def local_latent(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y)) as idx:
        z = pyro.sample("z", dist.Normal(mu, 1.0))
        pyro.sample("obs", dist.Normal(z, 1.0), obs=y[idx])


def wrong_size(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y) + 5):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


def scaled(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y)) as idx, pyro.poutine.scale(scale=0.5):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[idx])


@pytest.mark.parametrize(
    "model, exc, match",
    [
        (no_obs, ValueError, "no observed"),
        (outside, ValueError, "'extra'"),
        (no_plate, ValueError, "not inside any pyro.plate"),
        (two_plates, ValueError, "more than one plate"),
        (discrete, TypeError, "discrete"),
        (local_latent, ValueError, "local"),
        (wrong_size, ValueError, "does not match plate"),
        (scaled, ValueError, "temperature"),
    ],
)
def test_bad_models(model, exc, match, y64):
    with pytest.raises(exc, match=match), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PrivateLikelihood(model, (y64,), seed=0)


def test_explicit_plate_and_nonfinite_data_raise_nothing(y64):
    lik = PrivateLikelihood(two_plates, (y64,), data_plate="a", seed=0)
    assert lik.num_rows == 50
    with pytest.raises(ValueError, match="not a plate"):
        PrivateLikelihood(gauss_model, (y64,), data_plate="nope", seed=0)
    bad = y64.clone()
    bad[4] = float("nan")  # no exception that depends on one row (docs/privacy.md, "One per-row rule")
    ll = raw(PrivateLikelihood(gauss_model, (bad,), seed=0).per_example_loglik(torch.zeros(2, dtype=y64.dtype)))
    assert math.isnan(ll[4]) and bool(torch.isfinite(ll[:4]).all())
    with pytest.raises(ValueError, match="temperature"):
        PrivateLikelihood(gauss_model, (y64,), temperature=0.0)


def test_forward_mode_gradients_keep_a_float32_models_dtype():
    """A model whose plate is not sized by its data gets its per-example gradients from forward
    mode (``jacfwd``). For a float32 model with a positive scalar latent torch returned them as
    float64 (the derivative of Pyro's ``AffineTransform(0., 1)`` at a 0-d float32 point), and a
    DP-HMC chain's state then turned float64. They are now in the latent's dtype, eager and
    compiled, and equal to the float64 gradients to float32 precision."""
    import pyro_dp
    from pyro.infer.autoguide.initialization import init_to_median

    def model(y, n):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 5.0))
        s = pyro.sample("s", dist.HalfNormal(torch.tensor(3.0, dtype=y.dtype)))
        with pyro.plate("data", n):
            pyro.sample("obs", dist.Normal(mu, s), obs=y)

    y = 1 + 2 * torch.randn(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = torch.tensor([0.5, 0.3], dtype=torch.float64)
    want = raw(PrivateLikelihood(model, (y, 50), seed=0).per_example_grad(z)[1])
    for extra in ({}, dict(jit_compile=True, jit_options={"backend": "graph"})):
        lik = PrivateLikelihood(model, (y.float(), 50), seed=0, **extra)
        g = raw(lik.per_example_grad(z.float())[1])
        assert g.dtype == torch.float32
        torch.testing.assert_close(g.double(), want, rtol=1e-5, atol=1e-5)
        k = pyro_dp.DPHMC(model, 0.01, 3, 2.0, 2.0, 3.0, 2.0, seed=1, init_strategy=init_to_median, **extra)
        k.setup(0, y.float(), 50)
        p = k.initial_params
        for _ in range(5):
            p = k.sample(p)
        assert k._state.z.dtype == torch.float32 and all(v.dtype == torch.float32 for v in p.values())
