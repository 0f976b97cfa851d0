r"""The default-path suite of issue #16 (acceptance 1): five models written as an ordinary Pyro
user writes them, with seeded synthetic data, on which ``MCMC(K(model, epsilon=2.0))`` with no
other argument must agree with NUTS — or warn.

Every model is plain Pyro: float64 latents (prior parameters built with the data's dtype), the
observations in ``with pyro.plate("data", N): pyro.sample("y", ..., obs=y)`` **without**
indexing by the plate's indices (the usual idiom; pyro_dp slices the row-aligned arguments
itself), every other argument public or row-aligned. Features lie in the unit ball
(:math:`\|x_i\|\le 1`), so the per-example gradients of the linear predictor are bounded.

=====================  =========================================================================
name                   model (source of truth)
=====================  =========================================================================
``linear``             Bayesian linear regression with unknown noise scale: intercept + 3
                       coefficients, :math:`\sigma\sim\mathrm{HalfNormal}(2)` (the issue's own
                       example; Gelman et al. 2013, *BDA3* §14.2)
``logistic``           logistic regression, intercept + 3 coefficients (BDA3 §16.2; McCullagh &
                       Nelder 1989, ch. 4)
``poisson``            Poisson regression with a log-exposure **offset** passed as data:
                       :math:`y_i\sim\mathrm{Poisson}(e_i\exp(b_0+x_i^\top\beta))`
                       (McCullagh & Nelder 1989 §6.2.3; BDA3 §16.4)
``gamma``              Gamma regression with log link and an unknown **positive shape**
                       :math:`\alpha` (constrained latent, unconstrained by a log transform):
                       :math:`y_i\sim\mathrm{Gamma}(\alpha, \alpha/\mu_i)`, mean :math:`\mu_i`
                       (McCullagh & Nelder 1989 §8.3.1, mean–shape parametrisation)
``hierarchical``       two-level (varying-intercept) normal model: group effects
                       :math:`u_g\sim\mathcal N(0,\tau^2)` declared **outside** the data plate in
                       ``pyro.plate("groups", G)`` of public size :math:`G`, rows index their
                       group by a public group-id tensor (BDA3 ch. 5 and §15.1; Gelman & Hill
                       2007, ch. 12)
=====================  =========================================================================

Not in :data:`SUITE` (issue #40's first table, and ``benchmarks/whitening.py``/``peer_d3p.py``):
``correlated_logistic``, logistic regression without intercept on :math:`d=5` features with
pairwise correlation 0.8, scaled into the unit ball (:func:`make_correlated_logistic_data`) — a
posterior with strongly correlated coordinates.

The truth of each synthetic data set is in :data:`SUITE` (``truth``), but the **reference for
the posterior is Pyro's NUTS** on the same data (``benchmarks/default_suite.py``): none of these
posteriors has a closed form, and at :math:`N\ge 10^4` the posterior sits within a few
:math:`1/\sqrt N` of the truth (Bernstein–von Mises), so the truth only checks the data.

>>> sorted(SUITE)
['gamma', 'hierarchical', 'linear', 'logistic', 'poisson']
>>> X, y = make_linear_data(1000)
>>> X.dtype, X.shape, bool((X.norm(dim=1) <= 1).all())
(torch.float64, torch.Size([1000, 3]), True)
>>> import pyro
>>> tr = pyro.poutine.trace(hierarchical_model).get_trace(*make_hierarchical_data(200))
>>> tr.nodes["u"]["value"].shape, tr.nodes["y"]["value"].shape, tr.nodes["u"]["value"].dtype
(torch.Size([20]), torch.Size([200]), torch.float64)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Tuple

import pyro
import pyro.distributions as dist
import torch

__all__ = [
    "SuiteModel",
    "SUITE",
    "get_suite_model",
    "unit_ball",
    "linear_model",
    "make_linear_data",
    "logistic_model",
    "make_logistic_data",
    "correlated_logistic_model",
    "make_correlated_logistic_data",
    "poisson_model",
    "make_poisson_data",
    "gamma_model",
    "make_gamma_data",
    "hierarchical_model",
    "make_hierarchical_data",
]

DTYPE = torch.float64


def unit_ball(n: int, d: int, generator: torch.Generator, dtype=DTYPE) -> torch.Tensor:
    r"""``n`` points drawn uniformly in the ``d``-dimensional unit ball: a uniform direction
    (a normalised standard normal, Muller 1959) times a radius :math:`U^{1/d}` (the radius of a
    uniform point in the ball has density :math:`d r^{d-1}` on [0, 1]).

    >>> x = unit_ball(500, 3, torch.Generator().manual_seed(0))
    >>> x.shape, bool((x.norm(dim=1) <= 1).all())
    (torch.Size([500, 3]), True)
    """
    g = torch.randn(n, d, generator=generator, dtype=dtype)
    direction = g / torch.linalg.vector_norm(g, dim=1, keepdim=True)
    radius = torch.rand(n, 1, generator=generator, dtype=dtype) ** (1.0 / d)
    return direction * radius


def _zeros(ref: torch.Tensor, *shape) -> torch.Tensor:
    """Zeros of the data's dtype and device (so the latents are float64 like the data)."""
    return torch.zeros(shape, dtype=ref.dtype, device=ref.device)


