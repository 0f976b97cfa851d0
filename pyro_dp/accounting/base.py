r"""The accountant interface: a thin object over a :class:`~pyro_dp.mechanisms.PrivacyLedger`.

An accountant owns (or shares) a ledger, says which events it can analyse, and turns the
ledger into :math:`\varepsilon(\delta)` or :math:`\delta(\varepsilon)`. It knows nothing about
MCMC. Rules every subclass follows:

* an event it cannot analyse raises :class:`UnsupportedEventError`, on :meth:`record` and
  again when composing; it never returns an optimistic number;
* a :class:`~pyro_dp.mechanisms.NonPrivateEvent` anywhere in the ledger gives
  :math:`\varepsilon = \infty`, :math:`\delta = 1`; an empty ledger gives 0 and 0;
* results are rounded in the pessimistic direction.

Example
-------
>>> from pyro_dp.accounting import GaussianAccountant
>>> from pyro_dp.mechanisms import GaussianEvent
>>> acc = GaussianAccountant()
>>> acc.record(GaussianEvent(noise_multiplier=10.0), count=100)
>>> len(acc), round(acc.get_epsilon(1e-5), 4)
(100, 4.3772)
"""
from __future__ import annotations

import math
from typing import ClassVar, Dict, Optional

from pyro_dp.mechanisms import (
    RELATIONS,
    GaussianEvent,
    NonPrivateEvent,
    PrivacyEvent,
    PrivacyLedger,
    SubsampledGaussianEvent,
)

__all__ = ["UnsupportedEventError", "Accountant", "canonical_event", "check_delta", "check_epsilon"]


class UnsupportedEventError(ValueError):
    """The accountant cannot analyse this event (under this neighbouring relation).

    >>> issubclass(UnsupportedEventError, ValueError)
    True
    """


def check_delta(delta, name: str = "delta") -> float:
    """Validate :math:`\\delta \\in (0, 1)`; returns it as a float.

    >>> check_delta(0)
    Traceback (most recent call last):
    ...
    ValueError: delta must be in (0, 1), got 0
    """
    try:
        if isinstance(delta, (str, bytes)):
            raise TypeError
        d = float(delta)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {delta!r}") from None
    if not 0.0 < d < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {delta!r}")
    return d


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    """Validate a finite :math:`\\varepsilon > 0`; returns it as a float.

    >>> check_epsilon(float("inf"))
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be a positive finite number, got inf
    """
    try:
        if isinstance(epsilon, (str, bytes)):
            raise TypeError
        e = float(epsilon)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {epsilon!r}") from None
    if not (e > 0 and math.isfinite(e)):
        raise ValueError(f"{name} must be a positive finite number, got {epsilon!r}")
    return e


def canonical_event(event: PrivacyEvent) -> PrivacyEvent:
    """The simplest equivalent event: a "subsampled" Gaussian with ``sample_rate == 1``
    releases on every row, so it *is* the Gaussian mechanism (under either relation).

    >>> canonical_event(SubsampledGaussianEvent(1.0, 3.0))
    GaussianEvent(noise_multiplier=3.0)
    """
    if isinstance(event, SubsampledGaussianEvent) and event.sample_rate == 1.0:
        return GaussianEvent(event.noise_multiplier)
    return event


