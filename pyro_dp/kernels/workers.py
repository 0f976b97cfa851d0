r"""Processes: what a kernel object must know when ``pyro.infer.MCMC`` runs its chains in
worker processes (and, with ``distributed=True``, when its rows are sharded over
:mod:`torch.distributed` ranks, :mod:`pyro_dp.distributed`).

Pyro's runner owns the processes (``pyro/infer/mcmc/api.py``: ``_MultiSampler`` pickles the
kernel into one worker per chain and only ``diagnostics()`` comes back). A DP kernel must still
account for every release those workers make, so this module keeps, for every kernel object:

* its identity in this process (``_KERNELS``): a :class:`~pyro_dp.kernels.chain_ledger.ChainLedger`
  unpickled in the owner process files itself with the kernel object it belongs to;
* :class:`WorkerReleases`, release counters in shared memory (one slot per worker chain,
  :data:`WORKER_SLOTS`), so that a worker whose ledger never comes back (killed, terminated by
  Pyro, failed outside a step) marks the ledger incomplete instead of under-reporting ε;
* :class:`ChainFailedError`, which carries a failed worker chain's ledger back;
* :class:`ChainProcesses`, the part of a :class:`~pyro_dp.kernels.base.DPKernel` that holds all
  this (``kernel.processes``: which chain slot this process is, whether its chain fits the
  budget's share, what travels into a worker); it reads the kernel's
  :class:`~pyro_dp.kernels.privacy_engine.PrivacyEngine`, which each method receives;
* :class:`Ranks`, the part that shards rows over :mod:`torch.distributed` ranks
  (``kernel.ranks``).

Everything here reads counts and process ids only: no data.
"""
from __future__ import annotations

import contextlib
import copy
import ctypes
import multiprocessing
import os
import secrets
import weakref
from collections import Counter
from typing import Optional

import torch

from ..distributed import shards_for

__all__ = ["ChainProcesses", "Ranks", "WorkerReleases", "ChainFailedError", "WORKER_SLOTS", "owned_kernel"]

NONPRIVATE_PREFIX = "non-private "

# Kernel objects of this process by id: a ChainLedger unpickled here (a worker's chain coming
# back with its diagnostics) files itself with the kernel object it belongs to.
_KERNELS: "weakref.WeakValueDictionary[str, object]" = weakref.WeakValueDictionary()


def owned_kernel(kernel_id: str) -> Optional[object]:
    """The kernel object ``kernel_id`` if this process owns it (a ledger coming back from a
    worker process files itself there), else ``None`` (e.g. inside the worker)."""
    kernel = _KERNELS.get(kernel_id)
    return kernel if kernel is not None and kernel.processes.owner_pid == os.getpid() else None


#: chain slots of the shared release counters of chains run in ``MCMC`` worker processes (Pyro
#: names chain i's worker process "i"); a worker chain with an id from this number on is refused
#: before it reads data (its count would share a slot, so a lost ledger could go unnoticed)
WORKER_SLOTS = 256


class WorkerReleases:
    """Releases made by a kernel object's chains in ``MCMC`` worker processes, counted in shared
    memory as they are made (``made[slot]``, with the worker's ``pid[slot]``), so that the owner
    process knows how many releases its ledger should hold even when a worker's ledger never
    comes back: a worker that fails outside a chain's step (a ``hook_fn``, ``diagnostics()``
    with warnings turned into errors), is killed, or is terminated by Pyro because a sibling
    failed or the run was interrupted. Created with the kernel (before any worker is forked);
    inherited by forked workers, handed to spawned ones with the kernel. Counts only: no data.

    >>> w = WorkerReleases(); w.made[3] += 2; sum(w.made)
    2
    """

    def __init__(self):
        self.made = multiprocessing.RawArray(ctypes.c_int64, WORKER_SLOTS)
        self.pid = multiprocessing.RawArray(ctypes.c_int64, WORKER_SLOTS)
        #: the run (``ChainProcesses.run``) of the worker that last registered each slot
        self.run = multiprocessing.RawArray(ctypes.c_int64, WORKER_SLOTS)
        #: releases of the slot's earlier workers not in the ledgers the registering worker inherited
        self.stale = multiprocessing.RawArray(ctypes.c_int64, WORKER_SLOTS)


