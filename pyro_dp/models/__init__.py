r"""Benchmark posteriors with exact reference samplers (Räisä 2021 thesis, ch. 5 and Table 6.1).

Each model is a Pyro model whose observed sites lie in ``pyro.plate("data", N) as idx`` and
index their data by ``idx``; each comes with a seeded data generator and an exact sampler of
its (tempered) posterior.

* :mod:`~pyro_dp.models.gaussian` — Gaussian with known covariance (conjugate);
* :mod:`~pyro_dp.models.banana` — the Bayesian banana of thesis Thm 12;
* :mod:`~pyro_dp.models.circle` — the circle model of thesis §5.3 (exact sampler via polar
  coordinates);
* :mod:`~pyro_dp.models.mixture` — the Gaussian mixture of Welling & Teh (2011) / Heikkilä et al.
  (2019, §4) and its truncated variant of Zhang & Zhang (2023, App. E.1) (references by 2-d grid
  quadrature, :mod:`~pyro_dp.models.grid`);
* :mod:`~pyro_dp.models.regression` — synthetic logistic regression and Poisson regression on
  the RAND HIE data (reference: a long NUTS run; no exact sampler).

:func:`get_problem` builds the eight benchmarks of thesis Table 6.1 by name (``n`` may be
lowered for quick runs; the tempering :math:`T = n_0/n` follows the chosen ``n``), and the
benchmarks of :data:`EXTRA_PROBLEMS` (``gmm-heikkila``, ``gmm-truncated``, ``logistic``,
``randhie-poisson``).

>>> p = get_problem("flat-banana-2d", n=1000)
>>> p.temperature, p.reference_sample(3).shape
(1.0, torch.Size([3, 2]))
>>> sorted(TABLE_6_1)[:3]
['circle', 'correlated-gauss', 'flat-banana-10d']
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Optional

import torch
from pyro.infer.autoguide.initialization import init_to_value

from .banana import (
    Banana,
    banana_lik_scale,
    banana_model,
    banana_posterior,
    banana_reference_sample,
    banana_true_theta,
    make_banana_data,
)
from .circle import circle_log_density, circle_model, circle_reference_sample, make_circle_data
from .grid import GridDensity
from .mixture import (
    gmm_log_posterior,
    gmm_loglik,
    gmm_model,
    gmm_reference,
    make_gmm_data,
    make_truncated_gmm_data,
    truncated_gmm_bounds,
    truncated_gmm_lipschitz,
    truncated_gmm_model,
    truncated_gmm_reference,
)
from .regression import (
    load_randhie,
    logistic_model,
    make_logistic_data,
    nuts_reference_sample,
    poisson_model,
)
from .gaussian import (
    correlated_cov,
    diagonal_cov,
    gaussian_diag_model,
    gaussian_model,
    gaussian_posterior,
    gaussian_reference_sample,
    make_gaussian_data,
)

__all__ = [
    "Banana", "banana_lik_scale", "banana_model", "banana_posterior", "banana_reference_sample",
    "banana_true_theta", "make_banana_data",
    "circle_log_density", "circle_model", "circle_reference_sample", "make_circle_data",
    "correlated_cov", "diagonal_cov", "gaussian_diag_model", "gaussian_model", "gaussian_posterior",
    "gaussian_reference_sample", "make_gaussian_data",
    "GridDensity",
    "GMM_LIK_VAR", "GMM_PRIOR_VAR", "GMM_TRUE_THETA", "TRUNCATED_GMM_BOX", "gmm_log_posterior", "gmm_loglik",
    "gmm_model", "gmm_reference", "make_gmm_data", "make_truncated_gmm_data", "truncated_gmm_bounds",
    "truncated_gmm_lipschitz", "truncated_gmm_model", "truncated_gmm_reference",
    "RANDHIE_COVARIATES", "RANDHIE_SCALES", "load_randhie", "logistic_model", "make_logistic_data",
    "nuts_reference_sample", "poisson_model",
    "Problem", "TABLE_6_1", "EXTRA_PROBLEMS", "get_problem",
]

# Re-bound with doc comments so that autodoc (which reads ``#:`` comments from the module it
# documents) lists them under ``pyro_dp.models``; the objects are those of the submodules.
from . import mixture as _mixture, regression as _regression  # noqa: E402

#: Prior variances :math:`(\sigma_1^2, \sigma_2^2)` of the GMM (Heikkilä et al. 2019, eq. (24)).
GMM_PRIOR_VAR = _mixture.GMM_PRIOR_VAR
#: Likelihood variance :math:`\sigma_x^2` of the GMM (Heikkilä eq. (25); Zhang & Zhang 2023 §6.1).
GMM_LIK_VAR = _mixture.GMM_LIK_VAR
#: Data-generating parameters of the GMM (Heikkilä §4; Zhang & Zhang §6.1).
GMM_TRUE_THETA = _mixture.GMM_TRUE_THETA
#: Truncation / prior box of the truncated GMM (Zhang & Zhang 2023, App. E.1: data and θ in [-3, 3]).
TRUNCATED_GMM_BOX = _mixture.TRUNCATED_GMM_BOX
#: Default RAND HIE covariates (statsmodels column names) of :func:`load_randhie`.
RANDHIE_COVARIATES = _regression.RANDHIE_COVARIATES
#: Fixed public ranges of the RAND HIE covariates: column -> (divisor, upper clip after division).
RANDHIE_SCALES = _regression.RANDHIE_SCALES

#: Thesis Table 6.1: name -> (family, dim, n, n0, start_sd, a, sigma0_sq).
TABLE_6_1 = {
    "flat-banana-2d": ("banana", 2, 100_000, None, 0.02, 20.0, 1000.0),
    "flat-banana-10d": ("banana", 10, 200_000, None, 0.02, 20.0, 1000.0),
    "tempered-banana-2d": ("banana", 2, 100_000, 1000, 0.02, 20.0, 1000.0),
    "tempered-banana-10d": ("banana", 10, 200_000, 1000, 0.02, 20.0, 1000.0),
    "gauss-30d": ("gauss-diag", 30, 200_000, None, 0.02, 0.0, 1000.0),
    "narrow-banana": ("banana", 2, 150_000, None, 0.02, 350.0, 1000.0),
    "correlated-gauss": ("gauss-corr", 2, 200_000, None, 0.005, 0.0, 100.0),
    "circle": ("circle", 2, 100_000, None, 0.1, 1e-5, None),
}

#: Benchmarks beyond Table 6.1: name -> (n, n0 or None, source). ``n0`` sets T = n0/n.
EXTRA_PROBLEMS = {
    "gmm-heikkila": (1_000_000, 100, "Heikkilä et al. 2019, §4 (N = 1e6, N0 = 100)"),
    "gmm-truncated": (50_000, 100, "Zhang & Zhang 2023, §6.1/App. E.1 (N = 5e4, temperature 500)"),
    "logistic": (10_000, None, "pyro_dp.demo data, ||x|| <= 1"),
    "randhie-poisson": (20_190, None, "RAND HIE via statsmodels, all rows"),
}


@dataclass(frozen=True)
class Problem:
    """One benchmark: call ``model(*args)``; ``temperature`` goes to the kernel.

    :ivar start: centre of the DP runs' random starting points (thesis code: :math:`\\theta^*`
        for the Gaussians and bananas, ``(0, 1)`` for the circle); ``start_sd`` their spread.
    :ivar posterior: closed-form posterior distribution, or ``None`` (the circle; the mixtures,
        whose :class:`GridDensity` reference is built on the first ``reference_sample`` call because
        it costs seconds; the regressions, whose reference is a NUTS run).
    :ivar site: the latent site (``"theta"``; ``"w"`` for the regressions).
    """

    name: str
    model: Callable
    args: tuple
    temperature: float
    start: torch.Tensor
    start_sd: float
    posterior: Optional[object]
    _sampler: Callable = field(repr=False)
    site: str = "theta"

    def init_strategy(self):
        """Data-free Pyro init strategy at ``start`` (needed for the circle, whose flat prior
        cannot be sampled): ``PrivateLikelihood(p.model, p.args, init_strategy=p.init_strategy())``."""
        return init_to_value(values={self.site: self.start})

    def reference_sample(self, num_samples: int, seed: int = 0) -> torch.Tensor:
        """Draws from the (tempered) posterior: exact (closed form, grid) or NUTS for the regressions."""
        return self._sampler(num_samples, seed)


def get_problem(name: str, n: Optional[int] = None, seed: int = 0) -> Problem:
    """Build a Table 6.1 or :data:`EXTRA_PROBLEMS` benchmark (data drawn with ``seed``; ``n``
    overrides the table)."""
    if name in EXTRA_PROBLEMS:
        return _extra_problem(name, n, seed)
    if name not in TABLE_6_1:
        raise KeyError(f"unknown problem {name!r}; choose from {sorted(TABLE_6_1) + sorted(EXTRA_PROBLEMS)}")
    family, d, n_tab, n0, start_sd, a, s0 = TABLE_6_1[name]
    n = n_tab if n is None else int(n)
    T = 1.0 if n0 is None else n0 / n
    if family == "banana":
        X = make_banana_data(n, d, a, seed=seed)
        post = banana_posterior(X, a=a, sigma0_sq=s0, temperature=T)
        model = partial(banana_model, a=a, sigma0_sq=s0)  # picklable (parallel chains)
        return Problem(name, model, (X,), T, banana_true_theta(d), start_sd, post,
                       lambda k, s: banana_reference_sample(post, k, s))
    if family in ("gauss-diag", "gauss-corr"):
        cov = diagonal_cov(d) if family == "gauss-diag" else correlated_cov(0.999)
        X = make_gaussian_data(n, cov, seed=seed)
        post = gaussian_posterior(X, cov, prior_var=s0, temperature=T)
        if family == "gauss-diag":  # independent Normals: the same density, no solve per row
            model = partial(gaussian_diag_model, sd=cov.diagonal().sqrt(), prior_var=s0)
        else:
            model = partial(gaussian_model, cov=cov, prior_var=s0)
        start = torch.zeros(d, dtype=X.dtype)
        start[1] = 3.0
        return Problem(name, model, (X,), T, start, start_sd, post,
                       lambda k, s: gaussian_reference_sample(post, k, s))
    r = make_circle_data(n, seed=seed)
    model = partial(circle_model, a=a)
    return Problem(name, model, (r,), T, torch.tensor([0.0, 1.0], dtype=r.dtype), start_sd, None,
                   lambda k, s: circle_reference_sample(r, k, a=a, temperature=T, seed=s))


class _LazyGrid:
    """Builds a grid reference on first use (picklable: the model args are plain tensors)."""

    def __init__(self, build):
        self.build, self.grid = build, None

    def __call__(self, k, s):
        if self.grid is None:
            self.grid = self.build()
        return self.grid.sample(k, s)


def _extra_problem(name: str, n: Optional[int], seed: int) -> Problem:
    n_tab, n0, _ = EXTRA_PROBLEMS[name]
    n = n_tab if n is None else int(n)
    T = 1.0 if n0 is None else n0 / n
    if name == "gmm-heikkila":
        x = make_gmm_data(n, seed=seed)
        start = torch.tensor(GMM_TRUE_THETA, dtype=x.dtype)
        return Problem(name, gmm_model, (x,), T, start, 0.1, None,
                       _LazyGrid(partial(gmm_reference, x, T)))
    if name == "gmm-truncated":
        x = make_truncated_gmm_data(n, seed=seed)
        start = torch.zeros(2, dtype=x.dtype)  # the authors' code starts at the origin
        return Problem(name, truncated_gmm_model, (x,), T, start, 0.1, None,
                       _LazyGrid(partial(truncated_gmm_reference, x, T)))
    if name == "logistic":
        X, y, w = make_logistic_data(n, seed=seed)
        return Problem(name, logistic_model, (X, y), T, torch.zeros_like(w), 0.1, None,
                       lambda k, s: nuts_reference_sample(logistic_model, (X, y), k, seed=s), site="w")
    X, y = load_randhie(n=None if n == n_tab else n, seed=seed)
    return Problem(name, poisson_model, (X, y), T, torch.zeros(X.shape[1], dtype=X.dtype), 0.1, None,
                   lambda k, s: nuts_reference_sample(poisson_model, (X, y), k, seed=s), site="w")
