r"""A tap on the releases (:mod:`pyro_dp.mechanisms`): while :func:`tap_releases` is active, every
noisy release that the mechanisms layer makes is also appended, with its event and noise scale,
to a list the caller holds — the white-box view that :func:`pyro_dp.release_audit.audit_releases`
audits (Nasr et al. 2023). Inactive (always, outside an audit) it costs one attribute read per
release.

Where it sees: the three places that add release noise —
:func:`~pyro_dp.mechanisms.add_gaussian_noise` (hence :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`,
:func:`~pyro_dp.mechanisms.noisy_histogram`, :func:`~pyro_dp.mechanisms.noisy_count`),
:meth:`~pyro_dp.mechanisms.GaussianReleaseSpec.release` and
:meth:`~pyro_dp.mechanisms.GaussianStdReleaseSpec.release` (hence
:func:`~pyro_dp.mechanisms.gaussian_release`). Each release is seen once, after the noise was added
(and, for sharded rows, after the sum over ranks).

**Eager only.** The tap is bound to the thread that opened it and sees releases made by Python
code in that thread: a compiled kernel (``jit_compile=True``, or ``None`` when it chooses to
compile) traces its step in another thread and runs the graph without calling back, so its
releases are not seen. The audit therefore runs kernels eagerly.

White-box controls, for the audit only:

* ``pin={i: value}`` replaces the value of the ``i``-th release of the run by ``value`` (the
  value the kernel then uses: what a white-box adversary who chose the earlier outputs would
  see). Pinned releases are still recorded, with their pinned value.
* ``stop_after=i`` ends the run right after the ``i``-th release is recorded, by raising
  :class:`StopTap` (a ``BaseException``, so that no ``except Exception`` of a kernel swallows it).
* ``replay=n`` (with ``replay_at`` a set of release indices, default ``{stop_after}``): each
  of those releases is made ``n`` more times (before a pin replaces its value) from the same noise-free value and standard deviation, each with fresh normals
  from the secret stream that drew its noise (the kernel's
  :class:`~pyro_dp.mechanisms.NoiseSource`, a mutant's included), appended to the list
  :attr:`TappedRelease.replays` of the release: ``n`` draws of the release given the state,
  from one run. A release whose normals are not the ones its spec drew from a secret stream
  (found among the last draws of :meth:`GaussianReleaseSpec.draw` /
  :meth:`GaussianStdReleaseSpec.draw`, bit for bit) cannot be replayed: ``replays`` is then
  ``None``.
* **Batches.** Every batch selection of :func:`~pyro_dp.mechanisms.poisson_batch` and
  :func:`~pyro_dp.mechanisms.batch_without_replacement` is recorded (and
  :func:`~pyro_dp.mechanisms.batch_with_replacement`'s, recorded only: DP-Fast MH draws its
  size and thinning apart from it, Zhang & Zhang 2023 Alg. 1, so it is not pinned) (the list
  ``tap.batches``, :func:`tap_releases` yields it as ``seen.batches``); ``batches={j: idx}``
  replaces the ``j``-th by ``idx``, and ``include=r`` puts row ``r`` into every batch not
  pinned (a Poisson batch gains it, a batch of fixed size has its last row replaced by it): a
  white-box adversary who fixes the batch, with the differing row in it.

Each release is also labelled by the first ledger record
(:meth:`~pyro_dp.mechanisms.PrivacyLedger.record`) after it, with that record's label (``""``: the
kernel's own iterations, ``"tune:clip"``, ...) and event.

>>> import torch
>>> from pyro_dp.mechanisms import NoiseSource, clipped_sum_with_noise, recording
>>> with tap_releases() as seen, recording():
...     out = clipped_sum_with_noise(torch.ones(3, dtype=torch.float64), 1.0, 2.0, NoiseSource())
>>> len(seen), seen[0].event, float(seen[0].noise_std), bool(seen[0].value == out.value)
(1, GaussianEvent(noise_multiplier=2.0), 4.0, True)
>>> with tap_releases(pin={0: torch.tensor(7.0)}), recording():  # a white-box adversary's choice of the output
...     float(clipped_sum_with_noise(torch.ones(3), 1.0, 2.0, NoiseSource()).value)
7.0
"""
from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch

