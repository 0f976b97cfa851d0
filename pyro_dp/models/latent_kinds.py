r"""Non-location latents for the default path (issue 59, acceptance 3): a Student-t regression with
unknown degrees of freedom, a Gamma regression's shape, and a two-component mixture's weight.

Each is plain Pyro as a user writes it (float64, the observations in ``pyro.plate("data", N)``
without indexing by the plate), with seeded synthetic data; the reference posterior is Pyro's NUTS
on the same data (``benchmarks/latent_kinds.py``). :data:`LATENT_SUITE` holds them in the
:class:`~pyro_dp.models.default_suite.SuiteModel` form of the default suite (N = 10⁴ rows).

=================  ===========================================================================
name               model (source of truth)
=================  ===========================================================================
``student_t``      robust linear regression, :math:`y_i\sim t_\nu(b_0+x_i^\top\beta,\sigma)`
                   with **unknown** :math:`\nu\sim\mathrm{Gamma}(2, 0.1)` (the prior of Juárez &
                   Steel 2010, JASA 105(489), §3.1; BDA3 §17.2 for the model)
``gamma``          :func:`~pyro_dp.models.default_suite.gamma_model`: Gamma regression with an
                   unknown **shape** (McCullagh & Nelder 1989 §8.3.1)
``mixture``        two-component normal mixture with an unknown **weight**
                   :math:`w\sim\mathrm{Beta}(2,2)`, component means with priors centred at
                   :math:`\mp 2` (which break the label symmetry) and a shared scale
                   (BDA3 §22.1; Frühwirth-Schnatter 2006, §1.2)
=================  ===========================================================================

>>> sorted(LATENT_SUITE)
['gamma', 'mixture', 'student_t']
>>> X, y = make_student_t_data(500)
>>> X.shape, y.shape, X.dtype
(torch.Size([500, 2]), torch.Size([500]), torch.float64)
>>> x, = make_mixture_data(1000)
>>> round(float((x > 0).double().mean()), 1)  # the weight of the left component is 0.3
0.7
"""
from __future__ import annotations

from typing import Dict, Tuple

import pyro
import pyro.distributions as dist
import torch

from .default_suite import DTYPE, GAMMA_TRUTH, SuiteModel, gamma_model, make_gamma_data, unit_ball

__all__ = ["LATENT_SUITE", "STUDENT_T_TRUTH", "MIXTURE_TRUTH", "student_t_model", "make_student_t_data",
           "mixture_model", "make_mixture_data"]

def _zeros(ref: torch.Tensor, *shape) -> torch.Tensor:
    """Zeros of the data's dtype and device (the latents float64 like the data)."""
    return torch.zeros(shape, dtype=ref.dtype, device=ref.device)


#: generating parameters of :func:`make_student_t_data` (issue 59's NUTS: ν ≈ 3.8)
STUDENT_T_TRUTH = {"b0": 0.5, "beta": (1.0, -1.0), "sigma": 1.0, "nu": 4.0}


def student_t_model(X, y):
    r""":math:`b_0\sim\mathcal N(0,5^2)`, :math:`\beta\sim\mathcal N(0,5^2 I_2)`,
    :math:`\sigma\sim\mathrm{HalfNormal}(2)`, :math:`\nu\sim\mathrm{Gamma}(2, 0.1)` (shape, rate;
    Juárez & Steel 2010), :math:`y_i\sim t_\nu(b_0+x_i^\top\beta,\ \sigma)`."""
    b0 = pyro.sample("b0", dist.Normal(_zeros(X), 5.0))
    beta = pyro.sample("beta", dist.Normal(_zeros(X, X.shape[1]), 5.0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(_zeros(X) + 2.0))
    nu = pyro.sample("nu", dist.Gamma(_zeros(X) + 2.0, 0.1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.StudentT(nu, b0 + X @ beta, sigma), obs=y)


def make_student_t_data(n: int, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(X, y)``: ``X`` uniform in the 2-d unit ball, ``y`` from :data:`STUDENT_T_TRUTH` (a t
    variate as a normal over the square root of an independent Gamma(ν/2, ν/2))."""
    g = torch.Generator().manual_seed(int(seed))
    X = unit_ball(n, 2, g)
    t = STUDENT_T_TRUTH
    z = torch.randn(n, generator=g, dtype=DTYPE)
    # chi-square with nu degrees of freedom from nu standard normals (nu is an integer here)
    chi2 = torch.randn(n, int(t["nu"]), generator=g, dtype=DTYPE).pow(2).sum(1)
    y = t["b0"] + X @ torch.tensor(t["beta"], dtype=DTYPE) + t["sigma"] * z / torch.sqrt(chi2 / t["nu"])
    return X, y


#: generating parameters of :func:`make_mixture_data`: weight of the first (left) component
MIXTURE_TRUTH = {"w": 0.3, "locs": (-1.5, 1.5), "sigma": 1.0}


def mixture_model(x):
    r""":math:`w\sim\mathrm{Beta}(2,2)`, :math:`\mu\sim\mathcal N((-2, 2), I_2)`,
    :math:`\sigma\sim\mathrm{HalfNormal}(2)`, :math:`x_i\sim w\,\mathcal N(\mu_1,\sigma^2)+(1-w)\,
    \mathcal N(\mu_2,\sigma^2)` (``MixtureSameFamily``, the components summed out)."""
    w = pyro.sample("w", dist.Beta(_zeros(x) + 2.0, 2.0))
    locs = pyro.sample("locs", dist.Normal(torch.tensor([-2.0, 2.0], dtype=x.dtype), 1.0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(_zeros(x) + 2.0))
    weights = dist.Categorical(probs=torch.stack([w, 1.0 - w], -1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("x", dist.MixtureSameFamily(weights, dist.Normal(locs, sigma)), obs=x)


def make_mixture_data(n: int, seed: int = 0) -> Tuple[torch.Tensor]:
    """``(x,)``: ``n`` draws of :data:`MIXTURE_TRUTH`'s mixture."""
    g = torch.Generator().manual_seed(int(seed))
    t = MIXTURE_TRUTH
    first = torch.rand(n, generator=g, dtype=DTYPE) < t["w"]
    locs = torch.where(first, t["locs"][0], t["locs"][1])
    return (locs + t["sigma"] * torch.randn(n, generator=g, dtype=DTYPE),)


LATENT_SUITE: Dict[str, SuiteModel] = {
    "student_t": SuiteModel("student_t", student_t_model, make_student_t_data, 10_000, 10_000, STUDENT_T_TRUTH,
                            "Student-t regression with unknown degrees of freedom"),
    "gamma": SuiteModel("gamma", gamma_model, make_gamma_data, 10_000, 10_000, GAMMA_TRUTH,
                        "Gamma regression, log link, unknown positive shape"),
    "mixture": SuiteModel("mixture", mixture_model, make_mixture_data, 10_000, 10_000, MIXTURE_TRUTH,
                          "two-component normal mixture, unknown weight"),
}
