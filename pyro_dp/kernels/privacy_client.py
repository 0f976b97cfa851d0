r"""The kernel's side of its privacy engine: what a kernel *declares*, and the engine's public
surface on the kernel.

A kernel owns one :class:`~pyro_dp.kernels.privacy_engine.PrivacyEngine` (``kernel.privacy``)
and only reports to it, as Opacus's optimiser reports its steps to its accountant:

* **What a kernel declares is kernel knowledge and stays on the kernel** (its subclass API
  for privacy): :meth:`~PrivacyClient._per_iteration_events`,
  :meth:`~PrivacyClient._fixed_events`, :meth:`~PrivacyClient._step_events` and
  :meth:`~PrivacyClient._calibrate` (noise from the budget when the user gave none, through
  :meth:`~PrivacyClient._calibrate_scale`). The kernel evaluates them and hands the engine the
  resulting *events*; the engine never receives the kernel, a callable of it or its state.
  This is the design decision of issue 39: an engine that held the kernel (or callables bound
  to it) would know what it accounts for, and a pickled engine would carry the kernel along; an
  engine that receives values is an accountant, testable on its own (its doctest needs no
  model) and shared by every kernel unchanged.
* **Around each iteration** the kernel's lifecycle makes three calls: :meth:`_declare` (the
  iteration's declared events, checked against the plan by
  :meth:`PrivacyEngine.declare <pyro_dp.kernels.privacy_engine.PrivacyEngine.declare>`),
  :meth:`_report` (what the step released,
  :meth:`PrivacyEngine.report <pyro_dp.kernels.privacy_engine.PrivacyEngine.report>`) and, at a
  chain's first iteration with a private initialisation, :meth:`_run_private_start` (each
  release recorded as it is made). Worker processes' shared release counters
  (:mod:`pyro_dp.kernels.workers`) are counted by the kernel's ``on_release`` callback, per call.
* **The public surface is unchanged**: ``kernel.epsilon``, ``delta``, ``num_chains``,
  ``accountant``, ``reference_delta``, ``relation``, ``non_private`` and ``default_budget``
  are the engine's, read and written through thin properties; :attr:`ledger`,
  :meth:`chain_ledgers`, :meth:`get_epsilon` and :meth:`planned_events` delegate to it. The
  chain's stop flags (``_budget_exhausted``, ``_stop_cause_text``) and ``_incomplete`` are the
  engine's too, reached by the same properties, so checkpoints (``_chain_attrs``) keep their
  format.

The run length (``num_iterations``, where it came from) is the default path's
(:mod:`pyro_dp.kernels.default_path`) and stays on the kernel; the engine receives it where
it plans or calibrates.
"""
from __future__ import annotations

from collections import Counter
from typing import Optional, Sequence, Tuple

from ..mechanisms import PrivacyEvent, PrivacyLedger, ReproducibleNoiseWarning
from ..warn import warn_user
from .privacy_engine import PrivacyEngine, check_positive
from .tuning import DPAutoTune

__all__ = ["PrivacyClient"]


def _engine_attr(name: str, doc: str) -> property:
    """A kernel attribute that is its privacy engine's, read and written through ``kernel.privacy``."""
    return property(lambda self: getattr(self.privacy, name), lambda self, v: setattr(self.privacy, name, v), doc=doc)


