"""Row subsampling lives in :mod:`pyro_dp.mechanisms` (batches are drawn from the secret
stream, :class:`~pyro_dp.mechanisms.NoiseSource`); this module re-exports the two samplers.

>>> from pyro_dp.kernels.subsampling import poisson_subsample, sample_without_replacement
"""
from ..mechanisms import poisson_subsample, sample_without_replacement

__all__ = ["sample_without_replacement", "poisson_subsample"]
