r"""Regression benchmarks without an exact sampler: synthetic logistic regression and Poisson
regression on the RAND Health Insurance Experiment (real data).

Neither posterior has a closed form or a cheap exact sampler; the reference is a long run of
Pyro's NUTS (:func:`nuts_reference_sample`). It is *not* cached on disk: at the sizes used in
the tests (n ≤ a few thousand, d ≤ 8) a run takes seconds to a minute; callers that need it
repeatedly should keep the draws themselves.

**Logistic regression** reuses :func:`pyro_dp.models.examples.make_logistic_data` (intercept + 2 features,
:math:`\|x_i\|\le 1`, so every per-row log-likelihood is 1-Lipschitz in the coefficients) and
:func:`pyro_dp.models.examples.logistic_model` (prior :math:`\mathcal N(0, 2^2 I)`).

**RAND HIE** (Manning et al. 1987; shipped offline by ``statsmodels.datasets.randhie``,
20 190 person-years): doctor visits ``mdvis`` ~ Poisson with log link on an intercept and
covariates scaled by **fixed public ranges**, not by data statistics (a mean/sd computed from
the data would itself be a release about the data, and would make each row's features depend on
every other row, so the neighbouring relation would no longer be "one row changes"):

* ``lncoins`` = log(coinsurance % + 1) divided by log(101): the experiment's coinsurance plans
  were 0, 25, 50 and 95 % (public design), so the range is :math:`[0, \log 101]`;
* ``idp`` (individual deductible plan), ``physlm`` (physical limitation) and ``hlthg``/``hlthf``/
  ``hlthp`` (self-rated health good/fair/poor) are 0/1 indicators;
* ``disea`` (number of chronic diseases) divided by the public cap 60 and clipped to [0, 1]
  (a public clip, as DP pre-processing does; no row exceeds it in the shipped data).

Features are then divided by :math:`\sqrt{d+1}` so :math:`\|x_i\| \le 1` with the intercept
(the same convention as the logistic data). The counts ``mdvis`` are unbounded (max 77); DP
kernels that need bounded log-likelihood ratios must clip them (they do, per row).
"""
from __future__ import annotations

import math
import warnings
from typing import Callable, Dict, Optional, Sequence, Tuple

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_median

from .examples import logistic_model, make_logistic_data

__all__ = [
    "logistic_model", "make_logistic_data", "RANDHIE_COVARIATES", "RANDHIE_SCALES", "load_randhie",
    "poisson_model", "nuts_reference_sample",
]

#: default RAND HIE covariates (statsmodels column names)
RANDHIE_COVARIATES = ("lncoins", "idp", "physlm", "disea", "hlthg", "hlthf", "hlthp")

#: fixed public ranges: column -> (divisor, upper clip after division); see the module docstring
RANDHIE_SCALES: Dict[str, Tuple[float, float]] = {
    "lncoins": (math.log(101.0), 1.0),  # coinsurance plans 0/25/50/95 %: log(c + 1) <= log 101
    "idp": (1.0, 1.0),
    "physlm": (1.0, 1.0),
    "disea": (60.0, 1.0),  # public cap on the chronic-disease count
    "hlthg": (1.0, 1.0),
    "hlthf": (1.0, 1.0),
    "hlthp": (1.0, 1.0),
}


def load_randhie(covariates: Sequence[str] = RANDHIE_COVARIATES, n: Optional[int] = None, seed: int = 0,
                 dtype=torch.float64, device=None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(X, y)``: RAND HIE features (intercept first, public scaling, ``‖x_i‖ ≤ 1``) and the
    doctor-visit counts. ``n`` draws a seeded subset of rows without replacement.

    Needs ``statsmodels`` (imported here, lazily).
    """
    try:
        from statsmodels.datasets import randhie
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("load_randhie needs statsmodels (pip install statsmodels): it ships the RAND HIE "
                          "data set offline") from e
    unknown = [c for c in covariates if c not in RANDHIE_SCALES]
    if unknown:
        raise ValueError(f"no public scaling for covariates {unknown}; choose from {sorted(RANDHIE_SCALES)}")
    df = randhie.load_pandas().data
    cols = []
    for c in covariates:
        div, hi = RANDHIE_SCALES[c]
        v = torch.tensor(df[c].to_numpy(copy=True), dtype=dtype) / div
        cols.append(v.clamp(0.0, hi))
    X = torch.stack([torch.ones_like(cols[0])] + cols, -1) / math.sqrt(len(cols) + 1)
    y = torch.tensor(df["mdvis"].to_numpy(copy=True), dtype=dtype)
    if n is not None:
        if not 1 <= int(n) <= X.shape[0]:
            raise ValueError(f"n must be in [1, {X.shape[0]}], got {n!r}")
        g = torch.Generator().manual_seed(int(seed))
        idx = torch.randperm(X.shape[0], generator=g)[: int(n)]
        X, y = X[idx], y[idx]
    return X.to(device), y.to(device)


def poisson_model(X, y, prior_scale: float = 5.0):
    r"""Poisson regression, :math:`w \sim \mathcal N(0, 5^2 I)`, :math:`y_i \sim
    \mathrm{Poisson}(\exp(x_i^\top w))`; rows indexed by the ``"data"`` plate.

    >>> X, y = torch.ones(4, 2) / 2 ** 0.5, torch.tensor([0., 1., 2., 3.])
    >>> tr = pyro.poutine.trace(pyro.poutine.condition(poisson_model, {"w": torch.zeros(2)})).get_trace(X, y)
    >>> round(float(tr.nodes["obs"]["fn"].log_prob(y).sum()), 4)  # sum_i [-1 - log y_i!]
    -6.4849
    """
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype, device=X.device),
                                     prior_scale).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("obs", dist.Poisson(torch.exp(X[idx] @ w)), obs=y[idx])


def nuts_reference_sample(model: Callable, args: tuple, num_samples: int = 2000, *, warmup_steps: int = 1000,
                          seed: int = 0, site: str = "w", temperature: float = 1.0) -> torch.Tensor:
    """Reference draws ``[num_samples, d]`` of ``site`` from Pyro's NUTS (seeded, one chain).

    ``temperature`` tempers the likelihood (``poutine.scale`` on the data plate's sites) so the
    reference matches a tempered DP run. Not exact: NUTS error is Monte Carlo error
    (check ``r_hat``/ESS via ``MCMC.summary`` when in doubt)."""
    run_model = model if temperature == 1.0 else _TemperedPrior(model, temperature)
    pyro.set_rng_seed(int(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(NUTS(run_model, init_strategy=init_to_median), num_samples=int(num_samples),
                    warmup_steps=int(warmup_steps), disable_progbar=True)
        mcmc.run(*args)
    return mcmc.get_samples()[site].reshape(int(num_samples), -1)


class _TemperedPrior:
    """``model`` with only its observed sites scaled by ``temperature`` (the prior untempered)."""

    def __init__(self, model, temperature):
        self.model, self.temperature = model, float(temperature)

    def __call__(self, *args):
        with _ObservedScale(self.temperature):
            return self.model(*args)


class _ObservedScale(pyro.poutine.messenger.Messenger):
    """Multiply the log-probability of observed sites (``pyro.factor`` sites are observed too) by ``scale``."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def _process_message(self, msg):
        if msg["type"] == "sample" and msg["is_observed"]:
            msg["scale"] = self.scale * msg["scale"]
