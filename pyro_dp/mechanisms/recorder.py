r"""The release recorder (:mod:`pyro_dp.mechanisms`): every function of this layer that draws
release noise records its event here **when it draws**, so the ledger is written by the
mechanism, not from what a kernel says it released (issue 58).

A kernel's owner (the privacy engine, :class:`pyro_dp.kernels.privacy_engine.PrivacyEngine`)
opens a recorder around each step with :func:`recording`; the release functions —
:meth:`~pyro_dp.mechanisms.GaussianReleaseSpec.draw` (and ``draw_each``, ``draw_tentative``),
:meth:`~pyro_dp.mechanisms.GaussianStdReleaseSpec.draw`,
:func:`~pyro_dp.mechanisms.draw_gaussian_noise`, :func:`~pyro_dp.mechanisms.add_gaussian_noise`
(hence :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`,
:func:`~pyro_dp.mechanisms.noisy_histogram`, :func:`~pyro_dp.mechanisms.noisy_count`) and
:func:`~pyro_dp.mechanisms.gaussian_release` — call :func:`record_release` with their event, and
the owner writes the ledger from :attr:`Recorder.events`. Three rules of composition live here:

* **A withdrawn release is un-recorded.** :meth:`GaussianReleaseSpec.withdraw
  <pyro_dp.mechanisms.GaussianReleaseSpec.withdraw>` puts the secret stream back where it was
  before a tentative draw (DP-HMC's ratio, called off when the trajectory leaves the support)
  and takes that draw's record back (:meth:`Recorder.withdraw`).
* **Parallel composition.** The releases made inside :func:`parallel` are each one party's, on
  disjoint rows (DP multi-party penalty, Yıldırım & Ermiş 2019 §3.2.2): the scope records the
  worst of them once (:func:`worst_event`).
* **No release without a recorder.** A draw with no recorder open raises
  :class:`UnrecordedReleaseError`: there is no path by which release noise is drawn and the
  ledger does not hear of it. Data-free randomness (proposals, momenta, accept uniforms) and
  the batch selections (whose privacy is part of their release's subsampled event) record
  nothing.

The event recorded is the release's own (its spec's :attr:`event`), or the event its mechanism's
analysis states for it, passed as ``event=`` at the draw (a Poisson-subsampled Gaussian
release's :class:`~pyro_dp.mechanisms.SubsampledGaussianEvent`; DP-Fast MH's per-iteration
:math:`(\varepsilon, \delta)`, Zhang & Zhang 2023 Thm 2); a non-private test release
(``noise_multiplier = 0``) draws nothing and records :class:`~pyro_dp.mechanisms.NonPrivateEvent`;
a rank other than 0 of sharded rows draws nothing and records the same event as rank 0.

>>> import torch
>>> from pyro_dp.mechanisms import NoiseSource, clipped_sum_with_noise, gaussian_release_spec
>>> noise = NoiseSource()
>>> with recording() as drawn:
...     _ = clipped_sum_with_noise(torch.ones(3, dtype=torch.float64), 1.0, 2.0, noise)
...     _ = gaussian_release_spec(5.0).draw_each(noise, 3)
>>> drawn.events
[GaussianEvent(noise_multiplier=2.0), GaussianEvent(noise_multiplier=5.0), GaussianEvent(noise_multiplier=5.0), GaussianEvent(noise_multiplier=5.0)]
>>> try:
...     gaussian_release_spec(5.0).draw(noise)
... except UnrecordedReleaseError as e:
...     print(str(e)[:44])
release noise drawn with no recorder open: a
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import List, Optional

from .events import GaussianEvent, NonPrivateEvent, PrivacyEvent

__all__ = ["Recorder", "recording", "record_release", "withdraw_release", "parallel", "worst_event",
           "UnrecordedReleaseError", "open_recorder"]


class UnrecordedReleaseError(RuntimeError):
    """Release noise was drawn with no :class:`Recorder` open: the release would reach no ledger.

    >>> issubclass(UnrecordedReleaseError, RuntimeError)
    True
    """


class Recorder:
    """What the releases of one scope drew, in the order they drew it.

    :ivar events: one event per release (a release of ``count`` draws at once, e.g. DP-HMC's
        ``L`` gradients, adds ``count``), withdrawn tentative releases removed.
    """

    __slots__ = ("events", "_tentative", "_parties", "_token", "_outer")

    def __init__(self):
        self.events: List[PrivacyEvent] = []
        self._tentative: Optional[int] = None  # index of the last tentative release
        self._parties: Optional[List[PrivacyEvent]] = None  # an open parallel() scope's releases
        self._token = self._outer = None

    def __enter__(self) -> "Recorder":
        """Open this recorder (:func:`recording`; a class, not a generator: it runs every iteration)."""
        self._outer = _OPEN.get()
        self._token = _OPEN.set(self)
        return self

    def __exit__(self, *exc) -> bool:
        _OPEN.reset(self._token)
        outer, self._token, self._outer = self._outer, None, None
        if outer is not None:  # nested: the enclosing scope hears of every release too (none can be hidden)
            outer.record_all(self.events)
        return False

    def record(self, event: PrivacyEvent, count: int = 1, tentative: bool = False) -> None:
        """``count`` releases of ``event`` (``tentative``: one that :meth:`withdraw` may take back)."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"a release records a PrivacyEvent, got {type(event).__name__}")
        if self._parties is not None:
            self._parties.extend([event] * int(count))
            return
        if tentative:
            self._tentative = len(self.events)
        self.events.extend([event] * int(count))

    def record_all(self, events) -> None:
        """Record ``events`` (a nested scope's, as it closes: :func:`recording`)."""
        for ev in events:
            self.record(ev)

    def withdraw(self) -> None:
        """Take back the last tentative release (its draw was added to nothing released)."""
        i, self._tentative = self._tentative, None
        if i is None or i >= len(self.events):
            raise RuntimeError("internal error: a withdrawn release without its tentative draw (please report)")
        del self.events[i]

    def take(self, start: int = 0) -> List[PrivacyEvent]:
        """The events recorded from position ``start`` on, removed from the recorder."""
        self._tentative = None
        if start == 0:  # the whole record (every step): hand the list over, no copy
            out, self.events = self.events, []
            return out
        out = self.events[start:]
        del self.events[start:]
        return out

    def __repr__(self) -> str:
        return f"Recorder({self.events!r})"


