r"""Adapters to numerical accountants: ``dp_accounting`` (PLD, RDP) and ``prv_accountant``.

They add what the closed forms cannot do — subsampled Gaussians, mixtures with pure-DP
releases — and serve as independent oracles for :class:`GaussianAccountant`.

Conventions of the libraries, mapped here (checked against their sources, dp-accounting
0.6.0 and prv-accountant 0.2.0):

* ``dp_accounting``'s PLD with ``REPLACE_ONE`` treats ``sensitivity`` as the radius of the
  set of per-example contributions: the neighbouring outputs are centred at
  :math:`\pm s`. Our ``noise_multiplier`` is relative to the substitute sensitivity
  :math:`\Delta = 2s`, so we pass ``sensitivity=0.5`` with ``standard_deviation=nm``.
* All non-subsampled Gaussian releases are merged into one Gaussian with
  :math:`\mu = \sqrt{\sum_i c_i/\mathrm{nm}_i^2}` before discretising (their composition
  is exactly that Gaussian, Dong, Roth & Su 2019, Cor. 2.13): one discretisation instead
  of many, hence faster and tighter. Other events are aggregated per event and
  self-composed ``count`` times.
* Speed: a one-release PLD (the expensive part: ~0.1-1 s at ``1e-4``) is built once per
  (event, relation, discretisation) and kept in a small cache, so asking for the same
  mechanism at another count (budget searches, the progress bar) only self-composes it
  (an FFT power); the last few composed ledgers are cached too. PLDs are immutable.

Example
-------
>>> from pyro_dp.mechanisms import GaussianEvent
>>> acc = PLDAccountant()
>>> acc.record(GaussianEvent(60.0), 1000)
>>> acc.record(GaussianEvent(80.0), 11000)
>>> round(acc.get_epsilon(1e-5), 4)
6.5662
"""
from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

from pyro_dp.mechanisms import (
    ApproxDPEvent,
    GaussianEvent,
    PrivacyLedger,
    PureDPEvent,
    SubsampledGaussianEvent,
)

from . import gdp
from .base import Accountant

__all__ = ["PLDAccountant", "PRVAccountant", "DPAccountingRDPAccountant", "MAX_GRID_POINTS"]


#: Refuse discretisations larger than this many points (memory and minutes, not accuracy).
MAX_GRID_POINTS = 1e7
#: A subsampled Gaussian's PLD costs ~2e-5 s per grid point to build (dp-accounting 0.6.0, this
#: machine: 22 s for 1.25e6 points): above this many points the whole ledger's grid is coarsened
#: instead (still an upper bound, slightly looser), so an accountant never runs for minutes
#: (s10 audit: a DP-SGLD run with noise multiplier 0.04 never returned from its diagnostics).
MAX_SUBSAMPLED_GRID_POINTS = 5e5
#: relative guard added to every PLD result: the connect-the-dots bounds are upper bounds in exact
#: arithmetic, and floating point put them up to ~1e-11 relative below the exact value (s10 audit)
_FLOAT_GUARD = 1e-9


def _gaussian_span(noise_multiplier: float) -> float:
    """Loss span of one Gaussian release with ``mu = 1/nm`` (measured, dp-accounting 0.6.0)."""
    mu = 1.0 / noise_multiplier
    return mu * mu + 20 * mu


def _check_grid(points: float, hint: str) -> None:
    if points > MAX_GRID_POINTS:
        raise ValueError(
            f"this ledger would need a grid of ~{points:.2g} points (limit {MAX_GRID_POINTS:.0e}); "
            f"{hint}; for Gaussian releases the 'gdp' accountant is exact"
        )


def _merged_mu(events: dict) -> float:
    pairs = ((e.noise_multiplier, c) for e, c in events.items() if isinstance(e, GaussianEvent))
    return gdp.gaussian_mu(pairs)


def _subsampled(events: dict):
    return [
        (e, c)
        for e, c in events.items()
        if isinstance(e, SubsampledGaussianEvent) and math.isfinite(e.noise_multiplier)
    ]


def _dpa_relation(relation: str):
    """``dp_accounting``'s relation and the sensitivity argument for a unit-``Δ`` release
    (see the module docstring)."""
    from dp_accounting import privacy_accountant

    rel = privacy_accountant.NeighboringRelation
    return (rel.REPLACE_ONE, 0.5) if relation == "substitute" else (rel.ADD_OR_REMOVE_ONE, 1.0)


