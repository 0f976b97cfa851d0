r"""The Pyro lifecycle shared by every DP kernel: set-up without touching data, the
per-chain privacy ledger, the privacy budget, generators, diagnostics.

Algorithms live in pure-ish ``init``/``step`` functions (one file each); a subclass of
:class:`DPKernel` only says which events one iteration releases and calls its step.

How this fits :class:`pyro.infer.MCMC` (see ``shared/FACTS.md``):

* ``setup()`` may run more than once (``MCMC._set_transforms`` calls it again in the main
  process) — it evaluates no likelihood and records nothing.
* Initial values are drawn from the prior (``init_strategy``) or taken from the user's
  ``initial_params``; Pyro's data-dependent search for a valid starting point never runs.
* **One cumulative ledger per kernel object.** Each chain keeps a :class:`ChainLedger`
  (a :class:`~pyro_dp.mechanisms.PrivacyLedger` tagged with the kernel and the chain);
  ``cleanup()`` files it with the kernel's finished chains. ``diagnostics()`` returns it,
  and that is what comes back from a worker process when ``MCMC`` runs chains in parallel:
  when the parent process unpickles it, it files itself with the parent's kernel object
  (idempotently). So :attr:`DPKernel.ledger`, :meth:`DPKernel.get_epsilon`,
  :func:`pyro_dp.get_epsilon` and the budget see every release of every chain of every
  ``mcmc.run`` of this kernel object, in this process or in workers.
* **The budget is enforced on the ledger.** With ``epsilon``/``delta`` the kernel plans one
  chain's releases (the private ``init``, once-per-chain releases, and as many iterations
  as fit for ``num_chains`` chains) and, before every iteration, checks that the chain's
  ledger plus the iteration's declared releases stays within that plan and that all the
  kernel's ledgers stay within ``num_chains`` such plans. The check reads only event
  counts (public), so whatever the control flow — re-runs, a re-initialised state, a
  retried set-up, more chains than planned — nothing is released beyond the budget.
* **Randomness.** ``seed`` seeds only the data-free streams (proposals, momenta, accept
  uniforms, prior draws). Privacy noise and batch selection come from a
  :class:`~pyro_dp.mechanisms.NoiseSource` seeded from OS entropy, per chain; ``noise_seed``
  makes it reproducible for tests, with a :class:`~pyro_dp.mechanisms.ReproducibleNoiseWarning`.
  A kernel running in a process other than the one that built it mixes fresh OS entropy
  into its data-free seeds too, so parallel chains are independent. A copy of a kernel
  (``copy.deepcopy``, pickle) never carries the secret stream: its ``NoiseSource`` is
  reseeded from OS entropy (only the ``noise_seed`` test stream is copied as it is).
"""
from __future__ import annotations

import copy
import ctypes
import logging
import math
import multiprocessing
import os
import secrets
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from ..checks import SamplingWarning, chain_problems
from ..heap import HEAP_TRIM_EVERY, release_free_heap
from ..likelihood import PrivateLikelihood
from ..accounting import DEFAULT_ACCOUNTANT, UnsupportedEventError, calibrate, get_accountant
from ..mechanisms import NoiseSource, PrivacyEvent, PrivacyLedger, ReproducibleNoiseWarning
from ..warn import warn_user
from .checkpoint import from_plain, to_plain
from .plan import PrivacyPlan, counts as _counts, within as _within
from .tuning import DPAutoTune, mcmc_run_length, penalty_jump_length, posterior_scale_guess

__all__ = ["DPKernel", "BudgetExhaustedWarning", "SamplingWarning", "PrivacyNotice", "ChainLedger", "ChainFailedError",
           "WorkerReleases", "check_positive", "NONPRIVATE_PREFIX", "DEFAULT_EPSILON", "DEFAULT_DELTA", "DEFAULT_ITERATIONS"]

_logger = logging.getLogger("pyro_dp")


#: The default path warns before a chain runs when the largest move its noise allows is below
#: this fraction of the (guessed) posterior standard deviation (:meth:`DPKernel._move_scales`).
NOISE_LIMITED_RATIO = 0.25

#: A chain checks its own draws after warmup (:func:`~pyro_dp.checks.chain_problems`) when it has
#: at least this many; it keeps at most ``_MAX_CHECKED_DRAWS`` of them (the first ones).
_MIN_CHECKED_DRAWS, _MAX_CHECKED_DRAWS = 100, 20_000


class BudgetExhaustedWarning(UserWarning):
    """The privacy budget is spent: the kernel has stopped reading data.

    Turn it into an error when a run must never end early::

        import warnings
        warnings.simplefilter("error", pyro_dp.BudgetExhaustedWarning)

    >>> issubclass(BudgetExhaustedWarning, UserWarning)
    True
    """


class PrivacyNotice(UserWarning):
    """What the kernel assumed for you: the default budget, the number of iterations it funds,
    and (with the default budget) the ε a chain spent. Silence it with
    ``warnings.simplefilter("ignore", pyro_dp.PrivacyNotice)``.

    >>> issubclass(PrivacyNotice, UserWarning)
    True
    """


#: The default budget, used when a kernel is given neither a budget nor its noise
#: (``MCMC(DPHMC(model))``): ε = 1 over all chains of the kernel object — the "strong
#: privacy" end of the range used in practice (ε ≤ 1; Dwork & Roth 2014 §1; deployments use 1–10),
#: announced with a :class:`PrivacyNotice`. Pass ``epsilon=`` for your own budget.
DEFAULT_EPSILON = 1.0
#: The default δ (with the default budget, or when only ``epsilon`` is given). δ should be
#: well below 1/N; with N above 10^5 rows pass a smaller ``delta`` (the kernel warns).
DEFAULT_DELTA = 1e-5
#: Iterations per chain a budget funds when the kernel is used outside ``pyro.infer.MCMC``
#: and no ``num_iterations`` is given (inside ``MCMC`` it reads ``warmup_steps + num_samples``).
DEFAULT_ITERATIONS = 1000


def check_positive(name: str, value, *, allow_zero: bool = False, integer: bool = False):
    """Validate a hyper-parameter; raise a ``TypeError``/``ValueError`` naming it."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"{name} must be a number, got {value!r}")
    if torch.is_tensor(value):
        if value.numel() != 1 and not integer:
            if not bool(torch.isfinite(value).all()) or bool((value < 0).any()) or (
                not allow_zero and bool((value == 0).any())
            ):
                raise ValueError(f"{name} must be positive and finite, got {value}")
            return value
        value = value.item()
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'non-negative' if allow_zero else 'positive'} and finite, got {value!r}")
    if integer:
        if v != int(v):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        return int(v)
    return v


def _derive_seed(*words: int) -> int:
    """Independent 63-bit seeds for (base seed, chain, purpose) via numpy's SeedSequence."""
    return int(np.random.SeedSequence([int(w) & (2**64 - 1) for w in words]).generate_state(1, np.uint64)[0] >> 1)


_PURPOSE_INIT, _PURPOSE_ALGO, _PURPOSE_NOISE = 1, 2, 3

#: Prefix of every ``diagnostics()`` key computed from the raw data and **not covered by ε**
#: (e.g. ``"non-private clipped fraction"``); such keys appear only with
#: ``nonprivate_diagnostics=True``.
NONPRIVATE_PREFIX = "non-private "

# Kernel objects of this process by id: a ChainLedger unpickled here (a worker's chain coming
# back with its diagnostics) files itself with the kernel object it belongs to.
_KERNELS: "weakref.WeakValueDictionary[str, DPKernel]" = weakref.WeakValueDictionary()
#: checkpoints (their ``"token"``) this process has resumed: each may continue one chain once
_RESUMED_CHECKPOINTS: set = set()


def _refuse_resumed(state: dict) -> None:
    """A checkpoint continues its chain once: refuse one this process has resumed already."""
    if state.get("token") in _RESUMED_CHECKPOINTS:
        raise ValueError("this checkpoint was already resumed in this process: a checkpoint continues its chain "
                         "once (a second continuation would spend its budget again)")


