"""One row, one term (``PrivateLikelihood.rows_read_across``): every release clips each row's own
log-likelihood term, which bounds one person's effect only when no other row's term moves with
that person's data. A model that centres or standardises its data inside, or chains rows (a time
series), is refused at set-up, before anything is released. The check runs on stand-in data
(zeros with one row set to ones), never on the data."""
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.likelihood import PrivateLikelihood

from .refusals import assert_kernels_refuse_before_any_release

N = 30


def ys(seed=0):
    return torch.randn(N, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 1.0


def _mu(y):
    return pyro.sample("mu", dist.Normal(torch.zeros((), dtype=y.dtype), 5.0))


def centred(y):
    mu = _mu(y)
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y - y.mean())


def standardised(y):
    mu = _mu(y)
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=((y - y.mean()) / y.std())[i])


def ar1(y):
    mu = _mu(y)
    previous = torch.cat([y.new_zeros(1), y[:-1]])  # row t reads row t - 1
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(mu + 0.5 * previous, 1.0), obs=y)


def reads_the_next_row(y):
    mu = _mu(y)
    following = torch.cat([y[1:], y.new_zeros(1)])  # row t reads row t + 1: seen by changing the last row
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(mu + 0.5 * following, 1.0), obs=y)


def normalised_covariate(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=y.dtype), 1.0).to_event(1))
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal((X / X.norm(dim=0)) @ w, 1.0), obs=y)


def row_wise(X, group, trials, y, k):
    """Per-row terms only: indexed covariates, group ids, per-row trial counts."""
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=y.dtype), 1.0).to_event(1))
    with pyro.plate("groups", 3):
        u = pyro.sample("u", dist.Normal(torch.zeros((), dtype=y.dtype), 1.0))
    p = pyro.sample("p", dist.Beta(2.0, 2.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(X[i] @ w + u[group[i]], 1.0), obs=y[i])
        pyro.sample("k", dist.Binomial(trials[i], p), obs=k[i])


def with_n(y, n):
    """The row count passed as an int: the stand-in gets its own."""
    mu = _mu(y)
    with pyro.plate("data", n) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i] - y.mean())


def row_wise_data(seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, 2, generator=g, dtype=torch.float64)
    trials = torch.randint(1, 10, (N,), generator=g).double()
    return X, torch.arange(N) % 3, trials, ys(seed), torch.floor(trials / 2)


@pytest.mark.parametrize("model", [centred, standardised, ar1, reads_the_next_row])
def test_a_row_that_reads_other_rows_is_refused(model):
    with pytest.raises(ValueError, match="depends on other rows' data: on stand-in data"):
        PrivateLikelihood(model, (ys(),), seed=0)


def test_a_covariate_normalised_inside_the_model_is_refused_and_the_kernel_releases_nothing():
    X = torch.randn(N, 2, dtype=torch.float64)
    assert_kernels_refuse_before_any_release(normalised_covariate, "depends on other rows' data", X, ys())


def test_row_wise_models_pass():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        lik = PrivateLikelihood(row_wise, row_wise_data(), seed=0)
    assert lik.rows_read_across() == ()


def test_the_row_count_passed_as_an_int_is_replaced_in_the_stand_in():
    with pytest.raises(ValueError, match="depends on other rows' data"):
        PrivateLikelihood(with_n, (ys(), N), seed=0)


def test_a_model_that_branches_on_its_data_is_refused():
    """Since #38 a Python branch on a data value is refused (it would make control flow depend
    on the data); before, such a model ran unchecked after a warning."""
    def needs_positive_rows(y):
        mu = _mu(y)
        if bool((y == 0).any()):
            raise RuntimeError("zero rows")
        with pyro.plate("data", len(y)):
            pyro.sample("obs", dist.Normal(mu, 1.0), obs=y - y.mean())

    with pytest.raises(ValueError, match="needs a Python value of its data"):
        PrivateLikelihood(needs_positive_rows, (ys(),), seed=0)


def test_a_model_whose_joint_evaluation_fails_on_the_stand_in_says_so():
    """The per-row evaluation works, the joint one fails on stand-in data: the comparison
    cannot be made, and set-up says so (privacy holds: each term is computed from its row)."""
    def joint_fails(y):
        mu = _mu(y)
        with pyro.plate("data", len(y)):
            if len(y) == 16:  # the joint stand-in's size (a branch on a shape: public)
                raise RuntimeError("not on 16 rows")
            pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)

    with pytest.warns(UserWarning, match="could not compare the model's terms"):
        lik = PrivateLikelihood(joint_fails, (ys(),), seed=0)
    assert lik.rows_read_across() is None


@pytest.mark.parametrize("model", [centred, ar1])
def test_the_check_reads_no_data_value(model):
    answers = set()
    for y in (ys(0), ys(1) * 1e8, torch.full((N,), float("nan"), dtype=torch.float64),
              torch.tensor([float("inf"), -float("inf")] * (N // 2), dtype=torch.float64)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                PrivateLikelihood(model, (y,), seed=0)
                answers.add("allowed")
            except ValueError as e:
                answers.add(str(e))
    assert len(answers) == 1 and "allowed" not in answers


def test_the_stand_in_holds_no_data_value():
    """Every value the checks evaluate the model on is a stand-in's, marked by ``on_stand_in()``;
    the data (7.5 everywhere) are never among them (values under vmap are unwrapped to be read)."""
    from torch._subclasses.fake_tensor import is_fake

    from pyro_dp.likelihood import on_stand_in

    seen = []

    class Recording(dist.Normal):
        def log_prob(self, value):
            v = value
            while torch._C._functorch.is_batchedtensor(v):
                v = torch._C._functorch.get_unwrapped(v)
            if not is_fake(v):
                seen.append((on_stand_in(), set(v.reshape(-1).tolist())))
            return super().log_prob(value)

    def model(y):
        mu = _mu(y)
        with pyro.plate("data", len(y)) as i:
            pyro.sample("obs", Recording(mu, 1.0), obs=y[i])

    PrivateLikelihood(model, (torch.full((N,), 7.5, dtype=torch.float64),), seed=0)
    assert seen and all(flag and 7.5 not in values for flag, values in seen)


def test_a_kernel_checks_again_when_a_non_tensor_argument_changes():
    """The checks are cached per kernel object, keyed by every argument: a flag that switches
    the model to centring its data is checked anew, not covered by the first run's answer."""
    def model(y, centre=False):
        mu = _mu(y)
        with pyro.plate("data", len(y)):
            pyro.sample("obs", dist.Normal(mu, 1.0), obs=y - y.mean() if centre else y)

    kernel = pyro_dp.DPPenalty(model, proposal_scale=0.1, llr_clip=1.0, noise_multiplier=1.0, seed=0)
    MCMC(kernel, num_samples=2, warmup_steps=0, disable_progbar=True).run(ys())
    with pytest.raises(ValueError, match="depends on other rows' data"):
        MCMC(kernel, num_samples=2, warmup_steps=0, disable_progbar=True).run(ys(), centre=True)
