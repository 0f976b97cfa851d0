r"""The privacy engine of a kernel: its ledgers, budget, plan, stop and ε, in one place.

A kernel's step only *reports* what it released; this mixin of
:class:`~pyro_dp.kernels.base.DPKernel` owns everything the releases mean for privacy, as
Opacus's optimiser reports to its accountant (``opacus/privacy_engine.py``):

* **One cumulative ledger per kernel object.** Each chain keeps a :class:`ChainLedger`
  (a :class:`~pyro_dp.mechanisms.PrivacyLedger` tagged with the kernel and the chain);
  ``cleanup()`` files it with the kernel's finished chains. ``diagnostics()`` returns it,
  and that is what comes back from a worker process when ``MCMC`` runs chains in parallel:
  when the parent process unpickles it, it files itself with the parent's kernel object
  (idempotently, :mod:`pyro_dp.kernels.workers`). So :attr:`PrivacyEngine.ledger`,
  :meth:`PrivacyEngine.get_epsilon`, :func:`pyro_dp.get_epsilon` and the budget see every
  release of every chain of every ``mcmc.run`` of this kernel object, in this process or in
  workers.
* **The budget is enforced on the ledger.** With ``epsilon``/``delta`` the kernel plans one
  chain's releases (:class:`~pyro_dp.kernels.plan.PrivacyPlan`: the private ``init``,
  once-per-chain releases, and as many iterations as fit for ``num_chains`` chains) and,
  before every iteration (:meth:`PrivacyEngine._declare`), checks that the chain's ledger plus
  the iteration's declared releases stays within that plan and that all the kernel's ledgers
  stay within ``num_chains`` such plans. The check reads only event counts (public), so
  whatever the control flow — re-runs, a re-initialised state, a retried set-up, more chains
  than planned — nothing is released beyond the budget. After the step,
  :meth:`PrivacyEngine._report` records what it released and checks it was declared.
* **What a kernel declares** (its subclass API for privacy): :meth:`~PrivacyEngine._per_iteration_events`,
  :meth:`~PrivacyEngine._fixed_events`, :meth:`~PrivacyEngine._step_events` and
  :meth:`~PrivacyEngine._calibrate` (noise from the budget when the user gave none).

The kernel's lifecycle reaches it through a few calls only: ``_init_privacy``/``_init_ledgers``
(``__init__``), ``_setup_budget``/``_check_accountant_supports_plan``/``_check_delta``
(``setup``), :meth:`~PrivacyEngine._declare` and :meth:`~PrivacyEngine._report` (around each
step), ``_run_private_start`` (the private initialisation) and ``_file_chain`` (``cleanup``). It is a
mixin — the same object as the kernel — rather than a component of its own, so that what users,
checkpoints (``_chain_attrs``) and tests address (``kernel.epsilon``, ``kernel.ledger``,
``kernel._ledger``) is unchanged; making it a separate object is the next step (issue 39).
"""
from __future__ import annotations

import logging
import math
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

import torch

from ..warn import warn_user
from ..accounting import UnsupportedEventError, calibrate, get_accountant
from ..mechanisms import PrivacyEvent, PrivacyLedger, ReproducibleNoiseWarning
from .plan import PrivacyPlan, counts as _counts, within as _within
from .tuning import DPAutoTune
from .workers import _owned_kernel

__all__ = ["PrivacyEngine", "ChainLedger", "BudgetExhaustedWarning", "PrivacyNotice", "check_positive",
           "DEFAULT_EPSILON", "DEFAULT_DELTA"]

_logger = logging.getLogger("pyro_dp")


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


