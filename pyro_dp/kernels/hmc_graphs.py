"""DP-HMC's step as one compiled graph or eager (:func:`~.hmc.hmc_step`'s helpers): the
traced terms a graph is built on, the example inputs it is compiled for, and the gradient
release's flat outputs. Data-free code paths, decided from code and shapes."""
from __future__ import annotations

import functools

import torch

from ..mechanisms import clip_and_sum

__all__ = ["traced_ratio_terms", "one_graph_or_eager", "xi_like", "flat_gradient"]


def traced_ratio_terms(ll_new, ll_old, clip, count=True):
    return clip_and_sum(ll_new - ll_old, clip, count=count)


def one_graph_or_eager(lik, cl, name, make, example, scalars, like, count=True, outputs=None):
    """``(fn, scalars)``: ``make(terms)`` built on the compiled likelihood ``cl``'s traced terms
    and compiled into one graph (:meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph`, on
    ``example(*scalars as tensors)``), with ``scalars`` as tensors of ``like``'s dtype; else
    (``cl`` is ``None``, or the model or a chunked pass cannot be one graph: decided from code
    and shapes, before any draw) ``make(terms)`` on the likelihood's own functions, run as it is
    with ``scalars`` as they are. ``terms``: ``(gradient terms, prior terms, ratio terms)``.
    ``count=False``: the graph's clipped sums do not count their clipped rows (a non-private
    statistic only ``nonprivate_diagnostics=True`` shows; :data:`~pyro_dp.mechanisms.NOT_COUNTED`).
    ``outputs``: the graph's released, diagnostic and noise positions (``fused_graph``'s keywords)."""
    if cl is not None:
        tensors = tuple(torch.as_tensor(v, dtype=like.dtype, device=like.device) for v in scalars)
        terms = ((cl.clipped_grad_terms, cl.log_prior_terms, traced_ratio_terms) if count else
                 (functools.partial(cl.clipped_grad_terms, count=False), cl.log_prior_terms,
                  functools.partial(traced_ratio_terms, count=False)))
        graph = cl.fused_graph(name if count else name + "[uncounted]", make(terms), example(*tensors), **(outputs or {}))
        if graph is not None:
            return graph, tensors
    return make((lik.clipped_grad_sum, lik.log_prior_and_grad, lik.clipped_difference_sum)), scalars


def xi_like(z, count=None):
    """Zeros of the shape of the standard normals drawn for ``count`` gradient releases at ``z``
    (one if ``None``): a graph's example input, float64 as the release specs draw them."""
    shape = tuple(z.shape) if count is None else (count,) + tuple(z.shape)
    return torch.zeros(shape, dtype=torch.float64, device=z.device)


def flat_gradient(gradient):
    def flat(z, clip, xi):
        g, ll, lp, rel = gradient(z, clip, xi)
        return g, ll, lp, rel.num_clipped, rel.num_rows
    return flat
