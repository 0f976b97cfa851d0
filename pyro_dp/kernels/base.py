r"""The kernel base: Pyro's ``MCMCKernel`` lifecycle shared by every DP kernel — set-up without
touching data, ``sample``, ``diagnostics``, ``logging``, ``cleanup``, ``initial_params``. It
reads top to bottom; every other concern is a part the kernel holds or a module of its own:

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
``kernel.randomness``                        the seeds, the chain index and the chain's
(:mod:`~pyro_dp.kernels.seeds`)              data-free ``rng`` and secret ``noise``
``kernel.likelihood_settings``               the model and how each chain's likelihood is
(:mod:`~pyro_dp.kernels.likelihood_settings`)  built (temperature, plate, transforms, jit)
``kernel.start``                             the user's ``initial_params`` and the chain's
(:mod:`~pyro_dp.kernels.chain_start`)        start
``kernel.checkpoints``                       ``state_dict`` / ``load_state_dict``: a pending
(:mod:`~pyro_dp.kernels.checkpoint`)         and the last chain's checkpoint
:mod:`~pyro_dp.kernels.diagnostics`          ``diagnostics()`` / ``logging()``
:mod:`~pyro_dp.kernels.runner`               the run length a budget funds (from ``MCMC``)
:mod:`~pyro_dp.kernels.path_hook`            the default path's hook: private tuning of the
                                             settings left out (:mod:`pyro_dp.default_path`,
                                             a layer above the kernels, drives it)
:mod:`~pyro_dp.kernels.auto_compile`         ``jit_compile=None``: eager or compiled from
                                             the run's predicted cost
===========================================  ===============================================

The kernel holds these parts and calls them; none of them is a base class, and each keeps its
own state (the ``kernel.X`` column) and pickles it by its own rule. The class below is the
lifecycle, the subclass API, and the few names a user, a test or a step reads on a kernel,
forwarded to the part that holds them: the budget's to ``kernel.privacy``
(:class:`~pyro_dp.kernels.privacy_engine.EngineSetting`), ``seed``, ``_rng``, ``_noise``,
``model``, ``temperature``, ``jit_compile``, ``initial_params`` to theirs
(:class:`~pyro_dp.kernels.parts.PartAttribute`). The privacy surface the report, the ArviZ
export, the checkpoint and the audit read is the engine's (``kernel.privacy.chain_ledgers()``,
``.require_complete()``); ``kernel.ledger`` and ``kernel.get_epsilon()`` forward to it.

Decision (issue 63): a concern became a part where it has state of its own that changes, is
checked and is pickled together (docs/architecture.md, "The kernel base"); the run length and
the default path's per-kernel choices (``whiten_by_default``, ...) stay plain attributes
because the kernels and :mod:`pyro_dp.default_path` read and set them by those names.

Algorithms live in pure-ish ``init``/``step`` functions (one file each); a subclass of
:class:`DPKernel` declares its releases once (:meth:`DPKernel.releases`, a
:class:`~pyro_dp.kernels.releases.ReleasePlan`), sets the noise a budget funds (``_calibrate``,
with the pure functions of :mod:`~pyro_dp.kernels.releases`), builds its state (``_init_state``)
and calls its step (``_step``).

How this fits :class:`pyro.infer.MCMC` (see ``shared/FACTS.md``):

* ``setup()`` may run more than once (``MCMC._set_transforms`` calls it again in the main
  process) — it evaluates no likelihood and records nothing.
* Initial values are drawn from the prior (``init_strategy``) or taken from the user's
  ``initial_params``; Pyro's data-dependent search for a valid starting point never runs.
* Every release is recorded in the chain's ledger by the mechanism that draws its noise (issue
  58: :mod:`pyro_dp.mechanisms.recorder`; the step's ``info.events`` is a cross-check) and
  counted by the budget, also for chains run in worker processes
  (:mod:`~pyro_dp.kernels.privacy_engine`, :mod:`~pyro_dp.kernels.workers`).
* **Randomness** (``kernel.randomness``, :class:`~pyro_dp.kernels.seeds.ChainRandomness`). ``seed`` seeds only the data-free streams (proposals, momenta, accept
  uniforms, prior draws). Privacy noise and batch selection come from a
  :class:`~pyro_dp.mechanisms.NoiseSource` seeded from OS entropy, per chain; ``noise_seed``
  makes it reproducible for tests, with a :class:`~pyro_dp.mechanisms.ReproducibleNoiseWarning`.
  A kernel running in a process other than the one that built it mixes fresh OS entropy
  into its data-free seeds too, so parallel chains are independent. A copy of a kernel
  (``copy.deepcopy``, pickle) never carries the secret stream: its ``NoiseSource`` is
  reseeded from OS entropy (only the ``noise_seed`` test stream is copied as it is).
"""
from __future__ import annotations

