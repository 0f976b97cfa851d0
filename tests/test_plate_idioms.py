"""#18 items 3-4: obs_mask names poutine.mask; nested plates state the privacy unit."""
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch

from pyro_dp import PrivateLikelihood

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
    def model(y):  # y: [groups, rows]
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 1.0))
        with pyro.plate("groups", y.shape[0], dim=-2), pyro.plate("rows", y.shape[1], dim=-1) as i:
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y[:, i])

    with pytest.warns(UserWarning, match=r"privacy unit .* plate 'rows' across all of \['groups'\]"):
        lik = PrivateLikelihood(model, (torch.zeros(3, 5, dtype=F64),), data_plate="rows", seed=0)
    assert lik.num_rows == 5 and lik.per_example_loglik(torch.zeros(1, dtype=F64)).shape == (5,)


def test_a_single_plate_does_not_warn(recwarn):
    def model(y):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 1.0))
        with pyro.plate("data", len(y)) as i:
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])

    PrivateLikelihood(model, (torch.zeros(4, dtype=F64),), seed=0)
    assert not [w for w in recwarn if "privacy unit" in str(w.message)]
