"""#18 items 3-4: obs_mask names poutine.mask; nested plates state the privacy unit."""
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch

from pyro_dp import PrivateLikelihood

pytestmark = pytest.mark.usefixtures("raw_values")  # checks the likelihood's values (conftest)


F64 = torch.float64


def test_obs_mask_error_names_poutine_mask():
    def model(y, mask):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 1.0))
        with pyro.plate("data", len(y)) as i:
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i], obs_mask=mask[i])

    y, mask = torch.zeros(6, dtype=F64), torch.tensor([True, False] * 3)
    with pytest.raises(ValueError, match="poutine.mask"):
        PrivateLikelihood(model, (y, mask), seed=0)


def test_poutine_mask_is_the_supported_way_for_missing_values():
    def model(y, mask):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 1.0))
        with pyro.plate("data", len(y)) as i, poutine.mask(mask=mask[i]):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])

    y, mask = torch.arange(6, dtype=F64), torch.tensor([True, False] * 3)
    ll = PrivateLikelihood(model, (y, mask), seed=0).per_example_loglik(torch.zeros(1, dtype=F64))
    assert ll[1] == 0 and ll[0] < 0  # masked rows contribute nothing


def test_nested_plates_state_the_privacy_unit():
    def model(y):  # y: [rows, groups]
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 1.0))
        with pyro.plate("rows", y.shape[0], dim=-2) as i, pyro.plate("groups", y.shape[1], dim=-1):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])

    with pytest.warns(UserWarning, match=r"privacy unit .* plate 'rows' across all of \['groups'\]"):
        lik = PrivateLikelihood(model, (torch.zeros(5, 3, dtype=F64),), data_plate="rows", seed=0)
    assert lik.num_rows == 5 and lik.per_example_loglik(torch.zeros(1, dtype=F64)).shape == (5,)


def test_data_with_the_rows_in_a_later_dimension_are_refused():
    """Since #38 each row's term is computed from its slice of every data argument, along the
    first dimension: data laid out [groups, rows] are refused with what to do."""
    def model(y):  # y: [groups, rows]
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 1.0))
        with pyro.plate("groups", y.shape[0], dim=-2), pyro.plate("rows", y.shape[1], dim=-1) as i:
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y[:, i])

    with pytest.raises(ValueError, match="N = 5 entries in a later dimension"):
        PrivateLikelihood(model, (torch.zeros(3, 5, dtype=F64),), data_plate="rows", seed=0)


def test_a_single_plate_does_not_warn(recwarn):
    def model(y):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 1.0))
        with pyro.plate("data", len(y)) as i:
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])

    PrivateLikelihood(model, (torch.zeros(4, dtype=F64),), seed=0)
    assert not [w for w in recwarn if "privacy unit" in str(w.message)]


# #18 item 3: SVI's subsampling idioms are accepted; the kernel, not Pyro, chooses the rows.
def _plain(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 3.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])


def _svi_plate(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 3.0))
    with pyro.plate("data", len(y), subsample_size=10) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])


def _pyro_subsample(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 3.0))
    with pyro.plate("data", len(y), subsample_size=10):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=pyro.subsample(y, event_dim=0))


@pytest.mark.parametrize("model", [_svi_plate, _pyro_subsample], ids=["subsample_size", "pyro.subsample"])
def test_subsampling_idioms_evaluate_the_rows_the_kernel_chooses(model):
    y = torch.randn(50, dtype=F64, generator=torch.Generator().manual_seed(0))
    ref, lik = PrivateLikelihood(_plain, (y,), seed=0), PrivateLikelihood(model, (y,), seed=0)
    assert lik.num_rows == 50 and lik.declared_subsample_size == 10 and lik.row_access == "isolated"
    z, idx = torch.tensor([0.3], dtype=F64), torch.tensor([1, 4, 7, 30])
    assert torch.equal(lik.per_example_loglik(z), ref.per_example_loglik(z))  # all 50 rows, unscaled
    for u, v in zip(lik.per_example_grad(z, idx), ref.per_example_grad(z, idx)):
        assert torch.equal(u, v)
    # Pyro's plate is left as it was: outside pyro_dp it subsamples as declared
    assert pyro.poutine.trace(model).get_trace(y).nodes["obs"]["value"].shape == (10,)


def test_subsampling_idiom_runs_in_mcmc_with_a_minibatch_kernel():
    import pyro_dp
    from pyro.infer import MCMC

    y = torch.randn(200, dtype=F64, generator=torch.Generator().manual_seed(1))
    k = pyro_dp.DPSGLD(_svi_plate, 20, 1e-3, 1.0, noise_multiplier=1.0, seed=0)
    mcmc = MCMC(k, num_samples=30, warmup_steps=10, disable_progbar=True)
    with pytest.warns(UserWarning, match="batch_size=20 is used"):  # not the plate's 10: said (#40)
        mcmc.run(y)
    assert mcmc.get_samples()["mu"].shape == (30,) and len(k.ledger.entries) >= 1