import multiprocessing
from collections import Counter
from typing import Optional, Tuple

import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from ..accounting import DEFAULT_ACCOUNTANT
from ..checks import SamplingWarning  # noqa: F401 (re-exported)
from ..heap import HEAP_TRIM_EVERY, release_free_heap
from ..likelihood import PrivateLikelihood
from ..mechanisms import PrivacyLedger
from ..private import check_public
from . import auto_compile, diagnostics
from .checkpoint import ChainCheckpoints
from .chain_record import ChainRecord, RunForecast
from .chain_start import ChainStart
from .declared_batch import take_declared_subsample
from .diagnostics import MAX_CHECKED_DRAWS, NONPRIVATE_PREFIX
from .likelihood_settings import LikelihoodSettings
from .parts import PartAttribute
from .seeds import PURPOSE_INIT, ChainRandomness, kernel_chain_seed  # noqa: F401 (re-exported)
from .plan import counts as _counts  # noqa: F401  (re-exported: tests import it from here)
from .path_hook import check_inference, check_initialiser, default_path
from .runner import DEFAULT_ITERATIONS, resolve_run_length
from .privacy_engine import (DEFAULT_DELTA, DEFAULT_EPSILON, BudgetExhaustedWarning, ChainLedger, EngineSetting,
                             PrivacyEngine, PrivacyNotice, check_positive)
from .workers import WORKER_SLOTS, ChainFailedError, ChainProcesses, Ranks, WorkerReleases  # noqa: F401 (re-exported)

