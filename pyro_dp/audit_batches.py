r"""The batch a subsampled release is audited given (:func:`pyro_dp.release_audit.audit_releases`,
module doc "Subsampled releases"): the bound a release given its batch must meet where the
ledger's event is an amplified one — DP Barker's (:func:`barker_given_batch_mu`, Heikkilä et al.
2019 Thm 2 on the batch) and DP-Fast MH's (:func:`with_replacement_mu`, the per-slot Gaussian
behind Zhang & Zhang 2023 Thm 2) — and the selection stream that pins DP-Fast MH's batch from
outside the kernel (:class:`PinnedSelection`, :func:`pin_selection`). For audits and tests only.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from scipy.optimize import brentq

from .accounting.composition import with_replacement_amplification
from .accounting.gdp import gdp_delta
from .accounting.subsampled import barker_batch_rdp, dp_barker_event
from .kernels.base import DPKernel
from .mechanisms import NoiseSource, RDPCurveEvent

__all__ = ["PinnedSelection", "barker_given_batch_mu", "pin_selection", "with_replacement_mu"]


class PinnedSelection(NoiseSource):
    r"""The kernel's secret stream with its **batch selections** (Poisson counts, indices with
    and without replacement, Poisson subsamples, thinning uniforms) drawn from a second stream
    seeded with ``selection_seed``, and its **normals** (the release noise) from the kernel's own,
    fresh, stream (a mutant's scaled one included): every run with the same ``selection_seed``
    selects the same batch — DP-Fast MH's size :math:`B`, its indices drawn with replacement and
    their thinning (Zhang & Zhang 2023, Alg. 1), which :func:`~pyro_dp.mechanisms.tap_releases`
    records but cannot pin — while its noise is fresh; with ``include``, the batch drawn with
    replacement holds that row exactly once (:meth:`sample_with_replacement`: a white-box
    adversary's batch, as :func:`~pyro_dp.mechanisms.tap_releases`' ``include`` for the batches
    it pins). For the audit only, installed after the kernel's ``setup`` (:func:`pin_selection`)
    as :func:`~pyro_dp.mutants.weak_noise` installs its mutant's source; the kernel's code is
    unchanged."""

    def __init__(self, inner: NoiseSource, selection_seed: int, include: Optional[int] = None):  # noqa: D107
        self.__dict__.update(inner.__dict__)  # generator, secure_mode, device, shards: the kernel's
        self._inner = inner
        self._selection = NoiseSource(seed=int(selection_seed), device=inner.device, warn=False)
        self._include = include

    def standard_normal(self, shape=()) -> torch.Tensor:
        return self._inner.standard_normal(shape)

    def poisson_subsample(self, n, q, device=None):
        return self._selection.poisson_subsample(n, q, device=device)

    def poisson_subsamples(self, n, q, num, device=None):
        return self._selection.poisson_subsamples(n, q, num, device=device)

    def sample_without_replacement(self, n, b, device=None):
        return self._selection.sample_without_replacement(n, b, device=device)

    def sample_with_replacement(self, n, b, device=None):
        """The selection stream's draw; with ``include`` (the differing row), every copy of it
        replaced by the next row and the last slot by it: the row in the batch exactly once."""
        idx = self._selection.sample_with_replacement(n, b, device=device)
        r = self._include
        if r is not None and len(idx) and 0 <= int(r) < int(n):
            idx = torch.where(idx == int(r), (int(r) + 1) % int(n), idx)
            idx[-1] = int(r)
        return idx

    def poisson(self, rate):
        return self._selection.poisson(rate)

    def uniform(self, shape, like):
        return self._selection.uniform(shape, like=like)


_PINNED: dict = {}


def pin_selection(kernel: DPKernel, selection_seed: int, include: Optional[int] = None) -> DPKernel:
    """``kernel`` (not set up) with its secret stream wrapped in :class:`PinnedSelection` after
    every ``setup`` (a subclass per kernel class, as :func:`~pyro_dp.mutants.weak_noise` builds),
    its batch selections from the stream of ``selection_seed``, ``include`` put into its batches
    drawn with replacement. For the audit only (:func:`~pyro_dp.release_audit.audit_releases`).

    >>> import torch
    >>> from pyro_dp import DPFastMH
    >>> from pyro_dp.models.examples import normal_mean_model as model
    >>> k = pin_selection(DPFastMH(model, 0.3, lipschitz=0.05, lam=5.0, max_batch_size=10, step_epsilon=0.99,
    ...                            step_delta=1e-3), selection_seed=3, include=0)
    >>> type(k).__name__
    'PinnedSelection[DPFastMH]'
    """
    base = type(kernel)
    cls = _PINNED.get(base)
    if cls is None:
        def setup(self, warmup_steps, *args, **kwargs):
            base.setup(self, warmup_steps, *args, **kwargs)
            self._noise = PinnedSelection(self._noise, *self._audit_selection)

        cls = _PINNED[base] = type(f"PinnedSelection[{base.__name__}]", (base,), {"setup": setup})
    kernel.__class__ = cls
    kernel._audit_selection = (int(selection_seed), include)
    return kernel


def with_replacement_mu(epsilon: float, delta: float, batch_size: int, p: float) -> float:
    r"""The largest :math:`\mu_0` such that a Gaussian mechanism of :math:`\mu_0` on each slot of
    a batch of ``batch_size`` :math:`= B` slots drawn **with replacement** (each slot the changed
    row with probability at most ``p``) is :math:`(\varepsilon, \delta)`-DP by the amplification
    lemma the ledger of DP-Fast MH rests on (Zhang & Zhang 2023, App. B, eqs. (3)–(7), as
    :func:`~pyro_dp.accounting.composition.with_replacement_amplification` redoes it): the
    per-slot guarantee :math:`(\varepsilon_0, \delta_{\mu_0}(\varepsilon_0))` of the Gaussian
    (Dong, Roth & Su 2022, Cor. 2.13), at the best :math:`\varepsilon_0`, amplified to within
    :math:`(\varepsilon, \delta)`. The un-amplified :math:`\mu` a release given its batch must
    meet for its ledger's :math:`(\varepsilon, \delta)` to follow (:func:`audit_releases`).

    Computed by bisection on :math:`\mu_0` (the amplified :math:`\delta` increases with it); for
    each, :math:`\varepsilon_0` ranges over a grid of 400 points up to the largest whose
    amplified :math:`\varepsilon` is :math:`\varepsilon` (a grid can only miss a better
    :math:`\varepsilon_0`: the result is a lower bound of the supremum, within 1e-6).

    >>> round(with_replacement_mu(0.99, 1e-3, 9, 0.01), 3)
    0.985
    """
    eps, delta, b, p = float(epsilon), float(delta), int(batch_size), float(p)
    if not (eps > 0 and 0 < delta < 1 and b >= 1 and 0 < p <= 1):
        raise ValueError(f"need epsilon > 0, 0 < delta < 1, batch_size >= 1, 0 < p <= 1; got {epsilon}, {delta}, "
                         f"{batch_size}, {p}")
    amp = lambda e0, d0: with_replacement_amplification(e0, d0, b, p)  # noqa: E731
    hi = 1.0
    while amp(hi, 0.0)[0] < eps:
        hi *= 2.0
    e0_max = brentq(lambda e0: amp(e0, 0.0)[0] - eps, 0.0, hi, xtol=1e-14)
    grid = np.geomspace(e0_max * 1e-4, e0_max, 400)

    def excess(mu0):  # the smallest amplified delta over the grid, minus delta
        best = 1.0
        for e0 in grid:
            d0 = gdp_delta(float(e0), mu0)
            if d0 < 1.0:
                best = min(best, amp(float(e0), d0)[1])
        return best - delta

    lo, hi = 0.0, 1.0
    while excess(hi) <= 0:
        lo, hi = hi, 2.0 * hi
    return float(brentq(excess, lo, hi, xtol=1e-7)) if lo < hi and excess(lo) <= 0 < excess(hi) else lo


def barker_given_batch_mu(event, batch_size: int, num_rows: int) -> Optional[float]:
    r"""If ``event`` is DP Barker's ledger event for a batch of ``batch_size`` of ``num_rows`` rows
    (equal to :func:`~pyro_dp.accounting.subsampled.dp_barker_event` of them: Heikkilä et al.
    2019, Thm 2 amplified by Cor. 2), the Gaussian :math:`\mu` of its **un-amplified** curve,
    Thm 2's :math:`\varepsilon'(\alpha)` on the batch
    (:func:`~pyro_dp.accounting.subsampled.barker_batch_rdp`) over the same orders, as
    :func:`gaussian_mu_of_event` converts a curve (:math:`\min_\alpha\sqrt{2\varepsilon'(\alpha)/\alpha}`);
    else ``None``.

    >>> round(barker_given_batch_mu(dp_barker_event(20, 100), 20, 100), 3)  # Thm 2 at b = 20
    1.104
    """
    if not isinstance(event, RDPCurveEvent):
        return None
    try:
        if event != dp_barker_event(int(batch_size), int(num_rows), int(event.orders[-1])):
            return None
        rdp = barker_batch_rdp(int(batch_size), [int(a) for a in event.orders])
    except ValueError:
        return None
    return min(math.sqrt(2.0 * e / a) for a, e in zip(event.orders, rdp.tolist()))
