r"""The privacy engine of a kernel: its ledgers, budget, plan, stop and ε, in one object.

A kernel owns one :class:`PrivacyEngine` (``kernel.privacy``, built in ``__init__``) and only
*reports* to it what it is about to release and what it released, as Opacus's optimiser reports
its steps to its accountant (``opacus/privacy_engine.py``); the kernel's side of that contract,
what it declares (one :class:`~pyro_dp.kernels.releases.ReleasePlan`, ``kernel.releases(state)``) and the
budget's names forwarded to the engine, is :class:`pyro_dp.kernels.base.DPKernel`.
The engine receives events and public counts only — never the kernel, its state or data — so it
knows nothing of MCMC:

* **One cumulative ledger per kernel object.** Each chain keeps a :class:`ChainLedger`
  (a :class:`~pyro_dp.mechanisms.PrivacyLedger` tagged with the kernel and the chain,
  :attr:`PrivacyEngine.live`); at the chain's end (``cleanup()``) :meth:`PrivacyEngine.end_chain`
  files it with the finished chains. ``diagnostics()`` returns it, and that is what comes back
  from a worker process when ``MCMC`` runs chains in parallel: when the parent process unpickles
  it, it files itself with the parent's kernel object's engine (idempotently,
  :mod:`pyro_dp.kernels.workers`). So :attr:`PrivacyEngine.ledger`,
  :meth:`PrivacyEngine.get_epsilon`, :func:`pyro_dp.get_epsilon` and the budget see every
  release of every chain of every ``mcmc.run`` of this kernel object, in this process or in
  workers.
* **The budget is enforced on the ledger.** With ``epsilon``/``delta`` the engine plans one
  chain's releases (:meth:`PrivacyEngine.make_plan`, a :class:`~pyro_dp.kernels.plan.PrivacyPlan`:
  the kernel's once-per-chain releases, its private ``init``'s included, and as many iterations as
  fit for ``num_chains`` chains) and, before every iteration (:meth:`PrivacyEngine.declare`),
  checks that the chain's ledger plus the iteration's declared releases stays within that plan
  and that all the kernel's ledgers stay within ``num_chains`` such plans. The check reads only
  event counts (public), so whatever the control flow — re-runs, a re-initialised state, a
  retried set-up, more chains than planned — nothing is released beyond the budget; when it
  fails, :meth:`PrivacyEngine.stop` stops the chain, loudly.
* **The ledger is written by the mechanisms** (issue 58). Around a step the kernel opens the
  engine's :meth:`PrivacyEngine.recording` scope (a :class:`~pyro_dp.mechanisms.Recorder`): every
  release function of :mod:`pyro_dp.mechanisms` records its event there as it draws its noise
  (a draw with no recorder open raises), and :meth:`PrivacyEngine.commit` writes the ledger from
  what was drawn (a step that raises returns no state and publishes nothing of its own: its
  draws are discarded, as before issue 58). The events the step *reports*
  (``info.events``) are only a cross-check: a mismatch raises :class:`ReleaseMismatchError`,
  which says what the kernel's author did wrong; and what was drawn must have been declared.
  The private start's releases are written the same way, each as its initialiser reports it
  (:meth:`PrivacyEngine.claim`, which takes the label from the report and the event from the
  draw).
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import math
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch

from ..warn import warn_user
from ..accounting import DEFAULT_ACCOUNTANT, UnsupportedEventError, calibrate, get_accountant
from ..mechanisms import PrivacyEvent, PrivacyLedger, Recorder, recording
from .plan import PrivacyPlan, counts as _counts, plan_cap, within as _within
from .chain_ledger import ChainLedger  # noqa: F401 (re-exported: a chain's ledger, pickled by this name before)
from .workers import owned_kernel

__all__ = ["PrivacyEngine", "EngineSetting", "BudgetExhaustedWarning", "PrivacyNotice", "check_positive",
           "DEFAULT_EPSILON", "DEFAULT_DELTA", "ReleaseMismatchError"]

_logger = logging.getLogger("pyro_dp")


class BudgetExhaustedWarning(UserWarning):
    """The privacy budget is spent: the kernel has stopped reading data.

    Turn it into an error when a run must never end early::

        import warnings
        warnings.simplefilter("error", pyro_dp.BudgetExhaustedWarning)

    >>> issubclass(BudgetExhaustedWarning, UserWarning)
    True
    """


class ReleaseMismatchError(RuntimeError):
    """A kernel's step (or private start) reported releases other than those its mechanisms drew.
    The ledger holds what was drawn (the mechanisms wrote it); the error tells the kernel's
    author which report is wrong.

    >>> issubclass(ReleaseMismatchError, RuntimeError)
    True
    """


def _names(events) -> str:
    return "[" + ", ".join(f"{ev!r} x{n}" if n > 1 else repr(ev)
                           for ev, n in ((k, sum(1 for _ in g)) for k, g in itertools.groupby(events))) + "]"


class StepReport(list):
    """What a step reports (:meth:`PrivacyEngine.step` yields it): its events, and the ledger
    label of its releases (``label``: ``""`` for a kernel's per-iteration releases; a kernel whose
    step makes a release of another purpose says so through its info's ``label``)."""

    __slots__ = ("label",)

    def __init__(self):
        super().__init__()
        self.label = ""


class _StepScope:
    """:meth:`PrivacyEngine.step` (a class, not a generator: it runs every iteration)."""

    __slots__ = ("engine", "declared", "on_release", "owner", "drawn", "reported")

    def __init__(self, engine, declared, on_release, owner):
        self.engine, self.declared, self.on_release, self.owner = engine, declared, on_release, owner
        self.drawn, self.reported = recording(), StepReport()

    def __enter__(self) -> StepReport:
        self.drawn.__enter__()
        return self.reported

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.drawn.__exit__(exc_type, exc, tb)
        if exc_type is not None:  # no state returned, nothing published: the draws are discarded
            self.drawn.take()
            return False
        self.engine.commit(self.drawn, self.reported, self.declared, self.on_release, self.owner, self.reported.label)
        return False


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


class EngineSetting:
    """A kernel attribute that is its privacy engine's (``kernel.privacy``), read and written
    through the kernel under the same name (``kernel.epsilon`` is ``kernel.privacy.epsilon``)."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, kernel, owner=None):
        return self if kernel is None else getattr(kernel.privacy, self.name)

    def __set__(self, kernel, value):
        setattr(kernel.privacy, self.name, value)


class PrivacyEngine:
    r"""The privacy engine of one kernel object (module doc): its budget, its ledgers, its plan,
    its stop and its ε. A kernel owns one (``kernel.privacy``) and only reports to it.

    :param float epsilon, delta: total budget over all chains (``None``: no budget; ``delta``
        defaults to :data:`DEFAULT_DELTA` when only ``epsilon`` is given).
    :param int num_chains: chains the budget is shared by (default 1).
    :param str accountant: accountant of ε (:func:`~pyro_dp.accounting.get_accountant`).
    :param float reference_delta: δ at which diagnostics and the progress bar report ε
        (default: ``delta`` if given, else 1e-5).
    :param bool non_private: the noise-free test mode (refused with a budget).
    :param str relation: the ledgers' neighbouring relation.
    :param str kernel_id: the owning kernel object's id (tags its :class:`ChainLedger`).
    :param tuple supported_relations: the relations the owner's privacy analysis covers (any
        other ``relation`` is refused first; default: any). ``owner``: its name, for that error.

    It never sees a kernel, a state or data: it receives events (:meth:`declare`, what the
    mechanisms drew in its :meth:`recording` scope, :meth:`commit`, :meth:`claim`) and public counts (the iteration, the number of rows), as
    an accountant receives an optimiser's steps.

    >>> from pyro_dp.mechanisms import GaussianEvent
    >>> engine = PrivacyEngine(epsilon=5.0, delta=1e-5)  # nm = 3: 11 iterations fit
    >>> engine.make_plan([], [GaussianEvent(3.0)]); engine.steps_allowed
    11
    >>> declared = engine.declare([GaussianEvent(3.0)], iteration=0)
    >>> from pyro_dp.mechanisms import NoiseSource, gaussian_release_spec
    >>> with engine.recording() as drawn:  # the step: its mechanisms record what they draw
    ...     xi = gaussian_release_spec(3.0).draw(NoiseSource())
    >>> engine.commit(drawn, [GaussianEvent(3.0)], declared); engine.end_iteration()
    >>> engine.ledger.num_releases, engine.get_epsilon() <= 5.0
    (1, True)
    """

    def __init__(self, *, epsilon: Optional[float] = None, delta: Optional[float] = None,
                 num_chains: Optional[int] = None, accountant: str = DEFAULT_ACCOUNTANT,
                 reference_delta: Optional[float] = None, non_private: bool = False, relation: str = "substitute",
                 kernel_id: str = "", supported_relations: Optional[tuple] = None, owner: str = "this kernel"):
        if supported_relations is not None and relation not in supported_relations:
            raise ValueError(f"{owner}'s privacy analysis covers relation(s) {supported_relations}, "
                             f"not relation={relation!r}")
        self.relation = relation
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
        self.num_chains = 1 if num_chains is None else check_positive("num_chains", num_chains, integer=True)
        #: ``True`` when the engine adopted :data:`DEFAULT_EPSILON` (:meth:`adopt_default_budget`)
        self.default_budget = False
        get_accountant(accountant)
        self.accountant = accountant
        rd = reference_delta if reference_delta is not None else (delta if delta is not None else 1e-5)
        if not (0.0 < float(rd) < 1.0):
            raise ValueError(f"reference_delta must be in (0, 1), got {rd!r}")
        self.reference_delta = float(rd)
        self.kernel_id = kernel_id
        #: every finished chain of the kernel object (this process and workers): chain id -> ledger
        self.chains: Dict[str, PrivacyLedger] = {}
        self.filed_counts: Counter = Counter()  # event counts of self.chains, for the plan check
        #: the ledger of the chain in progress
        self.live = self.new_chain_ledger(-1)
        self.plan: Optional[PrivacyPlan] = None  # set by make_plan() when there is a budget
        #: why the ledgers may miss releases (set by the worker bookkeeping), else ``None``
        self.incomplete: Optional[str] = None
        self.reset_chain()

    # ------------------------------------------------------------------ the budget
    def adopt_default_budget(self) -> None:
        """No budget and no noise given: calibrate to :data:`DEFAULT_EPSILON`,
        :data:`DEFAULT_DELTA` (announced by a :class:`PrivacyNotice` at set-up)."""
        if self.epsilon is None and not self.non_private:
            self.epsilon, self.delta, self.default_budget = DEFAULT_EPSILON, DEFAULT_DELTA, True
            self.reference_delta = DEFAULT_DELTA

    def calibrate(self, events_for_scale, *, num_iterations, fixed=(), **kwargs) -> float:
        """:func:`~pyro_dp.accounting.calibrate` for this budget, with ``fixed`` (once per
        chain, e.g. a private initialisation's releases) added to the fixed events."""
        def with_fixed(scale):
            once, per = events_for_scale(scale)
            return list(once) + list(fixed), per

        return calibrate(self.epsilon, self.delta, num_iterations, with_fixed, accountant=self.accountant,
                         num_chains=self.num_chains, relation=self.relation, **kwargs)

    def make_plan(self, fixed, per_iteration, *, num_iterations: Optional[int] = None) -> None:
        """Plan one chain's releases (data-free): ``fixed`` once per chain, and as many
        iterations of ``per_iteration`` as fit for ``num_chains`` chains; warn when that is
        fewer than the ``num_iterations`` planned."""
        if self.epsilon is None:
            self.plan = None
            return
        self.plan = PrivacyPlan(self.epsilon, self.delta, fixed=list(fixed), per_iteration=list(per_iteration),
                                accountant=self.accountant, num_chains=self.num_chains, relation=self.relation,
                                cap=plan_cap(num_iterations))
        if num_iterations is not None and self.steps_allowed < num_iterations:
            warn_user(
                f"the budget (epsilon={self.epsilon}, delta={self.delta}) allows only "
                f"{self.steps_allowed} iterations per chain over {self.num_chains} chain(s), "
                f"fewer than num_iterations={num_iterations}",
                BudgetExhaustedWarning,
            )

    @property
    def steps_allowed(self) -> Optional[int]:
        """Iterations per chain the budget allows (``None`` without a budget)."""
        return None if self.plan is None else self.plan.steps_allowed

    def check_supports(self, events, owner: str) -> None:
        """Refuse, before any data access, an accountant that cannot compose one of the planned
        ``events`` (of ``owner``, a kernel's name): otherwise the chain would read the data and
        only the report of its ε fail. Data-free: events only."""
        if self.non_private:
            return
        acc = get_accountant(self.accountant, relation=self.relation)
        for item in events:
            try:
                acc.require(item[0] if isinstance(item, tuple) else item)
            except UnsupportedEventError as e:
                raise UnsupportedEventError(
                    f"{owner}: accountant {self.accountant!r} cannot compose a planned release "
                    f"({e}); choose one that can (e.g. 'pld' composes Gaussian and (epsilon, delta) "
                    "releases; docs/privacy.md, \"Accountants\")") from None

    def check_delta(self, num_rows: int) -> None:
        """Say when δ is above 1/N, N counting all ranks' rows (a neighbour may differ in any of them)."""
        if self.epsilon is not None and self.delta is not None and self.delta * num_rows > 1.0:
            warn_user(f"delta={self.delta} is above 1/N for N={num_rows} rows: pass a smaller delta", PrivacyNotice)

    # ------------------------------------------------------------------ chains
    def new_chain_ledger(self, worker_slot: int) -> ChainLedger:
        """An empty ledger for a new chain, tagged with the kernel object and ``worker_slot``."""
        return ChainLedger(self.relation, kernel_id=self.kernel_id, chain_id=secrets.token_hex(8),
                           worker_slot=worker_slot)

    def begin_chain(self, worker_slot: int) -> None:
        """At a chain's set-up: a fresh live ledger, unless the live one holds releases of this
        process's slot (an interrupted private start's: they stay in that chain). A worker process
        never records into the owner's live ledger (s10 audit F5)."""
        if not self.live or self.live.worker_slot != worker_slot:
            self.live = self.new_chain_ledger(worker_slot)

    def end_chain(self, worker_slot: int) -> bool:
        """At a chain's end: file the live ledger with the finished chains (idempotent) and start
        an empty one; ``False`` when the live ledger holds nothing (no chain ended)."""
        if not self.live:
            return False
        live, self.live = self.live, self.new_chain_ledger(worker_slot)
        self.file_chain(live)
        return True

    def file_chain(self, ledger: PrivacyLedger) -> None:
        """File a finished chain's ledger (idempotent by chain id; a chain's ledger only grows,
        so the longer copy wins). The live chain is never filed from a copy of itself."""
        cid = getattr(ledger, "chain_id", "") or secrets.token_hex(8)
        if cid == self.live.chain_id or not ledger:
            return
        old = self.chains.get(cid)
        if old is None or old.num_releases < ledger.num_releases:
            self.chains[cid] = ledger.copy()
            if old is not None:
                self.filed_counts.subtract(old.aggregate())
            self.filed_counts.update(ledger.aggregate())
            self.__dict__.pop("_eps_cache", None)

    def restore(self, chains, live: PrivacyLedger) -> None:
        """Continue a checkpoint's ledgers: its finished ``chains`` filed afresh, and its ``live``
        chain's releases (and iteration marks) in a live ledger of this kernel object."""
        self.chains, self.filed_counts = {}, Counter()
        for led in chains:
            self.file_chain(led)
        self.live = ChainLedger(self.relation, kernel_id=self.kernel_id, chain_id=live.chain_id)
        self.live.extend(live)
        self.__dict__.pop("_eps_cache", None)

    def reset_chain(self) -> None:
        """A chain starts: it reads data until :meth:`stop`; the progress bar's ε starts afresh."""
        #: whether the chain has stopped reading data (:meth:`stop`)
        self.stopped = False
        #: why it stopped, in words
        self.stop_cause = ""
        self.__dict__.pop("_eps_log", None)
        self.__dict__.pop("_eps_log_start", None)

    # ------------------------------------------------------------------ one iteration
    def declare(self, events, *, iteration: int) -> Optional[Counter]:
        """Before an iteration: the releases it may make (``events``, or ``(event, count)``
        pairs), checked against the plan; ``None`` when the chain has stopped reading data (now,
        with the budget warning, or earlier). ``iteration``: the chain's count, for the warning."""
        if self.stopped:
            return None
        declared = _counts(events)
        if self.plan is not None and not self.plan.fits(self.live, self.filed_counts, declared):
            self.stop(self.plan.stop_cause(self.live, declared, len(self.chains)), iteration=iteration)
            return None
        return declared

    @staticmethod
    def recording() -> Recorder:
        """The scope of one step (or private start): a fresh :class:`~pyro_dp.mechanisms.Recorder`
        that every release of :mod:`pyro_dp.mechanisms` records its event in as it draws
        (:func:`~pyro_dp.mechanisms.recording`); the ledger is written from it by :meth:`commit`."""
        return recording()

    def step(self, declared: Counter, on_release=None, owner: str = "the kernel") -> "_StepScope":
        """One step's scope: the step runs inside :meth:`recording` and puts what it reports
        (``info.events``, and its ``label`` where it has one) into the :class:`StepReport` this
        yields; on leaving, :meth:`commit` writes what was
        drawn. A step that raises returns no state, so nothing it computed is published: its
        draws are discarded (the ledger as before issue 58; ``tests/test_distributed.py``'s
        failing rank)."""
        return _StepScope(self, declared, on_release, owner)

    @contextlib.contextmanager
    def private_start(self, label: str, on_release=None, owner: str = "the private start"):
        """The private start's scope: yields the ``record(event, label=None)`` its initialiser
        calls after each release (:meth:`claim`, ``label`` by default), so each release is in
        the ledger as soon as it is reported (an exception later loses none); on leaving,
        :meth:`flush` refuses what was drawn and not reported (discarded when the start raised,
        as a step's are)."""
        with self.recording() as drawn:
            try:
                yield lambda event, lab=None: self.claim(drawn, event, lab or label, on_release, owner)
            except BaseException:
                drawn.take()  # drawn, not reported, and the start raised: nothing of it is published
                raise
            self.flush(drawn, label, on_release, owner)

    def _write(self, events, label: str = "", on_release=None) -> None:
        for ev, run in itertools.groupby(events):  # a run of equal releases as one entry
            n = sum(1 for _ in run)
            self.live.record(ev, n, label=label)
            if on_release is not None:
                for _ in range(n):
                    on_release()

    def commit(self, drawn: Recorder, reported, declared: Counter, on_release=None, owner: str = "the kernel",
               label: str = "") -> None:
        """After a step run inside :meth:`recording`: write what its releases ``drawn`` (in the
        order they drew) into the live ledger (under ``label``), calling ``on_release()`` after each (the worker
        processes' shared counters, :mod:`pyro_dp.kernels.workers`); then check the step's
        ``reported`` events against them and that it released no more than was ``declared``."""
        events = drawn.take()
        self._write(events, label, on_release)
        if reported is not None and list(reported) != events and _counts(reported) != _counts(events):
            raise ReleaseMismatchError(
                f"{owner}'s step reported {_names(reported)} but drew {_names(events)}: the ledger holds what the "
                "mechanisms drew (pyro_dp.mechanisms records each release as it draws its noise), so the step's "
                "report (info.events) is wrong. If you wrote this kernel, report every release the step makes, "
                "once, with the event its release function records (a release drawn through a mechanism with "
                "event= records that event; a withdrawn tentative draw is not a release); a kernel must not draw "
                "noise it does not release or release a value without drawing its noise through pyro_dp.mechanisms "
                "(docs/new_kernel.md). If it is one of pyro_dp's, please report it")
        self._check_declared(events, declared, owner)

    def claim(self, drawn: Recorder, event: PrivacyEvent, label: str, on_release=None,
              owner: str = "the private start") -> None:
        """The private start reports a release it just made (``event``, under ``label``): write the
        oldest release ``drawn`` has not written yet into the live ledger under that label (the
        event the mechanism drew, not the one reported), and check they agree."""
        if not drawn.events:
            raise ReleaseMismatchError(
                f"{owner} reported {event!r} ({label}) but drew no release for it: report a release only after "
                "drawing its noise through pyro_dp.mechanisms (docs/new_kernel.md)")
        head = drawn.events.pop(0)
        self._write([head], label, on_release)
        if head != event:
            raise ReleaseMismatchError(
                f"{owner} reported {event!r} ({label}) but drew {head!r}: the ledger holds what the mechanism drew; "
                "report each release with the event its release function records (docs/new_kernel.md)")

    def flush(self, drawn: Recorder, label: str, on_release=None, owner: str = "the private start",
              check: bool = True) -> None:
        """At the end of a private start: write the releases ``drawn`` that it did not report
        (under ``label``), then, with ``check``, refuse them (a release must be reported)."""
        left = drawn.take()
        self._write(left, label, on_release)
        if left and check:
            raise ReleaseMismatchError(
                f"{owner} drew {_names(left)} but did not report them (record(event, label) after each release): "
                "they are in the ledger; report every release it makes (docs/new_kernel.md)")

    @staticmethod
    def _check_declared(events, declared: Counter, owner: str) -> None:
        """Refuse a step that released more than it ``declared`` (its releases are already in the ledger)."""
        if not _within(_counts(events), declared):
            raise RuntimeError(
                f"{owner}'s step released {list(events)} but declared {dict(declared)} before it ran: a kernel "
                "must declare every release of a step before making it (its releases(state): ReleasePlan.step, "
                "pyro_dp.kernels.releases), so that the budget check sees it first. The releases were "
                "recorded in the ledger (the epsilon reported includes them). If you wrote this kernel, add the "
                "missing events to what its releases(state) declares (docs/new_kernel.md); if it is one of pyro_dp's, please "
                "report it"
            )

    def end_iteration(self) -> None:
        """Where an iteration's releases end (:func:`pyro_dp.privacy_report`'s curve)."""
        self.live.end_iteration()

    def stop(self, cause: str, *, iteration: int) -> None:
        """Stop reading data for the rest of this chain (after ``iteration`` iterations), and say why."""
        self.stopped = True
        self.stop_cause = cause
        head = (f"privacy budget (epsilon={self.epsilon}, delta={self.delta}) spent after" if self.epsilon is not None
                else "this chain (no budget set) refused to read data after")
        msg = (
            f"{head} {iteration} iterations of this chain: {cause}. The kernel has STOPPED READING DATA "
            "and repeats its last state for every remaining iteration: discard the repeated tail "
            "(diagnostics()['private iterations'] says how many iterations are real)."
        )
        warn_user(msg, BudgetExhaustedWarning)
        _logger.warning(msg)

    # ------------------------------------------------------------------ ε
    @property
    def ledger(self) -> PrivacyLedger:
        """Every release: every filed chain, then the chain in progress."""
        return PrivacyLedger.merged(self.chain_ledgers(), self.relation)

    def chain_ledgers(self) -> list:
        """The :class:`ChainLedger` of every chain, in the order :attr:`ledger` merges them: the
        finished chains as they were filed (this process and worker processes), then the chain
        in progress (empty between runs)."""
        return list(self.chains.values()) + [self.live]

    #: the kernel's worker bookkeeping (:class:`~pyro_dp.kernels.workers.ChainProcesses`): it counts
    #: the releases of chains run in worker processes and knows which never came back (``None``:
    #: chains in this process only)
    workers = None

    def count_release(self) -> None:
        """After each release of the live chain (``on_release``): counted in shared memory by
        :attr:`workers` when the chain runs in a worker process."""
        if self.workers is not None:
            self.workers.count_release(self)

    def require_complete(self) -> None:
        """Raise ``RuntimeError`` when the ledgers may miss releases (:attr:`incomplete`, or
        releases of worker processes whose ledgers never came back, :attr:`workers`): an ε from
        them would be a lower bound of what was spent.

        >>> engine = PrivacyEngine(); engine.require_complete()  # nothing missing
        >>> engine.incomplete = "a worker's ledger did not come back"; engine.require_complete()
        Traceback (most recent call last):
        ...
        RuntimeError: a worker's ledger did not come back
        """
        if self.workers is not None:
            self.workers.require_complete(self)
        elif self.incomplete:
            raise RuntimeError(self.incomplete)

    def get_epsilon(self, delta: Optional[float] = None, accountant: Optional[str] = None) -> float:
        """Total ε of :attr:`ledger` at ``delta`` (default :attr:`reference_delta`) under
        :attr:`relation`; 0 for an empty ledger."""
        delta = self.reference_delta if delta is None else delta
        ledger = self.ledger
        return get_accountant(accountant or self.accountant, ledger).get_epsilon(delta) if ledger else 0.0

    def epsilon_now(self, chain_only: bool = False) -> float:
        """ε at the reference δ of this chain (``chain_only``) or of all chains so far (cached)."""
        key = (chain_only, len(self.chains), self.live.num_releases)
        cache = self.__dict__.setdefault("_eps_cache", {})
        if key not in cache:
            ledger = self.live if chain_only else self.ledger
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

    def default_budget_spent(self, owner: str, chain_epsilon: float) -> str:
        """What a chain of ``owner`` (a kernel's name) run with the default budget spent, for
        the notice ``diagnostics()`` gives."""
        return (f"{owner} ran with the default budget (epsilon={self.epsilon}, delta={self.delta}): "
                f"this chain spent epsilon={chain_epsilon:.4g}; all chains of this kernel so far: "
                f"epsilon={self.epsilon_now():.4g} at delta={self.reference_delta} ({self.relation} relation)")

    def logged_epsilon(self, iteration: int) -> str:
        """ε for the progress bar, which Pyro asks for every iteration (``iteration``: the chain's):
        the ε at the reference δ of every chain of the kernel object so far (in this process).
        Shown as ``eps=3.99``, or ``eps=3.99@it288`` when the value is as of iteration 288 of
        the chain, older than the current one (README, "Reading the output").

        The first value of a chain is computed after it has run for 1 s (a short run, e.g. a
        benchmark, never pays for it; a numerical accountant can take a second). Then the value
        refreshes once the time since the last evaluation exceeds 20 times its cost
        and 0.1 s (so the progress bar costs at most ~5% of the run, also when an iteration
        takes well under a millisecond on the compiled path), and says which iteration it
        refers to when it is older than the current one. ``diagnostics()`` and
        ``get_epsilon()`` are always exact.
        """
        n = iteration
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
            eps = self.epsilon_now()
            t1 = time.perf_counter()
            last = self._eps_log = (n, eps, t1 - t0, t1)
        return f"{last[1]:.3g}" if last[0] == n else f"{last[1]:.3g}@it{last[0]}"

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_eps_cache", None)  # recomputed where needed
        return state