__all__ = ["DPKernel", "BudgetExhaustedWarning", "SamplingWarning", "PrivacyNotice", "ChainLedger", "ChainFailedError",
           "WorkerReleases", "check_positive", "NONPRIVATE_PREFIX", "DEFAULT_EPSILON", "DEFAULT_DELTA", "DEFAULT_ITERATIONS"]



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
    :param str inference: ``"auto"`` (default): on the default path of ``DPPenalty`` and ``DPHMC``
        (every clip, step and noise left out), the default path chooses, data-free, before any
        release, between the kernel's own chain and the **one-release mode** (an approximation:
        :class:`~pyro_dp.default_path.noise_aware.OneReleaseMode`, docs/choosing.md) from the
        budget and the number of rows; ``"iterative"``: always the kernel's own chain;
        ``"one_release"``: always the one-release mode (refused where the default path does not
        own the settings). ``kernel.one_release`` is the attached part (``None``: none).
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

    #: The chains' seeds and streams: the randomness part's (``kernel.randomness``, a
    #: :class:`~pyro_dp.kernels.seeds.ChainRandomness`), read and written through the kernel: the
    #: base seeds, the data-free generator and the secret ``NoiseSource`` of the chain in progress
    #: (what every step draws from), which chain of this object it is, and its seeds by purpose.
    seed = PartAttribute("randomness")
    noise_seed = PartAttribute("randomness")
    _rng = PartAttribute("randomness", "rng")
    _noise = PartAttribute("randomness", "noise")
    _chain_index = PartAttribute("randomness", "chain")

    #: The model and its likelihood's settings: the likelihood settings' (``kernel.likelihood_settings``,
    #: a :class:`~pyro_dp.kernels.likelihood_settings.LikelihoodSettings`), read and written through the kernel.
    model = PartAttribute("likelihood_settings")
    temperature = PartAttribute("likelihood_settings")
    jit_compile = PartAttribute("likelihood_settings")

    #: Where the chains start (``kernel.start``, a :class:`~pyro_dp.kernels.chain_start.ChainStart`):
    #: the user's values before ``setup()``, the chain's after (what Pyro's ``MCMC`` reads and writes).
    initial_params = PartAttribute("start")

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
        inference: str = "auto",
    ):
        #: the model and how each chain's likelihood is built from it (checked here, data-free)
        self.likelihood_settings = LikelihoodSettings(model, temperature=temperature, data_plate=data_plate,
                                                      transforms=transforms, init_strategy=init_strategy, public=public,
                                                      jit_compile=jit_compile, jit_options=jit_options)
        #: the process identity and shared release counters, before any worker is forked
        self.processes = ChainProcesses(self)
        #: the privacy engine: budget, ledgers, plan, stop, ε
        self.privacy = PrivacyEngine(epsilon=epsilon, delta=delta, num_chains=num_chains, accountant=accountant,
                                     reference_delta=reference_delta, non_private=non_private, relation=relation,
                                     kernel_id=self.processes.id, supported_relations=type(self).supported_relations,
                                     owner=type(self).__name__)
        self.privacy.workers = self.processes  # counts worker chains' releases, knows which never came back
        #: planned iterations per chain (``None``: the default path fixes it at the first set-up)
        self.num_iterations = None if num_iterations is None else check_positive("num_iterations", num_iterations,
                                                                                 integer=True)
        #: whether num_chains was given (else it is read from ``MCMC`` at the first set-up)
        self.num_chains_given = num_chains is not None
        #: where :attr:`num_iterations` came from: ``"given"``, ``"MCMC"`` or ``"assumed"``
        self.run_length_source = None if num_iterations is None else "given"
        #: the releasing warmup iterations of a default path that idles the rest (``None``: all release)
        self.burn_in: Optional[int] = None
        #: what ``jit_compile=None`` predicted and chose (a ``CompileDecision``), at the first set-up
        self.compile_decision = None
        self._jit_cache: dict = {}  # compiled graphs, shared by this kernel's chains in this process
        #: torch.distributed ranks: refused by kernels that cannot shard
        self.ranks = Ranks(distributed, process_group, type(self).__name__, type(self).supports_distributed)
        self.distributed = self.ranks.distributed
        #: the seeds, the chain index and the streams of the chain in progress
        self.randomness = ChainRandomness(seed, noise_seed, secure_mode)
        #: the optional private initialisation: its releases are in the chain's ledger, the plan and calibration
        self.init = check_initialiser(init, self.non_private)
        self.inference = check_inference(inference)  # the default path's choice of mode (issue 62), at set-up
        self.nonprivate_diagnostics = bool(nonprivate_diagnostics)
        self.transforms = None  # set by setup(); MCMC reads it after the run
        self.lik: Optional[PrivateLikelihood] = None  # set by setup()
        #: the user's initial_params and the chain's start (kernel.initial_params)
        self.start = ChainStart()
        #: set-ups so far (what is said once, is said at the first)
        self.num_setups = 0
        #: a checkpoint loaded before setup(), and the last chain's (state_dict() between runs)
        self.checkpoints = ChainCheckpoints()
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
    def releases(self, state=None):
        """The one declaration of this kernel's releases (data-free): a
        :class:`~pyro_dp.kernels.releases.ReleasePlan` at its noise, from which the plan, the budget
        check before each step, the default path's ratio noise and ``jit_compile=None``'s cost are
        derived (:mod:`pyro_dp.kernels.releases`). With ``state``: its ``step`` is the most the next
        step from ``state`` may release."""
        raise NotImplementedError

    def _calibrate(self) -> None:
        """At set-up, after the default path's tuner learnt the budget: set the noise the user
        left to the budget, with the pure calibration of :mod:`pyro_dp.kernels.releases` (data-free)."""

    def _nonprivate(self) -> dict:
        """Statistics of the raw data for ``diagnostics()`` (keys get :data:`NONPRIVATE_PREFIX`)."""
        return self.chain.nonprivate(with_init=self.init is not None)

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
        plan = self.releases()
        return ([] if self.init is None else list(self.init.events())) + list(plan.once), list(plan.per_iteration)

    @property
    def ledger(self) -> PrivacyLedger:
        """Every release of this kernel object: every chain of every ``mcmc.run``, in this
        process and in worker processes (merged back with their ``diagnostics()``)."""
        return self.privacy.ledger

    def get_epsilon(self, delta: Optional[float] = None, accountant: Optional[str] = None) -> float:
        r"""Total ε spent so far by this kernel object, at ``delta``: every chain of every run,
        also chains run in ``MCMC`` worker processes (their ledgers come back with their
        diagnostics). It is stated under the kernel's neighbouring relation :attr:`relation`
        (``self.ledger.relation``; ``diagnostics()["relation"]``)."""
        self.privacy.require_complete()
        if not self.privacy.ledger and self.num_setups > 0 and self.chain.iteration > 0:
            raise RuntimeError("this kernel object ran iterations but recorded no release: please report")
        return self.privacy.get_epsilon(delta, accountant)

    # ------------------------------------------------------------------ lifecycle
    def _reset_chain_stats(self) -> None:
        """A fresh chain: its record, no state, the engine's chain flags reset (kernels with
        statistics of their own reset them too, and call this)."""
        self.chain = ChainRecord()
        self.privacy.reset_chain()  # reads data until stopped; the progress bar's ε starts afresh
        self._state = None
        self._returned = None  # the last sample()'s output (_returned_unchanged)

    def setup(self, warmup_steps, *args, **kwargs):
        """Build the likelihood and the initial state. Data-free: costs no privacy."""
        self.seed = self.ranks.join(self.seed, self.processes.chain_id())  # every rank: rank 0's, before any draw
        self.num_setups += 1
        if self.chain.iteration > 0:  # a new run without cleanup(): file the old chain
            self.cleanup()
        self.privacy.begin_chain(self.processes.slot())  # a fresh chain id, also in each worker process
        self._reset_chain_stats()  # a chain starts here (the object is fully built by now)
        self.chain.warmup_steps = int(warmup_steps)
        # the chain's likelihood on these data (jit_compile=None: eager until auto_compile below attaches graphs)
        self.lik = self.likelihood_settings.build(args, kwargs, seed=self.randomness.chain_seed(PURPOSE_INIT),
                                                  jit_cache=self._jit_cache)
        self.transforms = self.lik.transforms
        take_declared_subsample(self, first_setup=self.num_setups == 1)  # the plate's subsample_size: used or refused
        self.lik.likelihood_mask  # the likelihood's coordinates, determined now (data-free; cached per kernel object)
        resolve_run_length(self)  # the run length a budget funds
        default_path().configure(self)  # the default path's tuner learns the budget first ...
        self._calibrate()  # noise from the budget when none was given (data-free)
        fixed, per_iteration = self.planned_events()  # the declaration (self.releases()), data-free
        plan = self.releases()
        auto_compile.auto_compile(self, lambda: plan.cost_of(self.lik.num_rows),
                                  self._jit_cache)  # jit_compile=None: eager or compiled from the run's predicted cost
        default_path().calibrated(self, plan.ratio_noise_multiplier)  # ... and the ratio noise after
        if self.epsilon is None:  # the plan (data-free)
            self.privacy.plan = None
        else:
            self.privacy.make_plan(fixed, per_iteration, num_iterations=self.num_iterations)
        self.privacy.check_supports(fixed + per_iteration, type(self).__name__)  # before any data access
        self.processes.register_chain(self.privacy)
        refusal = self.processes.refusal(self.privacy)  # stops the chain below, before any data is read
        self.randomness.start_chain(self.lik.device)  # the chain's data-free and secret streams
        self.ranks.share(self._noise, self.lik)  # sharded: the global N (public), rank 0's noise in every release
        if self.num_setups == 1:  # with the run-length notice: delta above 1/N, N over all ranks
            self.privacy.check_delta(self.lik.global_num_rows)
        z0 = self.start.begin(self.lik)  # the user's initial_params or the init strategy's draw (data-free)
        self.ranks.check_agree(z0, self.lik)  # sharded: every rank starts there
        self._state = self._init_state(z0)
        self.chain.init_done = False
        if refusal is not None:
            self.privacy.stop(refusal, iteration=self.chain.iteration)
        pending = self.checkpoints.take_pending(self)  # a load_state_dict() before setup(): continue its chain
        if pending is not None:
            self._restore(pending)

    def sample(self, params):
        with self.processes.failing_chain(self.privacy):  # in an MCMC worker: the chain's releases come back
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
            with self.privacy.step(declared, on_release=self.privacy.count_release,
                                   owner=type(self).__name__) as reported:
                self._state, info = self._step(self._state)
                reported.extend(info.events)
                reported.label = getattr(info, "label", "")  # a step's release of another purpose (DPNoiseAware's)
            self.privacy.end_iteration()  # where this iteration's releases end (pyro_dp.privacy_report's curve)
            z = self._state_z(self._state)
            chain.count_step(info, z, keep_draws=MAX_CHECKED_DRAWS)  # the end-of-chain checks' draws after warmup
            if chain.iteration % HEAP_TRIM_EVERY == 0:  # bounded memory over long runs (pyro_dp.heap): a fixed,
                release_free_heap()  # data-free schedule
            out = self.lik.unravel(z)
            check_public(out, "the parameters DPKernel.sample returns")  # issue 58: no private state leaves a step
            self._returned = (out, tuple(out.values()), z)
            return out

    def _declare(self, pending_init: bool) -> Optional[Counter]:
        """Before an iteration: the releases it may make (the private init's when it is
        pending, and :meth:`releases` at the state), checked against the plan by the engine; ``None``
        when the chain has stopped reading data (now, with the budget warning, or earlier)."""
        if self.privacy.stopped:
            return None
        events = (list(self.init.events()) if pending_init else []) + list(self.releases(self._state).step_events)
        return self.privacy.declare(events, iteration=self.chain.iteration)

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
        with self.privacy.private_start(label, on_release=self.privacy.count_release, owner=owner) as record:
            z_init, _, frac = self.init.run(self.lik, self._state_z(self._state), self._noise, self.relation,
                                            record=record)
        self.chain.started(frac, self.lik.preconditioner)  # a DPAutoTune(whiten=True) sets the coordinates
        default_path().take_tuning(self, first_chain=self._chain_index == 0,  # a DPAutoTune's settings (path_hook)
                                   ratio_noise_multiplier=self.releases().ratio_noise_multiplier)
        self._state = self._init_state(z_init)

    def cleanup(self):
        """End of a chain: file its ledger with the finished chains (idempotent). The chain's
        last checkpoint stays available from :meth:`state_dict` (to resume it after
        ``mcmc.run``)."""
        if self._state is not None and self.lik is not None and self.privacy.live:
            self.checkpoints.last = self.state_dict()
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
        chain = ("_state", "_chain_index") + tuple(self._chain_attrs)  # the chain in progress, by name
        return self.checkpoints.save(self, None if self._state is None else {a: getattr(self, a, None) for a in chain})

    def load_state_dict(self, state: dict) -> None:
        """Continue the chain and the ledger of :meth:`state_dict` on a new kernel object built
        with the same arguments (:func:`~pyro_dp.kernels.checkpoint.load` says what is refused).
        Call it before ``setup()`` (e.g. before ``mcmc.run``: the next ``setup`` restores the chain
        instead of starting a new one, and ``MCMC`` continues it from where it stopped, warmup
        length included) or after ``setup()`` (restored at once)."""
        if self.checkpoints.load(self, state):  # set up already: restored at once (else by the next setup())
            self._restore(state)

    def _restore(self, state: dict) -> None:
        for name, value in self.checkpoints.restore(self, state).items():
            setattr(self, name, value)
        self.start.chain = self.lik.unravel(self._state_z(self._state))

    # ------------------------------------------------------------------ pickling (into workers, copies)
    # Each part pickles its own state (the randomness and checkpoint parts: what a copy or a worker
    # may carry; the privacy engine: ChainProcesses.pickled_engine); the kernel drops its caches.
    def __getstate__(self):
        spawning = multiprocessing.context.get_spawning_popen() is not None  # pickled into a new worker
        state = dict(self.__dict__, privacy=self.processes.pickled_engine(self.privacy, spawning),
                     _returned=None, _jit_cache={})  # identities do not survive pickling; graphs stay in their process
        if spawning:  # the worker's setup() rebuilds the likelihood and the chain state: no data, no private caches
            state.update(lik=None, _state=None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.processes.adopt(self, self.privacy)
