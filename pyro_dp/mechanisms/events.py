r"""Privacy events as values and the ledger that records them (:mod:`pyro_dp.mechanisms`).

A mechanism is described by a frozen, hashable *event* record (in the spirit of
``dp_accounting.dp_event``): what kind of mechanism, with which noise relative to its
sensitivity, how many times. Events go into a :class:`PrivacyLedger`; an accountant
(:mod:`pyro_dp.accounting`) composes the ledger and knows nothing about MCMC.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Optional, Tuple, Union

from . import tap as _tap

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
    "LedgerEntry",
    "PrivacyLedger",
]

#: Neighbouring relations a ledger can be stated under.
RELATIONS = ("substitute", "add_remove")


def _check_positive(name: str, value, allow_inf: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if math.isnan(v) or v <= 0 or (math.isinf(v) and not allow_inf):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


# --------------------------------------------------------------------------- events


class PrivacyEvent:
    """Base class of all privacy events. Subclasses are frozen dataclasses.

    >>> isinstance(GaussianEvent(noise_multiplier=2.0), PrivacyEvent)
    True
    """

    __slots__ = ()


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    r"""One release of the Gaussian mechanism :math:`f(X) + \mathcal N(0, \sigma^2 I)`.

    :param noise_multiplier: :math:`\sigma/\Delta_2` with :math:`\Delta_2` the
        sensitivity of ``f`` under the ledger's neighbouring relation. ``math.inf``
        denotes a release that carries no information about the data.
    
    >>> GaussianEvent(noise_multiplier=2.0)  # hashable and comparable: a value
    GaussianEvent(noise_multiplier=2.0)
    >>> GaussianEvent(noise_multiplier=-1.0)
    Traceback (most recent call last):
    ...
    ValueError: noise_multiplier must be a positive finite number, got -1.0
    """

    noise_multiplier: float

    def __post_init__(self):
        object.__setattr__(
            self, "noise_multiplier", _check_positive("noise_multiplier", self.noise_multiplier, True)
        )


@dataclass(frozen=True)
class SubsampledGaussianEvent(PrivacyEvent):
    r"""A Gaussian mechanism applied to a random subsample of the rows.

    :param sample_rate: ``q``: Poisson inclusion probability (``scheme="poisson"``) or
        ``b/N`` for a fixed-size batch drawn without replacement
        (``scheme="without_replacement"``).
    :param noise_multiplier: :math:`\sigma/\Delta_2` of the Gaussian on the batch.
    :param scheme: ``"poisson"`` or ``"without_replacement"``.
    
    >>> SubsampledGaussianEvent(sample_rate=0.01, noise_multiplier=1.1)
    SubsampledGaussianEvent(sample_rate=0.01, noise_multiplier=1.1, scheme='poisson')
    """

    sample_rate: float
    noise_multiplier: float
    scheme: str = "poisson"

    def __post_init__(self):
        q = float(self.sample_rate)
        if not (0.0 < q <= 1.0):
            raise ValueError(f"sample_rate must be in (0, 1], got {self.sample_rate!r}")
        object.__setattr__(self, "sample_rate", q)
        object.__setattr__(
            self, "noise_multiplier", _check_positive("noise_multiplier", self.noise_multiplier, True)
        )
        if self.scheme not in ("poisson", "without_replacement"):
            raise ValueError(f"scheme must be 'poisson' or 'without_replacement', got {self.scheme!r}")


@dataclass(frozen=True)
class PureDPEvent(PrivacyEvent):
    r"""A mechanism known only to be :math:`\varepsilon`-DP.

    >>> PureDPEvent(epsilon=0.5)
    PureDPEvent(epsilon=0.5)
    """

    epsilon: float

    def __post_init__(self):
        object.__setattr__(self, "epsilon", _check_positive("epsilon", self.epsilon))


@dataclass(frozen=True)
class ApproxDPEvent(PrivacyEvent):
    r"""A mechanism known only to be :math:`(\varepsilon, \delta)`-DP.

    >>> ApproxDPEvent(epsilon=1.0, delta=1e-6)
    ApproxDPEvent(epsilon=1.0, delta=1e-06)
    """

    epsilon: float
    delta: float

    def __post_init__(self):
        eps = float(self.epsilon)
        if not (eps >= 0 and math.isfinite(eps)):
            raise ValueError(f"epsilon must be finite and >= 0, got {self.epsilon!r}")
        d = float(self.delta)
        if not (0.0 <= d < 1.0):
            raise ValueError(f"delta must be in [0, 1), got {self.delta!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", d)


@dataclass(frozen=True)
class RDPCurveEvent(PrivacyEvent):
    r"""A mechanism analysed only in Rényi DP: it is :math:`(\alpha, \varepsilon(\alpha))`-RDP
    for each listed order and **no claim is made for other orders** (an accountant must
    not interpolate optimistically).

    :param orders: tuple of RDP orders :math:`\alpha > 1`, increasing.
    :param rdp: tuple of the same length, :math:`\varepsilon(\alpha) \ge 0`.
    
    >>> RDPCurveEvent(orders=(2, 4), rdp=(0.1, 0.2))  # (2, 0.1)- and (4, 0.2)-RDP
    RDPCurveEvent(orders=(2.0, 4.0), rdp=(0.1, 0.2))
    """

    orders: Tuple[float, ...]
    rdp: Tuple[float, ...]

    def __post_init__(self):
        orders = tuple(float(a) for a in self.orders)
        rdp = tuple(float(e) for e in self.rdp)
        if len(orders) == 0 or len(orders) != len(rdp):
            raise ValueError("orders and rdp must be non-empty and of the same length")
        if any(not (a > 1) for a in orders) or any(b <= a for a, b in zip(orders, orders[1:])):
            raise ValueError("RDP orders must be > 1 and strictly increasing")
        if any(not (e >= 0) for e in rdp):
            raise ValueError("RDP values must be >= 0 (NaN is not allowed)")
        object.__setattr__(self, "orders", orders)
        object.__setattr__(self, "rdp", rdp)
        # hashed once: the ledger and the budget check hash the event at every iteration, and a
        # curve has hundreds of orders (#17: Python per iteration)
        object.__setattr__(self, "_hash", hash((orders, rdp)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class NonPrivateEvent(PrivacyEvent):
    r"""A release without noise (the documented non-private test mode). Any ledger that
    contains one has :math:`\varepsilon = \infty` under every accountant.

    >>> from pyro_dp.accounting import get_accountant
    >>> ledger = PrivacyLedger()
    >>> ledger.record(NonPrivateEvent())
    >>> get_accountant("gdp", ledger).get_epsilon(1e-5)
    inf
    """


# --------------------------------------------------------------------------- ledger


class LedgerEntry(NamedTuple):
    """``count`` consecutive releases of the same ``event``.

    >>> LedgerEntry(GaussianEvent(noise_multiplier=3.0), 10).count
    10
    """

    event: PrivacyEvent
    count: int


@dataclass
class PrivacyLedger:
    r"""An ordered, append-only record of every mechanism released.

    Consecutive identical events are merged into one :class:`LedgerEntry`. The ledger
    is picklable and mergeable: a kernel returns its chain's ledger from
    ``diagnostics()`` and :func:`pyro_dp.get_epsilon` composes the ledgers of all
    chains.

    :param relation: the neighbouring relation every event's sensitivity refers to.
    
    >>> ledger = PrivacyLedger()
    >>> ledger.record(GaussianEvent(noise_multiplier=10.0), 100)
    >>> ledger.record(GaussianEvent(noise_multiplier=10.0))
    >>> ledger.num_releases, len(ledger.entries)
    (101, 1)
    >>> PrivacyLedger.merged([ledger, ledger]).num_releases  # e.g. two chains
    202
    """

    relation: str = "substitute"
    _entries: list = field(default_factory=list, repr=False)
    #: one label per entry: what its releases were for (``""``: a kernel's own steps)
    _labels: list = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self):
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")

    def record(self, event: PrivacyEvent, count: int = 1, label: str = "") -> None:
        """Append ``count`` releases of ``event``. ``label`` says what they were for (e.g.
        ``"tune:clip"``); labels are documentation, the accountants compose events alone."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"expected a PrivacyEvent, got {type(event).__name__}")
        if int(count) != count or count < 0:
            raise ValueError(f"count must be a non-negative integer, got {count!r}")
        count = int(count)
        if count == 0:
            return
        label = str(label)
        labels = self._label_list()
        totals = self._totals()  # before the entries change: kept up to date below
        if self._entries and self._entries[-1].event == event and labels[-1] == label:
            last = self._entries[-1]
            self._entries[-1] = LedgerEntry(last.event, last.count + count)
        else:
            self._entries.append(LedgerEntry(event, count))
            labels.append(label)
        totals[event] = totals.get(event, 0) + count
        self.__dict__["_agg"] = (self._agg_key(), totals)
        if _tap.ACTIVE is not None:  # pyro_dp.mechanisms.tap: label the releases seen (an audit; eager only)
            _tap.recorded(event, count, label)

    def _agg_key(self) -> tuple:
        # the list object itself (held, so its id cannot be reused), its length and last entry
        return (self._entries, len(self._entries), self._entries[-1] if self._entries else None)

    def _totals(self) -> dict:
        """``{event: total count}``, kept as entries are recorded, so that reading it costs the
        number of distinct events, not of entries: a kernel whose iteration releases two kinds of
        event (DP-HMC's gradients and ratio) adds two entries per iteration, and the plan reads
        the totals before every iteration (it was quadratic in the run's length). Recomputed
        when the entries were set some other way (a copy, a pickle from before the cache)."""
        cached, key = self.__dict__.get("_agg"), self._agg_key()
        if cached is None or cached[0][0] is not key[0] or cached[0][1:] != key[1:]:
            out: dict = {}
            for e in self._entries:
                out[e.event] = out.get(e.event, 0) + e.count
            cached = (key, out)
            self.__dict__["_agg"] = cached
        return cached[1]

    def _label_list(self) -> list:
        """The labels, one per entry (a ledger pickled before labels existed has none: ``""``)."""
        labels = self.__dict__.setdefault("_labels", [])
        if len(labels) < len(self._entries):
            labels[:0] = [""] * (len(self._entries) - len(labels))
        return labels

    def labelled_entries(self) -> Tuple[Tuple[PrivacyEvent, int, str], ...]:
        """``(event, count, label)`` for every entry, oldest first.

        >>> ledger = PrivacyLedger(); ledger.record(GaussianEvent(5.0), 2, label="tune:start")
        >>> ledger.labelled_entries()
        ((GaussianEvent(noise_multiplier=5.0), 2, 'tune:start'),)
        """
        return tuple((e.event, e.count, lab) for e, lab in zip(self._entries, self._label_list()))

    def extend(self, other: Union["PrivacyLedger", Iterable[LedgerEntry]]) -> None:
        """Append every entry of ``other`` (another ledger of the same relation)."""
        if isinstance(other, PrivacyLedger):
            if other.relation != self.relation:
                raise ValueError(
                    f"cannot merge a {other.relation!r} ledger into a {self.relation!r} ledger"
                )
            for event, count, label in other.labelled_entries():
                self.record(event, count, label)
            return
        for entry in other:
            self.record(entry.event, entry.count)

    @property
    def entries(self) -> Tuple[LedgerEntry, ...]:
        """The entries, oldest first."""
        return tuple(self._entries)

    def by_label(self) -> dict:
        """``{label: number of releases}``, the kernel's own steps under ``""``.

        >>> ledger = PrivacyLedger()
        >>> ledger.record(GaussianEvent(5.0), 2, label="tune:start"); ledger.record(GaussianEvent(9.0), 10)
        >>> ledger.by_label()
        {'tune:start': 2, '': 10}
        """
        out: dict = {}
        for _, count, label in self.labelled_entries():
            out[label] = out.get(label, 0) + count
        return out

    def aggregate(self) -> dict:
        """``{event: total count}``; composition is commutative for every accountant here."""
        return dict(self._totals())

    @property
    def num_releases(self) -> int:
        """Total number of mechanism releases recorded."""
        return sum(self._totals().values())

    def __len__(self) -> int:
        return self.num_releases

    def __bool__(self) -> bool:
        return bool(self._entries)

    def copy(self) -> "PrivacyLedger":
        new = PrivacyLedger(self.relation)
        new._entries = list(self._entries)
        new._labels = list(self._label_list())
        return new

    def state_dict(self) -> dict:
        return {"relation": self.relation, "entries": list(self._entries), "labels": list(self._label_list())}

    def load_state_dict(self, state: dict) -> None:
        self.relation = state["relation"]
        self._entries, self._labels = [], []
        self.__dict__.pop("_agg", None)
        labels = state.get("labels") or [""] * len(state["entries"])  # a state saved before labels: ""
        for (ev, cnt), label in zip(state["entries"], labels):
            self.record(ev, cnt, label=label)

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, PrivacyLedger)
            and self.relation == other.relation
            and self._entries == other._entries
        )

    @staticmethod
    def merged(ledgers: Iterable["PrivacyLedger"], relation: Optional[str] = None) -> "PrivacyLedger":
        """One ledger holding every entry of ``ledgers`` (e.g. all chains of a run)."""
        ledgers = list(ledgers)
        rel = relation or (ledgers[0].relation if ledgers else "substitute")
        out = PrivacyLedger(rel)
        for led in ledgers:
            out.extend(led)
        return out



# --------------------------------------------------------------------------- events built once


@functools.lru_cache(maxsize=64)
def subsampled_gaussian_event(sample_rate: float, noise_multiplier: float, scheme: str = "poisson"):
    """``SubsampledGaussianEvent(sample_rate, noise_multiplier, scheme)``, built once per value
    (events are immutable values; a kernel records the same one at every iteration, #17).

    >>> subsampled_gaussian_event(0.01, 1.1) is subsampled_gaussian_event(0.01, 1.1)
    True
    """
    return SubsampledGaussianEvent(sample_rate, noise_multiplier, scheme)


@functools.lru_cache(maxsize=64)
def gaussian_event(noise_multiplier: float) -> PrivacyEvent:
    """The event of one Gaussian release with ``noise_multiplier`` (``NonPrivateEvent`` for 0,
    the non-private test mode), built once per value (events are immutable values; a kernel
    records the same one at every iteration, #17).

    >>> gaussian_event(2.0), gaussian_event(0.0)
    (GaussianEvent(noise_multiplier=2.0), NonPrivateEvent())
    """
    return GaussianEvent(noise_multiplier=noise_multiplier) if noise_multiplier != 0 else NonPrivateEvent()
