r"""Benchmark posteriors with exact reference samplers (Räisä 2021 thesis, ch. 5 and Table 6.1).

Each model is a Pyro model whose observed sites lie in ``pyro.plate("data", N) as idx`` and
index their data by ``idx``; each comes with a seeded data generator and an exact sampler of
its (tempered) posterior.

* :mod:`~pyro_dp.models.gaussian` — Gaussian with known covariance (conjugate);
* :mod:`~pyro_dp.models.banana` — the Bayesian banana of thesis Thm 12;
* :mod:`~pyro_dp.models.circle` — the circle model of thesis §5.3 (exact sampler via polar
  coordinates).

:func:`get_problem` builds the eight benchmarks of thesis Table 6.1 by name (``n`` may be
lowered for quick runs; the tempering :math:`T = n_0/n` follows the chosen ``n``).

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
from .gaussian import (
    correlated_cov,
    diagonal_cov,
    gaussian_model,
    gaussian_posterior,
    gaussian_reference_sample,
    make_gaussian_data,
)

__all__ = [
    "Banana", "banana_lik_scale", "banana_model", "banana_posterior", "banana_reference_sample",
    "banana_true_theta", "make_banana_data",
    "circle_log_density", "circle_model", "circle_reference_sample", "make_circle_data",
    "correlated_cov", "diagonal_cov", "gaussian_model", "gaussian_posterior",
    "gaussian_reference_sample", "make_gaussian_data",
    "Problem", "TABLE_6_1", "get_problem",
]

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


@dataclass(frozen=True)
class Problem:
    """One benchmark: call ``model(*args)``; ``temperature`` goes to the kernel.

    :ivar start: centre of the DP runs' random starting points (thesis code: :math:`\\theta^*`
        for the Gaussians and bananas, ``(0, 1)`` for the circle); ``start_sd`` their spread.
    :ivar posterior: closed-form posterior distribution (``None`` for the circle).
    """

    name: str
    model: Callable
    args: tuple
    temperature: float
    start: torch.Tensor
    start_sd: float
    posterior: Optional[object]
    _sampler: Callable = field(repr=False)

    def init_strategy(self):
        """Data-free Pyro init strategy at ``start`` (needed for the circle, whose flat prior
        cannot be sampled): ``PrivateLikelihood(p.model, p.args, init_strategy=p.init_strategy())``."""
        from pyro.infer.autoguide.initialization import init_to_value

        return init_to_value(values={"theta": self.start})

    def reference_sample(self, num_samples: int, seed: int = 0) -> torch.Tensor:
        """Exact iid draws from the (tempered) posterior."""
        return self._sampler(num_samples, seed)


def get_problem(name: str, n: Optional[int] = None, seed: int = 0) -> Problem:
    """Build a Table 6.1 benchmark (data drawn with ``seed``; ``n`` overrides the table)."""
    if name not in TABLE_6_1:
        raise KeyError(f"unknown problem {name!r}; choose from {sorted(TABLE_6_1)}")
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
        model = partial(gaussian_model, cov=cov, prior_var=s0)
        start = torch.zeros(d, dtype=X.dtype)
        start[1] = 3.0
        return Problem(name, model, (X,), T, start, start_sd, post,
                       lambda k, s: gaussian_reference_sample(post, k, s))
    r = make_circle_data(n, seed=seed)
    model = partial(circle_model, a=a)
    return Problem(name, model, (r,), T, torch.tensor([0.0, 1.0], dtype=r.dtype), start_sd, None,
                   lambda k, s: circle_reference_sample(r, k, a=a, temperature=T, seed=s))