def _lost_releases_message(lost: int) -> str:
    return (
        f"{lost} release(s) made by this kernel's chains in MCMC worker processes are not in its ledger: "
        "their ledgers did not come back (a worker failed outside the chain's step, e.g. in a hook_fn or in "
        "diagnostics() with warnings turned into errors, was killed, or Pyro terminated it when a sibling "
        "failed or the run was interrupted; or the run is still going). An epsilon from this ledger would be "
        "a LOWER bound of what was spent, so none is reported, and this kernel object's next chains refuse "
        "to read data (their budget cannot be checked). The releases made count against these data: bound "
        "them (at most num_chains full chain plans per run) before spending more on them"
    )


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (an exited, not yet reaped process does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: assume it runs (the caller then does not count it as lost)


def _before_fork() -> None:
    """Before this process forks (Pyro starting MCMC workers): every kernel object it owns counts
    the worker start (:meth:`ChainProcesses.run`) and notes releases of exited earlier
    workers that never came back, so the new workers inherit the mark. A worker still running
    may be a sibling of the run being started; the workers check those slots themselves, by run
    (:meth:`ChainProcesses.lost`)."""
    for kernel in list(_KERNELS.values()):
        if kernel.processes.owner_pid == os.getpid():
            kernel.processes.count_start()
            kernel.processes.note_lost(kernel.privacy)


os.register_at_fork(before=_before_fork)


class ChainFailedError(RuntimeError):
    """A chain failed in an ``MCMC`` worker process. It carries the chain's ledger back to the
    parent process (where unpickling files it with the kernel object) and marks the kernel's
    ledger as possibly incomplete: Pyro then terminates the sibling worker processes, and the
    releases they had made never come back.

    >>> ChainFailedError("boom", None).args
    ('boom',)
    """

    def __init__(self, message, ledger=None):
        super().__init__(message)
        self.ledger = ledger

    def __reduce__(self):
        return (_unpickle_chain_failure, (self.args[0], self.ledger))


def _unpickle_chain_failure(message, ledger):
    kernel = owned_kernel(getattr(ledger, "kernel_id", ""))
    if kernel is not None:
        kernel.privacy.incomplete = (
            "a chain failed in an MCMC worker process and Pyro terminated its siblings: releases they made "
            "are not in this ledger, so epsilon is a LOWER bound of what was spent. Run chains in this "
            "process (num_chains <= cpu_count - 1 makes Pyro use workers) to keep an exact ledger"
        )
    return ChainFailedError(message, ledger)


class ChainProcesses:
    """The part of a kernel object that knows its processes (module doc): its identity in the
    process that built it, its worker chains' shared release counters, and what a copy or a
    worker takes along. ``owner`` is the kernel object, registered by id so that a ledger coming
    back from a worker files itself with it (:func:`owned_kernel`). Every method that reads
    ledgers receives the kernel's :class:`~pyro_dp.kernels.privacy_engine.PrivacyEngine`.
    Counts and process ids only: no data.

    >>> class Kernel: ...
    >>> p = ChainProcesses(Kernel()); p.chain_id() is None and p.slot() == -1
    True
    """

    def __init__(self, owner):
        self.owner_pid = os.getpid()
        self.id = secrets.token_hex(8)
        _KERNELS[self.id] = owner
        self.releases: Optional[WorkerReleases] = WorkerReleases()  # created before any worker is forked
        self.starts = 0  # worker processes started from this object (see run)

    def count_start(self) -> None:
        """The owner is about to start a worker process (a fork, or pickling for a spawned one)."""
        self.starts += 1

    def chain_id(self) -> Optional[int]:
        """Pyro's chain id when this runs in an ``MCMC`` worker process (Pyro names each worker
        process by its chain id, ``pyro/infer/mcmc/api.py``, ``_MultiSampler``), else ``None``;
        ``-1`` in a process that does not name its chain."""
        if os.getpid() == self.owner_pid:
            return None
        try:
            return int(multiprocessing.current_process().name)
        except ValueError:
            return -1

    def run(self) -> Optional[int]:
        """Which ``MCMC`` run this worker belongs to (``None`` in the owner, or in a process that
        does not name its chain). Pyro starts chain ``c`` of a run as the ``c``-th worker process of
        its run, one after another (``_MultiSampler.run``), so the number of worker starts the
        worker inherited minus its chain id is the same for every chain of one run and differs
        between runs. A start in between (another fork of the owner) can only split one run into
        two, which makes a sibling's releases look lost: pessimistic, never the other way."""
        chain = self.chain_id()
        return None if chain is None or chain < 0 else self.starts - chain

    def slot(self) -> int:
        """This process's slot of :class:`WorkerReleases` (``-1`` in the owner process)."""
        chain = self.chain_id()
        if chain is None:
            return -1
        return chain % WORKER_SLOTS if chain >= 0 else WORKER_SLOTS - 1

    def count_release(self, engine) -> None:
        """Count one release of a chain in a worker process in shared memory, as it is made."""
        slot = engine.live.worker_slot
        if slot >= 0 and self.releases is not None:
            self.releases.made[slot] += 1

    def returned(self, engine) -> Counter:
        """Releases per worker slot in the engine's ledgers (worker ledgers that came back)."""
        back: Counter = Counter()
        for led in engine.chain_ledgers():
            if getattr(led, "worker_slot", -1) >= 0:
                back[led.worker_slot] += led.num_releases
        return back

    def lost(self, engine, finished_only: bool = False) -> int:
        """Releases made in worker processes (:class:`WorkerReleases`) that are not in the
        engine's ledgers: their chains' ledgers never came back. ``finished_only`` (before a
        worker starts, and at a worker chain's set-up): leave out the slots of chains that may
        still send their ledger back. In the owner about to start a worker, those are the slots
        whose worker still runs (it may be a sibling of the run being started). In a worker, they
        are its siblings of the same run (:meth:`run`), running or exited (an exited sibling's
        ledger went to the owner, not to this copy); a slot last registered by a worker of an
        earlier run counts as lost even while that worker is still exiting (Pyro terminates the
        workers of a failed run without waiting for them)."""
        shared = self.releases
        if shared is None:
            return 0
        back = self.returned(engine)
        own, run = self.slot(), self.run()
        lost = 0
        for slot in range(WORKER_SLOTS):
            made = shared.made[slot]  # read before the slot's run: a sibling registers before it releases
            if made <= back[slot]:
                continue
            if finished_only and slot != own:
                if own < 0 and _process_alive(shared.pid[slot]):
                    continue  # the owner: a running worker, perhaps of the run being started
                if own >= 0 and run is not None and shared.run[slot] == run:
                    # a sibling of its own run: its releases go to the owner, but not those of the
                    # slot's earlier workers that it found unreturned when it registered
                    lost += shared.stale[slot]
                    continue
            lost += made - back[slot]
        return lost

    def note_lost(self, engine, finished_only: bool = True) -> None:
        """Mark the engine's ledger incomplete when releases of workers never came back (what was
        spent is unknown). Run in the owner just before it starts workers (:func:`_before_fork`,
        pickling for a spawned worker), so they inherit the mark, and at every chain's set-up
        (``finished_only``: :meth:`lost`)."""
        lost = self.lost(engine, finished_only=finished_only)
        if lost:
            engine.incomplete = engine.incomplete or _lost_releases_message(lost)

    def register_chain(self, engine) -> None:
        """At a chain's set-up: :meth:`note_lost`, then register this worker's process in its
        slot. A chain in the owner process runs when no run of worker chains is in progress (Pyro
        runs a run's chains either all in workers or all here), so it counts every release that
        has not come back, also of a worker that is still exiting."""
        self.note_lost(engine, finished_only=self.chain_id() is not None)
        if self.chain_id() is not None and self.releases is not None:
            slot, shared = self.slot(), self.releases
            shared.pid[slot] = os.getpid()
            # before the run (a sibling that sees this run reads stale), and before any release
            shared.stale[slot] = max(shared.made[slot] - self.returned(engine)[slot], 0)
            shared.run[slot] = self.run() or 0

    @contextlib.contextmanager
    def failing_chain(self, engine):
        """Around a chain's ``sample()``: in an ``MCMC`` worker process an exception comes back
        as a :class:`ChainFailedError` carrying the chain's ledger (the engine's live one), so
        its releases are counted in the owner process; elsewhere it passes unchanged."""
        if self.chain_id() is None:
            yield
            return
        try:
            yield
        except Exception as e:  # in an MCMC worker: the chain's releases must come back
            raise ChainFailedError(f"{type(e).__name__}: {e}", engine.live.copy()) from e

    def require_complete(self, engine) -> None:
        """Raise ``RuntimeError`` when the engine's ledger may miss releases (an ε from it would
        be a lower bound of what was spent)."""
        if engine.incomplete:
            raise RuntimeError(engine.incomplete)
        lost = self.lost(engine)
        if lost:
            raise RuntimeError(_lost_releases_message(lost))

    def refusal(self, engine) -> Optional[str]:
        """Why the budget has no room for this chain, or ``None``: checked in ``setup``, before
        any data is read.

        In this process chains run one after another and the per-iteration check sees every
        earlier chain. A chain in a worker process cannot see its siblings; it may read data
        only if the chains already filed with this kernel object (earlier runs, merged back)
        plus a full chain plan for itself and for every sibling with a smaller chain id fit the
        budget's ``num_chains`` chain plans. A refused chain does not raise — Pyro would then
        terminate its siblings, and releases they had made would never come back — it stops
        like an exhausted chain: it reads nothing, repeats its start and warns.

        Any chain (also in this process) is refused when the ledger may miss releases
        (``engine.incomplete``, set by :meth:`register_chain` just before, or by a
        :class:`ChainFailedError`); ``get_epsilon`` then raises.
        """
        chain = self.chain_id()
        if chain is not None and chain >= WORKER_SLOTS:  # with or without a budget: its count would share a slot
            return (f"MCMC runs chain {chain} in a worker process, but a kernel object counts the releases of "
                    f"worker chains 0..{WORKER_SLOTS - 1} only (WORKER_SLOTS): a lost ledger of this chain could "
                    "go unnoticed; run at most that many chains in parallel, or the rest in this process")
        if engine.epsilon is None:
            return None
        if engine.incomplete:
            return ("this kernel object's ledger may miss releases of earlier chains (RuntimeError from "
                    "get_epsilon says why), so its budget cannot be checked")
        if chain is None:
            return None
        if chain < 0:
            return (f"this worker process ({multiprocessing.current_process().name!r}) does not name its "
                    f"chain, so its share of the num_chains={engine.num_chains} chain plans cannot be checked")
        if not engine.plan.fits(engine.live, engine.filed_counts, Counter(engine.plan.chain), concurrent=chain + 1):
            return (f"MCMC runs chain {chain} in parallel, but the budget was planned for "
                    f"num_chains={engine.num_chains} chains and {len(engine.chains)} chain(s) of earlier runs of "
                    "this kernel object are already in its ledger; pass the same num_chains to the kernel "
                    "and to MCMC, and use a new kernel (with its own budget) for a new analysis")
        return None

    # ------------------------------------------------------------------ pickling (into workers, copies)
    def pickled_engine(self, engine, spawning: bool):
        """The engine a pickled kernel takes along: into a spawned worker, this one (the worker
        start counted and lost releases noted first, as :func:`_before_fork` does for a forked
        one); into a copy, a copy of it that keeps knowing what was lost (s10 audit F4). The
        shared counters themselves travel only to spawned workers (:meth:`__getstate__`)."""
        if spawning:
            self.count_start()
            self.note_lost(engine)
            return engine
        lost = self.lost(engine)
        if lost and not engine.incomplete:
            engine = copy.copy(engine)  # the copy's engine, not this one's
            engine.incomplete = _lost_releases_message(lost)
        return engine

    def __getstate__(self):
        state = self.__dict__.copy()
        if multiprocessing.context.get_spawning_popen() is None:
            state["releases"] = None  # shared memory travels only to spawned workers
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.releases is None:
            self.releases = WorkerReleases()

    def adopt(self, owner, engine) -> None:
        """After unpickling ``owner`` (the kernel object): a copy in the owner's process
        (``copy.deepcopy``, a pickle round trip) is a kernel object of its own, whose workers'
        ledgers must file with it, not with the original (s10 audit F2); a copy in a worker keeps
        the original's id."""
        if os.getpid() == self.owner_pid and _KERNELS.get(self.id) not in (None, owner):
            self.id = engine.kernel_id = engine.live.kernel_id = secrets.token_hex(8)
        _KERNELS.setdefault(self.id, owner)


class Ranks:
    """The part of a kernel that shards its rows over :mod:`torch.distributed` ranks
    (``distributed=True`` or a ``process_group``; :mod:`pyro_dp.distributed`): every rank gets
    the same data-free seed, start and noise, and the global number of rows.

    >>> Ranks(False, None, "DPPenalty", supported=True).distributed
    False
    """

    def __init__(self, distributed: bool, process_group, owner: str, supported: bool):
        self.distributed = bool(distributed) or process_group is not None
        self.process_group = process_group
        self.shards = None  # pyro_dp.distributed.Shards, set by join() on every rank
        if self.distributed and not supported:
            raise ValueError(
                f"{owner} does not support distributed=True: its releases are not all plain sums "
                "over rows, or it reads batches that would need a global draw. Sharded kernels: DPPenalty, DPHMC "
                "(docs/scaling_out.md)"
            )

    def join(self, seed: int, worker_chain: Optional[int]) -> int:
        """At every set-up: join the ranks' process group and agree on the data-free seed
        (rank 0's, returned), before any draw; ``seed`` itself when not distributed."""
        if not self.distributed:
            return seed
        if worker_chain is not None and worker_chain >= 0:  # a Pyro MCMC worker: outside the process group
            raise RuntimeError(
                f"distributed=True: MCMC runs chain {worker_chain} in a worker process, outside the process group "
                "of the ranks, whose decisions would then disagree; run one chain per job (or sequential "
                "chains) and launch more jobs for more chains (docs/scaling_out.md)")
        self.shards = shards_for(True, self.process_group)
        return self.shards.agree_int(seed)

    def share(self, noise, lik) -> None:
        """The global number of rows (public) on every rank, and rank 0's noise inside every
        release (the all-reduce of :class:`~pyro_dp.distributed.Shards`); nothing when not sharded."""
        if self.shards is None:
            return
        noise.shards = self.shards
        n = torch.tensor([lik.num_rows], dtype=torch.int64)
        lik.global_num_rows = int(self.shards.all_reduce_sum(n)[0])

    def check_agree(self, z0: torch.Tensor, lik) -> None:
        """Every rank starts at the same point and clips and restricts alike (data-free); nothing
        when not sharded."""
        if self.shards is None:
            return
        self.shards.check_same(z0.detach().cpu(), "the initial point")
        mask = lik.likelihood_mask
        self.shards.check_same(torch.ones(lik.dim, dtype=torch.float64) if mask is None
                               else mask.detach().cpu().to(torch.float64), "the likelihood's coordinates")

    def __getstate__(self):
        return dict(self.__dict__, shards=None)  # a process group stays in its process (join() sets it again)
