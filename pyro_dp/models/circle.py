r"""Circle model (Räisä 2021 thesis §5.3) and an exact sampler for its posterior.

.. math::
    \ln p(r_j \mid x, y) = -a\,(x^2 + y^2 - r_j^2)^2, \qquad p(x, y) \propto 1.

The thesis evaluates it by the distance of the sample mean from the origin because "obtaining
samples from the true posterior ... is not as easy". It is easy in polar coordinates: with
:math:`u = x^2 + y^2`, :math:`\sum_j (u - r_j^2)^2 = n(u - \overline{r^2})^2 + \text{const}`
and :math:`dx\,dy = \tfrac12 du\,d\phi`, so the (tempered) posterior is
:math:`\phi \sim U(0, 2\pi)` independent of
:math:`u \sim \mathcal N(\overline{r^2}, 1/(2aTn))` truncated to :math:`u \ge 0`.

Thesis Table 6.1 / code: n = 100 000, a = 1e-5, :math:`r_j \sim \mathcal N(3, 1)`.
The log-likelihood is not a normalised density in :math:`r`; the Pyro model adds it with
``pyro.factor`` inside the data plate (one term per row).

>>> r = make_circle_data(100, seed=0)
>>> circle_reference_sample(r, 3, a=1e-5, seed=0).shape
torch.Size([3, 2])
"""
from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

__all__ = ["circle_model", "make_circle_data", "circle_log_density", "circle_reference_sample"]


def circle_model(r, a: float = 1e-5):
    """Pyro model: latent ``"theta" = (x, y)`` with a flat (improper) prior, per-row factor
    ``"obs"`` :math:`-a(x^2+y^2-r_j^2)^2` in the ``"data"`` plate."""
    theta = pyro.sample("theta", dist.ImproperUniform(constraints.real_vector, (), (2,)))
    with pyro.plate("data", r.shape[0]) as idx:
        pyro.factor("obs", -a * (theta.pow(2).sum(-1) - r[idx] ** 2) ** 2)


def make_circle_data(n: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    r""":math:`r_j \sim \mathcal N(3, 1)` (the thesis code's data)."""
    g = torch.Generator().manual_seed(seed)
    return 3.0 + torch.randn(n, generator=g, dtype=dtype)


def circle_log_density(theta, r, a: float = 1e-5, temperature: float = 1.0):
    """Unnormalised log posterior :math:`-aT\\sum_j(\\|\\theta\\|^2 - r_j^2)^2`."""
    u = theta.pow(2).sum(-1, keepdim=True)
    return -a * temperature * ((u - r**2) ** 2).sum(-1)


def circle_reference_sample(r, num_samples: int, a: float = 1e-5, temperature: float = 1.0,
                            seed: int = 0) -> torch.Tensor:
    """Exact iid draws (polar decomposition above; truncation by rejection)."""
    g = torch.Generator().manual_seed(seed)
    n, k = r.shape[0], int(num_samples)
    mean, sd = float((r**2).mean()), 1.0 / math.sqrt(2.0 * a * temperature * n)
    u = torch.empty(0, dtype=r.dtype)
    while u.numel() < k:
        draw = mean + sd * torch.randn(max(2 * (k - u.numel()), 16), generator=g, dtype=r.dtype)
        u = torch.cat([u, draw[draw >= 0]])
    t = u[:k].sqrt()
    phi = 2 * math.pi * torch.rand(k, generator=g, dtype=r.dtype)
    return torch.stack([t * phi.cos(), t * phi.sin()], dim=-1)
