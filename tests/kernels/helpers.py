"""Shared targets for kernel tests: a conjugate Gaussian with a closed-form posterior.

Model: y_i ~ N(mu, s^2) (s known), mu ~ N(m0, s0^2); posterior N(m_n, v_n) with
v_n = 1 / (1/s0^2 + N/s^2), m_n = v_n (m0/s0^2 + sum(y)/s^2) (Gelman et al., BDA3 §2.5).
Data are bounded (|y| <= 3), so |l_i(mu') - l_i(mu)| = |mu'-mu| |y_i - (mu+mu')/2| / s^2
stays below llr_clip |mu'-mu| wherever the chain goes in practice: clipping does not bind.
"""
import math

import pyro
import pytest
import pyro.distributions as dist
import torch

S, M0, S0 = 1.0, 0.0, 3.0


def gauss_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(M0, dtype=y.dtype, device=y.device), S0))
    with pyro.plate("data", y.shape[0]) as idx:
        pyro.sample("obs", dist.Normal(mu, S), obs=y[idx])


def gauss_model_2d(y):
    """Two independent coordinates (for OCU/GWMH): y_i in R^2, mu ~ N(0, S0^2 I)."""
    mu = pyro.sample("mu", dist.Normal(torch.zeros(2, dtype=y.dtype, device=y.device), S0).to_event(1))
    with pyro.plate("data", y.shape[0]) as idx:
        pyro.sample("obs", dist.Normal(mu, S).to_event(1), obs=y[idx])


class ClippedGradSum:
    """Mixin for closed-form stand-ins of PrivateLikelihood: ``clipped_grad_sum`` from their
    ``per_example_grad``, and ``clipped_difference_sum``, by :func:`pyro_dp.mechanisms.clip_and_sum`
    (as the eager path); ``jump_norm`` and ``project`` are PrivateLikelihood's own, with every
    coordinate in the likelihood (``likelihood_mask = None``)."""

    likelihood_mask = None

    def jump_norm(self, z_new, z):
        from pyro_dp.likelihood import PrivateLikelihood

        return PrivateLikelihood.jump_norm(self, z_new, z)

    def project(self, released):
        from pyro_dp.likelihood import PrivateLikelihood

        return PrivateLikelihood.project(self, released)

    def clipped_grad_sum(self, z, clip, idx=None):
        from pyro_dp.mechanisms import clip_and_sum

        ll, g = self.per_example_grad(z) if idx is None else self.per_example_grad(z, idx)
        return ll, clip_and_sum(g, clip)

    def clipped_difference_sum(self, ll_new, ll_old, clip):
        from pyro_dp.mechanisms import clip_and_sum

        return clip_and_sum(ll_new - ll_old, clip)


def posterior(y):
    """(mean, variance) per coordinate of the conjugate posterior."""
    n = y.shape[0]
    v = 1.0 / (1.0 / S0**2 + n / S**2)
    m = v * (M0 / S0**2 + y.sum(0) / S**2)
    return m, v


def make_data(n, d=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (n,) if d is None else (n, d)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 0.8 + 0.7).clamp(-3, 3)


def mean_var_within_mcse(x, mean, var, n_sd=4.0):
    """iid draws x [K, ...]: sample mean and variance vs truth, tolerance n_sd MC standard errors.

    MCSE of the mean: sqrt(var/K); of the sample variance of Gaussian draws: var*sqrt(2/(K-1)).
    """
    k = x.shape[0]
    m_hat, v_hat = x.mean(0), x.var(0)
    ok_m = bool(((m_hat - mean).abs() <= n_sd * torch.sqrt(torch.as_tensor(var) / k)).all())
    ok_v = bool(((v_hat - var).abs() <= n_sd * var * math.sqrt(2.0 / (k - 1))).all())
    return ok_m and ok_v, (m_hat, v_hat)



def broken_penalty_accept(rng, lambda_hat, noise_var):
    """Deliberately wrong: the penalty -sigma^2/2 is dropped (the statistical tests must fail)."""
    from pyro_dp.kernels.proposals import uniform_log

    return bool(uniform_log(rng, lambda_hat) < torch.clamp(lambda_hat, max=0.0))


def broken_penalty_log_accept_threshold(lambda_hat, noise_var):
    """:func:`broken_penalty_accept`'s threshold, for a step written as one tensor function."""
    return torch.clamp(lambda_hat, max=0.0)


def maybe_broken_fixture(module, broken_id="broken"):
    """A fixture run twice: with the module's ``penalty_accept`` as it is, and replaced by
    :func:`broken_penalty_accept` — a statistical test must pass the first and fail the second.
    A module whose step is one tensor function (issue 39: DP penalty) has no ``penalty_accept``:
    its ``penalty_log_accept_threshold`` is replaced by the broken one instead."""

    @pytest.fixture(params=[False, True], ids=["correct", broken_id])
    def maybe_broken(request, monkeypatch):
        if request.param:
            if hasattr(module, "penalty_accept"):
                monkeypatch.setattr(module, "penalty_accept", broken_penalty_accept)
            else:
                monkeypatch.setattr(module, "penalty_log_accept_threshold", broken_penalty_log_accept_threshold)
        return request.param

    return maybe_broken
