"""Accountants by name (in the spirit of Opacus's ``accountants/registry.py``).

>>> sorted(ACCOUNTANTS)
['advanced', 'dp_rdp', 'gdp', 'optimal', 'pld', 'prv', 'rdp', 'zcdp']
>>> get_accountant("zcdp", relation="add_remove")
ZCDPAccountant(relation='add_remove', releases=0, entries=0)
"""
from __future__ import annotations

from typing import Dict, Optional, Type, Union

from pyro_dp.mechanisms import PrivacyLedger

from .accountants import GaussianAccountant, RDPAccountant, ZCDPAccountant
from .adapters import DPAccountingRDPAccountant, PLDAccountant, PRVAccountant
from .base import Accountant
from .composition import AdvancedCompositionAccountant, OptimalCompositionAccountant

__all__ = ["ACCOUNTANTS", "DEFAULT_ACCOUNTANT", "get_accountant"]

#: name -> accountant class.
ACCOUNTANTS: Dict[str, Type[Accountant]] = {
    cls.name: cls
    for cls in (
        GaussianAccountant,
        ZCDPAccountant,
        RDPAccountant,
        PLDAccountant,
        PRVAccountant,
        DPAccountingRDPAccountant,
        AdvancedCompositionAccountant,
        OptimalCompositionAccountant,
    )
}

#: The accountant kernels use unless told otherwise (exact for Gaussian releases).
DEFAULT_ACCOUNTANT = "gdp"


def get_accountant(
    name: Union[str, Type[Accountant]] = DEFAULT_ACCOUNTANT,
    ledger: Optional[PrivacyLedger] = None,
    **kwargs,
) -> Accountant:
    """A new accountant of kind ``name`` (a key of :data:`ACCOUNTANTS` or an
    :class:`Accountant` subclass) over ``ledger``; ``kwargs`` are its keyword options.

    >>> get_accountant("nope")
    Traceback (most recent call last):
    ...
    ValueError: unknown accountant 'nope'; choose one of ['gdp', 'zcdp', 'rdp', 'pld', 'prv', 'dp_rdp', 'advanced', 'optimal']
    """
    if isinstance(name, type) and issubclass(name, Accountant):
        return name(ledger, **kwargs)
    try:
        cls = ACCOUNTANTS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown accountant {name!r}; choose one of {list(ACCOUNTANTS)}") from None
    return cls(ledger, **kwargs)