def _owned_kernel(kernel_id: str) -> Optional["DPKernel"]:
    """The kernel object ``kernel_id`` if this process owns it (a ledger coming back from a
    worker process files itself there), else ``None`` (e.g. inside the worker)."""
    kernel = _KERNELS.get(kernel_id)
    return kernel if kernel is not None and kernel._owner_pid == os.getpid() else None


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
    """Before this process forks (Pyro starting MCMC workers): every kernel object it owns notes
    releases of earlier workers that never came back, so the new workers inherit the mark. The
    owner sees every slot (a worker sees only its own: a sibling of its run that has already
    exited looks the same as a lost one)."""
    for kernel in list(_KERNELS.values()):
        if kernel._owner_pid == os.getpid():
            kernel._note_lost_releases()


os.register_at_fork(before=_before_fork)


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
        kernel = _owned_kernel(self.kernel_id)
        if kernel is not None:
            kernel._file_chain(self)


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
    kernel = _owned_kernel(getattr(ledger, "kernel_id", ""))
    if kernel is not None:
        kernel._incomplete = (
            "a chain failed in an MCMC worker process and Pyro terminated its siblings: releases they made "
            "are not in this ledger, so epsilon is a LOWER bound of what was spent. Run chains in this "
            "process (num_chains <= cpu_count - 1 makes Pyro use workers) to keep an exact ledger"
        )
    return ChainFailedError(message, ledger)