__all__ = ["TappedRelease", "tap_releases", "StopTap"]


@dataclass
class TappedRelease:
    """One release seen by :func:`tap_releases`.

    :ivar index: its position among the releases of the tapped code (0, 1, ...).
    :ivar site: where it was made: ``module.function`` of the first caller outside the
        mechanisms layer (e.g. ``"pyro_dp.kernels.penalty.step"``).
    :ivar event: the event the release function states (``None`` where the caller did not give
        one: :meth:`GaussianStdReleaseSpec.release` called on the class).
    :ivar noise_std: the standard deviation of the noise added (a tensor).
    :ivar value: the released value (a detached copy; the pinned value if pinned).
    :ivar label: the label of the first ledger record after it (``None``: not recorded yet).
    :ivar recorded_event: the event of that record (the ledger's, e.g. DP-Fast MH's
        ``ApproxDPEvent`` for a Gaussian release).
    :ivar replays: with ``replay=n``, for the releases ``replay_at`` only: ``n`` more draws of
        it from the same noise-free value (``None`` where it cannot be replayed).
    :ivar computed: the value the release function computed (``value`` unless pinned).
    """

    index: int
    site: str
    event: object
    noise_std: torch.Tensor
    value: torch.Tensor
    label: Optional[str] = None
    recorded_event: object = None
    replays: Optional[List[torch.Tensor]] = None
    computed: Optional[torch.Tensor] = None


class StopTap(BaseException):
    """Raised by the tap right after the release ``stop_after``: the run is over (for the audit,
    which needs nothing after it)."""


class _Seen(list):
    """The list of releases :func:`tap_releases` yields, with the run's batch selections as
    ``.batches``."""

    batches: List[torch.Tensor]
    #: for each batch, the number of releases made before it was selected
    batch_at: List[int]
    #: the batches recorded but not pinned (``batches``, ``include``: DP-Fast MH's)
    unpinned: List[int]


class _Tap:
    def __init__(self, pin, stop_after, replay=0, batches=None, include=None, replay_at=None):
        self.thread = threading.get_ident()
        self.seen = _Seen()
        self.seen.batches, self.seen.batch_at, self.seen.unpinned = [], [], []
        self.pin: Dict[int, torch.Tensor] = dict(pin or {})
        self.stop_after = stop_after
        self.replay = int(replay or 0)
        self.replay_at = frozenset(replay_at if replay_at is not None else
                                   ([] if stop_after is None else [stop_after]))
        self.batch_pin: Dict[int, torch.Tensor] = dict(batches or {})
        self.include = include
        self.drawn: List = []  # the last (noise source, standard normals) drawn by a release spec


#: the open tap (``None``: the releases are not tapped, the normal state)
ACTIVE: Optional[_Tap] = None

_LAYER = __name__.rsplit(".", 1)[0]  # "pyro_dp.mechanisms"


def _site() -> str:
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__", "").startswith(_LAYER):
        f = f.f_back
    if f is None:
        return "?"
    return f"{f.f_globals.get('__name__', '?')}.{f.f_code.co_name}"


def _active() -> Optional[_Tap]:
    tap = ACTIVE
    return tap if tap is not None and tap.thread == threading.get_ident() else None


def seen(value: torch.Tensor, std, event, redraw: Optional[Callable[[], torch.Tensor]] = None) -> torch.Tensor:
    """Called by the release functions when :data:`ACTIVE` is set: record the release, and
    return its value (or the pinned one). ``redraw()``: the release made again from the same
    noise-free value with fresh normals from the same secret stream (``None``: not replayable).
    Not for kernels."""
    tap = _active()
    if tap is None:
        return value
    i = len(tap.seen)
    computed = value.detach().clone()
    if i in tap.pin:
        value = torch.as_tensor(tap.pin[i]).to(dtype=value.dtype, device=value.device).reshape(value.shape)
    std = torch.as_tensor(std).detach().clone()
    r = TappedRelease(i, _site(), event, std, value.detach().clone(), computed=computed)
    tap.seen.append(r)
    if tap.replay > 0 and i in tap.replay_at and redraw is not None:
        r.replays = [redraw().detach().clone() for _ in range(tap.replay)]
    if tap.stop_after is not None and i >= tap.stop_after:
        raise StopTap()
    return value


