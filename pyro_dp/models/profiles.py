r"""Synthetic per-row scores for the model profiles of :func:`pyro_dp.feasibility`
(:mod:`pyro_dp.default_path.forecast`): data drawn from the default suite's GLMs at fixed, public parameter
values with a fixed seed — never anyone's data.

``dim`` features uniform in the unit ball (:func:`~pyro_dp.models.default_suite.unit_ball`),
coefficients :math:`\beta_j` evenly spaced in :math:`[-1, 1]`; the score of row :math:`i` is
:math:`\nabla_\theta \log p(y_i\mid x_i,\theta)` in unconstrained coordinates at those values:

* ``"logistic"``: intercept 0.3, :math:`(y-p)(1, x)`;
* ``"linear"``: intercept 0.3, residual sd ``noise_sd``, :math:`\log\sigma` unconstrained:
  :math:`(e/\sigma\,(1, x),\ e^2-1)` with :math:`e` the standardised residual;
* ``"poisson"``: exposures uniform on [0.5, 3] as an offset, mean count about ``rate``:
  :math:`(y-\mu)(1, x)`.

>>> synthetic_scores("logistic", 2, num_rows=4).shape
torch.Size([4, 3])
"""
from __future__ import annotations

import torch

from .default_suite import unit_ball

__all__ = ["synthetic_scores", "PROFILE_SEED"]

#: seed of the synthetic sample (public)
PROFILE_SEED = 12345


def synthetic_scores(name: str, dim: int, *, noise_sd: float = 1.0, rate: float = 3.0,
                     num_rows: int = 50_000) -> torch.Tensor:
    """``[num_rows, D]`` per-row scores of the profile ``name`` (module doc), float64."""
    g = torch.Generator().manual_seed(PROFILE_SEED)
    n, d, dt = int(num_rows), int(dim), torch.float64
    X = unit_ball(n, d, g)
    Xt = torch.cat([torch.ones(n, 1, dtype=dt), X], dim=1)
    beta = torch.linspace(-1.0, 1.0, d, dtype=dt)
    if name == "logistic":
        p = torch.sigmoid(0.3 + X @ beta)
        y = (torch.rand(n, generator=g, dtype=dt) < p).to(dt)
        return (y - p)[:, None] * Xt
    if name == "linear":
        s = float(noise_sd)
        if not s > 0:
            raise ValueError(f"noise_sd must be positive, got {noise_sd!r}")
        e = torch.randn(n, generator=g, dtype=dt)
        return torch.cat([(e / s)[:, None] * Xt, (e * e - 1.0)[:, None]], dim=1)
    if name == "poisson":
        if not float(rate) > 0:
            raise ValueError(f"rate must be positive, got {rate!r}")
        expo = 0.5 + 2.5 * torch.rand(n, generator=g, dtype=dt)
        mu = expo / 1.75 * float(rate) * torch.exp(X @ beta * 0.5)
        y = torch.poisson(mu, generator=g)
        return (y - mu)[:, None] * Xt
    raise ValueError(f"unknown profile {name!r}")
