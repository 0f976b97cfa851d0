r"""A chain's ledger (:class:`ChainLedger`): the :class:`~pyro_dp.mechanisms.PrivacyLedger` of one
chain of one kernel object, tagged with the kernel's identity and where each iteration's releases
end. The privacy engine (:mod:`pyro_dp.kernels.privacy_engine`) writes it; the report, the
checkpoint and the worker processes read it. Its own module so that the engine holds the budget
and the writing, and the ledger's bookkeeping reads alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..mechanisms import PrivacyEvent, PrivacyLedger
from .workers import owned_kernel

__all__ = ["ChainLedger"]


def _marked_releases(marks) -> int:
    """Releases covered by run-length iteration marks (:attr:`ChainLedger.iteration_marks`)."""
    return sum(r * n if n else r for r, n in marks)


@dataclass(eq=False)
class ChainLedger(PrivacyLedger):
    r"""The ledger of one chain of one kernel object: a :class:`~pyro_dp.mechanisms.PrivacyLedger`
    tagged with ``kernel_id`` and ``chain_id``.

    When it is unpickled in the process that owns the kernel — which is how a chain run in an
    ``MCMC`` worker process comes back, inside ``diagnostics()`` — it files itself with that
    kernel object (idempotently, by ``chain_id``), so the kernel's cumulative ledger and its
    budget count chains run in worker processes too.

    >>> led = ChainLedger("substitute", kernel_id="k", chain_id="c")
    >>> led.copy().chain_id, isinstance(led, PrivacyLedger)
    ('c', True)
    """

    kernel_id: str = ""
    chain_id: str = ""
    #: the :class:`WorkerReleases` slot of the worker process that made the releases (-1: the owner)
    worker_slot: int = -1
    #: where the chain's iterations end, run-length encoded: ``[r, n]`` = ``n`` iterations that
    #: released ``r`` values each, oldest first; ``[r, 0]`` = ``r`` releases not tied to an
    #: iteration (e.g. those of a ledger extended into this one). Releases recorded since the last
    #: :meth:`end_iteration` are pending. Public counts only; the ε-over-iterations curve of
    #: :func:`pyro_dp.privacy_report` reads them (:meth:`release_positions`).
    iteration_marks: list = field(default_factory=list, repr=False, compare=False)
    _pending: int = field(default=0, repr=False, compare=False)

    def __eq__(self, other) -> bool:
        return PrivacyLedger.__eq__(self, other)

    def record(self, event: PrivacyEvent, count: int = 1, label: str = "") -> None:
        super().record(event, count, label)
        self._pending += int(count)

    def end_iteration(self) -> None:
        """Mark the end of one iteration of the chain (the releases since the last mark were its own)."""
        marks, r = self.iteration_marks, self._pending
        self._pending = 0
        if marks and marks[-1][0] == r and marks[-1][1] > 0:
            marks[-1][1] += 1
        else:
            marks.append([r, 1])

    @property
    def num_iterations(self) -> int:
        """Iterations marked by :meth:`end_iteration` (0 for a ledger without marks)."""
        return sum(n for _, n in self.__dict__.get("iteration_marks", ()))

    def release_positions(self, iterations) -> list:
        """For each ``t`` of the increasing ``iterations``: how many of this ledger's releases were
        made by the end of its ``t``-th iteration, pessimistically — releases not tied to an
        iteration count from where they were recorded (a ledger without marks: from the start),
        and from ``t`` = :attr:`num_iterations` on, every release (pending ones included).

        >>> from pyro_dp.mechanisms import GaussianEvent
        >>> led = ChainLedger()
        >>> for t in range(3):
        ...     led.record(GaussianEvent(5.0), 2); led.end_iteration()
        >>> led.iteration_marks, led.release_positions([0, 1, 3])
        ([[2, 3]], [0, 2, 6])
        """
        total = self.num_releases
        marks = self.__dict__.get("iteration_marks", ())
        done = self.num_iterations
        pos = max(total - _marked_releases(marks) - self.__dict__.get("_pending", 0), 0)  # unmarked head: at 0
        out, it, k, used = [], 0, 0, 0  # ``used`` iterations of marks[k] are behind us
        for t in iterations:
            if t >= done:
                out.append(total)
                continue
            while k < len(marks):
                r, n = marks[k]
                if n == 0:  # not tied to an iteration: counted from the iteration before it
                    pos, k = pos + r, k + 1
                    continue
                take = min(n - used, t - it)
                pos, it, used = pos + r * take, it + take, used + take
                if used < n:
                    break
                k, used = k + 1, 0
            out.append(min(pos, total))
        return out

    def extend(self, other) -> None:
        """:meth:`PrivacyLedger.extend`, keeping the iteration marks pessimistic: this ledger's
        pending releases and ``other``'s releases are not tied to an iteration of this chain
        (counted from where they are), except that a :class:`ChainLedger`'s own marks are kept
        (a chain's ledger restored into a fresh one continues its marks)."""
        before = self.__dict__.get("_pending", 0)
        n0 = self.num_releases
        super().extend(other)
        added = self.num_releases - n0
        mine = self.__dict__.setdefault("iteration_marks", [])
        if before:
            mine.append([before, 0])
        theirs = other.__dict__.get("iteration_marks") if isinstance(other, ChainLedger) else None
        if not theirs:
            if added:
                mine.append([added, 0])
            self._pending = 0
            return
        pending = other.__dict__.get("_pending", 0)
        head = added - _marked_releases(theirs) - pending
        if head > 0:
            mine.append([head, 0])
        mine.extend([r, n] for r, n in theirs)
        self._pending = pending

    def copy(self) -> "ChainLedger":
        new = ChainLedger(self.relation, kernel_id=self.kernel_id, chain_id=self.chain_id,
                          worker_slot=self.worker_slot)
        new._entries = list(self._entries)
        new._labels = list(self._label_list())
        new.iteration_marks = [list(m) for m in self.__dict__.get("iteration_marks", ())]
        new._pending = self.__dict__.get("_pending", 0)
        return new

    def state_dict(self) -> dict:
        """:meth:`PrivacyLedger.state_dict` plus the iteration marks (plain ints)."""
        return {**super().state_dict(), "pending": self.__dict__.get("_pending", 0),
                "iteration_marks": [list(m) for m in self.__dict__.get("iteration_marks", ())]}

    def load_state_dict(self, state: dict) -> None:
        """:meth:`PrivacyLedger.load_state_dict` and the iteration marks; a state without them
        leaves its releases untied to iterations (the ε curve counts them from the start)."""
        super().load_state_dict(state)
        self.iteration_marks = [[int(r), int(n)] for r, n in state.get("iteration_marks", ())]
        self._pending = int(state.get("pending", 0)) if "iteration_marks" in state else 0

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("iteration_marks", [])  # a ledger pickled before marks existed: none
        self.__dict__.setdefault("_pending", 0)
        kernel = owned_kernel(self.kernel_id)
        if kernel is not None:
            kernel.privacy.file_chain(self)
