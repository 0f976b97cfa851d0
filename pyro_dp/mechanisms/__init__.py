r"""Privacy mechanisms as values, the ledger that records them, and the one audited
function that releases a clipped, noised sum: the mechanisms layer, the only place that draws
release noise and batches.

Every time a kernel touches data it releases the output of a *mechanism*. The
mechanism is described by a frozen, hashable *event* record (in the spirit of
``dp_accounting.dp_event``): what kind of mechanism, with which noise relative to
its sensitivity, how many times. Events go into a :class:`PrivacyLedger`; an
accountant (:mod:`pyro_dp.accounting`) composes the ledger into an
:math:`(\varepsilon, \delta)` statement and knows nothing about MCMC.

Conventions
-----------
* Neighbouring relation: **substitute one row** (the papers'), unless a ledger is
  created with ``relation="add_remove"``.
* ``noise_multiplier`` is always :math:`\sigma / \Delta_2`: the standard deviation of
  the Gaussian noise divided by the :math:`\ell_2`-sensitivity of the released query
  *under the ledger's neighbouring relation*. For a sum of per-example terms each
  clipped to norm :math:`b`, the substitute sensitivity is :math:`2b`
  (Räisä 2021 thesis, §3.1: :math:`c(\theta,\theta') \le 2L\|\theta-\theta'\|`).

Modules
-------
* ``events.py``: the frozen event values and :class:`PrivacyLedger`;
* ``noise.py``: :class:`NoiseSource`, the secret stream;
* ``batches.py``: batch selection (uniform subsets, Poisson samples);
* ``clipping.py``: the per-row rule, the clip and the sum;
* ``release.py``: the noisy releases and their events.

Every public name is importable from ``pyro_dp.mechanisms`` itself.

Example
-------
>>> import torch
>>> from pyro_dp.mechanisms import NoiseSource, clipped_sum_with_noise, PrivacyLedger
>>> ledger = PrivacyLedger()
>>> noise = NoiseSource()  # the secret stream: seeded from OS entropy
>>> values = torch.tensor([[3.0, 4.0], [0.3, 0.4]], dtype=torch.float64)
>>> out = clipped_sum_with_noise(values, clip=1.0, noise_multiplier=0.0, noise=noise)
>>> out.value  # (0.6, 0.8) + (0.3, 0.4), no noise
tensor([0.9000, 1.2000], dtype=torch.float64)
>>> out.clipped_fraction
0.5
>>> ledger.record(GaussianEvent(noise_multiplier=2.0))
>>> ledger.record(GaussianEvent(noise_multiplier=2.0))
>>> ledger.entries
(LedgerEntry(event=GaussianEvent(noise_multiplier=2.0), count=2),)
"""
from __future__ import annotations

# the private names other modules and tests import: _first_occurrences, _gaussian_event
from .batches import (_first_occurrences, batch_with_replacement, batch_without_replacement,  # noqa: F401
                      poisson_batch, poisson_batch_size, poisson_count, poisson_subsample, sample_without_replacement,
                      thinning_uniforms)
from .clipping import (ClippedSum, clip_and_sum, clip_and_sum_columns, clip_rows, clip_scalars, finite_row_mask,
                       finite_rows, finite_scalars)
from .events import (RELATIONS, ApproxDPEvent, GaussianEvent, LedgerEntry, NonPrivateEvent, PrivacyEvent,
                     PrivacyLedger, PureDPEvent, RDPCurveEvent, SubsampledGaussianEvent, gaussian_event,
                     subsampled_gaussian_event)
from .noise import NoiseSource, ReproducibleNoiseWarning, seed_from_os
from .release import (GaussianReleaseSpec, GaussianStdReleaseSpec, NoisyRelease, SumRelease, _gaussian_event,  # noqa: F401
                      add_gaussian_noise, clipped_sum_with_noise, draw_gaussian_noise, gaussian_release,
                      gaussian_release_spec, noisy_count, noisy_histogram)

__all__ = [
    "RELATIONS",
    "PrivacyEvent",
    "GaussianEvent",
    "SubsampledGaussianEvent",
    "subsampled_gaussian_event",
    "gaussian_event",
    "PureDPEvent",
    "ApproxDPEvent",
    "RDPCurveEvent",
    "NonPrivateEvent",
    "seed_from_os",
    "LedgerEntry",
    "PrivacyLedger",
    "NoiseSource",
    "ReproducibleNoiseWarning",
    "sample_without_replacement",
    "poisson_subsample",
    "poisson_batch_size",
    "poisson_batch",
    "batch_without_replacement",
    "batch_with_replacement",
    "poisson_count",
    "thinning_uniforms",
    "NoisyRelease",
    "finite_row_mask",
    "finite_rows",
    "finite_scalars",
    "clip_rows",
    "clip_scalars",
    "ClippedSum",
    "clip_and_sum",
    "clip_and_sum_columns",
    "clipped_sum_with_noise",
    "draw_gaussian_noise",
    "add_gaussian_noise",
    "gaussian_release",
    "GaussianReleaseSpec",
    "gaussian_release_spec",
    "GaussianStdReleaseSpec",
    "SumRelease",
    "noisy_histogram",
    "noisy_count",
]
