r"""The kernel base: Pyro's ``MCMCKernel`` lifecycle shared by every DP kernel — set-up without
touching data, ``sample``, ``diagnostics``, ``logging``, ``cleanup``, ``initial_params`` — and
the seeds of a chain. It reads top to bottom; every other concern is a module of its own:

===========================================  ===============================================
``kernel.privacy``                           ledgers, budget, plan, stop, ε: one
(:mod:`~pyro_dp.kernels.privacy_engine`)     object; the kernel *declares* an iteration's
                                             releases before it, runs it in the engine's
                                             recording scope (the mechanisms record what
                                             they draw) and its report is checked after it
``kernel.chain``                             what the chain in progress has done
(:mod:`~pyro_dp.kernels.chain_record`)       (iteration, counts, draws)
``kernel.processes``, ``kernel.ranks``       chains in ``MCMC`` worker processes (shared
(:mod:`~pyro_dp.kernels.workers`)            release counters, pickling, failed chains) and
                                             ``torch.distributed`` ranks
:mod:`~pyro_dp.kernels.checkpoint`           ``state_dict`` / ``load_state_dict``
:mod:`~pyro_dp.kernels.diagnostics`          ``diagnostics()`` / ``logging()``
:mod:`~pyro_dp.kernels.runner`               the run length a budget funds (from ``MCMC``)
:mod:`~pyro_dp.kernels.path_hook`            the default path's hook: private tuning of the
                                             settings left out (:mod:`pyro_dp.default_path`,
                                             a layer above the kernels, drives it)
:mod:`~pyro_dp.kernels.auto_compile`         ``jit_compile=None``: eager or compiled from
                                             the run's predicted cost
===========================================  ===============================================

The kernel holds these parts and calls them; none of them is a base class, and each keeps its
own state (the ``kernel.X`` column). The class below is the lifecycle, the subclass API, and the
few names a user reads on a kernel (the budget's, forwarded to ``kernel.privacy``).

Algorithms live in pure-ish ``init``/``step`` functions (one file each); a subclass of
:class:`DPKernel` says which events one iteration releases (``_per_iteration_events``,
``_step_events``), builds its state (``_init_state``) and calls its step (``_step``).

How this fits :class:`pyro.infer.MCMC` (see ``shared/FACTS.md``):

* ``setup()`` may run more than once (``MCMC._set_transforms`` calls it again in the main
  process) — it evaluates no likelihood and records nothing.
* Initial values are drawn from the prior (``init_strategy``) or taken from the user's
  ``initial_params``; Pyro's data-dependent search for a valid starting point never runs.
* Every release is recorded in the chain's ledger by the mechanism that draws its noise (issue
  58: :mod:`pyro_dp.mechanisms.recorder`; the step's ``info.events`` is a cross-check) and
  counted by the budget, also for chains run in worker processes (:mod:`~pyro_dp.kernels.privacy_engine`, :mod:`~pyro_dp.kernels.workers`).
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

import os
import secrets
import multiprocessing
from collections import Counter
from typing import Dict, Optional, Sequence, Tuple

import torch
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from ..accounting import DEFAULT_ACCOUNTANT
from ..checks import SamplingWarning  # noqa: F401 (re-exported)
from ..heap import HEAP_TRIM_EVERY, release_free_heap
from ..likelihood import PrivateLikelihood
from ..mechanisms import NoiseSource
from ..private import check_public
from ..mechanisms import PrivacyEvent, PrivacyLedger, ReproducibleNoiseWarning
from ..warn import warn_user
from . import auto_compile, checkpoint, diagnostics
from .chain_record import ChainRecord, RunForecast
from .declared_batch import take_declared_subsample
from .diagnostics import MAX_CHECKED_DRAWS, NONPRIVATE_PREFIX
from .seeds import PURPOSE_ALGO, PURPOSE_INIT, PURPOSE_NOISE, derive_seed, kernel_chain_seed  # noqa: F401 (re-exported)
from .plan import counts as _counts  # noqa: F401  (re-exported: tests import it from here)
from .path_hook import default_path
from .runner import DEFAULT_ITERATIONS, resolve_run_length
from .privacy_engine import (DEFAULT_DELTA, DEFAULT_EPSILON, BudgetExhaustedWarning, ChainLedger, EngineSetting,
                             PrivacyEngine, PrivacyNotice, check_positive)
from .workers import WORKER_SLOTS, ChainFailedError, ChainProcesses, Ranks, WorkerReleases  # noqa: F401 (re-exported)

__all__ = ["DPKernel", "BudgetExhaustedWarning", "SamplingWarning", "PrivacyNotice", "ChainLedger", "ChainFailedError",
           "WorkerReleases", "check_positive", "NONPRIVATE_PREFIX", "DEFAULT_EPSILON", "DEFAULT_DELTA", "DEFAULT_ITERATIONS"]



def _initial_point(lik: PrivateLikelihood, user_params: Optional[Dict[str, torch.Tensor]]) -> torch.Tensor:
    """A chain's data-free start, flat: the user's ``initial_params`` (checked) or the likelihood's
    prototype (the init strategy's draw)."""
    if user_params is not None:
        missing = set(lik.latent_names) - set(user_params)
        if missing:
            raise ValueError(f"initial_params lacks latent sites {sorted(missing)}")
        params = {k: v.to(dtype=lik.dtype, device=lik.device) for k, v in user_params.items()}
    else:
        params = dict(lik.prototype_params)
    z0 = lik.flatten(params)
    if z0.numel() != lik.dim or not bool(torch.isfinite(z0).all()):
        raise ValueError("initial parameters must be finite and match the model's latent shapes")
    return z0


def _returned_unchanged(last, params, z) -> bool:
    """Whether ``params`` is the dict the last :meth:`DPKernel.sample` returned (``last``),
    holding the same tensors, for the current state ``z`` (Pyro's runner passes it straight
    back): then the flatten-and-compare of the general check is skipped (#17: Python per
    iteration). An in-place change of those tensors changes the state's own tensor (they are
    views of it), which the general check could not see either."""
    return (last is not None and params is last[0] and last[2] is z
            and len(params) == len(last[1]) and all(a is b for a, b in zip(params.values(), last[1])))


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
    :param int num_iterations: planned iterations per chain, warmup included (calibrates the
        noise). Default: the ``pyro.infer.MCMC`` run's ``warmup_steps + num_samples``, else
        :data:`DEFAULT_ITERATIONS`; a :class:`PrivacyNotice` says which.
    :param int num_chains: planned number of chains (each reads the same data). Default: the
        ``MCMC``'s ``num_chains`` at the first set-up, else 1.
    :param str accountant: accountant used for ε (default ``"gdp"``: tight Gaussian).
    :param float reference_delta: δ at which diagnostics and the progress bar report ε
        (default: ``delta`` if given, else 1e-5).
    :param int seed: base seed of the **data-free** randomness (proposals, momenta, accept
        uniforms, prior draws), per chain. It never seeds privacy noise or batch selection.
    :param int noise_seed: reproducible privacy noise and batches, for tests only (anyone who
        knows it can remove the noise; warns). Default: OS entropy. ``secure_mode``: OS-seeded with
        the floating-point mitigation of :class:`~pyro_dp.mechanisms.NoiseSource`.
    :param bool nonprivate_diagnostics: add raw-data statistics (clipped fractions) to
        ``diagnostics()`` under :data:`NONPRIVATE_PREFIX`: **not covered by ε**, never publish them.
        Without it DP-HMC's and DP penalty's compiled graphs do not compute the counts at all.
    :param bool non_private: documented test mode: noise multipliers may be 0; such runs
        record :class:`~pyro_dp.mechanisms.NonPrivateEvent` and report ε = ∞.
    :param str relation: neighbouring relation of the ledger (``"substitute"``, the papers',
        or ``"add_remove"`` where the kernel's analysis covers it: see
        :attr:`supported_relations`); noise multipliers are relative to its sensitivity.
    :param bool jit_compile: trace the model's per-example functions once into graphs and
        compile them (:mod:`pyro_dp.compiled`; Pyro's name): the same values and ledger, faster
        after a one-time compile. ``None`` (default): compiled when the run's predicted wall time
        is shorter that way, decided data-free at the first set-up
        (:mod:`pyro_dp.kernels.auto_compile`, :attr:`compile_decision`); ``True``/``False`` as given.
    :param dict jit_options: ``{"backend": "inductor" (default) | "graph", **torch.compile
        kwargs}``; ``"graph"`` runs the traced graph without compiling it (exact, no compile time).
    :param bool distributed: shard the rows over the ranks of a :mod:`torch.distributed` group
        (:mod:`pyro_dp.distributed`; kernels with :attr:`supports_distributed`): every rank gets
        the same chain and ledger. ``process_group``: the group (implies ``distributed=True``).
    :param public: positions and keywords of ``MCMC.run`` arguments that are public although they
        look like data (a tensor whose first dimension has ``N`` entries): they are passed whole to
        every row's evaluation, without noise (:mod:`pyro_dp.arguments`).
    :param init: optional private initialisation run at the first iteration of every chain,
        e.g. :class:`~pyro_dp.default_path.private_init.DPGradientInit`; its releases are recorded
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

    #: Whether the kernel takes the data plate's ``subsample_size`` as its ``batch_size``
    #: (:mod:`pyro_dp.kernels.declared_batch`); other kernels refuse a plate that declares one.
    takes_plate_batch: bool = False

    #: The default path's choices for this kernel (:mod:`pyro_dp.default_path`): whether its
    #: tuner whitens, balances the coordinates' scales, releases a centre for a gradient clip ball
    #: (under substitution only); the releasing share of the warmup (``None``: all of it); the kernel
    #: whose forecast describes its chains; what the noise-limited advice adds; and whether the
    #: effective-sample-size advice names DPGroupedPenalty for hierarchical models (``advises_grouped``).
    whiten_by_default: bool = False
    scale_by_default: bool = False
    centre_by_default: bool = False
    burn_in_share: Optional[float] = None
    forecast_kernel: str = "DPPenalty"
    noise_limited_alternative: str = diagnostics.NOISE_LIMITED_ALTERNATIVE
    advises_grouped: bool = True

    #: Attributes that make up a chain in progress, saved by :meth:`state_dict` besides the
    #: chain's state, its :class:`~pyro_dp.kernels.chain_record.ChainRecord` and its ledger: the
    #: default path's forecast, and what subclasses add (their adaptation and statistics).
    _chain_attrs: Tuple[str, ...] = ("forecast",)

    #: The budget's settings: the privacy engine's (``kernel.privacy``, a
    #: :class:`~pyro_dp.kernels.privacy_engine.PrivacyEngine`), read and written through the kernel:
    #: the total ε and δ over all chains (``None``: no budget), the chains sharing it, the accountant,
    #: the δ at which diagnostics report ε, the neighbouring relation, the noise-free test mode,
    #: and whether the kernel adopted the default budget.
    epsilon = EngineSetting()
    delta = EngineSetting()
    num_chains = EngineSetting()
    accountant = EngineSetting()
    reference_delta = EngineSetting()
    relation = EngineSetting()
    non_private = EngineSetting()
    default_budget = EngineSetting()

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
        jit_compile: Optional[bool] = None,
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
        #: the process identity and shared release counters, before any worker is forked
        self.processes = ChainProcesses(self)
        #: the privacy engine: budget, ledgers, plan, stop, ε
        self.privacy = PrivacyEngine(epsilon=epsilon, delta=delta, num_chains=num_chains, accountant=accountant,
                                     reference_delta=reference_delta, non_private=non_private, relation=relation,
                                     kernel_id=self.processes.id)
        #: planned iterations per chain (``None``: the default path fixes it at the first set-up)
        self.num_iterations = None if num_iterations is None else check_positive("num_iterations", num_iterations,
                                                                                 integer=True)
        #: whether num_chains was given (else it is read from ``MCMC`` at the first set-up)
        self.num_chains_given = num_chains is not None
        #: where :attr:`num_iterations` came from: ``"given"``, ``"MCMC"`` or ``"assumed"``
        self.run_length_source = None if num_iterations is None else "given"
        #: the releasing warmup iterations of a default path that idles the rest (``None``: all release)
        self.burn_in: Optional[int] = None
        #: ``True``/``False`` as given; ``None``: decided from the run's predicted cost (:mod:`~pyro_dp.kernels.auto_compile`)
        self.jit_compile, self.jit_options = auto_compile.check_settings(jit_compile, jit_options)
        #: what ``jit_compile=None`` predicted and chose (a ``CompileDecision``), at the first set-up
        self.compile_decision = None
        self._jit_cache: dict = {}  # compiled graphs, shared by this kernel's chains in this process
        #: arguments named public (:mod:`pyro_dp.arguments`)
        self.public = tuple(public or ())
        #: torch.distributed ranks: refused by kernels that cannot shard
        self.ranks = Ranks(distributed, process_group, type(self).__name__, type(self).supports_distributed)
        self.distributed = self.ranks.distributed
        self.seed = int(seed) if seed is not None else secrets.randbits(63)  # the data-free streams only
        self.secure_mode = bool(secure_mode)
        if noise_seed is not None:  # the secret stream's test option: anyone who knows it can remove the noise
            if self.secure_mode:
                raise ValueError("secure_mode=True draws the noise seed from the OS: do not pass noise_seed")
            warn_user("noise_seed makes the privacy noise and batch selection reproducible: anyone who knows it "
                      "can replay the noise and remove it from the released values. Use it for tests only.",
                      ReproducibleNoiseWarning)
        self.noise_seed = None if noise_seed is None else int(noise_seed)
        if init is not None and not (callable(getattr(init, "run", None)) and callable(getattr(init, "events", None))):
            raise TypeError(f"init must be a private initialiser such as DPGradientInit, got {init!r}")
        if init is not None and getattr(init, "noise_multiplier", None) == 0 and not self.non_private:
            raise ValueError("init with noise_multiplier=0 is only allowed with non_private=True")
        #: the optional private initialisation: its releases are in the chain's ledger, the plan and calibration
        self.init = init
        self.nonprivate_diagnostics = bool(nonprivate_diagnostics)
        self.transforms = None  # set by setup(); MCMC reads it after the run
        self.lik: Optional[PrivateLikelihood] = None  # set by setup()
        self._user_initial_params: Optional[Dict[str, torch.Tensor]] = None
        self._initial_params: Optional[Dict[str, torch.Tensor]] = None
        self._chain_index = 0
        #: set-ups so far (what is said once, is said at the first)
        self.num_setups = 0
        self.pending_checkpoint: Optional[dict] = None  # a load_state_dict() waiting for setup()
        self.last_checkpoint: Optional[dict] = None  # state_dict() of the last chain cleanup() ended
        self.chain = ChainRecord()
        #: what the default path forecast for the chains (kept across chains: the last chain's)
        self.forecast = RunForecast()
        self._state = None
        self._returned = None

    # ------------------------------------------------------------------ the algorithm (subclass API)
    def _init_state(self, z: torch.Tensor):
        """Algorithm state at unconstrained ``z``; must not touch data."""
        raise NotImplementedError

    def _step(self, state) -> Tuple[object, object]:
        """One iteration: ``(new_state, info)``; ``info.events`` lists what was released."""
        raise NotImplementedError

    def _state_z(self, state) -> torch.Tensor:
        return state.z

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

    def _rows_per_iteration(self) -> Tuple[Optional[str], float, float]:
        """``(cost kind, rows whose log-likelihood, rows whose gradient one iteration evaluates)``
        for :mod:`~pyro_dp.kernels.auto_compile` (public: from :math:`N` and settings). Default: a
        penalty-type test over every row; kernels that read otherwise override it."""
        return "penalty", float(self.lik.num_rows), 0.0

    def _ratio_noise_multiplier(self) -> Optional[float]:
        """The noise multiplier of the kernel's ratio release, for the default path's ratio
        clip (:meth:`~pyro_dp.default_path.tuning.DPAutoTune.ratio_quantile`); ``None``: no ratio
        release whose clip is tuned (kernels with a default path override it)."""
        return None

    def default_path_noises(self) -> Tuple[float, float]:
        """For :func:`~pyro_dp.default_path.driver.default_path_noise`, after the tuner is
        configured: ``(the release's noise multiplier, the ratio noise the tuner's clip quantile
        balances)``, both the ratio's (DPSGLD: its gradient's)."""
        self._calibrate()
        nm = float(self._ratio_noise_multiplier())
        return nm, nm

    def _nonprivate(self) -> dict:
        """Statistics of the raw data for ``diagnostics()`` (keys get :data:`NONPRIVATE_PREFIX`)."""
        out = {"clipped fraction": self.chain.clipped_sum / max(self.chain.clipped_count, 1)}
        if self.init is not None:
            out["init clipped fraction"] = self.chain.init_clipped_fraction
        return out

    # ------------------------------------------------------------------ helpers for subclasses
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

    def _calibrate_scale(self, events_for_scale, **kwargs) -> float:
        """:func:`~pyro_dp.accounting.calibrate` for this kernel's budget and run length, with the
        private initialisation's releases added to the fixed (once per chain) events."""
        return self.privacy.calibrate(events_for_scale, num_iterations=self.num_iterations,
                                      fixed=self._init_events(), **kwargs)

    def _init_events(self) -> list:
        """Releases of the private initialisation (once per chain; ``[]`` without one)."""
        return [] if self.init is None else list(self.init.events())

    # ------------------------------------------------------------------ the privacy surface
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

    @property
    def ledger(self) -> PrivacyLedger:
        """Every release of this kernel object: every chain of every ``mcmc.run``, in this
        process and in worker processes (merged back with their ``diagnostics()``)."""
        return self.privacy.ledger

    def chain_ledgers(self) -> list:
        """The :class:`~pyro_dp.kernels.chain_ledger.ChainLedger` of every chain of this kernel
        object, in the order :attr:`ledger` merges them: the finished chains as they were filed
        (this process and worker processes), then the chain in progress (empty between runs)."""
        return self.privacy.chain_ledgers()

    def require_complete(self) -> None:
        """Raise ``RuntimeError`` when this object's ledger may miss releases (an ε from it would
        be a lower bound of what was spent: a worker's ledger never came back)."""
        self.processes.require_complete(self.privacy)

    def get_epsilon(self, delta: Optional[float] = None, accountant: Optional[str] = None) -> float:
        r"""Total ε spent so far by this kernel object, at ``delta``: every chain of every run,
        also chains run in ``MCMC`` worker processes (their ledgers come back with their
        diagnostics). It is stated under the kernel's neighbouring relation :attr:`relation`
        (``self.ledger.relation``; ``diagnostics()["relation"]``)."""
        self.require_complete()
        if not self.privacy.ledger and self.num_setups > 0 and self.chain.iteration > 0:
            raise RuntimeError("this kernel object ran iterations but recorded no release: please report")
        return self.privacy.get_epsilon(delta, accountant)

    # ------------------------------------------------------------------ lifecycle
    @property
    def initial_params(self):
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params):
        self._user_initial_params = None if params is None else {k: v.detach() for k, v in params.items()}
        self._initial_params = self._user_initial_params

    def _chain_seed(self, purpose: int, base: Optional[int] = None) -> int:
        words = [self.seed if base is None else base, self._chain_index, purpose]  # = kernel_chain_seed's
        if os.getpid() != self.processes.owner_pid:  # a worker process: make streams independent
            words.append(secrets.randbits(63))
        return derive_seed(*words)

    def _reset_chain_stats(self) -> None:
        """A fresh chain: its record, no state, the engine's chain flags reset (kernels with
        statistics of their own reset them too, and call this)."""
        self.chain = ChainRecord()
        self.privacy.reset_chain()  # reads data until stopped; the progress bar's ε starts afresh
        self._state = None
        self._returned = None  # the last sample()'s output (_returned_unchanged)

    def setup(self, warmup_steps, *args, **kwargs):
        """Build the likelihood and the initial state. Data-free: costs no privacy."""
        if self.distributed:  # every rank: the same data-free seed (rank 0's), before any draw
            self.seed = self.ranks.join(self.seed, self.processes.chain_id())
        self.num_setups += 1
        if self.chain.iteration > 0:  # a new run without cleanup(): file the old chain
            self.cleanup()
        self.privacy.begin_chain(self.processes.slot())  # a fresh chain id, also in each worker process
        self._reset_chain_stats()  # a chain starts here (the object is fully built by now)
        self.chain.warmup_steps = int(warmup_steps)
        self.lik = PrivateLikelihood(
            self.model,
            args,
            kwargs,
            data_plate=self.data_plate,
            temperature=self.temperature,
            transforms=self._user_transforms,
            init_strategy=self.init_strategy,
            seed=self._chain_seed(PURPOSE_INIT),
            jit_compile=bool(self.jit_compile),  # None (auto): attached by auto_compile below if it pays
            jit_options=self.jit_options,
            jit_cache=self._jit_cache,
            public=self.public,
        )
        self.transforms = self.lik.transforms
        take_declared_subsample(self, first_setup=self.num_setups == 1)  # the plate's subsample_size: used or refused
        self.lik.likelihood_mask  # the likelihood's coordinates, determined now (data-free; cached per kernel object)
        resolve_run_length(self)  # the run length a budget funds
        auto_compile.auto_compile(self, self._rows_per_iteration, self._jit_cache)  # jit_compile=None: eager or compiled from the run's predicted cost
        default_path().configure(self)  # the default path's tuner learns the budget first ...
        self._calibrate()  # noise from the budget when none was given (data-free)
        default_path().calibrated(self, self._ratio_noise_multiplier())  # ... and the ratio noise after
        if self.epsilon is None:  # the plan (data-free)
            self.privacy.plan = None
        else:
            fixed, per_iteration = self.planned_events()
            self.privacy.make_plan(fixed, per_iteration, num_iterations=self.num_iterations)
        self.privacy.check_supports(sum(self.planned_events(), []), type(self).__name__)  # before any data access
        self.processes.register_chain(self.privacy)
        refusal = self.processes.refusal(self.privacy)  # stops the chain below, before any data is read
        self._rng = torch.Generator(device=self.lik.device)
        self._rng.manual_seed(self._chain_seed(PURPOSE_ALGO))
        noise_seed = None if self.noise_seed is None else self._chain_seed(PURPOSE_NOISE, base=self.noise_seed)
        self._noise = NoiseSource(seed=noise_seed, secure_mode=self.secure_mode, device=self.lik.device, warn=False)
        if self.ranks.shards is not None:  # the global N (public) and rank 0's noise inside every release
            self.ranks.share(self._noise, self.lik)
        if self.num_setups == 1:  # with the run-length notice: delta above 1/N, N over all ranks
            self.privacy.check_delta(self.lik.global_num_rows)
        z0 = _initial_point(self.lik, self._user_initial_params)
        if self.ranks.shards is not None:
            self.ranks.check_agree(z0, self.lik)
        self._initial_params = self.lik.unravel(z0)
        self._state = self._init_state(z0)
        self.chain.init_done = False
        if refusal is not None:
            self.privacy.stop(refusal, iteration=self.chain.iteration)
        pending = checkpoint.resume_pending(self)  # a load_state_dict() before setup(): continue its chain
        if pending is not None:
            self._restore(pending)

    def sample(self, params):
        if self.processes.chain_id() is None:
            return self._sample(params)
        try:
            return self._sample(params)
        except Exception as e:  # in an MCMC worker: the chain's releases must come back
            raise ChainFailedError(f"{type(e).__name__}: {e}", self.privacy.live.copy()) from e

    def _sample(self, params):
        if self._state is None:
            raise RuntimeError("call setup() before sample()")
        chain = self.chain
        if not _returned_unchanged(self._returned, params, self._state_z(self._state)):
            # compared in the model's own coordinates, where what sample() returned is exact
            # (a preconditioned chain's u -> z -> u is not: pyro_dp.preconditioning)
            z = self.lik.flatten(params, coordinates=False).detach()
            if not torch.equal(z, self.lik.to_unconstrained(self._state_z(self._state))):
                self._state = self._init_state(self.lik.from_unconstrained(z))  # params were changed from outside
        pending_init = self.init is not None and not chain.init_done
        idle = chain.idle_left > 0 and chain.iteration == 0  # before the chain's first read (data-free)
        chain.idle_left -= int(idle)
        declared = None if idle else self._declare(pending_init)  # the plan check: None when no more data is read
        if declared is None:
            self.privacy.end_iteration()  # an iteration that released nothing (the ε curve stays flat)
            return {k: v.clone() for k, v in self.lik.unravel(self._state_z(self._state)).items()}
        if pending_init:
            self._run_private_start()  # the private init's releases, written as they are reported
        # the ledger from what the step's mechanisms drew (the shared worker counters count each; none if
        # it raises: it publishes nothing); its report (info.events) checked against that, and both
        # against what it declared
        with self.privacy.step(declared, on_release=self._count_release, owner=type(self).__name__) as reported:
            self._state, info = self._step(self._state)
            reported.extend(info.events)
            reported.label = getattr(info, "label", "")  # a step's release of another purpose (DPNoiseAware's)
        self.privacy.end_iteration()  # where this iteration's releases end (pyro_dp.privacy_report's curve)
        chain.iteration += 1
        if chain.iteration % HEAP_TRIM_EVERY == 0:  # bounded memory over long runs (pyro_dp.heap): a fixed,
            release_free_heap()  # data-free schedule
        if chain.iteration > chain.warmup_steps and len(chain.draws) < MAX_CHECKED_DRAWS:
            chain.draws.append(self._state_z(self._state))
        chain.accepted += int(bool(info.accepted))
        chain.clipped_sum += float(info.clipped_fraction)
        chain.clipped_count += 1
        z = self._state_z(self._state)
        out = self.lik.unravel(z)
        check_public(out, "the parameters DPKernel.sample returns")  # issue 58: no private state leaves a step
        self._returned = (out, tuple(out.values()), z)
        return out

    def _declare(self, pending_init: bool) -> Optional[Counter]:
        """Before an iteration: the releases it may make (the private init's when it is
        pending, and :meth:`_step_events`), checked against the plan by the engine; ``None``
        when the chain has stopped reading data (now, with the budget warning, or earlier)."""
        if self.privacy.stopped:
            return None
        events = (self._init_events() if pending_init else []) + self._step_events(self._state)
        return self.privacy.declare(events, iteration=self.chain.iteration)

    def _count_release(self) -> None:
        self.processes.count_release(self.privacy)

    def _run_private_start(self) -> None:
        """At a chain's first iteration (declared with it): the private initialisation reads the
        data through its own mechanism, each release written into the ledger as the mechanism drew
        it, when the initialiser reports it (``record(event, label)``: the label; an exception
        part-way loses none) under the initialiser's label; a
        :class:`~pyro_dp.default_path.tuning.DPAutoTune` result is then taken by the default
        path's hook (post-processing of the tuning releases, :mod:`~pyro_dp.kernels.path_hook`),
        and the chain starts there."""
        label = getattr(self.init, "label", f"init:{type(self.init).__name__}")
        owner = f"{type(self).__name__}'s private start ({type(self.init).__name__})"
        with self.privacy.private_start(label, on_release=self._count_release, owner=owner) as record:
            z_init, _, frac = self.init.run(self.lik, self._state_z(self._state), self._noise, self.relation,
                                            record=record)
        self.chain.init_done = True
        self.chain.init_clipped_fraction = frac
        self.chain.preconditioner = self.lik.preconditioner  # a DPAutoTune(whiten=True) sets it (post-processing)
        default_path().take_tuning(self, first_chain=self._chain_index == 0,  # a DPAutoTune's settings (path_hook)
                                   ratio_noise_multiplier=self._ratio_noise_multiplier())
        self._state = self._init_state(z_init)

    def cleanup(self):
        """End of a chain: file its ledger with the finished chains (idempotent). The chain's
        last checkpoint stays available from :meth:`state_dict` (to resume it after
        ``mcmc.run``)."""
        if self._state is not None and self.lik is not None and self.privacy.live:
            self.last_checkpoint = self.state_dict()
        if self.privacy.end_chain(self.processes.slot()):
            self._chain_index += 1
        self._reset_chain_stats()

    def diagnostics(self) -> dict:
        """Per-chain diagnostics of the chain **in progress**: :func:`~pyro_dp.kernels.diagnostics.chain_diagnostics`
        says what each key means (this chain's ε, its ledger, the checks of its own draws)."""
        return diagnostics.chain_diagnostics(self, self._nonprivate() if self.nonprivate_diagnostics else None)

    def logging(self):
        """Pyro's progress-bar postfix: acceptance rate and ε so far."""
        return {"acc. rate": f"{self.chain.acceptance_rate:.3f}", "eps": self.privacy.logged_epsilon(self.chain.iteration)}

    def state_dict(self) -> dict:
        """A checkpoint of this kernel object's chain in progress and its ledger:
        :func:`~pyro_dp.kernels.checkpoint.save` says what it holds. **A checkpoint is private
        data** (the chain state caches per-example log-likelihoods): store it like the raw data.

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
        if self._state is None and self.last_checkpoint is not None:
            return self.last_checkpoint  # the chain MCMC just finished (cleanup() ended it)
        if self.lik is None or self._state is None:
            raise RuntimeError("call setup() before state_dict(): there is no chain to save")
        values = {a: getattr(self, a, None) for a in ("_state", "_chain_index") + tuple(self._chain_attrs)}
        return checkpoint.save(self, values, self._rng, self._noise)

    def load_state_dict(self, state: dict) -> None:
        """Continue the chain and the ledger of :meth:`state_dict` on a new kernel object built
        with the same arguments (:func:`~pyro_dp.kernels.checkpoint.load` says what is refused).
        Call it before ``setup()`` (e.g. before ``mcmc.run``: the next ``setup`` restores the chain
        instead of starting a new one, and ``MCMC`` continues it from where it stopped, warmup
        length included) or after ``setup()`` (restored at once)."""
        checkpoint.load(self, state)
        if self.lik is None:
            self.pending_checkpoint = state
        else:
            self._restore(state)

    def _restore(self, state: dict) -> None:
        for name, value in checkpoint.restore(self, state, self._rng, self._noise).items():
            setattr(self, name, value)
        self._initial_params = self.lik.unravel(self._state_z(self._state))

    # ------------------------------------------------------------------ pickling (into workers, copies)
    # torch.Generator cannot be pickled; MCMC(num_chains>1, mp_context="spawn") pickles kernels.
    def __getstate__(self):
        spawning = multiprocessing.context.get_spawning_popen() is not None  # pickled into a new worker
        state = self.__dict__.copy()
        state["privacy"] = self.processes.pickled_engine(self.privacy, spawning)
        if spawning:
            # pickled into a new worker process (MCMC with mp_context="spawn"): the worker's setup()
            # rebuilds the likelihood and the chain state, so the data and this process's private
            # caches (per-example log-likelihoods) are not shipped
            for key in ("lik", "_state", "_initial_params", "_noise", "_rng", "last_checkpoint"):
                state[key] = None
        rng = state.pop("_rng", None)
        if rng is not None:
            state["_rng_state"] = (str(rng.device), rng.get_state())
        state["_returned"] = None  # identities do not survive pickling
        state["_jit_cache"] = {}  # compiled graphs stay in their process (rebuilt lazily)
        return state

    def __setstate__(self, state):
        rng_state = state.pop("_rng_state", None)
        self.__dict__.update(state)
        if rng_state is not None:
            self._rng = torch.Generator(device=rng_state[0])
            self._rng.set_state(rng_state[1])
        self.processes.adopt(self, self.privacy)
