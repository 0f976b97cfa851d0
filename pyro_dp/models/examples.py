r"""Small example models shared by the docstrings, the demo and the benchmark problems (no
pyro_dp imports: every layer may use them).

>>> sorted(__all__)
['logistic_model', 'make_logistic_data', 'normal_mean_model']
"""
from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import torch

__all__ = ["normal_mean_model", "logistic_model", "make_logistic_data"]


def normal_mean_model(y, prior_scale: float = 10.0):
    r"""The running example of the kernels' docstrings: :math:`y_i \sim \mathcal N(\mu, 1)`,
    :math:`\mu \sim \mathcal N(0, \mathrm{prior\_scale}^2)`, with the data plate indexed by its
    indices (so minibatch kernels can read row subsets).

    >>> import torch
    >>> lik = __import__("pyro_dp").PrivateLikelihood(normal_mean_model, (torch.zeros(3),), seed=0)
    >>> lik.latent_names, lik.indexable
    (('mu',), True)
    """
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype, device=y.device), prior_scale))
    with pyro.plate("data", len(y)) as idx:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[idx])


def logistic_model(X, y):
    """Bayesian logistic regression, ``w ~ N(0, 2^2 I)``; rows indexed by the data plate."""
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype, device=X.device), 2.0).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def make_logistic_data(n: int, seed: int = 0, dtype=torch.float64, device=None):
    """Synthetic logistic-regression data with ``‖x_i‖ ≤ 1`` (intercept column included).

    >>> X, y, w = make_logistic_data(100)
    >>> X.shape, bool((X.norm(dim=1) <= 1 + 1e-12).all())
    (torch.Size([100, 3]), True)
    """
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, 2, generator=g, dtype=dtype) * 2 - 1
    X = torch.cat([torch.ones(n, 1, dtype=dtype), u], dim=1) / math.sqrt(3.0)
    w_true = torch.tensor([-1.0, 3.0, -2.0], dtype=dtype)
    y = (torch.rand(n, generator=g, dtype=dtype) < torch.sigmoid(X @ w_true)).to(dtype)
    return X.to(device), y.to(device), w_true