@functools.lru_cache(maxsize=32)
def _gaussian_pld(relation: str, std: float, sampling_prob: float, vdi: float):
    """One (possibly Poisson-subsampled) Gaussian release, pessimistic (connect-the-dots)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    dpa_rel, sens = _dpa_relation(relation)
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=std, sensitivity=sens, sampling_prob=sampling_prob,
        value_discretization_interval=vdi, neighboring_relation=dpa_rel, pessimistic_estimate=True)


@functools.lru_cache(maxsize=8)
def composed_pld(relation: str, events: frozenset, vdi: float):
    """The PLD of a whole aggregated ledger ``{event: count}`` (cached: the same ledger is
    often asked for ε and δ, or by several accountant objects)."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    events = dict(events)
    parts = []
    # a subsampled Gaussian's span is at most its unsubsampled one's: coarsen the grid of the whole
    # ledger (PLDs compose on one grid) when it would be too slow to build
    spans = [_gaussian_span(e.noise_multiplier) for e, _ in _subsampled(events)]
    vdi = max([vdi] + [sp / MAX_SUBSAMPLED_GRID_POINTS for sp in spans])
    mu = _merged_mu(events)
    # the Gaussian PLD spans about mu^2 + 20 mu in loss (_gaussian_span)
    _check_grid((mu * mu + 20 * mu) / vdi, "increase value_discretization_interval")
    if mu > 0:
        parts.append(_gaussian_pld(relation, 1.0 / mu, 1.0, vdi))
    for e, c in sorted(_subsampled(events), key=repr):
        parts.append(_gaussian_pld(relation, e.noise_multiplier, e.sample_rate, vdi).self_compose(c))
    for e, c in sorted(events.items(), key=repr):
        if isinstance(e, (PureDPEvent, ApproxDPEvent)):
            params = common.DifferentialPrivacyParameters(e.epsilon, getattr(e, "delta", 0.0))
            parts.append(pld_lib.from_privacy_parameters(params, vdi).self_compose(c))
    out = pld_lib.identity(vdi) if not parts else parts[0]
    for p in parts[1:]:
        out = out.compose(p)
    return out


_composed_pld = composed_pld  # its former name (benchmarks/calibration.py clears its cache by it)


class PLDAccountant(Accountant):
    r"""Privacy-loss-distribution accountant over ``dp_accounting.pld``
    (Koskela et al. 2020; Doroshenko et al. 2022 "connect the dots").

    The PLDs are built with ``pessimistic_estimate=True`` (connect-the-dots, tails
    truncated into the infinite-loss mass), so :math:`\varepsilon` and :math:`\delta` are
    upper bounds; ``value_discretization_interval`` trades accuracy for speed.

    Supports :class:`GaussianEvent`; ``SubsampledGaussianEvent(scheme="poisson")`` on both
    relations (``add_remove`` -> ``ADD_OR_REMOVE_ONE``; ``substitute`` -> ``REPLACE_ONE``,
    which assumes the per-example contributions lie in a ball of radius :math:`\Delta/2`
    around the origin — true for clip-then-sum, :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`);
    :class:`PureDPEvent` and :class:`ApproxDPEvent` through the dominating pair of an
    :math:`(\varepsilon,\delta)`-DP mechanism (``from_privacy_parameters``; Kairouz, Oh &
    Viswanath 2015). Sampling without replacement and RDP curves are refused.

    >>> acc = PLDAccountant(relation="add_remove")
    >>> acc.record(SubsampledGaussianEvent(sample_rate=0.01, noise_multiplier=1.0), 1000)
    >>> round(acc.get_epsilon(1e-5), 2)
    1.83
    """

    name = "pld"

    def __init__(
        self,
        ledger: Optional[PrivacyLedger] = None,
        *,
        relation: Optional[str] = None,
        value_discretization_interval: float = 1e-4,
    ):
        super().__init__(ledger, relation=relation)
        self._configure(value_discretization_interval=value_discretization_interval)

    def _configure(self, *, value_discretization_interval=1e-4, **rest):
        vdi = float(value_discretization_interval)
        if not (vdi > 0 and math.isfinite(vdi)):
            raise ValueError(f"value_discretization_interval must be > 0, got {vdi!r}")
        super()._configure(value_discretization_interval=vdi, **rest)

    def _unsupported(self, event):
        if isinstance(event, (GaussianEvent, PureDPEvent, ApproxDPEvent)):
            return None
        if isinstance(event, SubsampledGaussianEvent):
            if event.scheme == "poisson":
                return None
            return "dp_accounting's PLD has no analysis of sampling without replacement"
        return f"no PLD for {type(event).__name__}"

    @classmethod
    def search_options(cls, options: dict) -> dict:
        """A 10x coarser grid (~10x faster; within ~1e-3 relative of the fine ε in the
        settings of ``tests/accounting/test_tightness.py``) to locate search results."""
        vdi = float(options.get("value_discretization_interval", 1e-4))
        return {**options, "value_discretization_interval": 10 * vdi}

    def _pld(self, events: dict):
        return composed_pld(self.relation, frozenset(events.items()), self._opts["value_discretization_interval"])

    def _epsilon(self, events, delta):
        eps = max(0.0, float(self._pld(events).get_epsilon_for_delta(delta)))
        return eps * (1 + _FLOAT_GUARD) if eps > 0 else eps  # pessimistic rounding (_FLOAT_GUARD)

    def _delta(self, events, epsilon):
        return min(1.0, float(self._pld(events).get_delta_for_epsilon(epsilon)) * (1 + _FLOAT_GUARD))


