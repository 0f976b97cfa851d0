r"""Closed-form accountants: exact Gaussian composition (GDP), zCDP and RDP.

Each is a thin object over the pure functions of :mod:`~pyro_dp.accounting.gdp`,
:mod:`~pyro_dp.accounting.zcdp` and :mod:`~pyro_dp.accounting.rdp`.

Example: the heterogeneous composition of FACTS.md (1000 releases with
:math:`\Delta=1, \sigma=60` and 11000 with :math:`\Delta=0.5, \sigma=40`)

>>> from pyro_dp.mechanisms import GaussianEvent
>>> events = [(GaussianEvent(60.0), 1000), (GaussianEvent(80.0), 11000)]
>>> for cls in (GaussianAccountant, ZCDPAccountant, RDPAccountant):
...     acc = cls()
...     for e, c in events:
...         acc.record(e, c)
...     print(cls.name, round(acc.get_epsilon(1e-5), 4))
gdp 6.5662
zcdp 7.7785
rdp 7.0701
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np

from pyro_dp.mechanisms import (
    GaussianEvent,
    PrivacyEvent,
    PrivacyLedger,
    PureDPEvent,
    RDPCurveEvent,
    SubsampledGaussianEvent,
)

from . import gdp, rdp, zcdp
from .base import Accountant, UnsupportedEventError

__all__ = ["GaussianAccountant", "ZCDPAccountant", "RDPAccountant"]


class GaussianAccountant(Accountant):
    r"""Exact accountant for compositions of (non-subsampled) Gaussian mechanisms.

    The ledger is :math:`\mu`-GDP with :math:`\mu = \sqrt{\sum_i c_i/\mathrm{nm}_i^2}`
    (Dong, Roth & Su 2019, Cor. 2.13; Räisä 2021 thesis, Thm 6 and Thm 11), and
    :math:`\varepsilon(\delta)` is the root of the closed-form curve, rounded up. This is
    the tightest possible statement for these mechanisms and the default for kernels.
    Supports :class:`GaussianEvent` only.

    >>> acc = GaussianAccountant()
    >>> acc.record(GaussianEvent(noise_multiplier=60.0), 1000)
    >>> acc.record(GaussianEvent(noise_multiplier=80.0), 11000)
    >>> round(acc.mu, 6), round(acc.get_epsilon(1e-5), 5)
    (1.412985, 6.56618)
    """

    name = "gdp"

    def _unsupported(self, event: PrivacyEvent) -> Optional[str]:
        if isinstance(event, GaussianEvent):
            return None
        if isinstance(event, SubsampledGaussianEvent):
            return "subsampled Gaussians are not GDP in closed form; use 'pld' or 'prv'"
        return "only GaussianEvent has an exact closed form; use 'pld', 'rdp' or 'zcdp'"

    @staticmethod
    def _mu_of(events: dict) -> float:
        return gdp.gaussian_mu((e.noise_multiplier, c) for e, c in events.items())

    @property
    def mu(self) -> float:
        r"""The GDP parameter :math:`\mu` of the ledger (``inf`` if it is non-private)."""
        events = self._events()
        return math.inf if events is None else self._mu_of(events)

    def _epsilon(self, events, delta):
        return gdp.gdp_epsilon(delta, self._mu_of(events))

    def _delta(self, events, epsilon):
        return gdp.gdp_delta(epsilon, self._mu_of(events))


class ZCDPAccountant(Accountant):
    r"""zCDP accountant (Bun & Steinke 2016): :math:`\rho` adds up; Gaussian releases cost
    :math:`1/(2\,\mathrm{nm}^2)`, :math:`\varepsilon`-DP releases :math:`\varepsilon^2/2`;
    converted with :math:`\varepsilon = \rho + 2\sqrt{\rho\ln(1/\delta)}` (thesis Thm 1).
    Loose; provided to reproduce the zCDP budgets of thesis Thm 5 and Thm 10.

    >>> acc = ZCDPAccountant()
    >>> acc.record(GaussianEvent(noise_multiplier=10.0), 100)
    >>> acc.rho, round(acc.get_epsilon(1e-5), 4)
    (0.5, 5.2985)
    """

    name = "zcdp"

    def _unsupported(self, event):
        if isinstance(event, (GaussianEvent, PureDPEvent)):
            return None
        return "zCDP is implemented for GaussianEvent and PureDPEvent only"

    @staticmethod
    def _rho_of(events: dict) -> float:
        terms = []
        for e, c in events.items():
            if isinstance(e, GaussianEvent):
                if math.isfinite(e.noise_multiplier):
                    terms.append(c * zcdp.zcdp_gaussian(e.noise_multiplier))
            else:
                terms.append(c * zcdp.zcdp_pure(e.epsilon))
        return math.fsum(terms)

    @property
    def rho(self) -> float:
        r"""Total :math:`\rho` of the ledger (``inf`` if it is non-private)."""
        events = self._events()
        return math.inf if events is None else self._rho_of(events)

    def _epsilon(self, events, delta):
        return zcdp.zcdp_epsilon(self._rho_of(events), delta)

    def _delta(self, events, epsilon):
        return zcdp.zcdp_delta(self._rho_of(events), epsilon)


class RDPAccountant(Accountant):
    r"""Rényi-DP accountant (Mironov 2017).

    Supports :class:`GaussianEvent` and :class:`PureDPEvent` (defined at every order),
    :class:`RDPCurveEvent` (defined only at its listed orders: the ledger is composed on
    the intersection of the orders of all curves, never interpolated) and, on an
    ``"add_remove"`` ledger only, ``SubsampledGaussianEvent(scheme="poisson")`` via
    Opacus's analysis (Mironov, Talwar & Zhang 2019), which does not hold for substitution.

    :param orders: orders used when the ledger holds no curve
        (default :data:`~pyro_dp.accounting.rdp.DEFAULT_ORDERS`, Opacus's grid).
    :param conversion: ``"improved"`` (default; Balle et al. 2020, Thm 21; Canonne, Kamath &
        Steinke 2020, Prop. 12 — what Opacus and ``dp_accounting`` use, never above their
        value on the same curve) or ``"mironov"`` (Mironov 2017, Prop. 3; thesis Thm 1, the
        looser bound the papers state; for reproducing their numbers).

    >>> acc = RDPAccountant()
    >>> acc.record(GaussianEvent(60.0), 1000)
    >>> acc.record(GaussianEvent(80.0), 11000)
    >>> round(acc.get_epsilon(1e-5), 4), round(RDPAccountant(acc.ledger, conversion="mironov").get_epsilon(1e-5), 4)
    (7.0701, 7.7785)
    """

    name = "rdp"

    def __init__(
        self,
        ledger: Optional[PrivacyLedger] = None,
        *,
        relation: Optional[str] = None,
        orders: Optional[Sequence[float]] = None,
        conversion: str = "improved",
    ):
        super().__init__(ledger, relation=relation)
        self._configure(orders=orders, conversion=conversion)

    def _configure(self, *, orders=None, conversion="improved", **rest):
        orders = rdp.DEFAULT_ORDERS if orders is None else tuple(float(a) for a in orders)
        rdp.check_orders(orders)  # validates
        rdp.check_conversion(conversion)
        super()._configure(orders=orders, conversion=conversion, **rest)

    def _unsupported(self, event):
        if isinstance(event, (GaussianEvent, PureDPEvent, RDPCurveEvent)):
            return None
        if isinstance(event, SubsampledGaussianEvent):
            if event.scheme != "poisson":
                return "only Poisson subsampling is analysed (use 'dp_rdp' for without_replacement)"
            if self.relation != "add_remove":
                return "the Poisson-subsampled Gaussian RDP bound holds for add/remove only"
            return None
        return f"RDP has no bound for {type(event).__name__}"

    def _curve_of(self, events: dict) -> Tuple[np.ndarray, np.ndarray]:
        curves = [e for e in events if isinstance(e, RDPCurveEvent)]
        if curves:
            common = set(curves[0].orders)
            for c in curves[1:]:
                common &= set(c.orders)
            if not common:
                raise UnsupportedEventError(
                    "the RDP curves in the ledger share no order; they cannot be composed"
                )
            orders = np.array(sorted(common))
        else:
            orders = np.array(self._opts["orders"])
        total = np.zeros_like(orders)
        for e, c in events.items():
            if isinstance(e, RDPCurveEvent):
                table = dict(zip(e.orders, e.rdp))
                total += c * np.array([table[a] for a in orders])
            elif isinstance(e, PureDPEvent):
                total += c * rdp.rdp_pure(e.epsilon, orders)
            elif math.isinf(e.noise_multiplier):
                continue
            elif isinstance(e, GaussianEvent):
                total += c * rdp.rdp_gaussian(e.noise_multiplier, orders)
            else:
                total += c * rdp.rdp_poisson_subsampled_gaussian(
                    e.sample_rate, e.noise_multiplier, orders
                )
        return orders, total

    def get_rdp(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(orders, rdp)`` of the composed ledger (``rdp`` is ``inf`` if non-private)."""
        events = self._events()
        if events is None:
            orders = np.array(self._opts["orders"])
            return orders, np.full_like(orders, np.inf)
        return self._curve_of(events)

    def get_epsilon_and_order(self, delta: float) -> Tuple[float, float]:
        """Like :meth:`get_epsilon`, also returning the optimal order (``nan`` if none)."""
        eps = self.get_epsilon(delta)
        if eps in (0.0, math.inf):
            return eps, math.nan
        orders, curve = self._curve_of(self._events())
        return rdp.rdp_epsilon(orders, curve, delta, conversion=self._opts["conversion"])

    def _epsilon(self, events, delta):
        orders, curve = self._curve_of(events)
        return rdp.rdp_epsilon(orders, curve, delta, conversion=self._opts["conversion"])[0]

    def _delta(self, events, epsilon):
        orders, curve = self._curve_of(events)
        return rdp.rdp_delta(orders, curve, epsilon, conversion=self._opts["conversion"])[0]