_OPEN: contextvars.ContextVar = contextvars.ContextVar("pyro_dp_release_recorder", default=None)


def open_recorder() -> Optional[Recorder]:
    """The innermost open :class:`Recorder` (``None``: none is open)."""
    return _OPEN.get()


def recording(recorder: Optional[Recorder] = None) -> Recorder:
    """Open ``recorder`` (default: a fresh :class:`Recorder`) for the releases of a ``with``
    block, which it is: ``with recording() as drawn:``; the innermost open recorder receives every
    release. The owner of the scope writes the ledger from :attr:`Recorder.events`. A scope opened inside another passes what it
    recorded on to the enclosing one when it closes, so code run inside a kernel's step cannot
    hide a release from the step's ledger by opening a recorder of its own.

    >>> with recording() as outer:
    ...     with recording() as inner:
    ...         record_release(GaussianEvent(2.0))
    >>> inner.events == outer.events == [GaussianEvent(2.0)]
    True
    """
    return Recorder() if recorder is None else recorder


def record_release(event: PrivacyEvent, count: int = 1, tentative: bool = False) -> None:
    """Called by the release functions of this layer when they draw (module doc): record
    ``count`` releases of ``event`` in the open recorder, or raise :class:`UnrecordedReleaseError`."""
    rec = _OPEN.get()
    if rec is None:
        raise UnrecordedReleaseError(
            "release noise drawn with no recorder open: a release must be made inside a step of a pyro_dp kernel "
            "(DPKernel.sample opens one) or inside pyro_dp.mechanisms.recording(), whose owner writes what was drawn "
            f"into a ledger (the release: {event!r})")
    rec.record(event, count, tentative)


def withdraw_release() -> None:
    """Take back the open recorder's last tentative release (:meth:`Recorder.withdraw`)."""
    rec = _OPEN.get()
    if rec is None:
        raise UnrecordedReleaseError("a release withdrawn with no recorder open")
    rec.withdraw()


def worst_event(events) -> PrivacyEvent:
    r"""The event of a parallel composition of ``events`` (releases on disjoint sets of rows:
    one row is in one of them only, so the composition is as private as the least private one;
    McSherry 2009, Thm 4, for Gaussian mechanisms of one sensitivity): :class:`NonPrivateEvent`
    if one of them is, else the Gaussian release with the smallest noise multiplier. Other kinds
    are refused (no order between them is implemented).

    >>> worst_event([GaussianEvent(3.0), GaussianEvent(2.0)])
    GaussianEvent(noise_multiplier=2.0)
    """
    events = list(events)
    if not events:
        raise ValueError("a parallel composition of no release")
    if any(isinstance(e, NonPrivateEvent) for e in events):
        return NonPrivateEvent()
    if not all(isinstance(e, GaussianEvent) for e in events):
        raise TypeError(f"parallel composition is implemented for Gaussian releases only, got {events!r}")
    return min(events, key=lambda e: e.noise_multiplier)


@contextlib.contextmanager
def parallel():
    """A scope whose releases are made on disjoint sets of rows (one party's each): on leaving it,
    the open recorder records :func:`worst_event` of them, once (parallel composition). Scopes do
    not nest.

    >>> import torch
    >>> from pyro_dp.mechanisms import NoiseSource, clipped_sum_with_noise
    >>> noise, rows = NoiseSource(), torch.ones(4, dtype=torch.float64)
    >>> with recording() as drawn:
    ...     with parallel():
    ...         a = clipped_sum_with_noise(rows[:2], 1.0, 3.0, noise)
    ...         b = clipped_sum_with_noise(rows[2:], 1.0, 2.0, noise)
    >>> drawn.events
    [GaussianEvent(noise_multiplier=2.0)]
    """
    rec = _OPEN.get()
    if rec is None:
        raise UnrecordedReleaseError("a parallel composition with no recorder open")
    if rec._parties is not None:
        raise RuntimeError("parallel() scopes do not nest")
    rec._parties = []
    try:
        yield
    finally:
        parties, rec._parties = rec._parties, None
        if parties:
            rec.record(worst_event(parties))