# --------------------------------------------------------------------------------------------
# (a) linear regression with unknown sigma
# --------------------------------------------------------------------------------------------

#: generating parameters of :func:`make_linear_data` (the issue's example: NUTS gave b0 0.302,
#: beta [0.999, -1.993, 0.490], sigma 0.703 at N = 20 000)
LINEAR_TRUTH = {"b0": 0.3, "beta": (1.0, -2.0, 0.5), "sigma": 0.7}


def linear_model(X, y):
    r"""Bayesian linear regression (BDA3 §14.2): :math:`b_0\sim\mathcal N(0,5^2)`,
    :math:`\beta\sim\mathcal N(0,5^2 I_3)`, :math:`\sigma\sim\mathrm{HalfNormal}(2)`,
    :math:`y_i\sim\mathcal N(b_0+x_i^\top\beta,\sigma^2)`."""
    b0 = pyro.sample("b0", dist.Normal(_zeros(X), 5.0))
    beta = pyro.sample("beta", dist.Normal(_zeros(X, X.shape[1]), 5.0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(_zeros(X) + 2.0))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(b0 + X @ beta, sigma), obs=y)


def make_linear_data(n: int, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(X, y)``: ``X`` uniform in the 3-d unit ball, ``y`` from :data:`LINEAR_TRUTH`."""
    g = torch.Generator().manual_seed(int(seed))
    X = unit_ball(n, 3, g)
    t = LINEAR_TRUTH
    mean = t["b0"] + X @ torch.tensor(t["beta"], dtype=DTYPE)
    y = mean + t["sigma"] * torch.randn(n, generator=g, dtype=DTYPE)
    return X, y


# --------------------------------------------------------------------------------------------
# (b) logistic regression
# --------------------------------------------------------------------------------------------

LOGISTIC_TRUTH = {"b0": -0.5, "beta": (2.0, -1.5, 1.0)}


def logistic_model(X, y):
    r"""Logistic regression (BDA3 §16.2): :math:`b_0\sim\mathcal N(0,5^2)`,
    :math:`\beta\sim\mathcal N(0,5^2 I)`, :math:`y_i\sim\mathrm{Bernoulli}(\mathrm{logit}^{-1}
    (b_0+x_i^\top\beta))`."""
    b0 = pyro.sample("b0", dist.Normal(_zeros(X), 5.0))
    beta = pyro.sample("beta", dist.Normal(_zeros(X, X.shape[1]), 5.0).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=b0 + X @ beta), obs=y)


def make_logistic_data(n: int, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(X, y)``: ``X`` uniform in the 3-d unit ball, 0/1 ``y`` from :data:`LOGISTIC_TRUTH`."""
    g = torch.Generator().manual_seed(int(seed))
    X = unit_ball(n, 3, g)
    t = LOGISTIC_TRUTH
    p = torch.sigmoid(t["b0"] + X @ torch.tensor(t["beta"], dtype=DTYPE))
    y = (torch.rand(n, generator=g, dtype=DTYPE) < p).to(DTYPE)
    return X, y


#: generating coefficients and prior sd of :func:`make_correlated_logistic_data` (issue #40's
#: first table; ``benchmarks/whitening.py``'s data set ``correlated``)
CORRELATED_LOGISTIC_TRUTH = {"w": (1.0, -0.5, 0.8, 0.0, -1.2)}
CORRELATED_LOGISTIC_PRIOR_SD = 2.0


def correlated_logistic_model(X, y):
    r"""Logistic regression without intercept (BDA3 §16.2): :math:`w\sim\mathcal N(0,2^2 I_d)`,
    :math:`y_i\sim\mathrm{Bernoulli}(\mathrm{logit}^{-1}(x_i^\top w))`."""
    w = pyro.sample("w", dist.Normal(_zeros(X, X.shape[1]), CORRELATED_LOGISTIC_PRIOR_SD).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def make_correlated_logistic_data(n: int, seed: int = 0, rho: float = 0.8, *, w=None,
                                  scales=None) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""``(X, y)``: :math:`x_i = L z_i/\sqrt d` with :math:`z_i\sim\mathcal N(0, I_d)` and
    :math:`LL^\top` the equicorrelation matrix (``rho`` off the diagonal), rows of norm above 1
    scaled onto the unit sphere (about a third of them at N = 5·10⁴, which lowers the features'
    correlation from ``rho`` = 0.8 to about 0.7); 0/1 ``y`` from the coefficients ``w`` (default
    :data:`CORRELATED_LOGISTIC_TRUTH`, :math:`d = 5`). With ``scales`` the columns are then
    multiplied by them and ``y`` drawn from ``w / scales``: the same logits, covariates on their
    own scales. ``benchmarks/whitening.py``'s data sets, bit for bit.

    >>> X, y = make_correlated_logistic_data(2000)
    >>> X.shape, bool((X.norm(dim=1) <= 1 + 1e-12).all()), round(float(torch.corrcoef(X.T)[0, 1]), 1)
    (torch.Size([2000, 5]), True, 0.7)
    """
    g = torch.Generator().manual_seed(int(seed))
    w = torch.as_tensor(CORRELATED_LOGISTIC_TRUTH["w"] if w is None else w, dtype=DTYPE)
    d = w.numel()
    cov = torch.full((d, d), float(rho), dtype=DTYPE).fill_diagonal_(1.0)
    X = torch.randn(n, d, generator=g, dtype=DTYPE) @ torch.linalg.cholesky(cov).T / d ** 0.5
    X = X / X.norm(dim=1, keepdim=True).clamp(min=1.0)
    if scales is not None:
        scales = torch.as_tensor(scales, dtype=DTYPE)
        X, w = X * scales, w / scales
    y = torch.bernoulli(torch.sigmoid(X @ w), generator=g)
    return X, y


# --------------------------------------------------------------------------------------------
# (c) Poisson regression with an offset
# --------------------------------------------------------------------------------------------

POISSON_TRUTH = {"b0": 0.5, "beta": (0.8, -0.6, 0.4)}
#: exposures are uniform on [EXPOSURE_RANGE] (public design: e.g. person-years at risk)
EXPOSURE_RANGE = (0.5, 3.0)


def poisson_model(X, log_exposure, y):
    r"""Poisson regression with a log link and an offset (McCullagh & Nelder 1989 §6.2.3):
    :math:`b_0\sim\mathcal N(0,5^2)`, :math:`\beta\sim\mathcal N(0,5^2 I)`,
    :math:`y_i\sim\mathrm{Poisson}(\exp(\log e_i + b_0 + x_i^\top\beta))` with the exposure
    :math:`e_i` passed as data (``log_exposure``, row-aligned)."""
    b0 = pyro.sample("b0", dist.Normal(_zeros(X), 5.0))
    beta = pyro.sample("beta", dist.Normal(_zeros(X, X.shape[1]), 5.0).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Poisson(torch.exp(log_exposure + b0 + X @ beta)), obs=y)


def make_poisson_data(n: int, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(X, log_exposure, y)``: ``X`` in the 3-d unit ball, exposures uniform on
    :data:`EXPOSURE_RANGE`, counts from :data:`POISSON_TRUTH`."""
    g = torch.Generator().manual_seed(int(seed))
    X = unit_ball(n, 3, g)
    lo, hi = EXPOSURE_RANGE
    log_exposure = torch.log(lo + (hi - lo) * torch.rand(n, generator=g, dtype=DTYPE))
    t = POISSON_TRUTH
    rate = torch.exp(log_exposure + t["b0"] + X @ torch.tensor(t["beta"], dtype=DTYPE))
    y = torch.poisson(rate, generator=g)
    return X, log_exposure, y


# --------------------------------------------------------------------------------------------
# (d) a constrained latent: Gamma regression with unknown shape
# --------------------------------------------------------------------------------------------

GAMMA_TRUTH = {"b0": 0.5, "beta": (1.0, -0.5, 0.5), "shape": 2.0}


def gamma_model(X, y):
    r"""Gamma regression with a log link, mean–shape parametrisation (McCullagh & Nelder 1989
    §8.3.1): :math:`b_0\sim\mathcal N(0,5^2)`, :math:`\beta\sim\mathcal N(0,5^2 I)`, shape
    :math:`\alpha\sim\mathrm{LogNormal}(0,1)` (positive: Pyro samples it in log space),
    :math:`\mu_i=\exp(b_0+x_i^\top\beta)`, :math:`y_i\sim\mathrm{Gamma}(\alpha,\ \alpha/\mu_i)`
    (concentration, rate: mean :math:`\mu_i`, variance :math:`\mu_i^2/\alpha`)."""
    b0 = pyro.sample("b0", dist.Normal(_zeros(X), 5.0))
    beta = pyro.sample("beta", dist.Normal(_zeros(X, X.shape[1]), 5.0).to_event(1))
    shape = pyro.sample("shape", dist.LogNormal(_zeros(X), 1.0))
    with pyro.plate("data", X.shape[0]):
        mu = torch.exp(b0 + X @ beta)
        pyro.sample("y", dist.Gamma(shape, shape / mu), obs=y)


def make_gamma_data(n: int, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(X, y)``: ``X`` in the 3-d unit ball, positive ``y`` from :data:`GAMMA_TRUTH`."""
    g = torch.Generator().manual_seed(int(seed))
    X = unit_ball(n, 3, g)
    t = GAMMA_TRUTH
    mu = torch.exp(t["b0"] + X @ torch.tensor(t["beta"], dtype=DTYPE))
    # torch's Gamma sampler takes no generator: draw under a forked, seeded global RNG
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(2 ** 31 - 1, (), generator=g)))
        y = torch.distributions.Gamma(torch.full_like(mu, t["shape"]), t["shape"] / mu).sample()
    return X, y


# --------------------------------------------------------------------------------------------
# (e) two-level model with group effects outside the data plate
# --------------------------------------------------------------------------------------------

HIERARCHICAL_TRUTH = {"mu": 1.0, "tau": 0.5, "beta": (1.0, -1.0), "sigma": 1.0}
#: number of groups (public design)
NUM_GROUPS = 20


def hierarchical_model(X, group, num_groups, y):
    r"""Varying-intercept model (BDA3 §15.1; Gelman & Hill 2007 §12.5), centred
    parametrisation: :math:`\mu\sim\mathcal N(0,5^2)`, :math:`\tau\sim\mathrm{HalfNormal}(1)`,
    :math:`u_g\sim\mathcal N(\mu,\tau^2)` for :math:`g<G` in ``pyro.plate("groups", G)``
    (outside the data plate), :math:`\beta\sim\mathcal N(0,5^2 I_2)`,
    :math:`\sigma\sim\mathrm{HalfNormal}(2)`, :math:`y_i\sim\mathcal N(u_{g_i}+x_i^\top\beta,
    \sigma^2)`; ``group`` (long, row-aligned) and ``num_groups`` are public."""
    mu = pyro.sample("mu", dist.Normal(_zeros(X), 5.0))
    tau = pyro.sample("tau", dist.HalfNormal(_zeros(X) + 1.0))
    with pyro.plate("groups", num_groups):
        u = pyro.sample("u", dist.Normal(mu, tau))
    beta = pyro.sample("beta", dist.Normal(_zeros(X, X.shape[1]), 5.0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(_zeros(X) + 2.0))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(u[group] + X @ beta, sigma), obs=y)


def make_hierarchical_data(n: int, seed: int = 0, num_groups: int = NUM_GROUPS):
    """``(X, group, num_groups, y)``: ``X`` in the 2-d unit ball, groups uniform over
    ``num_groups``, group intercepts and ``y`` from :data:`HIERARCHICAL_TRUTH`."""
    g = torch.Generator().manual_seed(int(seed))
    X = unit_ball(n, 2, g)
    group = torch.randint(num_groups, (n,), generator=g)
    t = HIERARCHICAL_TRUTH
    u = t["mu"] + t["tau"] * torch.randn(num_groups, generator=g, dtype=DTYPE)
    y = u[group] + X @ torch.tensor(t["beta"], dtype=DTYPE) + t["sigma"] * torch.randn(n, generator=g, dtype=DTYPE)
    return X, group, int(num_groups), y


# --------------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteModel:
    """One model of the suite.

    :ivar name: registry key.
    :ivar model: the Pyro model.
    :ivar make_data: ``make_data(n, seed) -> args`` of the model.
    :ivar n: the suite's number of rows (between 1e4 and 1e5).
    :ivar quick_n: rows of the ``--quick`` smoke test.
    :ivar truth: generating parameters (a check of the data, not the reference posterior).
    :ivar description: one line.
    """

    name: str
    model: Callable
    make_data: Callable
    n: int
    quick_n: int
    truth: Dict[str, object] = field(default_factory=dict)
    description: str = ""

    def data(self, quick: bool = False, seed: int = 0) -> tuple:
        """The model's arguments at the suite's (or the quick) size."""
        return self.make_data(self.quick_n if quick else self.n, seed)


SUITE: Dict[str, SuiteModel] = {
    "linear": SuiteModel("linear", linear_model, make_linear_data, 50_000, 10_000, LINEAR_TRUTH,
                         "linear regression, 3 coefficients + intercept, unknown sigma"),
    "logistic": SuiteModel("logistic", logistic_model, make_logistic_data, 50_000, 10_000, LOGISTIC_TRUTH,
                           "logistic regression, 3 coefficients + intercept"),
    "poisson": SuiteModel("poisson", poisson_model, make_poisson_data, 50_000, 10_000, POISSON_TRUTH,
                          "Poisson regression with a log-exposure offset"),
    "gamma": SuiteModel("gamma", gamma_model, make_gamma_data, 50_000, 10_000, GAMMA_TRUTH,
                        "Gamma regression, log link, unknown positive shape"),
    "hierarchical": SuiteModel("hierarchical", hierarchical_model, make_hierarchical_data, 50_000, 10_000,
                               HIERARCHICAL_TRUTH, "two-level model, 20 group intercepts outside the data plate"),
}


def get_suite_model(name: str) -> SuiteModel:
    """The suite's model ``name`` (one of :data:`SUITE`).

    >>> get_suite_model("poisson").n
    50000
    """
    try:
        return SUITE[name]
    except KeyError:
        raise KeyError(f"unknown suite model {name!r}; choose from {sorted(SUITE)}") from None