class DPKernel(MCMCKernel):
    r"""Base class of pyro_dp's kernels (not used directly).

    :param model: Pyro model (see :class:`~pyro_dp.likelihood.PrivateLikelihood`).
    :param float temperature: tempering :math:`T` of the log-likelihood.
    :param str data_plate: name of the data plate (default: inferred).
    :param dict transforms: optional transforms to unconstrained space.
    :param init_strategy: data-free Pyro init strategy (default: a prior draw; the prior median
        on the default path, where the private tuning starts from it).
    :param float epsilon, delta: total privacy budget over all chains. When set, the kernel
        never takes a step that would exceed it: it stops reading data, keeps returning
        the last state, and warns (:class:`BudgetExhaustedWarning`). ``delta`` defaults to :data:`DEFAULT_DELTA` when only
        ``epsilon`` is given; with neither, and no noise multiplier, the kernel adopts the
        default budget :data:`DEFAULT_EPSILON` and says so (:class:`PrivacyNotice`).
    :param int num_iterations: planned iterations per chain, warmup included (used to
        calibrate the noise when no noise multiplier is given). Default: read from the
        ``pyro.infer.MCMC`` run at the first set-up (``warmup_steps + num_samples``), else
        :data:`DEFAULT_ITERATIONS`; a :class:`PrivacyNotice` says which.
    :param int num_chains: planned number of chains (each reads the same data). Default: the
        ``MCMC``'s ``num_chains`` at the first set-up, else 1.
    :param str accountant: accountant used for ε (default ``"gdp"``: tight Gaussian).
    :param float reference_delta: δ at which diagnostics and the progress bar report ε
        (default: ``delta`` if given, else 1e-5).
    :param int seed: base seed of the **data-free** randomness (proposals, momenta, accept
        uniforms, prior draws), per chain. It never seeds privacy noise or batch selection.
    :param int noise_seed: makes the privacy noise and batch selection reproducible — for
        tests only: anyone who knows it can remove the noise. Warns
        (:class:`~pyro_dp.mechanisms.ReproducibleNoiseWarning`). Default: OS entropy.
    :param bool secure_mode: noise and batches from an OS-seeded generator with the
        floating-point mitigation of :class:`~pyro_dp.mechanisms.NoiseSource` (refuses
        ``noise_seed``).
    :param bool nonprivate_diagnostics: add to ``diagnostics()`` the statistics computed from
        the raw data for the data holder's tuning (clipped fractions), under keys starting
        with :data:`NONPRIVATE_PREFIX`. They are **not covered by ε**: never publish them.
    :param bool non_private: documented test mode: noise multipliers may be 0; such runs
        record :class:`~pyro_dp.mechanisms.NonPrivateEvent` and report ε = ∞.
    :param str relation: neighbouring relation of the ledger (``"substitute"``, the papers',
        or ``"add_remove"`` where the kernel's analysis covers it: see
        :attr:`supported_relations`); noise multipliers are relative to its sensitivity.
    :param bool jit_compile: trace the model's per-example functions once into graphs and
        compile them (:mod:`pyro_dp.compiled`; Pyro's name for the switch on ``HMC``/``NUTS``):
        the same values and the same ledger, several times faster per iteration after a
        one-time compile that every chain of this kernel object in this process reuses.
        Off by default because the compile costs seconds to tens of seconds (worth it from a
        few hundred iterations on large data); a model the trace cannot represent runs eagerly
        with a :class:`~pyro_dp.compiled.CompileFallbackWarning`.
    :param dict jit_options: ``{"backend": "inductor" (default) | "graph", **torch.compile
        kwargs}``; ``"graph"`` runs the traced graph without compiling it (exact, no compile time).
    :param bool distributed: shard the rows over the ranks of an initialised
        :mod:`torch.distributed` process group (:mod:`pyro_dp.distributed`): each rank passes its
        own rows to ``MCMC.run``, every release sums the ranks' clipped sums with rank 0's noise
        inside the all-reduce, and every rank gets the same chain and ledger. Kernels with
        :attr:`supports_distributed` only.
    :param process_group: the process group to shard over (implies ``distributed=True``;
        default: the default group).
    :param public: positions and keywords of ``MCMC.run`` arguments that are public although they
        look like data (a tensor whose first dimension has ``N`` entries): they are passed whole to
        every row's evaluation, without noise (:mod:`pyro_dp.arguments`).
    :param init: optional private initialisation run at the first iteration of every chain,
        e.g. :class:`~pyro_dp.kernels.private_init.DPGradientInit`; its releases are recorded
        in the chain's ledger and counted by the budget and by noise calibration.

    Every kernel of :mod:`pyro_dp.kernels` is a :class:`DPKernel`, and these keyword
    arguments work for all of them:

    >>> import pyro_dp
    >>> all(issubclass(k, DPKernel) for k in (pyro_dp.DPPenalty, pyro_dp.DPHMC, pyro_dp.DPBarker))
    True
    >>> kernel = pyro_dp.DPPenalty(lambda y: None, proposal_scale=0.1, llr_clip=1.0,
    ...                            epsilon=1.0, delta=1e-5, num_iterations=1000, seed=0)
    >>> kernel.epsilon, kernel.num_iterations
    (1.0, 1000)
    """

    #: Neighbouring relations this kernel's privacy analysis covers; any other is refused in
    #: ``__init__``, before data is seen.
    supported_relations: Tuple[str, ...] = ("substitute",)

    #: Whether the kernel can shard its rows over torch.distributed ranks (``distributed=True``,
    #: :mod:`pyro_dp.distributed`): every release is a sum of clipped per-example terms over all rows.
    supports_distributed: bool = False

    #: Attributes that make up a chain in progress, saved by :meth:`state_dict` (subclasses
    #: extend it with their adaptation and statistics).
    _chain_attrs: Tuple[str, ...] = (
        "_state", "_iteration", "_num_accepted", "_clipped_sum", "_clipped_count", "_budget_exhausted",
        "_stop_cause_text", "_init_done", "_chain_index", "_warmup_steps", "_incomplete", "_draws",
    )

    def __init__(
        self,
        model,
        *,
        temperature: float = 1.0,
        data_plate: Optional[str] = None,
        transforms: Optional[dict] = None,
        init_strategy=None,
        epsilon: Optional[float] = None,
        delta: Optional[float] = None,
        num_iterations: Optional[int] = None,
        num_chains: Optional[int] = None,
        accountant: str = DEFAULT_ACCOUNTANT,
        reference_delta: Optional[float] = None,
        seed: Optional[int] = None,
        noise_seed: Optional[int] = None,
        secure_mode: bool = False,
        non_private: bool = False,
        relation: str = "substitute",
        init=None,
        nonprivate_diagnostics: bool = False,
        jit_compile: bool = False,
        jit_options: Optional[dict] = None,
        distributed: bool = False,
        process_group=None,
        public=(),
    ):
        if not callable(model):
            raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
        if relation not in type(self).supported_relations:
            raise ValueError(
                f"{type(self).__name__}'s privacy analysis covers relation(s) {type(self).supported_relations}, "
                f"not relation={relation!r}"
            )
        self.model = model
        self.temperature = check_positive("temperature", temperature)
        self.data_plate = data_plate
        self._user_transforms = transforms
        self.init_strategy = init_to_sample if init_strategy is None else init_strategy
        self.non_private = bool(non_private)
        if epsilon is not None or delta is not None:
            if epsilon is None:
                raise ValueError("a privacy budget needs epsilon (delta alone is not a budget)")
            if delta is None:
                delta = DEFAULT_DELTA
            epsilon = check_positive("epsilon", epsilon)
            delta = float(delta)
            if not (0.0 < delta < 1.0):
                raise ValueError(f"delta must be in (0, 1), got {delta!r}")
            if self.non_private:
                raise ValueError("non_private=True cannot be combined with a privacy budget")
        self.epsilon, self.delta = epsilon, delta
        self.num_iterations = None if num_iterations is None else check_positive("num_iterations", num_iterations, integer=True)
        #: whether num_chains was given (else it is read from ``MCMC`` at the first set-up)
        self._num_chains_given = num_chains is not None
        self.num_chains = 1 if num_chains is None else check_positive("num_chains", num_chains, integer=True)
        #: ``True`` when the kernel adopted :data:`DEFAULT_EPSILON` (:meth:`_adopt_default_budget`)
        self.default_budget = False
        #: where :attr:`num_iterations` came from: ``"given"``, ``"MCMC"`` or ``"assumed"``
        self.run_length_source = None if num_iterations is None else "given"
        get_accountant(accountant)
        self.accountant = accountant
        rd = reference_delta if reference_delta is not None else (delta if delta is not None else 1e-5)
        if not (0.0 < float(rd) < 1.0):
            raise ValueError(f"reference_delta must be in (0, 1), got {rd!r}")
        self.reference_delta = float(rd)
        self.jit_compile = bool(jit_compile)
        #: arguments named public (:mod:`pyro_dp.arguments`)
        self.public = tuple(public or ())
        self.jit_options = dict(jit_options or {})
        if self.jit_options and not self.jit_compile:
            raise ValueError("jit_options needs jit_compile=True")
        self._jit_cache: dict = {}  # compiled graphs, shared by this kernel's chains in this process
        self.distributed = bool(distributed) or process_group is not None
        self._process_group = process_group
        self._shards = None  # pyro_dp.distributed.Shards, set by setup() on every rank
        if self.distributed and not type(self).supports_distributed:
            raise ValueError(
                f"{type(self).__name__} does not support distributed=True: its releases are not all plain sums "
                "over rows, or it reads batches that would need a global draw. Sharded kernels: DPPenalty, DPHMC "
                "(docs/scaling_out.md)"
            )
        self.seed = int(seed) if seed is not None else secrets.randbits(63)
        self.secure_mode = bool(secure_mode)
        if noise_seed is not None:
            if self.secure_mode:
                raise ValueError("secure_mode=True draws the noise seed from the OS: do not pass noise_seed")
            warn_user(
                "noise_seed makes the privacy noise and batch selection reproducible: anyone who knows it "
                "can replay the noise and remove it from the released values. Use it for tests only.",
                ReproducibleNoiseWarning,
            )
        self.noise_seed = None if noise_seed is None else int(noise_seed)
        self.nonprivate_diagnostics = bool(nonprivate_diagnostics)
        self._owner_pid = os.getpid()
        self._id = secrets.token_hex(8)
        _KERNELS[self._id] = self

        self.transforms = None  # set by setup(); MCMC reads it after the run
        self.lik: Optional[PrivateLikelihood] = None  # set by setup()
        self._warmup_steps = 0  # set by setup()
        self._user_initial_params: Optional[Dict[str, torch.Tensor]] = None
        self._initial_params: Optional[Dict[str, torch.Tensor]] = None
        self.relation = relation
        if init is not None and not (callable(getattr(init, "run", None)) and callable(getattr(init, "events", None))):
            raise TypeError(f"init must be a private initialiser such as DPGradientInit, got {init!r}")
        if init is not None and getattr(init, "noise_multiplier", None) == 0 and not self.non_private:
            raise ValueError("init with noise_multiplier=0 is only allowed with non_private=True")
        self.init = init
        # every finished chain of this kernel object (this process and workers): chain id -> ledger
        self._chains: Dict[str, PrivacyLedger] = {}
        self._filed_counts: Counter = Counter()  # event counts of self._chains, for the plan check
        self._ledger = self._new_chain_ledger()
        self._chain_index = 0
        self._num_setups = 0
        self._plan: Optional[PrivacyPlan] = None  # set by setup() when there is a budget
        self._pending_state: Optional[dict] = None  # a load_state_dict() waiting for setup()
        self._last_checkpoint: Optional[dict] = None  # state_dict() of the last chain cleanup() ended
        self._incomplete: Optional[str] = None  # set when worker releases may have been lost
        self._worker_releases: Optional[WorkerReleases] = WorkerReleases()  # before any worker is forked
        DPKernel._reset_chain_stats(self)  # the base's fields only: subclasses reset theirs in setup()

    def _adopt_default_budget(self) -> None:
        """No budget and no noise given: calibrate to :data:`DEFAULT_EPSILON`,
        :data:`DEFAULT_DELTA` (announced by a :class:`PrivacyNotice` at set-up)."""
        if self.epsilon is None and not self.non_private:
            self.epsilon, self.delta, self.default_budget = DEFAULT_EPSILON, DEFAULT_DELTA, True
            self.reference_delta = DEFAULT_DELTA

    def _check_noise_multiplier(self, name: str, value) -> Optional[float]:
        """Validate a noise multiplier; ``None`` means: calibrate it to the budget (the
        default budget when there is none), and 0 is allowed only in the ``non_private``
        test mode."""
        if value is None:
            if self.non_private:
                raise ValueError(f"non_private=True is the noise-free test mode: set {name}=0")
            self._adopt_default_budget()
            return None
        value = check_positive(name, value, allow_zero=self.non_private)
        if self.non_private and value != 0:
            raise ValueError(f"non_private=True is the noise-free test mode: set {name}=0")
        return value

    # ------------------------------------------------------------------ subclass API
    def _per_iteration_events(self) -> Sequence[PrivacyEvent]:
        """Events one iteration releases (data-free; used for the budget)."""
        raise NotImplementedError

    def _fixed_events(self) -> Sequence[PrivacyEvent]:
        """Events released once per chain in addition to the iterations (default none)."""
        return ()

    def _calibrate(self) -> None:
        """Set noise from (epsilon, delta, num_iterations) when the user gave none."""
    def planned_events(self) -> Tuple[list, list]:
        """``(once per chain, per iteration)``: the releases this kernel plans, as events or
        ``(event, count)`` pairs, for :func:`~pyro_dp.accounting.planned_epsilon` and
        :func:`~pyro_dp.accounting.max_iterations`. Call after ``setup()`` (noise calibration
        may need the number of rows). Data-free.

        >>> import torch, pyro, pyro.distributions as dist, pyro_dp
        >>> def model(y):
        ...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype, device=y.device), 1.0))
        ...     with pyro.plate("data", len(y)) as i:
        ...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])
        >>> k = pyro_dp.DPPenalty(model, 0.1, llr_clip=1.0, noise_multiplier=10.0, seed=0)
        >>> k.setup(0, torch.zeros(5, dtype=torch.float64))
        >>> k.planned_events()
        ([], [GaussianEvent(noise_multiplier=10.0)])
        """
        if self.lik is None:
            raise RuntimeError("call setup() first: the plan may depend on the number of rows")
        return self._init_events() + list(self._fixed_events()), list(self._per_iteration_events())

    def _init_events(self) -> list:
        """Releases of the private initialisation (once per chain; ``[]`` without one)."""
        return [] if self.init is None else list(self.init.events())

    def _calibrate_scale(self, events_for_scale, **kwargs) -> float:
        """:func:`~pyro_dp.accounting.calibrate` for this kernel's budget, with the private
        initialisation's releases added to the fixed (once per chain) events."""
        init = self._init_events()

        def with_init(scale):
            fixed, per = events_for_scale(scale)
            return list(fixed) + init, per

        return calibrate(self.epsilon, self.delta, self.num_iterations, with_init, accountant=self.accountant,
                         num_chains=self.num_chains, relation=self.relation, **kwargs)

    def _init_state(self, z: torch.Tensor):
        """Algorithm state at unconstrained ``z``; must not touch data."""
        raise NotImplementedError

    def _step(self, state) -> Tuple[object, object]:
        """One iteration: ``(new_state, info)``; ``info.events`` lists what was released."""
        raise NotImplementedError

    def _state_z(self, state) -> torch.Tensor:
        return state.z

    def _step_events(self, state) -> list:
        """The most one ``_step(state)`` can release, as events or ``(event, count)`` pairs
        (data-free). The base enforces the budget against it *before* the step and checks
        afterwards that the step released no more. Default: :meth:`_per_iteration_events`."""
        return list(self._per_iteration_events())

    # ------------------------------------------------------------------ lifecycle
    def _reset_chain_stats(self):
        self._iteration = 0
        self._draws = []  # this chain's states after warmup (post-processing), for chain_problems
        self._num_accepted = 0
        self._clipped_sum = 0.0
        self._clipped_count = 0
        self._budget_exhausted = False
        self._stop_cause_text = ""
        self._state = None
        self._returned = None  # the last sample()'s output (_returned_unchanged)
        self._init_done = False
        self.__dict__.pop("_eps_log", None)  # the progress bar's ε starts afresh with the chain
        self._diagnostics_warned = set()  # (iteration, message) pairs diagnostics() has warned
        self.__dict__.pop("_eps_log_start", None)

    def _new_chain_ledger(self) -> ChainLedger:
        return ChainLedger(self.relation, kernel_id=self._id, chain_id=secrets.token_hex(8),
                           worker_slot=self._worker_slot())

    def _worker_slot(self) -> int:
        """This process's slot of :class:`WorkerReleases` (``-1`` in the owner process)."""
        chain = self._worker_chain_id()
        if chain is None:
            return -1
        return chain % WORKER_SLOTS if chain >= 0 else WORKER_SLOTS - 1

    def _count_worker_release(self) -> None:
        """Count one release of a chain in a worker process in shared memory, as it is made."""
        slot, shared = self._ledger.worker_slot, self.__dict__.get("_worker_releases")
        if slot >= 0 and shared is not None:
            shared.made[slot] += 1

    def _lost_worker_releases(self, finished_only: bool = False) -> int:
        """Releases made in worker processes (:class:`WorkerReleases`) that are not in this
        object's ledgers: their chains' ledgers never came back. ``finished_only``: count only
        slots whose worker has exited (a running sibling's releases come back with it)."""
        shared = self.__dict__.get("_worker_releases")
        if shared is None:
            return 0
        back: Counter = Counter()
        for led in list(self._chains.values()) + [self._ledger]:
            if getattr(led, "worker_slot", -1) >= 0:
                back[led.worker_slot] += led.num_releases
        own = self._worker_slot()
        # a worker checks its own slot only: it cannot tell a lost slot from a sibling of this run
        # that has already exited (its ledger went to the owner, not to this copy)
        slots = [own] if finished_only and own >= 0 else range(WORKER_SLOTS)
        lost = 0
        for slot in slots:
            made = shared.made[slot]
            if made > back[slot] and not (finished_only and slot != own and _process_alive(shared.pid[slot])):
                lost += made - back[slot]
        return lost

    def _note_lost_releases(self) -> None:
        """Mark the ledger incomplete when releases of exited workers never came back (what was
        spent is unknown). Run in the owner just before it starts workers (:func:`_before_fork`,
        ``__getstate__`` when spawning), so they inherit the mark, and at every chain's set-up."""
        lost = self._lost_worker_releases(finished_only=True)
        if lost:
            self._incomplete = self._incomplete or _lost_releases_message(lost)

    def _check_worker_releases(self) -> None:
        """At a chain's set-up: :meth:`_note_lost_releases`, then register this worker's process
        in its slot."""
        self._note_lost_releases()
        shared = self.__dict__.get("_worker_releases")
        if self._worker_chain_id() is not None and shared is not None:
            shared.pid[self._worker_slot()] = os.getpid()

    def _require_complete(self) -> None:
        """Raise ``RuntimeError`` when this object's ledger may miss releases (an ε from it would
        be a lower bound of what was spent)."""
        if self._incomplete:
            raise RuntimeError(self._incomplete)
        lost = self._lost_worker_releases()
        if lost:
            raise RuntimeError(_lost_releases_message(lost))

    def _file_chain(self, ledger: PrivacyLedger) -> None:
        """File a finished chain's ledger with this kernel object (idempotent by chain id; a
        chain's ledger only grows, so the longer copy wins). The live chain is never filed
        from a copy of itself."""
        cid = getattr(ledger, "chain_id", "") or secrets.token_hex(8)
        if cid == self._ledger.chain_id or not ledger:
            return
        old = self._chains.get(cid)
        if old is None or old.num_releases < ledger.num_releases:
            self._chains[cid] = ledger.copy()
            if old is not None:
                self._filed_counts.subtract(old.aggregate())
            self._filed_counts.update(ledger.aggregate())
            self.__dict__.pop("_eps_cache", None)

    @property
    def initial_params(self):
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params):
        self._user_initial_params = None if params is None else {k: v.detach() for k, v in params.items()}
        self._initial_params = self._user_initial_params

    def _chain_seed(self, purpose: int, base: Optional[int] = None) -> int:
        words = [self.seed if base is None else base, self._chain_index, purpose]
        if os.getpid() != self._owner_pid:  # a worker process: make streams independent
            words.append(secrets.randbits(63))
        return _derive_seed(*words)

    def _worker_chain_id(self) -> Optional[int]:
        """Pyro's chain id when this runs in an ``MCMC`` worker process (Pyro names each worker
        process by its chain id, ``pyro/infer/mcmc/api.py``, ``_MultiSampler``), else ``None``."""
        if os.getpid() == self._owner_pid:
            return None
        name = multiprocessing.current_process().name
        try:
            return int(name)
        except ValueError:
            return -1  # a process that does not name its chain

    def _chain_slot_refusal(self) -> Optional[str]:
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
        (``_incomplete``, set by :meth:`_check_worker_releases` just before, or by a
        :class:`ChainFailedError`); ``get_epsilon`` then raises.
        """
        chain = self._worker_chain_id()
        if chain is not None and chain >= WORKER_SLOTS:  # with or without a budget: its count would share a slot
            return (f"MCMC runs chain {chain} in a worker process, but a kernel object counts the releases of "
                    f"worker chains 0..{WORKER_SLOTS - 1} only (WORKER_SLOTS): a lost ledger of this chain could "
                    "go unnoticed; run at most that many chains in parallel, or the rest in this process")
        if self.epsilon is None:
            return None
        if self._incomplete:
            return ("this kernel object's ledger may miss releases of earlier chains (RuntimeError from "
                    "get_epsilon says why), so its budget cannot be checked")
        if chain is None:
            return None
        if chain < 0:
            return (f"this worker process ({multiprocessing.current_process().name!r}) does not name its "
                    f"chain, so its share of the num_chains={self.num_chains} chain plans cannot be checked")
        if not self._plan.fits(self._ledger, self._filed_counts, Counter(self._plan.chain), concurrent=chain + 1):
            return (f"MCMC runs chain {chain} in parallel, but the budget was planned for "
                    f"num_chains={self.num_chains} chains and {len(self._chains)} chain(s) of earlier runs of "
                    "this kernel object are already in its ledger; pass the same num_chains to the kernel "
                    "and to MCMC, and use a new kernel (with its own budget) for a new analysis")
        return None

    def setup(self, warmup_steps, *args, **kwargs):
        """Build the likelihood and the initial state. Data-free: costs no privacy."""
        if self.distributed:  # every rank: the same data-free seed (rank 0's), before any draw
            from ..distributed import shards_for

            chain = self._worker_chain_id()
            if chain is not None and chain >= 0:  # a Pyro MCMC worker: outside the ranks' process group
                raise RuntimeError(
                    f"distributed=True: MCMC runs chain {chain} in a worker process, outside the process group "
                    "of the ranks, whose decisions would then disagree; run one chain per job (or sequential "
                    "chains) and launch more jobs for more chains (docs/scaling_out.md)")

            self._shards = shards_for(True, self._process_group)
            self.seed = self._shards.agree_int(self.seed)
        self._warmup_steps = int(warmup_steps)
        self._num_setups += 1
        if self._iteration > 0:  # a new run without cleanup(): file the old chain
            self.cleanup()
        if not self._ledger or self._ledger.worker_slot != self._worker_slot():
            # a fresh chain id, also in each worker process: a worker never records into the owner's
            # live ledger (e.g. one left non-empty by an interrupted private init, s10 audit F5)
            self._ledger = self._new_chain_ledger()
        self._reset_chain_stats()  # a chain starts here (the object is fully built by now)
        self.lik = PrivateLikelihood(
            self.model,
            args,
            kwargs,
            data_plate=self.data_plate,
            temperature=self.temperature,
            transforms=self._user_transforms,
            init_strategy=self.init_strategy,
            seed=self._chain_seed(_PURPOSE_INIT),
            jit_compile=self.jit_compile,
            jit_options=self.jit_options,
            jit_cache=self.__dict__.setdefault("_jit_cache", {}),
            public=self.public,
        )
        self.transforms = self.lik.transforms
        self.lik.likelihood_mask  # the likelihood's coordinates, determined now (data-free; cached per kernel object)
        self._resolve_run_length()
        if isinstance(self.init, DPAutoTune):
            self.init.configure(epsilon=self.epsilon, delta=self.delta, num_chains=self.num_chains,
                                non_private=self.non_private)
        self._calibrate()
        if isinstance(self.init, DPAutoTune):  # data-free: the ratio clip's quantile depends on N and the noise
            self.init.set_ratio_noise(self._ratio_noise_multiplier())
            problem = self.init.reliability_problem(getattr(self.lik, "global_num_rows", self.lik.num_rows))
            if problem is not None and self._num_setups == 1:
                warn_user(f"{type(self).__name__} default path: {problem}", SamplingWarning)
        self._setup_budget()
        self._check_accountant_supports_plan()
        self._check_worker_releases()
        refusal = self._chain_slot_refusal()
        self._rng = torch.Generator(device=self.lik.device)
        self._rng.manual_seed(self._chain_seed(_PURPOSE_ALGO))
        noise_seed = None if self.noise_seed is None else self._chain_seed(_PURPOSE_NOISE, base=self.noise_seed)
        self._noise = NoiseSource(seed=noise_seed, secure_mode=self.secure_mode, device=self.lik.device, warn=False)
        if self._shards is not None:  # the global N (public) and rank 0's noise inside every release
            self._noise.shards = self._shards
            n = torch.tensor([self.lik.num_rows], dtype=torch.int64)
            self.lik.global_num_rows = int(self._shards.all_reduce_sum(n)[0])
        if self.epsilon is not None and self._num_setups == 1:  # once per kernel, as the run-length notice
            n = self.lik.global_num_rows  # all ranks' rows: a neighbour may differ in any of them
            if self.delta is not None and self.delta * n > 1.0:
                warn_user(f"delta={self.delta} is above 1/N for N={n} rows: pass a smaller delta", PrivacyNotice)
        if self._user_initial_params is not None:
            missing = set(self.lik.latent_names) - set(self._user_initial_params)
            if missing:
                raise ValueError(f"initial_params lacks latent sites {sorted(missing)}")
            params = {
                k: v.to(dtype=self.lik.dtype, device=self.lik.device) for k, v in self._user_initial_params.items()
            }
        else:
            params = dict(self.lik.prototype_params)
        z0 = self.lik.flatten(params)
        if z0.numel() != self.lik.dim or not bool(torch.isfinite(z0).all()):
            raise ValueError("initial parameters must be finite and match the model's latent shapes")
        if self._shards is not None:
            self._shards.check_same(z0.detach().cpu(), "the initial point")
            mask = self.lik.likelihood_mask  # every rank must clip and restrict alike (data-free)
            self._shards.check_same(torch.ones(self.lik.dim, dtype=torch.float64) if mask is None
                                    else mask.detach().cpu().to(torch.float64), "the likelihood's coordinates")
        self._initial_params = self.lik.unravel(z0)
        self._state = self._init_state(z0)
        self._init_done = False
        if refusal is not None:
            self._stop(refusal)
        if self._pending_state is not None:  # resuming a checkpoint: continue its chain
            state, self._pending_state = self._pending_state, None
            chains = (mcmc_run_length() or {}).get("num_chains", 1)
            if self._worker_chain_id() is not None or chains > 1:
                raise ValueError(f"a checkpoint continues one chain: resume it with num_chains=1 (this run has "
                                 f"{chains}); more chains would each continue it and spend its budget again")
            self._restore(state)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        r"""A checkpoint of this kernel object: the chain in progress (state, counters, warmup
        adaptation, the algorithm and noise generators' states) and the cumulative ledger.

        **A checkpoint is private data**: the chain state caches per-example log-likelihoods.
        Store it like the raw data; never publish it. It holds no rows of data (the data are
        given to ``setup`` again), but the number of rows and the data plate's name, which are
        checked on load. It does not hold the secret noise stream (only under the test option
        ``noise_seed``): a resumed chain draws fresh noise, so it continues the chain's state,
        data-free randomness and ledger, not its noise. Resume it once, into a new kernel object
        and one chain (a second resume in the same process is refused; across processes it
        cannot be detected, and each continuation would spend up to the budget).

        It holds only tensors and plain Python values (``dict``, ``list``, ``tuple``, ``str``,
        ``int``, ``float``, ``bool``, ``None``; states and ledgers as tagged dicts,
        :mod:`pyro_dp.kernels.checkpoint`): ``torch.save(kernel.state_dict(), path)`` and
        ``kernel.load_state_dict(torch.load(path))`` with torch's default ``weights_only=True``,
        which unpickles no arbitrary object.

        >>> import torch, pyro_dp
        >>> from pyro_dp.models.examples import normal_mean_model
        >>> y = torch.zeros(20, dtype=torch.float64)
        >>> k = pyro_dp.DPPenalty(normal_mean_model, 0.1, llr_clip=1.0, noise_multiplier=3.0)
        >>> k.setup(0, y); p = k.sample(k.initial_params)
        >>> resumed = pyro_dp.DPPenalty(normal_mean_model, 0.1, llr_clip=1.0, noise_multiplier=3.0)
        >>> resumed.load_state_dict(k.state_dict()); resumed.setup(0, y)  # continues k's chain, fresh noise
        >>> torch.equal(resumed.initial_params["mu"], p["mu"]), resumed.ledger == k.ledger
        (True, True)
        """
        if self._state is None and self._last_checkpoint is not None:
            return self._last_checkpoint  # the chain MCMC just finished (cleanup() ended it)
        if self.lik is None or self._state is None:
            raise RuntimeError("call setup() before state_dict(): there is no chain to save")
        return {  # tensors and plain values only: torch.load's default weights_only=True reads it (#42)
            "format": 2,
            "kernel": type(self).__name__,
            "relation": self.relation,
            "num_rows": self.lik.num_rows,
            "data_plate": self.lik.data_plate,
            "chain": {a: to_plain(self.__dict__.get(a)) for a in self._chain_attrs},
            "rng": self._rng.get_state(),
            # the secret stream's state only under the test option noise_seed: anyone holding it could
            # replay the noise of every later release of this chain (and a resumed chain draws fresh noise)
            "noise": self._noise.get_state() if self.noise_seed is not None else None,
            "ledger": to_plain(self._ledger),
            "chains": {cid: to_plain(led) for cid, led in self._chains.items()},
            # which point of which chain this is (the chain id is random): resumed once per process
            "token": f"{self._ledger.chain_id}:{self._iteration}:{self._ledger.num_releases}",
            # the run length a budget was planned for when the kernel chose it itself (from the
            # MCMC that ran it, or assumed): a resumed run must keep that plan, not re-plan the
            # budget for the iterations that remain (data-free)
            "run_length": None if self.run_length_source in (None, "given") else {
                "num_iterations": self.num_iterations, "source": self.run_length_source,
                "num_chains": self.num_chains},
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue the chain and the ledger of :meth:`state_dict`, on a new kernel object built
        with the same arguments (refused on a kernel that has released anything, and for a
        checkpoint already resumed in this process). Call it before ``setup()`` (e.g. before ``mcmc.run``: the next
        ``setup`` restores the chain instead of starting a new one, and ``MCMC`` continues it
        from where it stopped, warmup length included) or after ``setup()`` (restored at once).
        The ledger, and with it the budget, counts every release made before the checkpoint."""
        if not isinstance(state, dict) or state.get("format") not in (1, 2):  # 1: objects (weights_only=False)
            raise ValueError("not a pyro_dp kernel checkpoint (state_dict() of a DPKernel)")
        if self.ledger:
            raise ValueError(
                f"this kernel object has already released {self.ledger.num_releases} values: load a checkpoint into a "
                "new kernel object (built with the same arguments), so that no release is forgotten")
        _refuse_resumed(state)
        if state["kernel"] != type(self).__name__ or state["relation"] != self.relation:
            raise ValueError(
                f"checkpoint of a {state['kernel']} under relation {state['relation']!r}; this is a "
                f"{type(self).__name__} under {self.relation!r}"
            )
        planned = state.get("run_length")
        if planned is not None and self.run_length_source is None and self.epsilon is not None:
            if self.lik is not None:
                raise ValueError(
                    "this checkpoint's budget was planned for the run length of the MCMC that ran it "
                    f"({planned['num_iterations']} iterations per chain): call load_state_dict() before setup() "
                    "(before mcmc.run), or pass that num_iterations= to the kernel")
            self.num_iterations, self.run_length_source = planned["num_iterations"], planned["source"]
            if not self._num_chains_given:
                self.num_chains = planned["num_chains"]
        if self.lik is None:
            self._pending_state = state
        else:
            self._restore(state)

    def _restore(self, state: dict) -> None:
        if (state["num_rows"], state["data_plate"]) != (self.lik.num_rows, self.lik.data_plate):
            raise ValueError(
                f"checkpoint of a run on {state['num_rows']} rows of plate {state['data_plate']!r}; "
                f"this set-up has {self.lik.num_rows} rows of plate {self.lik.data_plate!r}"
            )
        _refuse_resumed(state)
        if state.get("token") is not None:
            _RESUMED_CHECKPOINTS.add(state["token"])
        for a, v in state["chain"].items():
            setattr(self, a, copy.deepcopy(from_plain(v)))
        self._rng.set_state(state["rng"])  # the data-free stream continues
        if self.noise_seed is not None:  # the test option: the same noise as an uninterrupted run
            noise = state["noise"]
            self._noise.set_state(noise["state"] if isinstance(noise, dict) else noise)  # a dict: format 1
            self._noise.shards = self._shards
        # else the secret stream stays the fresh one setup() drew from the OS: restoring its state
        # would replay the checkpoint's noise on whatever data this run reads (the difference of
        # two resumed runs on neighbouring data would be one row's noise-free term)
        self._chains, self._filed_counts = {}, Counter()
        for led in state["chains"].values():
            self._file_chain(from_plain(led))
        live = from_plain(state["ledger"])
        self._ledger = ChainLedger(self.relation, kernel_id=self._id, chain_id=live.chain_id)
        self._ledger.extend(live)
        self._initial_params = self.lik.unravel(self._state_z(self._state))
        self.__dict__.pop("_eps_cache", None)

    def _resolve_run_length(self) -> None:
        """Fix, once and data-free, the iterations per chain a budget funds and the number of
        chains it is shared by, when the user gave none: from the ``pyro.infer.MCMC`` run that
        calls ``setup`` (``warmup_steps + num_samples``, its ``num_chains``), else
        :data:`DEFAULT_ITERATIONS`. Says what it assumed (:class:`PrivacyNotice`). Never
        overspends either way: the budget is enforced on the ledger."""
        if self.epsilon is None or self.run_length_source is not None:
            return
        run = mcmc_run_length()
        if run is not None:
            self.num_iterations = max(1, run["warmup_steps"] + run["num_samples"])
            self.run_length_source = "MCMC"
            if not self._num_chains_given and "num_chains" in run:
                self.num_chains = run["num_chains"]
            said = (f"{self.num_iterations} iterations per chain (warmup_steps + num_samples of the MCMC) "
                    f"over {self.num_chains} chain(s)")
        else:
            self.num_iterations = DEFAULT_ITERATIONS
            self.run_length_source = "assumed"
            said = (f"{self.num_iterations} iterations per chain over {self.num_chains} chain(s) (ASSUMED: not run "
                    "by pyro.infer.MCMC and no num_iterations given; longer chains stop at the budget)")
        budget = "the DEFAULT budget" if self.default_budget else "the budget"
        warn_user(
            f"{type(self).__name__}: {budget} epsilon={self.epsilon}, delta={self.delta} funds {said}"
            + (". Pass epsilon= (and delta=) for your own budget" if self.default_budget else ""),
            PrivacyNotice,
        )

    def _auto_tuner(self) -> DPAutoTune:
        """The :class:`~pyro_dp.kernels.tuning.DPAutoTune` of a kernel whose settings
        :attr:`auto_tuned` are left to the default path: the user's ``init`` if it is one,
        else a new one with the documented defaults."""
        names = ", ".join(self.auto_tuned)
        if self.distributed:
            raise ValueError(f"the default path (private tuning of {names}) does not support distributed=True yet: "
                             f"give {names} (docs/scaling_out.md)")
        if self.init is None:
            return DPAutoTune()
        if isinstance(self.init, DPAutoTune):
            return self.init
        raise ValueError(f"{names} left to the default are tuned privately by DPAutoTune, which finds its own start: "
                         f"pass init=DPAutoTune(...) instead of {type(self.init).__name__}, or give {names}")

    def _apply_tuning(self, result) -> None:
        """Take the settings a :class:`~pyro_dp.kernels.tuning.DPAutoTune` run found (kernels
        with a default path override it). Called at the first iteration of every chain."""

    def _ratio_noise_multiplier(self) -> Optional[float]:
        """The noise multiplier of the kernel's ratio release, for the default path's ratio
        clip (:meth:`~pyro_dp.kernels.tuning.DPAutoTune.ratio_quantile`); ``None``: no ratio
        release whose clip is tuned (kernels with a default path override it)."""
        return None

    def _move_scales(self, result, noise_multiplier: float) -> Tuple[float, float]:
        """``(jump, sd)`` from which the default path sets a kernel's step sizes, both
        post-processing of the tuning releases (``result``, a
        :class:`~pyro_dp.kernels.tuning.TuneResult`): ``jump`` is the move whose penalty noise
        (``noise_multiplier``, the kernel's ``llr_clip``) has standard deviation 1
        (:func:`~pyro_dp.kernels.tuning.penalty_jump_length`), ``sd`` a guess of the posterior
        standard deviation from the gradient clip (:func:`~pyro_dp.kernels.tuning.posterior_scale_guess`).
        Says before the chain runs when the budget lets each move cover less than
        :data:`NOISE_LIMITED_RATIO` of that scale."""
        n, T = getattr(self.lik, "global_num_rows", self.lik.num_rows), self.lik.temperature
        jump = penalty_jump_length(noise_multiplier, self.llr_clip, T)
        sd = posterior_scale_guess(result.grad_clip, n, self.lik.dim, T)
        ratio = jump / sd
        if ratio < NOISE_LIMITED_RATIO:
            warn_user(
                f"{type(self).__name__}: at this budget the privacy noise limits each move to about {ratio:.2g} "
                "of the posterior's scale (guessed from the private clip): expect slow mixing and few effective "
                "samples. Spend more epsilon, run fewer iterations (the noise per iteration grows with their "
                "square root) or use more rows (docs/tuning.md)",
                SamplingWarning,
            )
        return jump, sd

    def _check_accountant_supports_plan(self) -> None:
        """Refuse, before any data access, an accountant that cannot compose a release this
        kernel plans (its private initialisation's included): otherwise the chain would read
        the data and only the report of its ε fail. Data-free: events only."""
        if self.non_private:
            return
        fixed, per = self.planned_events()
        acc = get_accountant(self.accountant, relation=self.relation)
        for item in list(fixed) + list(per):
            try:
                acc._require(item[0] if isinstance(item, tuple) else item)
            except UnsupportedEventError as e:
                raise UnsupportedEventError(
                    f"{type(self).__name__}: accountant {self.accountant!r} cannot compose a planned release "
                    f"({e}); choose one that can (e.g. 'pld' composes Gaussian and (epsilon, delta) "
                    "releases; docs/privacy.md, \"Accountants\")") from None

    @property
    def _steps_allowed(self) -> Optional[int]:
        """Iterations per chain the budget allows (``None`` without a budget)."""
        return None if self._plan is None else self._plan.steps_allowed

    def _setup_budget(self):
        """Plan one chain's releases (data-free): the private init, the once-per-chain releases
        and as many iterations as fit for ``num_chains`` chains."""
        if self.epsilon is None:
            self._plan = None
            return
        self._plan = PrivacyPlan(self.epsilon, self.delta, fixed=self._init_events() + list(self._fixed_events()),
                                 per_iteration=list(self._per_iteration_events()), accountant=self.accountant,
                                 num_chains=self.num_chains, relation=self.relation)
        if self.num_iterations is not None and self._steps_allowed < self.num_iterations:
            warn_user(
                f"the budget (epsilon={self.epsilon}, delta={self.delta}) allows only "
                f"{self._steps_allowed} iterations per chain over {self.num_chains} chain(s), "
                f"fewer than num_iterations={self.num_iterations}",
                BudgetExhaustedWarning,
            )

    def _stop(self, cause: str):
        """Stop reading data for the rest of this chain, and say why."""
        self._budget_exhausted = True
        self._stop_cause_text = cause
        head = (f"privacy budget (epsilon={self.epsilon}, delta={self.delta}) spent after" if self.epsilon is not None
                else "this chain (no budget set) refused to read data after")
        msg = (
            f"{head} {self._iteration} iterations of this chain: {cause}. The kernel has STOPPED READING DATA "
            "and repeats its last state for every remaining iteration: discard the repeated tail "
            "(diagnostics()['private iterations'] says how many iterations are real)."
        )
        warn_user(msg, BudgetExhaustedWarning)
        _logger.warning(msg)

    def sample(self, params):
        if self._worker_chain_id() is None:
            return self._sample(params)
        try:
            return self._sample(params)
        except Exception as e:  # in an MCMC worker: the chain's releases must come back
            raise ChainFailedError(f"{type(e).__name__}: {e}", self._ledger.copy()) from e

    def _sample(self, params):
        if self._state is None:
            raise RuntimeError("call setup() before sample()")
        if not self._returned_unchanged(params):
            z = self.lik.flatten(params).detach()
            if not torch.equal(z, self._state_z(self._state)):
                self._state = self._init_state(z)  # params were changed from outside
        pending_init = self.init is not None and not self._init_done
        if not self._budget_exhausted:
            declared = _counts((self._init_events() if pending_init else []) + self._step_events(self._state))
            if self._plan is not None and not self._plan.fits(self._ledger, self._filed_counts, declared):
                self._stop(self._plan.stop_cause(self._ledger, declared, len(self._chains)))
        if self._budget_exhausted:
            self._ledger.end_iteration()  # an iteration that released nothing (the ε curve stays flat)
            return {k: v.clone() for k, v in self.lik.unravel(self._state_z(self._state)).items()}
        if pending_init:
            # private initialisation: reads the data through its own mechanism; each release is
            # recorded as it is made (an exception part-way loses none)
            z_init, _, frac = self.init.run(
                self.lik, self._state_z(self._state), self._noise, self.relation, record=self._record_init
            )
            self._init_done = True
            self._init_clipped_fraction = frac
            if isinstance(self.init, DPAutoTune):
                self._apply_tuning(self.init.result)  # post-processing of the tuning releases
            self._state = self._init_state(z_init)
        self._state, info = self._step(self._state)
        for ev in info.events:
            self._ledger.record(ev)
            self._count_worker_release()
        if not _within(_counts(info.events), declared):
            raise RuntimeError(
                f"internal error: {type(self).__name__} released {list(info.events)} but declared "
                f"{dict(declared)} (recorded in the ledger; please report)"
            )
        self._ledger.end_iteration()  # where this iteration's releases end (pyro_dp.privacy_report's curve)
        self._iteration += 1
        if self._iteration % HEAP_TRIM_EVERY == 0:  # bounded memory over long runs (pyro_dp.heap): a fixed,
            release_free_heap()  # data-free schedule
        if self._iteration > self._warmup_steps and len(self._draws) < _MAX_CHECKED_DRAWS:
            self._draws.append(self._state_z(self._state))
        self._num_accepted += int(bool(info.accepted))
        self._clipped_sum += float(info.clipped_fraction)
        self._clipped_count += 1
        z = self._state_z(self._state)
        out = self.lik.unravel(z)
        self._returned = (out, tuple(out.values()), z)
        return out

    def _returned_unchanged(self, params) -> bool:
        """Whether ``params`` is the dict the last :meth:`sample` returned, holding the same
        tensors, for the current state (Pyro's runner passes it straight back): then the
        flatten-and-compare of the general check is skipped (#17: Python per iteration). An
        in-place change of those tensors changes the state's own tensor (they are views of it),
        which the general check could not see either."""
        last = self.__dict__.get("_returned")
        return (last is not None and params is last[0] and last[2] is self._state_z(self._state)
                and len(params) == len(last[1]) and all(a is b for a, b in zip(params.values(), last[1])))

    def _record_init(self, event, label: Optional[str] = None) -> None:
        """Record one release of the private initialisation under its own label (the
        initialiser's ``label``, e.g. ``"init:DPGradientInit"``, unless it names a finer one)."""
        self._ledger.record(event, label=label or getattr(self.init, "label", f"init:{type(self.init).__name__}"))
        self._count_worker_release()

    def cleanup(self):
        """End of a chain: file its ledger with the finished chains (idempotent). The chain's
        last checkpoint stays available from :meth:`state_dict` (to resume it after
        ``mcmc.run``)."""
        if self._state is not None and self.lik is not None and self._ledger:
            self._last_checkpoint = self.state_dict()
        if self._ledger:
            live, self._ledger = self._ledger, self._new_chain_ledger()
            self._file_chain(live)
            self._chain_index += 1
        self._reset_chain_stats()

    # torch.Generator cannot be pickled; MCMC(num_chains>1, mp_context="spawn") pickles kernels.
    def __getstate__(self):
        spawning = multiprocessing.context.get_spawning_popen() is not None  # pickled into a new worker
        if spawning:
            self._note_lost_releases()  # a spawned worker inherits the mark (as a forked one, _before_fork)
        state = self.__dict__.copy()
        if spawning:
            # pickled into a new worker process (MCMC with mp_context="spawn"): the worker's setup()
            # rebuilds the likelihood and the chain state, so the data and this process's private
            # caches (per-example log-likelihoods) are not shipped
            for key in ("lik", "_state", "_initial_params", "_noise", "_rng", "_last_checkpoint"):
                state[key] = None
        rng = state.pop("_rng", None)
        if rng is not None:
            state["_rng_state"] = (str(rng.device), rng.get_state())
        state.pop("_eps_cache", None)
        state.pop("_returned", None)  # identities do not survive pickling
        state["_jit_cache"] = {}  # compiled graphs stay in their process (rebuilt lazily)
        state["_shards"] = None  # a process group stays in its process (setup() sets it again)
        if not spawning:
            state["_worker_releases"] = None  # shared memory travels only to workers (a copy counts afresh) ...
            lost = self._lost_worker_releases()
            if lost and not state.get("_incomplete"):  # ... but keeps knowing what was lost (s10 audit F4)
                state["_incomplete"] = _lost_releases_message(lost)
        return state

    def __setstate__(self, state):
        rng_state = state.pop("_rng_state", None)
        self.__dict__.update(state)
        if rng_state is not None:
            self._rng = torch.Generator(device=rng_state[0])
            self._rng.set_state(rng_state[1])
        if self.__dict__.get("_worker_releases") is None:
            self._worker_releases = WorkerReleases()
        if os.getpid() == self._owner_pid and _KERNELS.get(self._id) not in (None, self):
            # a copy in the owner's process (copy.deepcopy, a pickle round trip) is a kernel object of its
            # own: its workers' ledgers must file with it, not with the original (s10 audit F2)
            self._id = secrets.token_hex(8)
            self._ledger.kernel_id = self._id
        _KERNELS.setdefault(self._id, self)  # a copy in a worker; the original keeps its entry

    # ------------------------------------------------------------------ reporting
    @property
    def ledger(self) -> PrivacyLedger:
        """Every release of this kernel object: every chain of every ``mcmc.run``, in this
        process and in worker processes (merged back with their ``diagnostics()``)."""
        return PrivacyLedger.merged(self.chain_ledgers(), self.relation)

    def chain_ledgers(self) -> list:
        """The :class:`ChainLedger` of every chain of this kernel object, in the order
        :attr:`ledger` merges them: the finished chains as they were filed (this process and
        worker processes), then the chain in progress (empty between runs)."""
        return list(self._chains.values()) + [self._ledger]

    def get_epsilon(self, delta: Optional[float] = None, accountant: Optional[str] = None) -> float:
        r"""Total ε spent so far by this kernel object, at ``delta``: every chain of every run,
        also chains run in ``MCMC`` worker processes (their ledgers come back with their
        diagnostics). It is stated under the kernel's neighbouring relation :attr:`relation`
        (``self.ledger.relation``; ``diagnostics()["relation"]``)."""
        delta = self.reference_delta if delta is None else delta
        ledger = self.ledger
        self._require_complete()
        if not ledger and self._num_setups > 0 and self._iteration > 0:
            raise RuntimeError("this kernel object ran iterations but recorded no release: please report")
        return get_accountant(accountant or self.accountant, ledger).get_epsilon(delta) if ledger else 0.0

    def _epsilon_now(self, chain_only: bool = False) -> float:
        """ε at the reference δ of this chain (``chain_only``) or of all chains so far (cached)."""
        key = (chain_only, len(self._chains), self._ledger.num_releases)
        cache = self.__dict__.setdefault("_eps_cache", {})
        if key not in cache:
            ledger = self._ledger if chain_only else self.ledger
            cache.clear()
            try:
                cache[key] = get_accountant(self.accountant, ledger).get_epsilon(self.reference_delta) if ledger else 0.0
            except ValueError as e:
                # for the progress bar and diagnostics() only (get_epsilon raises): a report that
                # fails must not lose the chain's samples, and must not read as a small epsilon
                cache[key] = math.inf
                if not self.__dict__.get("_eps_failure_warned"):
                    self._eps_failure_warned = True
                    warn_user(
                        f"the accountant {self.accountant!r} could not compute epsilon for this run's ledger ({e}); "
                        "the progress bar and diagnostics() report inf. Compute it with "
                        "kernel.get_epsilon(delta, accountant=...) and another accountant", UserWarning)
        return cache[key]

    def _nonprivate(self) -> dict:
        """Statistics of the raw data for ``diagnostics()`` (keys get :data:`NONPRIVATE_PREFIX`)."""
        out = {"clipped fraction": self._clipped_sum / max(self._clipped_count, 1)}
        if self.init is not None:
            out["init clipped fraction"] = self.__dict__.get("_init_clipped_fraction", 0.0)
        return out

    def diagnostics(self) -> dict:
        """Per-chain diagnostics (merged by ``MCMC.diagnostics()`` as ``{key: {"chain i": v}}``).

        It describes the chain **in progress**: Pyro calls it at the end of each chain, before
        ``cleanup()``. After ``mcmc.run`` the kernel holds no chain (a fresh, empty one: ``"epsilon"``
        0.0, ``"private iterations"`` 0); read a run's chains from ``mcmc.diagnostics()`` and the
        total from :meth:`get_epsilon`.
        ``"epsilon"`` is this chain's own ε at ``"delta"`` under ``"relation"`` (the
        neighbouring relation, :attr:`relation`: ``"substitute"`` unless the kernel was built
        with ``relation="add_remove"``); the total over all chains and runs
        is :meth:`get_epsilon` / :func:`pyro_dp.get_epsilon`. ``"privacy ledger"`` is this
        chain's :class:`ChainLedger`. ``"divergences"`` is empty (these kernels do not detect
        divergences; ArviZ and Pyro's summary expect the key). Everything here is
        post-processing of released values, except the keys starting with
        :data:`NONPRIVATE_PREFIX`, present only with ``nonprivate_diagnostics=True``: they are
        computed from the raw data and are **not covered by ε**.
        """
        out = {
            "acceptance rate": self._num_accepted / max(self._iteration, 1),
            "epsilon": self._epsilon_now(chain_only=True),
            "delta": self.reference_delta,
            "relation": self.relation,  # the neighbouring relation epsilon is stated under
            "private iterations": self._iteration,
            "budget exhausted": self._budget_exhausted,
            "budget exhausted cause": self._stop_cause_text,
            "privacy ledger": self._ledger.copy(),
            "divergences": [],
        }
        if self.nonprivate_diagnostics:
            out.update({NONPRIVATE_PREFIX + k: v for k, v in self._nonprivate().items()})
        if self.default_budget and self._iteration > 0:  # say what the default spent (Pyro asks once a chain)
            self._diagnostics_warn(
                f"{type(self).__name__} ran with the default budget (epsilon={self.epsilon}, delta={self.delta}): "
                f"this chain spent epsilon={out['epsilon']:.4g}; all chains of this kernel so far: "
                f"epsilon={self._epsilon_now():.4g} at delta={self.reference_delta} ({self.relation} relation)",
                PrivacyNotice,
            )
        if self._iteration >= 10 and self._num_accepted == 0:  # Pyro asks at the end of each chain
            self._diagnostics_warn(
                f"this chain accepted none of its {self._iteration} proposals: its samples are its starting "
                "point, not posterior draws. Lower llr_clip or the noise, shrink the proposal, or start closer "
                "(pyro_dp.check_run(mcmc) checks a whole run)",
                SamplingWarning,
            )
        elif not self._budget_exhausted and len(self._draws) >= _MIN_CHECKED_DRAWS:
            # never silently wrong: this chain's own draws, checked at its end (post-processing)
            problems = chain_problems(torch.stack(self._draws).cpu(), names=self.lik.coordinate_names())
            out["sampling problems"] = tuple(problems)
            for p in problems:
                self._diagnostics_warn(f"{type(self).__name__} chain: {p} (pyro_dp.check_run(mcmc) also compares "
                                       "chains)", SamplingWarning)
        return out

    def _diagnostics_warn(self, message: str, category) -> None:
        """Warn from :meth:`diagnostics` once per chain state: calling it again before the
        chain has moved (Pyro asks once per chain; users and ``check_run`` ask again) returns the
        same values without repeating the warning."""
        warned = self.__dict__.setdefault("_diagnostics_warned", set())
        if (self._iteration, message) not in warned:
            warned.add((self._iteration, message))
            warn_user(message, category)

    def _logged_epsilon(self) -> str:
        """ε for the progress bar, which Pyro asks for every iteration.

        The first value of a chain is computed after it has run for 1 s (a short run, e.g. a
        benchmark, never pays for it; a numerical accountant can take a second). Then the value
        refreshes once the time since the last evaluation exceeds 20 times its cost
        and 0.1 s (so the progress bar costs at most ~5% of the run, also when an iteration
        takes well under a millisecond on the compiled path), and says which iteration it
        refers to when it is older than the current one. ``diagnostics()`` and
        ``get_epsilon()`` are always exact.
        """
        n = self._iteration
        last = self.__dict__.get("_eps_log")  # (iteration, epsilon, seconds it took, when it ended)
        now = time.perf_counter()
        if last is None:  # the first value of a chain is due after 1 s of it
            if now - self.__dict__.setdefault("_eps_log_start", now) < 1.0:
                return "..."
        if last is not None and last[0] == n:
            pass
        elif (last is None or n < last[0]
              or now - last[3] >= max(20 * last[2], 0.1)):
            t0 = time.perf_counter()
            eps = self._epsilon_now()
            t1 = time.perf_counter()
            last = self._eps_log = (n, eps, t1 - t0, t1)
        return f"{last[1]:.3g}" if last[0] == n else f"{last[1]:.3g}@it{last[0]}"

    def logging(self):
        return {
            "acc. rate": f"{self._num_accepted / max(self._iteration, 1):.3f}",
            "eps": self._logged_epsilon(),
        }