def drew(noise, xi: torch.Tensor) -> None:
    """Called by the release specs' draws when :data:`ACTIVE` is set: ``xi`` (standard normals,
    one release's or a stack of them) came from the secret stream ``noise``."""
    tap = _active()
    if tap is not None:
        tap.drawn = (tap.drawn + [(noise, xi)])[-4:]


def source_of(xi: torch.Tensor):
    """The secret stream whose last draws include ``xi`` bit for bit (one release's normals, or
    one row of a stack drawn at once), else ``None``."""
    tap = _active()
    if tap is None:
        return None
    for noise, t in reversed(tap.drawn):
        if t.shape == xi.shape and torch.equal(t, xi.to(t.device, t.dtype)):
            return noise
        if t.dim() == xi.dim() + 1 and t.shape[1:] == xi.shape and any(torch.equal(row, xi.to(t.device, t.dtype))
                                                                     for row in t):
            return noise
    return None


def batch(idx: torch.Tensor, fixed_size: bool, pinnable: bool = True) -> torch.Tensor:
    """Called by the batch selections when :data:`ACTIVE` is set: record the batch ``idx`` and
    return it, or the pinned one, or it with the row ``include`` put in (module doc). A batch
    that is not ``pinnable`` (DP-Fast MH's: its size and thinning are drawn apart from it) is
    recorded, its index in ``seen.unpinned``, and returned as it is."""
    tap = _active()
    if tap is None:
        return idx
    j = len(tap.seen.batches)
    if not pinnable:
        tap.seen.unpinned.append(j)
    elif j in tap.batch_pin:
        idx = torch.as_tensor(tap.batch_pin[j]).to(dtype=idx.dtype, device=idx.device)
    elif tap.include is not None and not bool((idx == int(tap.include)).any()):
        row = torch.tensor([int(tap.include)], dtype=idx.dtype, device=idx.device)
        idx = torch.cat([idx[:-1], row]) if fixed_size and len(idx) else torch.cat([idx, row])
    tap.seen.batches.append(idx.detach().clone())
    tap.seen.batch_at.append(len(tap.seen))
    return idx


def recorded(event, count: int, label: str) -> None:
    """Called by :meth:`PrivacyLedger.record` when :data:`ACTIVE` is set: the ``count`` oldest
    releases not yet recorded take ``label`` and ``event``."""
    tap = _active()
    if tap is None:
        return
    left = int(count)
    for r in tap.seen:
        if left <= 0:
            break
        if r.label is None:
            r.label, r.recorded_event = str(label), event
            left -= 1


@contextlib.contextmanager
def tap_releases(pin: Optional[Dict[int, torch.Tensor]] = None, stop_after: Optional[int] = None, *,
                 replay: int = 0, replay_at=None, batches: Optional[Dict[int, torch.Tensor]] = None,
                 include: Optional[int] = None):
    """Tap the releases made in this thread while the block runs; yields the list of
    :class:`TappedRelease` (module doc), with the batch selections as its ``.batches``.
    ``pin``: ``{release index: value}`` replaces those releases' values; ``stop_after``: raise
    :class:`StopTap` right after that release (the caller catches it); ``replay``: make the
    releases ``replay_at`` (default: ``stop_after``) that many more times; ``batches``: ``{selection index: idx}`` replaces those batches;
    ``include``: a row put into every other batch. Taps do not nest."""
    global ACTIVE
    if ACTIVE is not None:
        raise RuntimeError("tap_releases() is already active (taps do not nest)")
    if replay and stop_after is None and replay_at is None:
        raise ValueError("replay needs replay_at or stop_after (the releases to replay)")
    tap = _Tap(pin, stop_after, replay, batches, include, replay_at)
    ACTIVE = tap
    try:
        yield tap.seen
    finally:
        ACTIVE = None