class PrivacyClient:
    """Mixin of :class:`~pyro_dp.kernels.base.DPKernel`: what a kernel declares to its
    :class:`~pyro_dp.kernels.privacy_engine.PrivacyEngine` ``self.privacy``, and the engine's
    surface on the kernel (module doc)."""

    epsilon = _engine_attr("epsilon", "The total ε budget over all chains (``None``: none).")
    delta = _engine_attr("delta", "The budget's δ (``None`` without a budget).")
    num_chains = _engine_attr("num_chains", "Chains the budget is shared by.")
    accountant = _engine_attr("accountant", "The accountant of ε.")
    reference_delta = _engine_attr("reference_delta", "δ at which diagnostics and the progress bar report ε.")
    relation = _engine_attr("relation", "The neighbouring relation of the ledger.")
    non_private = _engine_attr("non_private", "The noise-free test mode.")
    default_budget = _engine_attr("default_budget", "Whether the kernel adopted the default budget.")
    _budget_exhausted = _engine_attr("stopped", "Whether the chain has stopped reading data.")
    _stop_cause_text = _engine_attr("stop_cause", "Why the chain stopped reading data.")
    _incomplete = _engine_attr("incomplete", "Why the ledgers may miss releases (``None``: they do not).")

    def _init_privacy(self, *, epsilon, delta, num_iterations, num_chains, accountant, reference_delta,
                      non_private, relation) -> None:
        """The privacy engine, with the budget and the accounting settings, and the run length
        (``__init__``, after :meth:`~pyro_dp.kernels.workers.WorkerBookkeeping._init_workers`; data-free)."""
        self.privacy = PrivacyEngine(epsilon=epsilon, delta=delta, num_chains=num_chains, accountant=accountant,
                                     reference_delta=reference_delta, non_private=non_private, relation=relation,
                                     kernel_id=self._id)
        self.num_iterations = None if num_iterations is None else check_positive("num_iterations", num_iterations, integer=True)
        #: whether num_chains was given (else it is read from ``MCMC`` at the first set-up)
        self._num_chains_given = num_chains is not None
        #: where :attr:`num_iterations` came from: ``"given"``, ``"MCMC"`` or ``"assumed"``
        self.run_length_source = None if num_iterations is None else "given"
        #: the releasing warmup iterations of a default path that idles the rest (``None``: all release;
        #: :meth:`~pyro_dp.kernels.default_path.DefaultPath._fix_run_length`)
        self._burn_in: Optional[int] = None

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

    def _check_noise_multiplier(self, name: str, value) -> Optional[float]:
        """Validate a noise multiplier; ``None`` means: calibrate it to the budget (the
        default budget when there is none), and 0 is allowed only in the ``non_private``
        test mode."""
        if value is None:
            if self.non_private:
                raise ValueError(f"non_private=True is the noise-free test mode: set {name}=0")
            self.privacy.adopt_default_budget()
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

    def _step_events(self, state) -> list:
        """The most one ``_step(state)`` can release, as events or ``(event, count)`` pairs
        (data-free). The engine enforces the budget against it *before* the step and checks
        afterwards that the step released no more. Default: :meth:`_per_iteration_events`."""
        return list(self._per_iteration_events())

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
        """:func:`~pyro_dp.accounting.calibrate` for this kernel's budget and run length, with the
        private initialisation's releases added to the fixed (once per chain) events."""
        return self.privacy.calibrate(events_for_scale, num_iterations=self.num_iterations,
                                      fixed=self._init_events(), **kwargs)

    def _setup_budget(self) -> None:
        """Plan one chain's releases (data-free): the private init, the once-per-chain releases
        and as many iterations as fit for ``num_chains`` chains."""
        if self.epsilon is None:
            self.privacy.plan = None
            return
        fixed, per_iteration = self.planned_events()
        self.privacy.make_plan(fixed, per_iteration, num_iterations=self.num_iterations)

    # ------------------------------------------------------------------ around each iteration
    def _declare(self, pending_init: bool) -> Optional[Counter]:
        """Before an iteration: the releases it may make (the private init's when it is
        pending, and :meth:`_step_events`), checked against the plan by the engine; ``None``
        when the chain has stopped reading data (now, with the budget warning, or earlier)."""
        if self.privacy.stopped:
            return None
        events = (self._init_events() if pending_init else []) + self._step_events(self._state)
        return self.privacy.declare(events, iteration=self._iteration)

    def _report(self, events, declared: Counter) -> None:
        """After a step: the engine records what it released (the shared worker counters count
        each release), then checks that it released no more than it declared."""
        self.privacy.report(events, declared, on_release=self._count_worker_release, owner=type(self).__name__)

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
            self._metric_sd = self.init.result.metric_sd  # the end-of-chain spread check (kernels.diagnostics)
            self._apply_tuning(self.init.result)
        self._state = self._init_state(z_init)

    def _record_init(self, event, label: Optional[str] = None) -> None:
        """Record one release of the private initialisation under its own label (the
        initialiser's ``label``, e.g. ``"init:DPGradientInit"``, unless it names a finer one)."""
        self.privacy.record(event, label=label or getattr(self.init, "label", f"init:{type(self.init).__name__}"),
                            on_release=self._count_worker_release)

    # ------------------------------------------------------------------ reporting
    @property
    def ledger(self) -> PrivacyLedger:
        """Every release of this kernel object: every chain of every ``mcmc.run``, in this
        process and in worker processes (merged back with their ``diagnostics()``)."""
        return self.privacy.ledger

    def chain_ledgers(self) -> list:
        """The :class:`~pyro_dp.kernels.privacy_engine.ChainLedger` of every chain of this kernel
        object, in the order :attr:`ledger` merges them: the finished chains as they were filed
        (this process and worker processes), then the chain in progress (empty between runs)."""
        return self.privacy.chain_ledgers()

    def get_epsilon(self, delta: Optional[float] = None, accountant: Optional[str] = None) -> float:
        r"""Total ε spent so far by this kernel object, at ``delta``: every chain of every run,
        also chains run in ``MCMC`` worker processes (their ledgers come back with their
        diagnostics). It is stated under the kernel's neighbouring relation :attr:`relation`
        (``self.ledger.relation``; ``diagnostics()["relation"]``)."""
        self.require_complete()
        if not self.privacy.ledger and self._num_setups > 0 and self._iteration > 0:
            raise RuntimeError("this kernel object ran iterations but recorded no release: please report")
        return self.privacy.get_epsilon(delta, accountant)
