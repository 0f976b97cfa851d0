"""The prior reads no data (``PrivateLikelihood.prior_data_reads``): the kernels evaluate the
prior's density and gradient without noise in every step and draw the start from it, so a model
whose prior reads a data argument (a tensor with a dimension of N entries) is refused at set-up,
before anything is released. The check is data-free: it traces the prior terms on fake tensors,
or, for a model that cannot be traced, evaluates them on two stand-in data sets."""
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.likelihood import PrivateLikelihood

from .refusals import assert_kernels_refuse_before_any_release

N = 40


def y_data(seed=0):
    return torch.randn(N, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 1.0


def centred_on_mean(y):
    mu = pyro.sample("mu", dist.Normal(y.mean(), 5.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])


def scale_from_std(y):
    s = pyro.sample("s", dist.HalfNormal(y.std()))
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(0.0, s), obs=y)


def support_from_range(y):
    mu = pyro.sample("mu", dist.Uniform(y.min(), y.max()))
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


def covariate_in_prior(y, X=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=y.dtype), 1.0).to_event(1))
    b = pyro.sample("b", dist.Normal(X[:, 0].mean(), 1.0))  # a covariate, passed by keyword
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(X @ w + b, 1.0), obs=y)


def public_hyperparameters(y, loc, scale=2.0):
    """A tensor of hyperparameters without an N-sized dimension, and the data's shape: public."""
    mu = pyro.sample("mu", dist.Normal(loc, scale * len(y) / N))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


def branches_on_a_latent(y, read_data=False):
    """Python control flow on a latent value: cannot be traced on fake tensors."""
    mu = pyro.sample("mu", dist.Normal(y.mean() if read_data else 0.0, 5.0))
    loc = mu if float(mu) > -1e9 else -mu
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(loc, 1.0), obs=y)


@pytest.mark.parametrize("model, site", [(centred_on_mean, "mu"), (scale_from_std, "s"), (support_from_range, "mu")])
def test_a_prior_that_reads_the_data_is_refused(model, site):
    with pytest.raises(ValueError, match=f"the prior of latent site '{site}' reads the data \\(model argument 0"):
        PrivateLikelihood(model, (y_data(),), seed=0)


def test_the_argument_is_named_and_a_kernel_refuses_before_any_release():
    X = torch.randn(N, 2, dtype=torch.float64)
    assert_kernels_refuse_before_any_release(covariate_in_prior, "site 'b' reads the data \\(model argument 'X'",
                                             y_data(), X=X)


def test_public_hyperparameters_and_the_data_shape_are_allowed():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # neither refused nor warned about
        lik = PrivateLikelihood(public_hyperparameters, (y_data(), torch.tensor(3.0, dtype=torch.float64)), seed=0)
    assert lik.prior_data_reads() == {}


@pytest.mark.parametrize("model", [centred_on_mean, public_hyperparameters])
def test_the_check_reads_no_data_value(model):
    """The answer is the same on any data, adversarial rows included: the trace sees shapes."""
    args = (torch.tensor(3.0, dtype=torch.float64),) if model is public_hyperparameters else ()
    answers = []
    for y in (y_data(0), y_data(1) * 1e6, torch.full((N,), float("nan"), dtype=torch.float64),
              torch.tensor([float("inf")] * (N // 2) + [-1e300] * (N // 2), dtype=torch.float64)):
        try:
            PrivateLikelihood(model, (y, *args), seed=0)
            answers.append("allowed")
        except ValueError as e:
            answers.append(str(e))
    assert len(set(answers)) == 1


def test_an_untraceable_model_is_probed_with_stand_in_data():
    with pytest.warns(UserWarning, match="two stand-in data sets.*not a proof"):
        PrivateLikelihood(branches_on_a_latent, (y_data(),), seed=0)
    with pytest.raises(ValueError, match="the prior of latent site 'mu' reads the data"):
        PrivateLikelihood(branches_on_a_latent, (y_data(),), {"read_data": True}, seed=0)


def test_the_check_runs_once_per_kernel_object(monkeypatch):
    calls = []
    original = PrivateLikelihood.prior_data_reads
    monkeypatch.setattr(PrivateLikelihood, "prior_data_reads", lambda self: calls.append(1) or original(self))
    y = y_data()
    kernel = pyro_dp.DPPenalty(public_hyperparameters, proposal_scale=0.1, llr_clip=1.0, noise_multiplier=1.0, seed=0)
    for _ in range(2):
        MCMC(kernel, num_samples=3, warmup_steps=0, disable_progbar=True).run(y, torch.tensor(0.0, dtype=y.dtype))
    assert len(calls) == 1


def test_data_outside_the_arguments_are_refused():
    y = y_data()

    def model():
        mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
        with pyro.plate("data", N):
            pyro.sample("obs", dist.Normal(mu, 1.0))

    conditioned = pyro.condition(model, data={"obs": y})
    # since #38, data that are not arguments are refused: a row could not be evaluated alone; since
    # #58 before any evaluation, naming where they are (pyro.condition's data, held by the model)
    with pytest.raises(ValueError, match=r"can reach data that is not one of its arguments: .*\.data\['obs'\]"):
        PrivateLikelihood(conditioned, (), seed=0)
