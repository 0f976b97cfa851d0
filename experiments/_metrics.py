r"""The thesis code's scalar sample-quality metrics, used by the sampling experiments
(private to :mod:`experiments`; the per-dimension versions are :mod:`pyro_dp.evaluation`).

Both follow the thesis code (``oraisa/masters-thesis``, ``rwmh_clipping.py`` and ``util.py``):
Euclidean norms of the difference of per-dimension moments between the chain and the
reference sample.

>>> import torch
>>> x = torch.tensor([[0.0, 0.0], [2.0, 2.0]])
>>> y = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
>>> float(mean_error(x, y)), float(variance_error(x, y))
(0.0, 1.4142135623730951)
"""
from __future__ import annotations

import torch

__all__ = ["mean_error", "variance_error"]


def mean_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    r""":math:`\|\bar x - \bar y\|_2` (thesis code ``mean_error``; DP-HMC paper §4, "distance of the means"):
    the Euclidean norm of :func:`pyro_dp.evaluation.mean_error`'s per-dimension errors."""
    from pyro_dp.evaluation import mean_error as per_dimension

    return float(torch.linalg.vector_norm(per_dimension(torch.as_tensor(x).double(), torch.as_tensor(ref).double())))


def variance_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    r""":math:`\|\mathrm{var}(x) - \mathrm{var}(y)\|_2` of the per-dimension (biased, ``np.var``)
    variances (thesis code ``var_error``). Not :func:`pyro_dp.evaluation.variance_error`,
    which uses unbiased variances (Heikkilä Fig. 3); the thesis figures use the biased ones."""
    x, ref = torch.as_tensor(x).double(), torch.as_tensor(ref).double()
    return float(torch.linalg.vector_norm(x.var(0, unbiased=False) - ref.var(0, unbiased=False)))
