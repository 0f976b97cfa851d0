r"""The Bayesian banana model of Räisä 2021 thesis, Thm 12 (§5.2, Appendix A).

Banana distribution (thesis Def. 9; Tran, Pitt & Kohn 2014): if :math:`Y \sim
\mathcal N(\mu, \Sigma)` then :math:`\theta = g(Y)` with
:math:`g(y) = (y_1,\; y_2 - a(y_1-m)^2 - b,\; y_3, \dots, y_d)` is
:math:`\mathrm{Ban}(\mu, \Sigma, a, b, m)`. As :math:`|\det J_{g^{-1}}| = 1`, its density is
:math:`\mathcal N(g^{-1}(\theta); \mu, \Sigma)`.

Model (thesis Thm 12): :math:`\theta \sim \mathrm{Ban}(0, \sigma_0^2 I, a, b, m)`, and each
row :math:`x_j \in \mathbb R^d` has independent coordinates
:math:`x_{j1} \sim \mathcal N(\theta_1, \sigma_1^2)`,
:math:`x_{j2} \sim \mathcal N(\theta_2 + a(\theta_1-m)^2 + b, \sigma_2^2)`,
:math:`x_{ji} \sim \mathcal N(\theta_i, \sigma_i^2)` for :math:`i > 2`. The posterior
tempered by :math:`T` is :math:`\mathrm{Ban}(\mu_T, \Sigma_T, a, b, m)` with
:math:`\mu_{T,i} = Tn\tau_i\bar x_i/(Tn\tau_i+\tau_0)`,
:math:`\Sigma_T = \mathrm{diag}(1/(Tn\tau_i+\tau_0))`, :math:`\tau_i = \sigma_i^{-2}` —
sampled exactly by pushing Gaussian draws through :math:`g`.

Thesis Table 6.1 / §6.1 parameters: :math:`b = m = 0`, :math:`\sigma_0^2 = 1000`,
:math:`\sigma_1^2 = 20`, :math:`\sigma_2^2 = 2.5`, :math:`\sigma_{i>2}^2 = 1`, data generated
at :math:`\theta^* = (0, 3, 0, \dots)` (the thesis code's choice).

>>> X = make_banana_data(1000, dim=2, a=20.0, seed=0)
>>> post = banana_posterior(X, a=20.0)
>>> banana_reference_sample(post, 5, seed=0).shape
torch.Size([5, 2])
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

__all__ = [
    "Banana",
    "banana_lik_scale",
    "banana_model",
    "make_banana_data",
    "banana_posterior",
    "banana_reference_sample",
    "banana_true_theta",
]


class Banana(dist.TorchDistribution):
    r""":math:`\mathrm{Ban}(\mu, \mathrm{diag}(s^2), a, b, m)` on :math:`\mathbb R^d`, ``d >= 2``.

    :param loc: :math:`\mu`, shape ``[..., d]``.
    :param scale: standard deviations :math:`s` (diagonal :math:`\Sigma`), broadcastable to ``loc``.
    """

    arg_constraints = {"loc": constraints.real_vector, "scale": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, scale, a: float = 20.0, b: float = 0.0, m: float = 0.0, validate_args=None):
        loc = torch.as_tensor(loc)
        loc, scale = torch.broadcast_tensors(loc, torch.as_tensor(scale, dtype=loc.dtype))
        if loc.dim() < 1 or loc.shape[-1] < 2:
            raise ValueError(f"Banana needs event dimension d >= 2, got loc of shape {tuple(loc.shape)}")
        self.loc, self.scale = loc, scale
        self.a, self.b, self.m = float(a), float(b), float(m)
        super().__init__(loc.shape[:-1], loc.shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        shape = torch.Size(batch_shape) + self.event_shape
        return Banana(self.loc.expand(shape), self.scale.expand(shape), self.a, self.b, self.m)

    def g(self, y):
        r""":math:`g(y)`: Gaussian draws to banana draws."""
        y2 = y[..., 1] - self.a * (y[..., 0] - self.m) ** 2 - self.b
        return torch.cat([y[..., :1], y2.unsqueeze(-1), y[..., 2:]], dim=-1)

    def g_inv(self, theta):
        r""":math:`g^{-1}(\theta)`; unit Jacobian determinant."""
        u = theta[..., 1] + self.a * (theta[..., 0] - self.m) ** 2 + self.b
        return torch.cat([theta[..., :1], u.unsqueeze(-1), theta[..., 2:]], dim=-1)

    def rsample(self, sample_shape=torch.Size()):
        eps = torch.randn(self._extended_shape(sample_shape), dtype=self.loc.dtype, device=self.loc.device)
        return self.g(self.loc + self.scale * eps)

    def sample_with(self, num_samples: int, generator: torch.Generator) -> torch.Tensor:
        """``num_samples`` exact draws with an explicit generator (reproducible)."""
        shape = torch.Size([int(num_samples)]) + self._extended_shape()
        eps = torch.randn(shape, generator=generator, dtype=self.loc.dtype)
        return self.g(self.loc + self.scale * eps.to(self.loc.device))

    def log_prob(self, value):
        z = (self.g_inv(value) - self.loc) / self.scale
        return (-0.5 * z**2 - self.scale.log() - 0.5 * math.log(2 * math.pi)).sum(-1)

    @property
    def mean(self):
        # E theta_2 = mu_2 - a (Var y1 + (mu1 - m)^2) - b
        m2 = self.loc[..., 1] - self.a * (self.scale[..., 0] ** 2 + (self.loc[..., 0] - self.m) ** 2) - self.b
        return torch.cat([self.loc[..., :1], m2.unsqueeze(-1), self.loc[..., 2:]], dim=-1)

    @property
    def variance(self):
        # Var(y2 - a (y1-m)^2) = s2^2 + a^2 Var((y1-m)^2) = s2^2 + a^2 (2 s1^4 + 4 s1^2 (mu1-m)^2)
        s1, c = self.scale[..., 0] ** 2, self.loc[..., 0] - self.m
        v2 = self.scale[..., 1] ** 2 + self.a**2 * (2 * s1**2 + 4 * s1 * c**2)
        v = self.scale**2
        return torch.cat([v[..., :1], v2.unsqueeze(-1), v[..., 2:]], dim=-1)


def banana_lik_scale(dim: int, dtype=torch.float64, device=None) -> torch.Tensor:
    r"""Thesis §6.1 likelihood standard deviations: :math:`\sigma^2 = (20, 2.5, 1, \dots, 1)`."""
    if dim < 2:
        raise ValueError("dim must be >= 2")
    var = torch.ones(dim, dtype=dtype, device=device)
    var[0], var[1] = 20.0, 2.5
    return var.sqrt()


def banana_true_theta(dim: int, dtype=torch.float64) -> torch.Tensor:
    r""":math:`\theta^* = (0, 3, 0, \dots, 0)`, the data-generating parameter."""
    t = torch.zeros(dim, dtype=dtype)
    t[1] = 3.0
    return t


def _mean_fn(theta, a, b, m):
    r"""The likelihood's mean :math:`(\theta_1, \theta_2 + a(\theta_1 - m)^2 + b, \theta_3, \dots)`
    (thesis Thm 12). Written with ``where`` rather than ``cat``: the same values, but the
    per-example gradient graph of the compiled path (:mod:`pyro_dp.compiled`) then has no
    slice-and-concatenate per row, which took the 10-d banana's gradient pass from 39 ms to
    13 ms at n = 10^5 on one thread (the 2-d pass is unchanged)."""
    u = theta[..., 1] + a * (theta[..., 0] - m) ** 2 + b
    second = torch.arange(theta.shape[-1], device=theta.device) == 1
    return torch.where(second, u.unsqueeze(-1), theta)


def banana_model(X, a: float = 20.0, b: float = 0.0, m: float = 0.0, sigma0_sq: float = 1000.0,
                 lik_scale: Optional[torch.Tensor] = None):
    r"""Pyro model of thesis Thm 12: latent ``"theta"`` (shape ``[d]``), observed ``"obs"``
    rows ``X[idx]`` in the ``"data"`` plate. Untempered: kernels apply the temperature."""
    d = X.shape[-1]
    dev = X.device
    scale = (banana_lik_scale(d, X.dtype, dev) if lik_scale is None
             else torch.as_tensor(lik_scale, dtype=X.dtype, device=dev))
    prior = Banana(torch.zeros(d, dtype=X.dtype, device=dev),
                   torch.full((d,), math.sqrt(sigma0_sq), dtype=X.dtype, device=dev), a, b, m)
    theta = pyro.sample("theta", prior)
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("obs", dist.Normal(_mean_fn(theta, a, b, m), scale).to_event(1), obs=X[idx])


def make_banana_data(n: int, dim: int = 2, a: float = 20.0, b: float = 0.0, m: float = 0.0, *,
                     theta: Optional[Sequence[float]] = None, lik_scale: Optional[torch.Tensor] = None,
                     seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    r"""``n`` rows drawn from the likelihood at ``theta`` (default :math:`\theta^*`)."""
    g = torch.Generator().manual_seed(seed)
    th = banana_true_theta(dim, dtype) if theta is None else torch.as_tensor(theta, dtype=dtype)
    scale = banana_lik_scale(dim, dtype) if lik_scale is None else torch.as_tensor(lik_scale, dtype=dtype)
    return _mean_fn(th, a, b, m) + scale * torch.randn(n, dim, generator=g, dtype=dtype)


def banana_posterior(X, a: float = 20.0, b: float = 0.0, m: float = 0.0, sigma0_sq: float = 1000.0,
                     lik_scale: Optional[torch.Tensor] = None, temperature: float = 1.0) -> Banana:
    r"""Closed-form tempered posterior (thesis Thm 12) as a :class:`Banana`."""
    n, d = X.shape
    scale = banana_lik_scale(d, X.dtype) if lik_scale is None else torch.as_tensor(lik_scale, dtype=X.dtype)
    tau, tau0, T = scale**-2, 1.0 / sigma0_sq, float(temperature)
    prec = T * n * tau + tau0
    # thesis Thm 12 writes mean of X_2 as a(theta_1-m)^2 + b + theta_2: xbar_2 estimates u = g^{-1}(theta)_2
    loc = T * n * tau * X.mean(0) / prec
    return Banana(loc, prec.rsqrt(), a, b, m)


def banana_reference_sample(posterior: Banana, num_samples: int, seed: int = 0) -> torch.Tensor:
    """Exact iid draws from ``posterior`` with a fixed seed."""
    return posterior.sample_with(num_samples, torch.Generator().manual_seed(seed))
