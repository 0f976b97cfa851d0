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
* ``recorder.py``: :func:`recording`, the scope in which every release records its event as
  it draws (the ledger is written from it: no release without a record);
* ``release.py``: the noisy releases and their events;
* ``tap.py``: :func:`tap_releases`, the audit's white-box view of every release (eager only).

Every public name is importable from ``pyro_dp.mechanisms`` itself.

Example
-------
>>> import torch
>>> from pyro_dp.mechanisms import NoiseSource, clipped_sum_with_noise, PrivacyLedger, recording
>>> ledger = PrivacyLedger()
>>> noise = NoiseSource()  # the secret stream: seeded from OS entropy
>>> values = torch.tensor([[3.0, 4.0], [0.3, 0.4]], dtype=torch.float64)
>>> with recording() as drawn:  # every release records its event here (a kernel's step opens one)
...     out = clipped_sum_with_noise(values, clip=1.0, noise_multiplier=0.0, noise=noise)
>>> out.value  # (0.6, 0.8) + (0.3, 0.4), no noise
tensor([0.9000, 1.2000], dtype=torch.float64)
>>> out.clipped_fraction
0.5
>>> drawn.events
[NonPrivateEvent()]
>>> ledger.record(GaussianEvent(noise_multiplier=2.0))
>>> ledger.record(GaussianEvent(noise_multiplier=2.0))
>>> ledger.entries
(LedgerEntry(event=GaussianEvent(noise_multiplier=2.0), count=2),)
"""
from __future__ import annotations

from . import batches, clipping, events, noise, recorder, release, tap
from .batches import *  # noqa: F401,F403 (each module's __all__)
from .clipping import *  # noqa: F401,F403
from .events import *  # noqa: F401,F403
from .noise import *  # noqa: F401,F403
from .recorder import *  # noqa: F401,F403
from .release import *  # noqa: F401,F403
from .tap import *  # noqa: F401,F403

#: every public name of the layer, module by module
__all__ = (events.__all__ + noise.__all__ + batches.__all__ + clipping.__all__ + recorder.__all__ + release.__all__
           + tap.__all__)
