r"""Privacy accounting: compose a :class:`~pyro_dp.mechanisms.PrivacyLedger` into
:math:`(\varepsilon, \delta)`.

Thin accountants over pure analysis functions:

* :mod:`~pyro_dp.accounting.gdp`, :mod:`~pyro_dp.accounting.zcdp`,
  :mod:`~pyro_dp.accounting.rdp` — closed forms (pure functions);
* :class:`GaussianAccountant` (``"gdp"``, exact for Gaussian releases, the default),
  :class:`ZCDPAccountant` (``"zcdp"``), :class:`RDPAccountant` (``"rdp"``);
* :class:`PLDAccountant` (``"pld"``), :class:`PRVAccountant` (``"prv"``) and
  :class:`DPAccountingRDPAccountant` (``"dp_rdp"``) — adapters to ``dp_accounting`` and
  ``prv_accountant`` for subsampled and mixed ledgers;
* :mod:`~pyro_dp.accounting.planning` — iteration budgets and noise calibration.

An accountant refuses (:class:`UnsupportedEventError`) what it cannot analyse, and every
result is rounded in the pessimistic direction.

Example
-------
>>> from pyro_dp.mechanisms import GaussianEvent, PrivacyLedger
>>> from pyro_dp.accounting import get_accountant
>>> ledger = PrivacyLedger()
>>> ledger.record(GaussianEvent(noise_multiplier=60.0), 1000)
>>> ledger.record(GaussianEvent(noise_multiplier=80.0), 11000)
>>> round(get_accountant("gdp", ledger).get_epsilon(1e-5), 5)
6.56618
"""
from .accountants import GaussianAccountant, RDPAccountant, ZCDPAccountant
from .adapters import DPAccountingRDPAccountant, PLDAccountant, PRVAccountant
from .base import Accountant, UnsupportedEventError, canonical_event
from .composition import AdvancedCompositionAccountant, OptimalCompositionAccountant
from .gdp import gaussian_mu, gdp_delta, gdp_epsilon, gdp_mu
from .planning import (
    calibrate,
    calibrate_noise_multiplier,
    max_iterations,
    planned_epsilon,
    planned_ledger,
    zcdp_max_iterations_penalty,
)
from . import rdp as _rdp, registry as _registry
from .rdp import rdp_delta, rdp_epsilon
from .subsampled import barker_batch_rdp, barker_orders, dp_barker_event, dp_barker_rdp, minibatch_penalty_rdp, wbk_amplified_rdp
from .registry import get_accountant
from .zcdp import zcdp_epsilon, zcdp_rho_budget

# Re-bound here with doc comments so that Sphinx's autodoc (which reads ``#:`` comments
# from the module it documents) shows them under ``pyro_dp.accounting``; the objects are
# those of :mod:`~pyro_dp.accounting.registry` and :mod:`~pyro_dp.accounting.rdp`.

#: The accountant classes by name — ``"advanced"``, ``"dp_rdp"``, ``"gdp"``, ``"optimal"``,
#: ``"pld"``, ``"prv"``, ``"rdp"``, ``"zcdp"`` — as accepted by :func:`get_accountant` and by
#: every kernel's ``accountant`` argument. ``sorted(ACCOUNTANTS)`` lists them.
ACCOUNTANTS = _registry.ACCOUNTANTS

#: The accountant used when none is given: ``"gdp"``, exact for (non-subsampled) Gaussian
#: releases (Gaussian DP, Dong, Roth & Su 2019; see :mod:`~pyro_dp.accounting.gdp`).
DEFAULT_ACCOUNTANT = _registry.DEFAULT_ACCOUNTANT

#: The Rényi orders at which :class:`RDPAccountant` and :func:`rdp_epsilon` evaluate RDP
#: curves by default: Opacus's ``RDPAccountant.DEFAULT_ALPHAS``, 1.1, 1.2, ..., 10.9, 12, ..., 63.
DEFAULT_ORDERS = _rdp.DEFAULT_ORDERS

__all__ = [
    "barker_orders",
    "barker_batch_rdp",
    "dp_barker_event",
    "dp_barker_rdp",
    "minibatch_penalty_rdp",
    "wbk_amplified_rdp",
    "Accountant",
    "UnsupportedEventError",
    "canonical_event",
    "GaussianAccountant",
    "ZCDPAccountant",
    "RDPAccountant",
    "PLDAccountant",
    "PRVAccountant",
    "DPAccountingRDPAccountant",
    "AdvancedCompositionAccountant",
    "OptimalCompositionAccountant",
    "ACCOUNTANTS",
    "DEFAULT_ACCOUNTANT",
    "get_accountant",
    "gaussian_mu",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu",
    "zcdp_epsilon",
    "zcdp_rho_budget",
    "DEFAULT_ORDERS",
    "rdp_epsilon",
    "rdp_delta",
    "planned_ledger",
    "planned_epsilon",
    "max_iterations",
    "calibrate",
    "calibrate_noise_multiplier",
    "zcdp_max_iterations_penalty",
]
