r"""Posterior predictive draws that never echo the observed data: :func:`posterior_predictive`.

``pyro.infer.Predictive(model, samples)(X, y)`` returns the observed sites' values: handed the
data, every "draw" of ``y`` is the raw ``y`` (Pyro conditions on ``obs=`` as it does outside
pyro_dp), and the README's model called with ``y=None`` fails at ``y[idx]`` (``TypeError:
'NoneType' object is not subscriptable``). :func:`posterior_predictive` runs the model under
:class:`pyro.poutine.uncondition`, so every site that was observed is drawn afresh from its
distribution at each posterior sample, whatever value was passed for it; and an argument given
as ``None`` reaches the model as a placeholder that indexes to ``None`` (``y[idx]`` is then
``obs=None``, an unobserved site), so the model runs as written with the outcome left out.

**What it reads.** The posterior samples (post-processing of the releases: free) and the
arguments you pass. It never returns an observed value, but the model's code runs on whatever
you pass: the covariates ``X`` of the rows you predict for are *your* choice and your
responsibility — the draws of ``y`` at the private rows' ``X`` depend on those rows' features,
which ε does not cover. For what you publish, pass public or new covariates (a grid, a
synthetic design), and ``None`` for the outcome.

>>> import torch, pyro, pyro.distributions as dist
>>> def model(X, y):
...     w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype), 2.0).to_event(1))
...     with pyro.plate("data", X.shape[0]) as idx:
...         pyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])
>>> X = torch.eye(3, dtype=torch.float64)
>>> samples = {"w": torch.randn(5, 3, dtype=torch.float64)}
>>> draws = posterior_predictive(model, samples, X, None)  # the README's model as written
>>> sorted(draws), tuple(draws["y"].shape)
(['y'], (5, 3))
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from pyro import poutine
from pyro.infer import Predictive
from pyro.poutine.subsample_messenger import _Subsample  # the fn of a plate's index site

__all__ = ["posterior_predictive", "Unobserved"]


class Unobserved:
    """What an argument given as ``None`` to :func:`posterior_predictive` becomes: indexing it
    gives ``None`` (so ``obs=y[idx]`` leaves the site unobserved); any other use raises a
    ``TypeError`` that says what to pass instead.

    >>> Unobserved("argument 0")[torch.arange(3)] is None
    True
    """

    def __init__(self, name: str):
        self._name = name

    def __getitem__(self, index):
        return None

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise TypeError(
            f"the model reads {attr!r} of the {self._name}, passed as None to posterior_predictive: pass a "
            "placeholder of the data's shape instead (e.g. torch.zeros(n)); its values are never used for a draw "
            "and never returned")

    def __len__(self):
        raise TypeError(
            f"the model takes len() of the {self._name}, passed as None to posterior_predictive: pass a "
            "placeholder of the data's shape instead (e.g. torch.zeros(n)); its values are never used for a draw "
            "and never returned")

    def __repr__(self) -> str:
        return f"Unobserved({self._name!r})"


def _placeholders(args, kwargs):
    args = tuple(Unobserved(f"positional argument {i}") if a is None else a for i, a in enumerate(args))
    kwargs = {k: Unobserved(f"argument {k!r}") if v is None else v for k, v in kwargs.items()}
    return args, kwargs


def posterior_predictive(model, samples: dict, *args, return_sites: Optional[Sequence[str]] = None,
                         parallel: bool = False, **kwargs) -> dict:
    r"""Draws of the model's observed sites (and of latents the samples do not hold) at each
    posterior sample: ``{site: tensor [num_samples, ...]}``, never the observed values
    (module docstring).

    :param model: the Pyro model the samples are from.
    :param dict samples: posterior samples, ``mcmc.get_samples()`` (``{latent: [num_samples, ...]}``).
    :param args, kwargs: the model's arguments. Pass ``None`` for an outcome the model only
        indexes (``y[idx]``); pass a placeholder of the data's shape where it reads more
        (``len(y)``, ``y.dtype``): either way its values are neither used for a draw nor
        returned. Covariates are read by the model: what you pass is yours to protect.
    :param return_sites: the sites to return (default: every sample site of the model that
        ``samples`` does not hold: the formerly observed ones and any new latents).
    :param bool parallel: Pyro's ``Predictive(parallel=...)`` (vectorised over samples; the
        model must broadcast over a leading sample dimension).
    :raises ValueError: ``samples`` holds an observed site (conditioning on it would return it),
        or is empty.

    >>> from pyro_dp.models.examples import logistic_model, make_logistic_data
    >>> X, y, _ = make_logistic_data(50)
    >>> draws = posterior_predictive(logistic_model, {"w": torch.zeros(4, 3, dtype=X.dtype)}, X, y)
    >>> any(torch.equal(d, y) for d in draws["y"])  # fresh draws, never the data passed in
    False
    """
    if not isinstance(samples, dict) or not samples:
        raise ValueError("samples must be a non-empty dict {latent site: tensor [num_samples, ...]} "
                         "(mcmc.get_samples())")
    args, kwargs = _placeholders(args, kwargs)
    free = poutine.uncondition(model)  # every observed site drawn afresh, whatever value was passed
    with torch.no_grad(), poutine.block():
        trace = poutine.trace(free).get_trace(*args, **kwargs)  # the prior: reads only what the model reads
    observed = [name for name, site in trace.nodes.items() if site["type"] == "sample"
                and (site["infer"].get("was_observed") or site["is_observed"])]
    latent = {name for name, site in trace.nodes.items() if site["type"] == "sample"
              and not isinstance(site["fn"], _Subsample)}
    held = [name for name in samples if name in observed]
    if held:
        raise ValueError(f"samples holds {held}, observed site(s) of the model: conditioning on them would return "
                         "the data; pass the latents only (mcmc.get_samples() holds only latents)")
    if return_sites is None:
        return_sites = [name for name in trace.nodes if name in latent and name not in samples]
    predictive = Predictive(free, posterior_samples=samples, return_sites=list(return_sites), parallel=parallel)
    return dict(predictive(*args, **kwargs))