class PRVAccountant(Accountant):
    r"""Privacy-random-variable accountant over ``prv_accountant`` (Gopi, Lee & Wutschitz
    2021). Returns the library's **upper** bounds: :math:`\varepsilon` is
    :math:`\varepsilon_{\rm est}(\delta - \delta_{\rm err}) + \varepsilon_{\rm err}`.

    Supports :class:`GaussianEvent` and, on ``add_remove`` ledgers only,
    ``SubsampledGaussianEvent(scheme="poisson")`` (the library's analysis is for
    add/remove, as in Opacus).

    :param eps_error: :math:`\varepsilon_{\rm err}` (default 0.01, Opacus's default): the
        returned :math:`\varepsilon` exceeds the truth by at most about this much.
    :param delta_error: :math:`\delta_{\rm err}`; default ``delta/1000`` in
        :meth:`get_epsilon` (as Opacus) and ``1e-10`` in :meth:`get_delta`.

    >>> acc = PRVAccountant()
    >>> acc.record(GaussianEvent(60.0), 1000)
    >>> acc.record(GaussianEvent(80.0), 11000)
    >>> round(acc.get_epsilon(1e-5), 4)  # exact value 6.5662
    6.5765
    """

    name = "prv"

    def __init__(
        self,
        ledger: Optional[PrivacyLedger] = None,
        *,
        relation: Optional[str] = None,
        eps_error: float = 0.01,
        delta_error: Optional[float] = None,
    ):
        super().__init__(ledger, relation=relation)
        self._configure(eps_error=eps_error, delta_error=delta_error)

    def _configure(self, *, eps_error=0.01, delta_error=None, **rest):
        eps_error = float(eps_error)
        if not (eps_error > 0 and math.isfinite(eps_error)):
            raise ValueError(f"eps_error must be > 0, got {eps_error!r}")
        if delta_error is not None and not 0 < float(delta_error) < 1:
            raise ValueError(f"delta_error must be in (0, 1), got {delta_error!r}")
        super()._configure(eps_error=eps_error, delta_error=delta_error, **rest)

    @classmethod
    def search_options(cls, options: dict) -> dict:
        """A 10x larger ``eps_error`` (a 10x coarser mesh) to locate search results."""
        return {**options, "eps_error": 10 * float(options.get("eps_error", 0.01))}

    def _unsupported(self, event):
        if isinstance(event, GaussianEvent):
            return None
        if isinstance(event, SubsampledGaussianEvent):
            if event.scheme != "poisson":
                return "prv_accountant has no analysis of sampling without replacement"
            if self.relation != "add_remove":
                return "prv_accountant's Poisson-subsampled Gaussian is analysed for add/remove only"
            return None
        return f"prv adapter supports Gaussian mechanisms only, not {type(event).__name__}"

    def _accountant(self, events, delta_error):
        import prv_accountant as prv

        prvs, counts = [], []
        mu = _merged_mu(events)
        if mu > 0:
            prvs.append(prv.GaussianMechanism(noise_multiplier=1.0 / mu))
            counts.append(1)
        for e, c in _subsampled(events):
            prvs.append(prv.PoissonSubsampledGaussianMechanism(
                sampling_probability=e.sample_rate, noise_multiplier=e.noise_multiplier))
            counts.append(c)
        if not prvs:
            return None, counts
        from prv_accountant.accountant import compute_safe_domain_size

        eps_error = self._opts["eps_error"]
        half_width = compute_safe_domain_size(prvs, counts, eps_error=eps_error, delta_error=delta_error)
        # mesh size of prv_accountant.PRVAccountant (Gopi et al. 2021, Thm 5.5)
        mesh = eps_error / math.sqrt(sum(counts) / 2 * math.log(12 / delta_error))
        _check_grid(2 * half_width / mesh, "increase eps_error")
        acc = prv.PRVAccountant(prvs, eps_error=self._opts["eps_error"], delta_error=delta_error,
                                max_self_compositions=counts)
        return acc, counts

    def _epsilon(self, events, delta):
        acc, counts = self._accountant(events, self._opts["delta_error"] or delta / 1000)
        if acc is None:
            return 0.0
        try:
            return max(0.0, acc.compute_epsilon(delta, counts)[2])
        except RuntimeError:  # prv_accountant finds no root when delta is above delta(0): then epsilon is 0
            if self._delta(events, 0.0) <= delta:
                return 0.0
            raise

    def _delta(self, events, epsilon):
        acc, counts = self._accountant(events, self._opts["delta_error"] or 1e-10)
        if acc is None:
            return 0.0
        return max(0.0, acc.compute_delta(epsilon, counts)[2])


