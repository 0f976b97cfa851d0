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
from .rdp import DEFAULT_ORDERS, rdp_delta, rdp_epsilon
from .subsampled import barker_batch_rdp, barker_orders, dp_barker_rdp, minibatch_penalty_rdp, wbk_amplified_rdp
from .registry import ACCOUNTANTS, DEFAULT_ACCOUNTANT, get_accountant
from .zcdp import zcdp_epsilon, zcdp_rho_budget

__all__ = [
    "barker_orders",
    "barker_batch_rdp",
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
