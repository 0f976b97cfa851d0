r"""Scales and a start that the kernels and the default path both use (issue 63: the default path
is a layer above the kernels, :mod:`pyro_dp.default_path`, and no kernel imports it; what a kernel
itself needs lives here, below it).

* :func:`penalty_jump_length`, :func:`posterior_scale_guess`: pure functions of public numbers,
  from which the default path sets step sizes and :class:`~pyro_dp.kernels.grouped.DPGroupedPenalty`
  its group scale;
* :func:`private_norm_quantiles`: the noisy-histogram quantile of per-row norms over
  :data:`NORM_BIN_EDGES` (Dwork & Lei 2009 §3), the tuner's and DPGroupedPenalty's group clip;
* :func:`init_to_center`: the data-free start a kernel picks when its settings are left to the
  default path.

They were in ``default_path/tuning.py`` (now :mod:`pyro_dp.default_path.tuning`, which re-exports them).
"""
from __future__ import annotations

import math

import torch
from pyro.infer.autoguide.initialization import init_to_median

from ..mechanisms import noisy_histogram

__all__ = ["NORM_BIN_EDGES", "init_to_center", "private_norm_quantiles", "penalty_jump_length",
           "posterior_scale_guess"]

#: Upper edges of the data-free bins of the gradient-norm histograms: 4 per decade from 1e-4
#: to 1e5 (a quantile is rounded **up** to an edge, i.e. by at most a factor 10^(1/4) = 1.78;
#: norms above the last edge are counted in an overflow bin and give the last edge).
NORM_BIN_EDGES = tuple(10.0 ** (k / 4.0) for k in range(-16, 21))


def init_to_center(site=None):
    """Data-free start of the default path: each latent's prior mean where it is finite, else
    the median of 1001 prior draws (Pyro's ``init_to_median`` takes 15, whose median varies
    from run to run by a sizeable part of the prior's scale). Reads no data.

    >>> import pyro, pyro.distributions as dist
    >>> from pyro import poutine
    >>> from pyro.infer.autoguide.initialization import InitMessenger
    >>> def m():
    ...     pyro.sample("a", dist.Normal(1.0, 5.0)); pyro.sample("s", dist.HalfCauchy(1.0))
    >>> tr = poutine.trace(InitMessenger(init_to_center)(m)).get_trace()
    >>> float(tr.nodes["a"]["value"]), 0.7 < float(tr.nodes["s"]["value"]) < 1.3
    (1.0, True)
    """
    if site is None:
        return init_to_center
    fn = site["fn"]
    try:
        value = fn.mean.detach()
        if bool(torch.isfinite(value).all()):
            if hasattr(fn, "_validate_sample"):
                # Pyro's own support-and-shape check of a sample (no public equivalent that also checks the shape)
                fn._validate_sample(value)  # architecture: private-read (pyro's Distribution, third-party)
            return value
    except (NotImplementedError, ValueError):  # no mean (e.g. Cauchy), or one outside the support
        pass
    return init_to_median(site, num_samples=1001)


def private_norm_quantiles(lik, norms, quantiles, noise_multiplier, noise, relation="substitute", record=None):
    r"""Private upper quantiles of per-example ``norms`` ``[B]`` (**private**: only binned and
    released here): one :func:`~pyro_dp.mechanisms.noisy_histogram` over :data:`NORM_BIN_EDGES` (a
    row whose norm is not finite is counted in the overflow bin: the per-row rule), then, for each
    :math:`q`, the smallest edge above which the noisy counts leave at most :math:`(1-q)N` rows
    (scanning down from the top, so the answer is monotone in :math:`q`; Dwork & Lei 2009 §3).
    Returns ``(quantiles, event)``; ``record(event)`` is called right after the release."""
    edges = torch.tensor(NORM_BIN_EDGES, dtype=torch.float64, device=lik.device)
    norms = norms.to(torch.float64)  # reads the data ...
    finite = torch.isfinite(norms)
    bins = torch.bucketize(torch.where(finite, norms, torch.zeros_like(norms)), edges)  # edges[k-1] < x <= edges[k]
    bins = torch.where(finite, bins, torch.full_like(bins, len(edges)))  # per-row rule: overflow bin
    rel = noisy_histogram(bins, len(edges) + 1, noise_multiplier, noise, relation)  # ... released here
    if record is not None:
        record(rel.event)
    n = getattr(lik, "global_num_rows", lik.num_rows)  # public N (all ranks)
    counts = rel.value.cpu()
    above = torch.flip(torch.cumsum(torch.flip(counts, (0,)), 0), (0,)) - counts  # rows above edge k
    out = []
    for q in quantiles:
        k = len(edges) - 1  # the last edge also stands for the overflow bin
        while k > 0 and float(above[k - 1]) <= (1.0 - q) * n:
            k -= 1
        out.append(float(edges[k]))
    return out, rel.event


def penalty_jump_length(noise_multiplier: float, clip: float, temperature: float = 1.0) -> float:
    r"""The jump length :math:`\|\theta'-\theta\|` at which the penalty test's noise on the
    tempered ratio has standard deviation 1: :math:`T\cdot\mathrm{nm}\cdot 2b\|\theta'-\theta\| = 1`
    (the substitute sensitivity :math:`2b\|\theta'-\theta\|`, thesis §3.1). The penalty
    :math:`e^{-T^2\sigma^2/2}` (Yıldırım & Ermiş 2019 §3.1) rejects much longer jumps.
    Data-free. ``inf`` in the noise-free test mode.

    >>> penalty_jump_length(10.0, 0.5)
    0.1
    """
    s = 2.0 * float(noise_multiplier) * float(clip) * float(temperature)
    return math.inf if s == 0 else 1.0 / s


def posterior_scale_guess(grad_norm: float, num_rows: int, dim: int, temperature: float = 1.0) -> float:
    r"""A guess of the posterior standard deviation per coordinate from a typical per-example
    gradient norm :math:`g`: the Fisher information per row and coordinate is about
    :math:`g^2/d`, so :math:`\mathrm{sd}\approx\sqrt{d}/(g\sqrt{TN})` (Bernstein–von Mises).
    Post-processing of a private quantile; used only as a cap on step sizes.

    >>> posterior_scale_guess(2.0, 10_000, 4)
    0.01
    """
    return math.sqrt(dim) / (float(grad_norm) * math.sqrt(float(temperature) * num_rows))