class PrivacyEngine:
    """Mixin of :class:`~pyro_dp.kernels.base.DPKernel`: ledgers, budget, plan, stop and ε
    (module doc). The kernel's lifecycle calls :meth:`_declare` before a step and
    :meth:`_report` after it; everything else here is privacy bookkeeping."""

    def _init_privacy(self, *, epsilon, delta, num_iterations, num_chains, accountant, reference_delta,
                      non_private, relation) -> None:
        """Validate and keep the budget and the accounting settings (``__init__``; data-free)."""
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

    def _init_secret_stream(self, noise_seed, secure_mode) -> None:
        """The settings of the secret stream (privacy noise, batches: a
        :class:`~pyro_dp.mechanisms.NoiseSource` per chain, from OS entropy): ``noise_seed``, the
        test option that makes it reproducible, warns (anyone who knows it can remove the noise)."""
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

    def _init_private_start(self, init) -> None:
        """The optional private initialisation (``init=``, e.g. ``DPGradientInit``): its releases
        are recorded in the chain's ledger and counted by the plan and by calibration."""
        if init is not None and not (callable(getattr(init, "run", None)) and callable(getattr(init, "events", None))):
            raise TypeError(f"init must be a private initialiser such as DPGradientInit, got {init!r}")
        if init is not None and getattr(init, "noise_multiplier", None) == 0 and not self.non_private:
            raise ValueError("init with noise_multiplier=0 is only allowed with non_private=True")
        self.init = init

    def _init_ledgers(self) -> None:
        """This kernel object's (empty) ledgers and plan (``__init__``, after :meth:`_init_workers`)."""
        # every finished chain of this kernel object (this process and workers): chain id -> ledger
        self._chains: Dict[str, PrivacyLedger] = {}
        self._filed_counts: Counter = Counter()  # event counts of self._chains, for the plan check
        self._ledger = self._new_chain_ledger()
        self._plan: Optional[PrivacyPlan] = None  # set by setup() when there is a budget
        self._incomplete: Optional[str] = None  # set when worker releases may have been lost

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

    # ------------------------------------------------------------------ what a kernel declares (subclass API)
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

    def _step_events(self, state) -> list:
        """The most one ``_step(state)`` can release, as events or ``(event, count)`` pairs
        (data-free). The base enforces the budget against it *before* the step and checks
        afterwards that the step released no more. Default: :meth:`_per_iteration_events`."""
        return list(self._per_iteration_events())

    # ------------------------------------------------------------------ ledgers, plan, stop
    def _new_chain_ledger(self) -> ChainLedger:
        return ChainLedger(self.relation, kernel_id=self._id, chain_id=secrets.token_hex(8),
                           worker_slot=self._worker_slot())

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

    def _stop(self, cause: str, stacklevel: int = 3):
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

    def _check_delta(self) -> None:
        """At the first set-up (with the run-length notice): say when δ is above 1/N, N counting
        all ranks' rows (a neighbour may differ in any of them)."""
        if self.epsilon is not None and self._num_setups == 1:
            n = self.lik.global_num_rows
            if self.delta is not None and self.delta * n > 1.0:
                warn_user(f"delta={self.delta} is above 1/N for N={n} rows: pass a smaller delta", PrivacyNotice)

    def _declare(self, pending_init: bool) -> Optional[Counter]:
        """Before an iteration: the releases it may make (the private init's when it is
        pending, and :meth:`_step_events`), checked against the plan; ``None`` when the chain
        has stopped reading data (now, with the budget warning, or earlier)."""
        if self._budget_exhausted:
            return None
        declared = _counts((self._init_events() if pending_init else []) + self._step_events(self._state))
        if self._plan is not None and not self._plan.fits(self._ledger, self._filed_counts, declared):
            self._stop(self._plan.stop_cause(self._ledger, declared, len(self._chains)))
            return None
        return declared

    def _report(self, events, declared: Counter) -> None:
        """After a step: record what it released in the chain's ledger (and the shared worker
        counters), then check that it released no more than it declared."""
        for ev in events:
            self._ledger.record(ev)
            self._count_worker_release()
        if not _within(_counts(events), declared):
            raise RuntimeError(
                f"internal error: {type(self).__name__} released {list(events)} but declared "
                f"{dict(declared)} (recorded in the ledger; please report)"
            )

    def _run_private_start(self) -> None:
        """At a chain's first iteration (declared with it): the private initialisation reads the
        data through its own mechanism, each release recorded as it is made (an exception
        part-way loses none); a :class:`~pyro_dp.kernels.tuning.DPAutoTune` result is then taken
        by the kernel (post-processing of the tuning releases), and the chain starts there."""
        z_init, _, frac = self.init.run(
            self.lik, self._state_z(self._state), self._noise, self.relation, record=self._record_init
        )
        self._init_done = True
        self._init_clipped_fraction = frac
        self._preconditioner = self.lik.preconditioner  # a DPAutoTune(whiten=True) sets it (post-processing)
        if isinstance(self.init, DPAutoTune):
            self._apply_tuning(self.init.result)
        self._state = self._init_state(z_init)

    def _record_init(self, event, label: Optional[str] = None) -> None:
        """Record one release of the private initialisation under its own label (the
        initialiser's ``label``, e.g. ``"init:DPGradientInit"``, unless it names a finer one)."""
        self._ledger.record(event, label=label or getattr(self.init, "label", f"init:{type(self.init).__name__}"))
        self._count_worker_release()

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

    def _default_budget_spent(self, chain_epsilon: float) -> str:
        """What a chain run with the default budget spent, for the notice ``diagnostics()`` gives."""
        return (f"{type(self).__name__} ran with the default budget (epsilon={self.epsilon}, delta={self.delta}): "
                f"this chain spent epsilon={chain_epsilon:.4g}; all chains of this kernel so far: "
                f"epsilon={self._epsilon_now():.4g} at delta={self.reference_delta} ({self.relation} relation)")

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
