r"""Privacy mechanisms as values, the ledger that records them, and the one audited
function that releases a clipped, noised sum.

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

import functools
import math
import secrets
import warnings  # noqa: F401 (the doctests use it)
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .warn import warn_user

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
    "without_replacement_draws",
    "sorted_draw_keys",
    "draw_batch_indices",
    "first_distinct_draws",
    "distinct_draws_and_count",
    "poisson_subsample",
    "poisson_batch_size",
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
    "noisy_histogram",
    "noisy_count",
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
        if self._entries and self._entries[-1].event == event and labels[-1] == label:
            last = self._entries[-1]
            self._entries[-1] = LedgerEntry(last.event, last.count + count)
        else:
            self._entries.append(LedgerEntry(event, count))
            labels.append(label)

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
        out: dict = {}
        for e in self._entries:
            out[e.event] = out.get(e.event, 0) + e.count
        return out

    @property
    def num_releases(self) -> int:
        """Total number of mechanism releases recorded."""
        return sum(e.count for e in self._entries)

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


# --------------------------------------------------------------------------- noise


#: torch's CPU generator state (``CPUGeneratorImplState``, stable since torch 1.x): a uint64
#: initial seed, int ``left``, int ``seeded``, uint64 ``next``, then the 624 MT19937 words,
#: each in the low half of a uint64, then the normal-sampling caches; 5056 bytes in all
_CPU_STATE_BYTES, _MT_WORDS, _MT_OFFSET = 5056, 624, 24


def seed_from_os(generator: torch.Generator) -> torch.Generator:
    r"""Seed ``generator`` with its **whole** state from the operating system's CSPRNG.

    ``manual_seed`` is not enough on the CPU: torch's MT19937 keeps only the low 32 bits of a
    seed (the state is derived from ``seed & 0xffffffff``), so a 63-bit OS seed gave 2^32
    possible noise streams — about 16 CPU-hours to try them all and replay a run's noise
    (found by a privacy audit, 2026-11-26). Here all 624 state words (19 968 bits) come from
    ``os.urandom``; on CUDA (Philox) the 64-bit seed and the offset do. Refuses (rather than
    seeding weakly) a CPU state layout it does not know.

    >>> a, b = seed_from_os(torch.Generator()), seed_from_os(torch.Generator())
    >>> bool((torch.randn(4, generator=a) == torch.randn(4, generator=b)).all())
    False
    """
    if generator.device.type != "cpu":
        generator.manual_seed(secrets.randbits(64))
        state = generator.get_state()
        if state.numel() == 16:  # Philox: uint64 seed, uint64 offset (a multiple of 4)
            raw = bytearray(state.cpu().numpy().tobytes())
            raw[8:16] = (secrets.randbits(60) * 4).to_bytes(8, "little")
            generator.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())
        return generator
    generator.manual_seed(0)  # left = 1, seeded = 1, next = 0: the next draw regenerates the state
    raw = bytearray(generator.get_state().numpy().tobytes())
    if len(raw) != _CPU_STATE_BYTES:
        raise RuntimeError(f"torch's CPU generator state has {len(raw)} bytes, not {_CPU_STATE_BYTES}: cannot seed its "
                           "whole state from the OS on this torch version (please report)")
    words = secrets.token_bytes(4 * _MT_WORDS)
    if not any(words):  # MT19937 needs a non-zero state (probability 2^-19968)
        words = b"\x01" + words[1:]
    for i in range(_MT_WORDS):
        at = _MT_OFFSET + 8 * i
        raw[at:at + 8] = words[4 * i:4 * i + 4] + bytes(4)
    generator.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())
    if bytes(generator.get_state().numpy().tobytes()) != bytes(raw):
        raise RuntimeError("torch did not take the OS-seeded generator state (please report)")
    return generator


class ReproducibleNoiseWarning(UserWarning):
    """Privacy noise or batch selection was seeded by the user: anyone who knows the seed can
    replay the noise and remove it from the released values. For tests only.

    >>> issubclass(ReproducibleNoiseWarning, UserWarning)
    True
    """


class NoiseSource:
    r"""The secret stream: the dedicated :class:`torch.Generator` behind every privacy-noise
    draw **and every batch selection** of a release. Nothing else draws from it.

    Privacy of the Gaussian mechanism assumes the adversary cannot predict the noise, and
    privacy amplification by subsampling assumes the same of the batch. So by default the
    generator is seeded from the operating system's CSPRNG, whatever seed the kernel was
    given (the kernel's ``seed`` makes only the data-free randomness reproducible:
    proposals, momenta, accept uniforms).

    :param seed: an integer makes the stream reproducible — a **testing option**: it warns
        with :class:`ReproducibleNoiseWarning` unless ``warn=False``. ``None`` (default): OS
        entropy: the generator's whole state from ``os.urandom`` (:func:`seed_from_os`).
    :param secure_mode: refuse a ``seed`` and draw every Gaussian
        as the Opacus/Holohan et al. (2021, §5.1) construction
        :math:`(Z_1+Z_2+Z_3+Z_4)/2` in float64, scaled by σ in float64 before any cast.
        **What it does not guarantee**: torch's generator (MT19937 on CPU, Philox on CUDA)
        is not a cryptographic PRNG — an attacker who saw enough raw draws could in principle
        reconstruct its state (they see only noisy sums); the noise is a floating-point
        Gaussian, not a discrete Gaussian, and no snapping is applied (Mironov 2012's attack
        on the Laplace mechanism has Gaussian analogues that the four-sum mitigates but does
        not provably remove). See ``docs/privacy.md``, "Threat model".
    :param device: device the noise is drawn on (a generator is device-bound).
    :param bool warn: warn when ``seed`` is given (default ``True``).

    **Copies** (``copy.deepcopy``, a pickle round trip, e.g. of a kernel mid-run) never carry
    the secret stream: an OS-seeded source is reseeded from OS entropy in the copy, and its
    pickle holds no generator state at all, so a copy cannot draw the original's next
    normals (two copies run on neighbouring data sets would otherwise release with the same
    noise, and the difference of their releases is one row's noise-free term). An explicitly
    ``seed``-ed source (the test option: whoever knows the seed can replay it anyway) is
    copied with its state, so a copy of a seeded test stream continues it exactly — the
    reproducibility the test option exists for. Checkpoints of the test option carry the
    state explicitly (:meth:`get_state`, :meth:`set_state`).

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", ReproducibleNoiseWarning)
    ...     a, b = NoiseSource(seed=0), NoiseSource(seed=0)
    >>> bool((a.normal(1.0, (3,)) == b.normal(1.0, (3,))).all())  # seeded: reproducible
    True
    >>> bool((NoiseSource().normal(1.0, (3,)) == NoiseSource().normal(1.0, (3,))).all())  # default: fresh
    False
    """

    def __init__(self, seed: Optional[int] = None, secure_mode: bool = False, device=None, *, warn: bool = True):
        self.secure_mode = bool(secure_mode)
        self.device = torch.device(device if device is not None else "cpu")
        if self.secure_mode and seed is not None:
            raise ValueError("secure_mode=True draws its seed from the OS: do not pass a noise seed")
        if seed is not None and warn:
            warn_user(
                "privacy noise and batch selection are seeded: anyone who knows the seed can replay the "
                "noise and remove it from every released value. Use this for tests only.",
                ReproducibleNoiseWarning,
            )
        #: ``True`` for the test option (an explicit ``seed``): the only stream a copy continues
        self.seeded = seed is not None
        self.generator = torch.Generator(device=self.device)
        if seed is None:  # the whole generator state from os.urandom (not a 32-bit CPU seed)
            seed_from_os(self.generator)
        else:
            self.generator.manual_seed(int(seed))
        #: :class:`~pyro_dp.distributed.Shards` of a sharded kernel (``None``: one process). The
        #: releases then sum the ranks' local sums, rank 0's noise added inside the reduction.
        self.shards = None

    def normal(self, std, shape=(), like: Optional[torch.Tensor] = None) -> torch.Tensor:
        r"""Draw :math:`\mathcal N(0, \mathrm{std}^2)` noise of ``shape``: drawn and scaled by
        ``std`` in float64, then cast to the dtype (and device) of ``like``."""
        dtype = like.dtype if like is not None else torch.get_default_dtype()
        z = self.standard_normal(shape) * torch.as_tensor(std, dtype=torch.float64, device=self.device)
        out_device = like.device if like is not None else self.device
        return z.to(dtype=dtype, device=out_device)

    def standard_normal(self, shape=()) -> torch.Tensor:
        r"""The float64 :math:`\mathcal N(0, 1)` draw of ``shape`` that :meth:`normal` scales by its
        ``std`` (the same draws from the same stream, on the generator's device). For a graph
        that scales the noise itself (the compiled path's fused steps, #17): ``normal(std,
        shape, like)`` is ``(standard_normal(shape) * std.double()).to(like.dtype)``.

        >>> a, b = NoiseSource(seed=0, warn=False), NoiseSource(seed=0, warn=False)
        >>> bool(a.standard_normal((2,)).mul(3.0).eq(b.normal(3.0, (2,), like=torch.zeros(2, dtype=torch.float64))).all())
        True
        """
        shape = tuple(shape)
        z = torch.randn(shape, generator=self.generator, dtype=torch.float64, device=self.device)
        if self.secure_mode:  # Holohan et al. 2021 §5.1 / Opacus: (Z1 + Z2 + Z3 + Z4) / 2
            for _ in range(3):
                z += torch.randn(shape, generator=self.generator, dtype=torch.float64, device=self.device)
            z = z / 2
        return z

    # ------------------------------------------------------------ batch selection (secret)
    def poisson_subsample(self, n: int, q: float, device=None) -> torch.Tensor:
        """Indices of a Poisson sample: each of ``n`` rows independently with probability ``q``."""
        return poisson_subsample(self.generator, n, q, device=device)

    def sample_without_replacement(self, n: int, b: int, device=None) -> torch.Tensor:
        """``b`` distinct row indices, every subset equally likely."""
        return sample_without_replacement(self.generator, n, b, device=device)

    def sample_with_replacement(self, n: int, b: int, device=None) -> torch.Tensor:
        """``b`` row indices drawn uniformly with replacement."""
        return torch.randint(int(n), (int(b),), generator=self.generator, device=self.device).to(device)

    def poisson(self, rate: float) -> int:
        """One :math:`\\mathrm{Poisson}(\\mathrm{rate})` batch size."""
        r = torch.as_tensor(float(rate), dtype=torch.float64, device=self.device)
        return int(torch.poisson(r, generator=self.generator))

    def uniform(self, shape, like: torch.Tensor) -> torch.Tensor:
        """``Uniform(0, 1)`` draws (e.g. a batch's thinning), dtype/device of ``like``."""
        u = torch.rand(tuple(shape), generator=self.generator, dtype=torch.float64, device=self.device)
        return u.to(dtype=like.dtype, device=like.device)

    # ------------------------------------------------------------ copies and checkpoints
    def get_state(self) -> torch.Tensor:
        """The generator's state, for a checkpoint of the seeded test option only (an OS-seeded
        stream's state is the secret: refused)."""
        if not self.seeded:
            raise RuntimeError("the secret stream's state never leaves the NoiseSource: only a seeded test stream "
                               "(noise_seed) can be saved")
        return self.generator.get_state()

    def set_state(self, state: torch.Tensor) -> None:
        """Continue a seeded test stream from :meth:`get_state`."""
        self.generator.set_state(state)
        self.seeded = True

    # torch.Generator is not picklable, and the secret stream must not travel: a copy
    # (``copy.deepcopy``, pickle) of an OS-seeded source is reseeded from OS entropy; only the
    # seeded test stream carries its state (class docstring).
    def __getstate__(self):
        return {
            "secure_mode": self.secure_mode,
            "device": str(self.device),
            "seeded": self.seeded,
            "state": self.generator.get_state() if self.seeded else None,
        }

    def __setstate__(self, state):
        self.secure_mode = state["secure_mode"]
        self.device = torch.device(state["device"])
        self.generator = torch.Generator(device=self.device)
        self.seeded = bool(state.get("seeded", False)) and state.get("state") is not None
        if self.seeded:
            self.generator.set_state(state["state"])
        else:  # the copy's own secret stream, from os.urandom
            seed_from_os(self.generator)
        self.shards = None  # a process group does not travel: the kernel's setup() sets it again


# --------------------------------------------------------------------------- batch selection


def sample_without_replacement(rng: torch.Generator, n: int, b: int, device=None) -> torch.Tensor:
    r"""``b`` distinct indices from ``range(n)``, every subset equally likely, from ``rng``
    (kernels call it only through :meth:`NoiseSource.sample_without_replacement`: batches
    are as secret as the noise).

    Draws iid uniform indices and keeps the first ``b`` *distinct* values in draw order
    (the first :math:`b` distinct draws of an iid uniform sequence form a uniformly random
    :math:`b`-subset). Expected cost :math:`O(b \log b)`, independent of ``n``.

    >>> g = torch.Generator().manual_seed(0)
    >>> idx = sample_without_replacement(g, 1_000_000, 5)
    >>> idx.shape, len(set(idx.tolist())) == 5
    (torch.Size([5]), True)
    """
    n, b = int(n), int(b)
    if not (0 <= b <= n):
        raise ValueError(f"need 0 <= batch size <= N, got b={b}, N={n}")
    gdev = rng.device
    if b == 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    if 2 * b > n:  # dense case: a permutation is as cheap
        return torch.randperm(n, generator=rng, device=gdev)[:b].to(device)
    draws = None
    while True:
        extra = torch.randint(n, (_draws_per_round(b),), generator=rng, device=gdev)
        draws = extra if draws is None else torch.cat([draws, extra])
        if gdev.type == "cpu":
            values = draws.numpy()
            first_pos = _first_occurrences(values, n)  # in draw order
            if first_pos.size >= b:  # the first b distinct draws, in draw order
                return torch.from_numpy(values[first_pos[:b]]).to(device)
            continue
        uniq, inverse = torch.unique(draws, return_inverse=True)
        if uniq.numel() >= b:
            break
    pos = torch.arange(draws.numel(), device=gdev)
    first = torch.full((uniq.numel(),), draws.numel(), dtype=torch.long, device=gdev)
    first = first.scatter_reduce(0, inverse, pos, reduce="amin")
    order = torch.argsort(first)[:b]
    return uniq[order].to(device)


def _draws_per_round(b: int) -> int:
    """Indices :func:`sample_without_replacement` draws per round (enough for ``b`` distinct
    ones in one round, unless ``b`` is close to half of ``n``)."""
    return b + b // 2 + 8


def without_replacement_draws(n: int, b: int) -> Optional[int]:
    """How many indices :func:`sample_without_replacement` draws in its first round (the
    iid-draws branch), or ``None`` when it takes another branch (``b = 0``, the dense
    :math:`2b > n` permutation), or when :func:`sorted_draw_keys` would overflow ``int64``.
    For a graph that
    selects the batch itself from pre-drawn indices (:func:`first_distinct_draws`).

    >>> without_replacement_draws(10**6, 1000), without_replacement_draws(1500, 1000)
    (1508, None)
    """
    n, b = int(n), int(b)
    m = _draws_per_round(b)
    if b <= 0 or 2 * b > n or n << _position_bits(m) >= 2**62:  # sorted_draw_keys would overflow
        return None
    return m


def _position_bits(m: int) -> int:
    """Bits that hold a position in ``range(m)`` (the low bits of a draw's sort key)."""
    return max(int(m) - 1, 1).bit_length()


@functools.lru_cache(maxsize=64)
def _np_arange(m: int) -> np.ndarray:
    out = np.arange(m)
    out.setflags(write=False)
    return out


def sorted_draw_keys(draws: torch.Tensor) -> torch.Tensor:
    """The keys ``value << s | position`` (``s`` bits hold a position in ``range(m)``) of
    ``m`` draws, sorted (numpy's SIMD sort on the CPU, several times faster than
    ``torch.sort`` there): the input of :func:`first_distinct_draws`. Shifts and masks, not
    the ``value * m + position`` of :func:`_first_occurrences`: 64-bit integer division is
    not vectorised (the same order, so the same first occurrences).

    >>> sorted_draw_keys(torch.tensor([5, 3, 5])).tolist()  # 3<<2|1, 5<<2|0, 5<<2|2
    [13, 20, 22]
    """
    m = draws.shape[0]
    s = _position_bits(m)
    if draws.device.type == "cpu":
        keys = (draws.numpy() << s) | _np_arange(m)
        keys.sort()
        return torch.from_numpy(keys)
    return torch.sort((draws << s) | torch.arange(m, device=draws.device))[0]


def draw_batch_indices(rng: torch.Generator, n: int, m: int, padded: int, device=None
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(draws, sorted keys)`` on ``device``: the first round of ``m`` iid indices that
    :func:`sample_without_replacement` draws from ``rng`` (``m`` from
    :func:`without_replacement_draws`), padded to ``padded`` with copies of the first draw
    (never a first occurrence, so the batch :func:`distinct_draws_and_count` keeps is unchanged;
    a batch bucket's graph then has fixed shapes), and their :func:`sorted_draw_keys`. The
    fused steps of the compiled path select their batch from these inside the graph (#17).

    >>> d, keys = draw_batch_indices(torch.Generator().manual_seed(0), 100, 5, 7)
    >>> d.shape, bool((d[5:] == d[0]).all()), bool((keys[1:] > keys[:-1]).all())
    (torch.Size([7]), True, True)
    """
    draws = torch.randint(int(n), (int(m),), generator=rng, device=rng.device)
    if padded > m:
        draws = torch.cat([draws, draws[:1].expand(int(padded) - int(m))])
    return draws.to(device), sorted_draw_keys(draws).to(device)


def first_distinct_draws(draws: torch.Tensor, keys: torch.Tensor, b: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(the first b distinct values of draws in draw order, whether there are fewer than b)``
    from the draws and their :func:`sorted_draw_keys`, with fixed shapes and no sort
    (traceable into a graph; #17): what :func:`sample_without_replacement` keeps of its first
    round of draws (values in ``[0, n)`` with :func:`without_replacement_draws` not ``None``).
    Each value's first position is the first of its run of sorted keys; a running count over
    the positions in draw order gives each first occurrence its slot. With fewer than ``b``
    distinct values the batch is padded with row 0 and the flag is set (the caller must then
    draw more).

    >>> d = torch.tensor([5, 3, 5, 9, 3, 1])
    >>> idx, short = first_distinct_draws(d, sorted_draw_keys(d), 3)
    >>> idx.tolist(), bool(short)
    ([5, 3, 9], False)
    >>> d = torch.tensor([5, 3, 5, 3])
    >>> bool(first_distinct_draws(d, sorted_draw_keys(d), 3)[1])
    True
    """
    out, count = distinct_draws_and_count(draws, keys, b)
    return out, count < b


def distinct_draws_and_count(draws: torch.Tensor, keys: torch.Tensor, size: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(the first size distinct values of draws in draw order, padded with row 0, the number
    of distinct values)``: :func:`first_distinct_draws` for a batch whose size is not fixed
    (a Poisson batch of ``k <= size`` rows keeps the first ``k``, and needs ``count >= k``).
    Padding ``draws`` at the end with copies of ``draws[0]`` changes nothing (a copy is never a
    first occurrence).

    >>> d = torch.tensor([5, 3, 5, 9, 3, 1, 5, 5])  # the last two: padding
    >>> out, count = distinct_draws_and_count(d, sorted_draw_keys(d), 5)
    >>> out.tolist(), int(count)
    ([5, 3, 9, 1, 0], 4)
    """
    b = int(size)
    m = draws.shape[0]
    s = _position_bits(m)
    value = keys >> s
    start = torch.cat([torch.ones(1, dtype=torch.bool, device=draws.device), value[1:] != value[:-1]])
    # the sorted keys' positions are a permutation of range(m): a scatter without collisions
    first = torch.zeros(m, dtype=torch.long, device=draws.device).scatter(0, keys & ((1 << s) - 1), start.long())
    rank = torch.cumsum(first, 0) - 1  # slot of each first occurrence, in draw order
    slot = torch.where((first == 1) & (rank < b), rank, b)  # the rest goes to a discarded slot b
    out = torch.zeros(b + 1, dtype=draws.dtype, device=draws.device).scatter(0, slot, draws)
    return out[:b], rank[-1] + 1


def _first_occurrences(values: np.ndarray, n: int) -> np.ndarray:
    """Positions of the first occurrence of each distinct value of ``values`` (integers in
    ``[0, n)``), in increasing order (draw order): ``np.sort(np.unique(values,
    return_index=True)[1])``. Sorts one key ``value * m + position`` with numpy's default (SIMD)
    sort and marks the first positions in a mask, instead of the stable argsort ``unique``
    needs and a second sort (#17)."""
    m = values.size
    if m == 0 or n * m >= 2**62:  # the key would overflow int64
        return np.sort(np.unique(values, return_index=True)[1])
    keys = values * m + np.arange(m)
    keys.sort()
    value = keys // m
    start = np.empty(m, dtype=bool)
    start[0] = True
    np.not_equal(value[1:], value[:-1], out=start[1:])
    first = np.zeros(m, dtype=bool)
    first[keys[start] - value[start] * m] = True
    return np.flatnonzero(first)


def poisson_subsample(rng: torch.Generator, n: int, q: float, device=None) -> torch.Tensor:
    r"""Indices of a Poisson sample from ``rng``: each of ``n`` rows included independently
    with probability ``q``, drawn as :math:`K \sim \mathrm{Binomial}(n, q)` followed by a
    uniform subset of size :math:`K` (the same law), in :math:`O(qn)`.

    >>> len(poisson_subsample(torch.Generator().manual_seed(0), 10, 1.0))
    10
    """
    return sample_without_replacement(rng, n, poisson_batch_size(rng, n, q), device=device)


def poisson_batch_size(rng: torch.Generator, n: int, q: float) -> int:
    r"""The size :math:`K \sim \mathrm{Binomial}(n, q)` of a Poisson sample, drawn from ``rng``
    (:func:`poisson_subsample`'s first draw).

    >>> poisson_batch_size(torch.Generator().manual_seed(0), 10, 1.0)
    10
    """
    if not (0.0 < q <= 1.0):
        raise ValueError(f"sample rate q must be in (0, 1], got {q!r}")
    count = torch.tensor(float(n), dtype=torch.float64, device=rng.device)
    return int(torch.binomial(count, torch.tensor(float(q), dtype=torch.float64, device=rng.device), generator=rng))


# --------------------------------------------------------------------------- release


class NoisyRelease(NamedTuple):
    """Result of :func:`clipped_sum_with_noise`.

    :ivar value: the released noisy sum (safe to use anywhere: it is in the ledger).
    :ivar event: the event to record in the ledger.
    :ivar noise_std: standard deviation of the noise that was added.
    :ivar clipped_fraction: fraction of rows whose norm exceeded the clip. This is a
        statistic of the data: it is **not** private, it is for the user's own diagnostics
        and must never feed back into the algorithm.
    
    >>> import torch
    >>> out = clipped_sum_with_noise(torch.tensor([0.5, 3.0]), clip=1.0, noise_multiplier=0.0,
    ...                              noise=NoiseSource())
    >>> out.value, out.event, out.clipped_fraction
    (tensor(1.5000), NonPrivateEvent(), 0.5)
    """

    value: torch.Tensor
    event: PrivacyEvent
    noise_std: torch.Tensor
    clipped_fraction: float


def finite_row_mask(values: torch.Tensor) -> torch.Tensor:
    r"""``torch.isfinite(values).all(-1)`` for ``[..., D]`` rows, written as
    :math:`\sum_j (x_j - x_j) = 0`: exact in IEEE arithmetic (:math:`x - x` is 0 for finite
    :math:`x` and NaN for NaN and :math:`\pm\infty`, and a sum with a NaN is NaN). Unlike
    ``torch.isfinite`` and an AND of boolean masks, the compiler of the compiled path vectorises
    it (inductor on the CPU, 10^5 rows of two float64 columns: the per-row rule, clip and sum in
    0.2 ms instead of 0.6 ms). (Not :math:`0\cdot x`: inductor folds ``x * 0`` to 0, which is
    wrong for NaN and :math:`\pm\infty`; ``tests/test_compiled.py`` checks the compiled rule on
    non-finite rows.) The per-row rule uses it.

    >>> import torch
    >>> finite_row_mask(torch.tensor([[0.0, -3e38], [float("nan"), 1.0], [2.0, float("inf")]]))
    tensor([ True, False, False])
    """
    return (values - values).sum(-1) == 0


def finite_rows(values: torch.Tensor) -> torch.Tensor:
    r"""The per-row rule for vector terms: a row with any non-finite entry (NaN, ±inf)
    becomes the zero row. Applied by :func:`clip_rows` before clipping, so every released
    sum sees only finite rows of norm at most the clip: the sensitivity bound holds for
    any row an adversary can write, and no branch or exception depends on one row.

    >>> import torch
    >>> finite_rows(torch.tensor([[1.0, float("nan")], [2.0, 3.0], [float("inf"), 0.0]]))
    tensor([[0., 0.],
            [2., 3.],
            [0., 0.]])
    """
    ok = finite_row_mask(values).unsqueeze(-1)
    return torch.where(ok, values, torch.zeros_like(values))


def finite_scalars(values: torch.Tensor, clip) -> torch.Tensor:
    r"""The per-row rule for scalar terms: NaN becomes 0 and :math:`\pm\infty` becomes
    :math:`\pm` ``clip``. Applied by :func:`clip_scalars` before clipping. (A log-likelihood
    ratio of a row outside the likelihood's support is :math:`-\infty - (-\infty)` = NaN;
    ``torch.minimum``/``torch.clamp`` would pass the NaN through to the released sum and
    make every decision depend on that one row.)

    >>> import torch
    >>> finite_scalars(torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5]), 2.0)
    tensor([ 0.0000,  2.0000, -2.0000,  0.5000])
    """
    clip_t = torch.as_tensor(clip, dtype=values.dtype, device=values.device)
    values = torch.where(values != values, torch.zeros_like(values), values)  # NaN != NaN (IEEE)
    return torch.maximum(torch.minimum(values, clip_t), -clip_t)


def clip_rows(values: torch.Tensor, clip) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Clip each row of ``values`` (shape ``[B, D]``) to L2 norm ``clip``, after the
    per-row rule :func:`finite_rows`.

    Uses :math:`x \cdot \min(1, b/\|x\|)` written so that a zero row stays zero (no NaN).
    Returns the clipped rows and a boolean mask of rows that were clipped (a non-finite
    row counts as clipped). ``clip`` may be a scalar or a 0-d tensor.

    >>> import torch
    >>> clip_rows(torch.tensor([[3.0, 4.0], [0.0, 0.0]]), 1.0)
    (tensor([[0.6000, 0.8000],
            [0.0000, 0.0000]]), tensor([ True, False]))
    """
    finite = finite_row_mask(values)
    values = finite_rows(values)
    norms = torch.linalg.vector_norm(values, dim=-1)
    clip_t = torch.as_tensor(clip, dtype=values.dtype, device=values.device)
    factor = torch.clamp(clip_t / torch.clamp(norms, min=torch.finfo(values.dtype).tiny), max=1.0)
    return values * factor.unsqueeze(-1), (norms > clip_t) | ~finite


def clip_scalars(values: torch.Tensor, clip) -> Tuple[torch.Tensor, torch.Tensor]:
    """Clip each scalar of ``values`` to ``[-clip, clip]`` after the per-row rule
    :func:`finite_scalars`; returns values and the clipped mask (NaN counts as clipped).

    >>> import torch
    >>> clip_scalars(torch.tensor([-3.0, 0.5, 2.0, float("nan")]), 1.0)
    (tensor([-1.0000,  0.5000,  1.0000,  0.0000]), tensor([ True, False,  True,  True]))
    """
    clip_t = torch.as_tensor(clip, dtype=values.dtype, device=values.device)
    mask = ~(values.abs() <= clip_t)  # NaN compares False: counted as clipped
    return finite_scalars(values, clip_t), mask


class ClippedSum(NamedTuple):
    """Result of :func:`clip_and_sum`: the sum of clipped per-example terms, before noise.

    :ivar total: the sum of the clipped terms (**not private**: release it only through
        :func:`clipped_sum_with_noise`).
    :ivar num_clipped: number of rows that were clipped (a 0-d tensor; a data statistic).
    :ivar num_rows: number of rows summed (a 0-d tensor).
    """

    total: torch.Tensor
    num_clipped: torch.Tensor
    num_rows: torch.Tensor


def clip_and_sum(values: torch.Tensor, clip, valid: Optional[torch.Tensor] = None) -> ClippedSum:
    r"""The per-row rule, the clip and the sum of :func:`clipped_sum_with_noise`, without the
    noise: ``values`` ``[B]`` are clipped by :func:`clip_scalars`, ``[B, D]`` by :func:`clip_rows`.

    Pure tensor code (no Python branch on a value), so the compiled path
    (:mod:`pyro_dp.compiled`) traces *this* function into its fused per-example graph:
    the compiled and eager paths apply the same rule. ``valid`` (``[B]``, 0/1) drops padded
    rows of a size bucket from the sum and the counts.

    >>> import torch
    >>> clip_and_sum(torch.tensor([[3.0, 4.0], [0.3, 0.4]]), 1.0)
    ClippedSum(total=tensor([0.9000, 1.2000]), num_clipped=tensor(1), num_rows=tensor(2))
    """
    if values.dim() == 1:
        clipped, mask = clip_scalars(values, clip)
    elif values.dim() == 2:
        clipped, mask = clip_rows(values, clip)
    else:
        raise ValueError(f"values must have shape [B] or [B, D], got {tuple(values.shape)}")
    if valid is None:
        return ClippedSum(clipped.sum(0), mask.sum(), torch.tensor(mask.numel(), device=values.device))
    keep = valid.to(torch.bool)
    w = keep.to(values.dtype)
    clipped = clipped * (w if values.dim() == 1 else w.unsqueeze(-1))
    return ClippedSum(clipped.sum(0), (mask & keep).sum(), keep.sum())


def clip_and_sum_columns(columns: Sequence[torch.Tensor], clip, valid: Optional[torch.Tensor] = None) -> ClippedSum:
    r""":func:`clip_and_sum` of the ``[B, D]`` rows ``torch.stack(columns, -1)``, computed column
    by column: the same per-row rule (a row with a non-finite entry is the zero row, counted
    as clipped), the same clip to L2 norm ``clip`` and the same sum, written with ``[B]``-shaped
    operations only. The compiled path uses it for small ``D``, where per-example gradients
    come as ``D`` forward-mode columns and a ``[B, D]`` layout would keep the compiler from
    vectorising over rows. ``tests/test_mechanisms.py`` checks it against :func:`clip_and_sum`
    on rows with NaN, ±inf, zero and clipped norms.

    >>> import torch
    >>> clip_and_sum_columns([torch.tensor([3.0, 0.3]), torch.tensor([4.0, 0.4])], 1.0)
    ClippedSum(total=tensor([0.9000, 1.2000]), num_clipped=tensor(1), num_rows=tensor(2))
    """
    columns = list(columns)
    if not columns or any(c.dim() != 1 or c.shape != columns[0].shape for c in columns):
        raise ValueError("columns must be a non-empty sequence of [B] tensors of one shape")
    probe = columns[0] - columns[0]  # finite_row_mask, column by column: 0 iff every entry is finite
    for c in columns[1:]:
        probe = probe + (c - c)
    finite = probe == 0
    zero = torch.zeros_like(columns[0])
    columns = [torch.where(finite, c, zero) for c in columns]  # finite_rows, column by column
    if len(columns) == 1:  # torch.linalg.vector_norm over one entry is |x| (no overflow of x^2)
        norms = columns[0].abs()
    else:  # the sum of squares, as vector_norm computes it (a row whose squares overflow: inf, zeroed)
        sq = columns[0] * columns[0]
        for c in columns[1:]:
            sq = sq + c * c
        norms = torch.sqrt(sq)  # as clip_rows: x * min(1, b/||x||), a zero row stays zero
    clip_t = torch.as_tensor(clip, dtype=columns[0].dtype, device=columns[0].device)
    factor = torch.clamp(clip_t / torch.clamp(norms, min=torch.finfo(columns[0].dtype).tiny), max=1.0)
    # The clipped rows, (norms > clip) | ~finite as in clip_rows, counted as a float64 sum of
    # 0/1 (exact below 2^53 rows): an OR of boolean masks and an integer sum kept inductor's
    # CPU code from vectorising the pass (10^5 banana rows: 0.37 ms for the gradient pass
    # instead of 0.22 ms; benchmarks/compiled.py). Nested where, not OR: the same count.
    one = torch.ones((), dtype=torch.float64, device=norms.device)
    zero = torch.zeros((), dtype=torch.float64, device=norms.device)
    clipped = torch.where(finite, torch.where(norms > clip_t, one, zero), one)
    if valid is None:
        keep_count = torch.tensor(norms.numel(), device=norms.device)
    else:
        keep = valid.to(torch.bool)
        factor = factor * keep.to(factor.dtype)
        clipped = torch.where(keep, clipped, zero)
        keep_count = keep.sum()
    total = torch.stack([(c * factor).sum(0) for c in columns])
    return ClippedSum(total, clipped.sum().to(torch.int64), keep_count)


def clipped_sum_with_noise(
    values,
    clip,
    noise_multiplier: float,
    noise: NoiseSource,
    relation: str = "substitute",
) -> NoisyRelease:
    r"""Clip per example, sum, add Gaussian noise — in that order, in one audited place.

    ``values`` has shape ``[B]`` (scalars, clipped to ``[-clip, clip]``) or ``[B, D]``
    (vectors, clipped to L2 norm ``clip``), or is the :class:`ClippedSum` that
    :func:`clip_and_sum` returned for them with the same ``clip`` (the compiled path fuses
    that part into its per-example graph). The sum over the ``B`` rows has
    :math:`\ell_2`-sensitivity :math:`\Delta = 2\,\mathrm{clip}` under substitution of one
    row and :math:`\mathrm{clip}` under add/remove; the noise has standard deviation
    :math:`\sigma = \mathrm{noise\_multiplier}\cdot\Delta` (Gaussian mechanism,
    Räisä 2021 thesis Def. 6–7, Thm 4).

    ``clip`` may be a data-free tensor (e.g. :math:`b\|\theta-\theta'\|`); it must not
    depend on the data. ``noise_multiplier = 0`` is the documented non-private test
    mode: no noise is added and the event is :class:`NonPrivateEvent`, for which every
    accountant reports :math:`\varepsilon = \infty`.
    
    >>> import torch
    >>> out = clipped_sum_with_noise(torch.ones(100, dtype=torch.float64), clip=1.0,
    ...                              noise_multiplier=5.0, noise=NoiseSource())
    >>> out.event, float(out.noise_std)  # sigma = nm * 2 * clip (substitute one row)
    (GaussianEvent(noise_multiplier=5.0), 10.0)
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    cs = values if isinstance(values, ClippedSum) else clip_and_sum(values, clip)
    counts = (cs.num_clipped, cs.num_rows)
    shards = getattr(noise, "shards", None)
    if shards is not None:  # sharded rows: the counts of all ranks (a non-private diagnostic)
        counts = shards.all_reduce_sum(torch.stack([torch.as_tensor(c, dtype=torch.float64) for c in counts]))
    rows = int(counts[1])
    frac = float(counts[0]) / rows if rows else 0.0
    return add_gaussian_noise(cs.total, clip, noise_multiplier, noise, relation)._replace(clipped_fraction=frac)


def gaussian_release(value: torch.Tensor, std, event: PrivacyEvent, noise: NoiseSource) -> NoisyRelease:
    r"""Release ``value`` + :math:`\mathcal N(0, \mathrm{std}^2 I)` for a mechanism whose privacy
    analysis is ``event`` — the release path of the kernels whose noise is not
    ``noise_multiplier x sensitivity`` of a clipped sum (DP Barker's :math:`C - \sigma_b^2`,
    Heikkilä et al. 2019 eq. (18); the minibatch penalty's :math:`\mathrm{nm}\cdot c(\theta,\theta')`,
    Räisä 2021 thesis Thm 8). ``std`` must be data-independent or bounded as the event's
    analysis assumes.

    >>> out = gaussian_release(torch.tensor(1.0, dtype=torch.float64), 0.0, NonPrivateEvent(), NoiseSource())
    >>> float(out.value), out.event
    (1.0, NonPrivateEvent())
    """
    std_t = torch.as_tensor(std, dtype=value.dtype, device=value.device)
    return NoisyRelease(value + noise.normal(std_t, value.shape, like=value), event, std_t, 0.0)


def add_gaussian_noise(
    total: torch.Tensor,
    clip,
    noise_multiplier: float,
    noise: NoiseSource,
    relation: str = "substitute",
) -> NoisyRelease:
    r"""The noise half of :func:`clipped_sum_with_noise`: ``total`` must already be a sum
    of per-example terms each clipped to norm ``clip`` (e.g. a cached clipped sum that is
    released repeatedly, Yıldırım & Ermiş 2019 Alg. 3). Adds
    :math:`\mathcal N(0, (\mathrm{nm}\cdot\Delta)^2 I)` with :math:`\Delta = 2\,\mathrm{clip}`
    (substitute) or :math:`\mathrm{clip}` (add/remove) and returns the event.
    
    >>> import torch
    >>> out = add_gaussian_noise(torch.tensor(42.0, dtype=torch.float64), clip=0.5, noise_multiplier=2.0,
    ...                          noise=NoiseSource(), relation="add_remove")
    >>> float(out.noise_std)  # nm * clip under add/remove
    1.0
    """
    shards = getattr(noise, "shards", None)
    if shards is None or shards.rank == 0:
        draw = draw_gaussian_noise(total, clip, noise_multiplier, noise, relation)
    else:  # pyro_dp.distributed: only rank 0 draws; the others know the event and std
        draw = _gaussian_event(total, clip, noise_multiplier, relation)
    if noise_multiplier > 0:
        if shards is None:
            value = total + draw.value
        else:  # pyro_dp.distributed: rank 0's noise enters once, inside the sum over ranks
            local = total + draw.value if shards.rank == 0 else total
            value = shards.all_reduce_sum(local)
    else:
        value = total if shards is None else shards.all_reduce_sum(total)
    return draw._replace(value=value)


def _gaussian_event(like: torch.Tensor, clip, noise_multiplier: float, relation: str) -> NoisyRelease:
    """``(None, event, std, 0)`` of the Gaussian release of a sum clipped to ``clip`` (no draw)."""
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    sens_factor = 2.0 if relation == "substitute" else 1.0  # l2-sensitivity 2*clip (substitute) or clip
    clip_t = torch.as_tensor(clip, dtype=like.dtype, device=like.device)
    std = float(noise_multiplier) * sens_factor * clip_t  # sigma = nm * Delta (Räisä 2021 thesis Def. 7)
    return NoisyRelease(None, gaussian_event(float(noise_multiplier)), std, 0.0)


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


def draw_gaussian_noise(
    like: torch.Tensor,
    clip,
    noise_multiplier: float,
    noise: NoiseSource,
    relation: str = "substitute",
    count: Optional[int] = None,
) -> NoisyRelease:
    r"""The noise of :func:`add_gaussian_noise`, drawn before the clipped sum it will be added
    to exists: ``value`` is the draw :math:`\mathcal N(0, (\mathrm{nm}\cdot\Delta)^2 I)` of the
    shape of ``like`` (zeros when ``noise_multiplier`` is 0, the non-private test mode), with
    the event and the standard deviation. ``add_gaussian_noise(total, ...)`` is
    ``total + draw_gaussian_noise(total, ...).value``, the same draw from the same stream.

    For the compiled path, which adds the draw to the clipped sum *inside* one fused graph
    (DP-HMC's leapfrog step, :meth:`pyro_dp.compiled.CompiledLikelihood.fused_graph`): the
    clipped sum then never leaves the graph without its noise. The caller must add the draw
    to exactly one clipped sum of per-example terms each clipped to ``clip``, record the
    event, and not run sharded (``noise.shards``: the noise must enter inside the all-reduce).
    With ``count``, ``value`` stacks ``count`` such draws (``[count, *like.shape]``), drawn one
    after another exactly as ``count`` calls would draw them, for ``count`` releases of the
    same event: record it ``count`` times.

    >>> import torch
    >>> out = draw_gaussian_noise(torch.zeros(2, dtype=torch.float64), clip=0.5, noise_multiplier=2.0,
    ...                           noise=NoiseSource())
    >>> tuple(out.value.shape), out.event, float(out.noise_std)  # sigma = nm * 2 * clip
    ((2,), GaussianEvent(noise_multiplier=2.0), 2.0)
    """
    out = _gaussian_event(like, clip, noise_multiplier, relation)
    if count is None:
        if noise_multiplier > 0:
            return out._replace(value=noise.normal(out.noise_std, like.shape, like=like))
        return out._replace(value=torch.zeros_like(like))
    if noise_multiplier > 0:  # one draw per release (a single [count, ...] draw would use the stream differently)
        return out._replace(value=torch.stack([noise.normal(out.noise_std, like.shape, like=like)
                                               for _ in range(int(count))]))
    return out._replace(value=torch.zeros((int(count),) + tuple(like.shape), dtype=like.dtype, device=like.device))


def noisy_histogram(
    bin_index: torch.Tensor,
    num_bins: int,
    noise_multiplier: float,
    noise: NoiseSource,
    relation: str = "substitute",
) -> NoisyRelease:
    r"""Release the number of rows in each of ``num_bins`` data-free bins, plus Gaussian noise.

    ``bin_index`` holds one bin per row (a row whose statistic is NaN or infinite must already
    have been given a bin by a data-free per-row rule: every row counts exactly once). Each row
    adds 1 to exactly one count, so the count vector has :math:`\ell_2`-sensitivity
    :math:`\sqrt 2` under substitution of one row (one count loses 1, another gains 1) and 1
    under add/remove (the Gaussian histogram: Dwork & Roth 2014 §3.3 and Thm A.1); the noise
    has standard deviation :math:`\mathrm{noise\_multiplier}\cdot\Delta`. Sharded rows
    (:mod:`pyro_dp.distributed`) sum their counts inside the release like every clipped sum.

    >>> out = noisy_histogram(torch.tensor([0, 0, 2]), 3, noise_multiplier=0.0, noise=NoiseSource())
    >>> out.value.tolist(), out.event
    ([2.0, 0.0, 1.0], NonPrivateEvent())
    >>> round(float(noisy_histogram(torch.tensor([0]), 3, 2.0, NoiseSource()).noise_std), 4)  # 2 * sqrt(2)
    2.8284
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    num_bins = int(num_bins)
    idx = bin_index.reshape(-1).to(torch.long)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= num_bins):
        raise ValueError(f"bin indices must lie in [0, {num_bins})")
    counts = torch.bincount(idx, minlength=num_bins).to(torch.float64)
    # add_gaussian_noise's std is nm * s * clip with s = 2 (substitute) or 1 (add/remove):
    # clip = Δ / s gives Δ = √2 (substitute) and 1 (add/remove) as above
    clip = math.sqrt(2.0) / 2.0 if relation == "substitute" else 1.0
    return add_gaussian_noise(counts, clip, noise_multiplier, noise, relation)


def noisy_count(count: torch.Tensor, noise_multiplier: float, noise: NoiseSource,
                relation: str = "substitute") -> NoisyRelease:
    r"""Release a count of rows (each row adds 0 or 1, decided by a per-row rule), plus
    Gaussian noise of standard deviation ``noise_multiplier``: one row changes the count by at
    most 1 under either relation (substituting it moves it between counted and not counted),
    so :math:`\Delta = 1` (Dwork & Roth 2014 Thm A.1; the unclipped count of the adaptive clip
    of Andrew et al. 2021, Alg. 1). Sharded rows sum their counts inside the release.

    >>> out = noisy_count(torch.tensor(7), noise_multiplier=0.0, noise=NoiseSource())
    >>> float(out.value), out.event
    (7.0, NonPrivateEvent())
    >>> float(noisy_count(torch.tensor(7), 3.0, NoiseSource()).noise_std)  # nm * 1
    3.0
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    # add_gaussian_noise's std is nm * s * clip with s = 2 (substitute) or 1 (add/remove): Δ = 1
    clip = 0.5 if relation == "substitute" else 1.0
    return add_gaussian_noise(torch.as_tensor(count).to(torch.float64), clip, noise_multiplier, noise, relation)