class Accountant:
    r"""Base class. Subclasses set :attr:`name` and implement ``_unsupported(event)``
    (a reason string, or ``None`` if the event is analysable), ``_epsilon(events, delta)``
    and ``_delta(events, epsilon)`` where ``events`` is ``{event: count}`` without
    non-private events; keyword options go through ``_configure`` so that
    :meth:`state_dict` can carry them.

    :param ledger: the ledger to read and record into (shared, not copied). A new
        ledger is created when ``None``.
    :param relation: neighbouring relation of a new ledger (default ``"substitute"``);
        when a ledger is given it must agree with ``ledger.relation`` or be ``None``.

    >>> from pyro_dp.accounting import get_accountant
    >>> acc = get_accountant("gdp")
    >>> acc.get_epsilon(1e-5), acc.get_delta(1.0)  # empty ledger
    (0.0, 0.0)
    """

    name: ClassVar[str] = ""

    def __init__(self, ledger: Optional[PrivacyLedger] = None, *, relation: Optional[str] = None):
        if relation is not None and relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
        if ledger is None:
            ledger = PrivacyLedger(relation or "substitute")
        elif not isinstance(ledger, PrivacyLedger):
            raise TypeError(f"ledger must be a PrivacyLedger, got {type(ledger).__name__}")
        elif relation is not None and relation != ledger.relation:
            raise ValueError(f"relation={relation!r} disagrees with the ledger's {ledger.relation!r}")
        self._ledger = ledger
        self._opts: Dict[str, object] = {}

    # ------------------------------------------------------------------ options
    def _configure(self, **options) -> None:
        """Validate and store keyword options (subclasses override and call super)."""
        self._opts.update(options)

    @classmethod
    def search_options(cls, options: dict) -> Optional[dict]:
        """Keyword options of a cheaper, coarser accountant of this kind, which the searches
        of :mod:`~pyro_dp.accounting.planning` may use to *locate* an answer before they
        certify it with ``options`` themselves; ``None`` (the default, closed forms) when
        there is nothing cheaper.

        >>> Accountant.search_options({}) is None
        True
        """
        return None

    # ------------------------------------------------------------------ ledger
    @property
    def ledger(self) -> PrivacyLedger:
        """The ledger this accountant reads."""
        return self._ledger

    @property
    def relation(self) -> str:
        """The neighbouring relation of the ledger."""
        return self._ledger.relation

    @property
    def history(self):
        """The ledger entries, oldest first (``(event, count)`` named tuples)."""
        return self._ledger.entries

    def __len__(self) -> int:
        """Number of releases recorded (not the number of entries)."""
        return self._ledger.num_releases

    def record(self, event: PrivacyEvent, count: int = 1) -> None:
        """Record ``count`` releases of ``event``; raises :class:`UnsupportedEventError`
        (recording nothing) if this accountant cannot analyse it."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"expected a PrivacyEvent, got {type(event).__name__}")
        self.require(event)
        self._ledger.record(event, count)

    def supports(self, event: PrivacyEvent) -> bool:
        """Whether this accountant can analyse ``event`` under the ledger's relation."""
        return isinstance(event, NonPrivateEvent) or self._unsupported(canonical_event(event)) is None

    def unsupported_reason(self, event: PrivacyEvent) -> Optional[str]:
        """Why this accountant cannot analyse ``event`` under the ledger's relation, or ``None``
        when it can (:meth:`supports`)."""
        return None if isinstance(event, NonPrivateEvent) else self._unsupported(canonical_event(event))

    def require(self, event: PrivacyEvent) -> None:
        """Raise :class:`UnsupportedEventError` unless this accountant can analyse ``event``."""
        reason = self.unsupported_reason(event)
        if reason is not None:
            raise UnsupportedEventError(
                f"{type(self).__name__} ({self.name!r}, relation={self.relation!r}) "
                f"cannot analyse {event!r}: {reason}"
            )

    def _events(self) -> Optional[dict]:
        """Canonical ``{event: count}`` of the ledger, ``None`` if it holds a non-private
        event; raises :class:`UnsupportedEventError` on any event it cannot analyse."""
        agg: dict = {}
        for e, c in self._ledger.aggregate().items():
            e = canonical_event(e)
            agg[e] = agg.get(e, 0) + c
        if any(isinstance(e, NonPrivateEvent) for e in agg):
            return None
        for e in agg:
            self.require(e)
        return agg

    # ------------------------------------------------------------------ queries
    def get_epsilon(self, delta: float) -> float:
        r"""Smallest certified :math:`\varepsilon` at this :math:`\delta \in (0, 1)`."""
        delta = check_delta(delta)
        events = self._events()
        if events is None:
            return math.inf
        if not events:
            return 0.0
        return float(self._epsilon(events, delta))

    def get_delta(self, epsilon: float) -> float:
        r"""Smallest certified :math:`\delta` at this finite :math:`\varepsilon > 0`."""
        epsilon = check_epsilon(epsilon)
        events = self._events()
        if events is None:
            return 1.0
        if not events:
            return 0.0
        return float(min(1.0, self._delta(events, epsilon)))

    # ------------------------------------------------------------------ hooks
    def _unsupported(self, event: PrivacyEvent) -> Optional[str]:  # pragma: no cover
        raise NotImplementedError

    def _epsilon(self, events: dict, delta: float) -> float:  # pragma: no cover
        raise NotImplementedError

    def _delta(self, events: dict, epsilon: float) -> float:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Picklable state: accountant name, options and the ledger's state."""
        return {"name": self.name, "options": dict(self._opts), "ledger": self._ledger.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output (the ledger is loaded in place)."""
        if state.get("name") != self.name:
            raise ValueError(f"state is for accountant {state.get('name')!r}, not {self.name!r}")
        self._configure(**state.get("options", {}))
        self._ledger.load_state_dict(state["ledger"])

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self._opts.items())
        return (
            f"{type(self).__name__}(relation={self.relation!r}, releases={len(self)}"
            f", entries={len(self.history)}{opts})"
        )