class DPAccountingRDPAccountant(Accountant):
    r"""RDP accountant over ``dp_accounting.rdp.RdpAccountant`` (improved conversion of
    Canonne, Kamath & Steinke 2020): a second, independent RDP implementation.

    Supports :class:`GaussianEvent`; :class:`PureDPEvent` (as
    :math:`\varepsilon^2/2`-zCDP, Bun & Steinke 2016 Prop. 1.4);
    ``SubsampledGaussianEvent(scheme="poisson")`` on ``add_remove`` ledgers and
    ``scheme="without_replacement"`` on ``substitute`` ledgers (Wang, Balle &
    Kasiviswanathan 2019, Thm 27, which is stated for replace-one and fixed batch size).

    :param orders: RDP orders (default ``dp_accounting``'s grid).

    >>> acc = DPAccountingRDPAccountant()
    >>> acc.record(SubsampledGaussianEvent(0.01, 1.0, scheme="without_replacement"), 100)
    >>> round(acc.get_epsilon(1e-5), 3)
    1.483
    """

    name = "dp_rdp"

    def __init__(
        self,
        ledger: Optional[PrivacyLedger] = None,
        *,
        relation: Optional[str] = None,
        orders: Optional[Sequence[float]] = None,
    ):
        super().__init__(ledger, relation=relation)
        self._configure(orders=orders)

    def _configure(self, *, orders=None, **rest):
        if orders is not None:
            orders = tuple(float(a) for a in orders)
            if not orders or min(orders) <= 1:
                raise ValueError("orders must be a non-empty sequence of values > 1")
        super()._configure(orders=orders, **rest)

    def _unsupported(self, event):
        if isinstance(event, (GaussianEvent, PureDPEvent)):
            return None
        if isinstance(event, SubsampledGaussianEvent):
            need = "add_remove" if event.scheme == "poisson" else "substitute"
            if self.relation != need:
                return f"dp_accounting analyses scheme={event.scheme!r} under {need!r} only"
            return None
        return f"dp_rdp adapter does not support {type(event).__name__}"

    def _accountant(self, events):
        from dp_accounting import dp_event as de
        from dp_accounting import privacy_accountant
        from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

        rel = privacy_accountant.NeighboringRelation
        acc = rdp_lib.RdpAccountant(
            orders=self._opts["orders"],
            neighboring_relation=rel.REPLACE_ONE if self.relation == "substitute" else rel.ADD_OR_REMOVE_ONE,
        )
        mu = _merged_mu(events)
        if mu > 0:  # RDP of a Gaussian is alpha/(2 nm^2) under either relation here
            acc.compose(de.GaussianDpEvent(1.0 / mu))
        for e, c in _subsampled(events):
            g = de.GaussianDpEvent(e.noise_multiplier)
            if e.scheme == "poisson":
                acc.compose(de.PoissonSampledDpEvent(e.sample_rate, g), c)
            else:  # dp_accounting uses only the ratio sample_size / source_dataset_size
                acc.compose(de.SampledWithoutReplacementDpEvent(1, e.sample_rate, g), c)
        for e, c in events.items():
            if isinstance(e, PureDPEvent):
                acc.compose(de.ZCDpEvent(rho=e.epsilon**2 / 2, xi=0.0), c)
        return acc

    def _epsilon(self, events, delta):
        return float(self._accountant(events).get_epsilon(delta))

    def _delta(self, events, epsilon):
        return float(self._accountant(events).get_delta(epsilon))
