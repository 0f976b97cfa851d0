r"""The kernel base: Pyro's ``MCMCKernel`` lifecycle shared by every DP kernel — set-up without
touching data, ``sample``, ``diagnostics``, ``logging``, ``cleanup``, ``initial_params`` — and
the seeds of a chain. It reads top to bottom; every other concern is a module of its own:

========================================  ==================================================
:mod:`pyro_dp.kernels.privacy_engine`     ledgers, budget, plan, stop, ε: one object,
                                          ``kernel.privacy``; the kernel only *declares* an
                                          iteration's releases before it and *reports* them
                                          after it (:mod:`~pyro_dp.kernels.privacy_client`)
:mod:`pyro_dp.kernels.workers`            chains in ``MCMC`` worker processes (shared release
                                          counters, pickling, failed chains) and
                                          ``torch.distributed`` ranks
:mod:`pyro_dp.kernels.checkpoint`         ``state_dict`` / ``load_state_dict``
:mod:`pyro_dp.kernels.default_path`       the default budget's run length, private tuning hooks
:mod:`pyro_dp.kernels.auto_compile`       ``jit_compile=None``: eager or compiled from the
                                          run's predicted cost
========================================  ==================================================

Algorithms live in pure-ish ``init``/``step`` functions (one file each); a subclass of
:class:`DPKernel` says which events one iteration releases (``_per_iteration_events``,
``_step_events``), builds its state (``_init_state``) and calls its step (``_step``).

How this fits :class:`pyro.infer.MCMC` (see ``shared/FACTS.md``):

* ``setup()`` may run more than once (``MCMC._set_transforms`` calls it again in the main
  process) — it evaluates no likelihood and records nothing.
* Initial values are drawn from the prior (``init_strategy``) or taken from the user's
  ``initial_params``; Pyro's data-dependent search for a valid starting point never runs.
* Every release is recorded in the chain's ledger and counted by the budget, also for chains
  run in worker processes (:mod:`~pyro_dp.kernels.privacy_engine`, :mod:`~pyro_dp.kernels.workers`).
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
from typing import Dict, Optional, Tuple

import numpy as np
import torch
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from ..accounting import DEFAULT_ACCOUNTANT
from ..checks import SamplingWarning  # noqa: F401 (re-exported)
from ..heap import HEAP_TRIM_EVERY, release_free_heap
from ..likelihood import PrivateLikelihood
from ..mechanisms import NoiseSource
from .auto_compile import AutoCompile
from .checkpoint import Checkpointing
from .declared_batch import take_declared_subsample
from .diagnostics import MAX_CHECKED_DRAWS, NONPRIVATE_PREFIX, ChainReporting
from .default_path import DEFAULT_ITERATIONS, DefaultPath
from .plan import counts as _counts  # noqa: F401  (re-exported: tests import it from here)
from .privacy_client import PrivacyClient
from .privacy_engine import DEFAULT_DELTA, DEFAULT_EPSILON, BudgetExhaustedWarning, ChainLedger, PrivacyNotice, check_positive
from .workers import WORKER_SLOTS, ChainFailedError, WorkerBookkeeping, WorkerReleases  # noqa: F401 (re-exported)

__all__ = ["DPKernel", "BudgetExhaustedWarning", "SamplingWarning", "PrivacyNotice", "ChainLedger", "ChainFailedError",
           "WorkerReleases", "check_positive", "NONPRIVATE_PREFIX", "DEFAULT_EPSILON", "DEFAULT_DELTA", "DEFAULT_ITERATIONS",
           "kernel_chain_seed"]



def _derive_seed(*words: int) -> int:
    """Independent 63-bit seeds for (base seed, chain, purpose) via numpy's SeedSequence."""
    return int(np.random.SeedSequence([int(w) & (2**64 - 1) for w in words]).generate_state(1, np.uint64)[0] >> 1)


_PURPOSE_INIT, _PURPOSE_ALGO, _PURPOSE_NOISE = 1, 2, 3
_STREAMS = {"init": _PURPOSE_INIT, "algorithm": _PURPOSE_ALGO, "noise": _PURPOSE_NOISE}


def kernel_chain_seed(seed: int, chain: int, stream: str) -> int:
    """The seed of stream ``stream`` of chain ``chain`` (0, 1, ... in the order Pyro's runner
    runs them) of a kernel built with ``seed=seed`` (``"init"``: the start; ``"algorithm"``:
    proposals, momenta, accept uniforms) or ``noise_seed=seed`` (``"noise"``: releases and
    batches), in the process that built it (a worker process adds OS entropy). A runner outside
    the kernel uses it to run the kernel's own chains (e.g.
    :func:`~experiments.sgld_chains.run_sgld_chains`' ``noise_seeds``).

    >>> kernel_chain_seed(7, 0, "noise") == kernel_chain_seed(7, 0, "noise") != kernel_chain_seed(7, 1, "noise")
    True
    """
    if stream not in _STREAMS:
        raise ValueError(f"stream must be one of {sorted(_STREAMS)}, got {stream!r}")
    return _derive_seed(int(seed), int(chain), _STREAMS[stream])



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


class DPKernel(PrivacyClient, WorkerBookkeeping, Checkpointing, DefaultPath, AutoCompile, ChainReporting, MCMCKernel):
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

    #: Whether the kernel takes the data plate's ``subsample_size`` as its ``batch_size``
    #: (:mod:`pyro_dp.kernels.declared_batch`); other kernels refuse a plate that declares one.
    takes_plate_batch: bool = False

    #: Attributes that make up a chain in progress, saved by :meth:`state_dict` (subclasses
    #: extend it with their adaptation and statistics).
    _chain_attrs: Tuple[str, ...] = (
        "_state", "_iteration", "_num_accepted", "_clipped_sum", "_clipped_count", "_budget_exhausted",
        "_stop_cause_text", "_init_done", "_chain_index", "_warmup_steps", "_incomplete", "_draws",
        "_preconditioner", "_metric_sd", "_noise_limited", "_longer_helps", "_alternative_ess",
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
        self._init_workers()  # this object's identity and shared release counters, before any worker is forked
        self._init_privacy(epsilon=epsilon, delta=delta, num_iterations=num_iterations, num_chains=num_chains,
                           accountant=accountant, reference_delta=reference_delta, non_private=non_private,
                           relation=relation)
        self._init_compile(jit_compile, jit_options)  # checked now, not only if the kernel compiles
        #: arguments named public (:mod:`pyro_dp.arguments`)
        self.public = tuple(public or ())
        self._init_ranks(distributed, process_group)  # torch.distributed: refused by kernels that cannot shard
        self.seed = int(seed) if seed is not None else secrets.randbits(63)  # the data-free streams only
        self._init_secret_stream(noise_seed, secure_mode)
        self.nonprivate_diagnostics = bool(nonprivate_diagnostics)
        self.transforms = None  # set by setup(); MCMC reads it after the run
        self.lik: Optional[PrivateLikelihood] = None  # set by setup()
        self._warmup_steps = 0  # set by setup()
        self._user_initial_params: Optional[Dict[str, torch.Tensor]] = None
        self._initial_params: Optional[Dict[str, torch.Tensor]] = None
        self._init_private_start(init)
        self._chain_index = 0
        self._num_setups = 0
        self._pending_state: Optional[dict] = None  # a load_state_dict() waiting for setup()
        self._last_checkpoint: Optional[dict] = None  # state_dict() of the last chain cleanup() ended
        DPKernel._reset_chain_stats(self)  # the base's fields only: subclasses reset theirs in setup()

    # ------------------------------------------------------------------ the algorithm (subclass API)
    def _init_state(self, z: torch.Tensor):
        """Algorithm state at unconstrained ``z``; must not touch data."""
        raise NotImplementedError

    def _step(self, state) -> Tuple[object, object]:
        """One iteration: ``(new_state, info)``; ``info.events`` lists what was released."""
        raise NotImplementedError

    def _state_z(self, state) -> torch.Tensor:
        return state.z

    # ------------------------------------------------------------------ lifecycle
    def _reset_chain_stats(self):
        self._iteration = 0
        self._idle_left = 0  # idle warmup iterations before the first release (DefaultPath._plan_idle_warmup)
        self._draws = []  # this chain's states after warmup (post-processing), for chain_problems
        self._preconditioner = None  # the chain's coordinates, set by its private start (pyro_dp.preconditioning)
        self._metric_sd = None  # the posterior sd its released metric predicts (kernels.whitening.metric_sd)
        self._num_accepted = 0
        self._clipped_sum = 0.0
        self._clipped_count = 0
        self.privacy.reset_chain()  # reads data until stopped; the progress bar's ε starts afresh
        self._state = None
        self._returned = None  # the last sample()'s output (_returned_unchanged)
        self._init_done = False
        self._diagnostics_warned = set()  # (iteration, message) pairs diagnostics() has warned

    @property
    def initial_params(self):
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params):
        self._user_initial_params = None if params is None else {k: v.detach() for k, v in params.items()}
        self._initial_params = self._user_initial_params

    def _chain_seed(self, purpose: int, base: Optional[int] = None) -> int:
        words = [self.seed if base is None else base, self._chain_index, purpose]  # = kernel_chain_seed's
        if os.getpid() != self._owner_pid:  # a worker process: make streams independent
            words.append(secrets.randbits(63))
        return _derive_seed(*words)

    def setup(self, warmup_steps, *args, **kwargs):
        """Build the likelihood and the initial state. Data-free: costs no privacy."""
        if self.distributed:
            self._join_ranks()  # every rank: the same data-free seed (rank 0's), before any draw
        self._warmup_steps = int(warmup_steps)
        self._num_setups += 1
        if self._iteration > 0:  # a new run without cleanup(): file the old chain
            self.cleanup()
        self.privacy.begin_chain(self._worker_slot())  # a fresh chain id, also in each worker process
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
            jit_compile=bool(self.jit_compile),  # None (auto): attached by _auto_compile below if it pays
            jit_options=self.jit_options,
            jit_cache=self.__dict__.setdefault("_jit_cache", {}),
            public=self.public,
        )
        self.transforms = self.lik.transforms
        take_declared_subsample(self, first_setup=self._num_setups == 1)  # the plate's subsample_size: used or refused
        self.lik.likelihood_mask  # the likelihood's coordinates, determined now (data-free; cached per kernel object)
        self._resolve_run_length()  # the default path: the run length a budget funds
        self._auto_compile()  # jit_compile=None: eager or compiled from the run's predicted cost (data-free)
        self._calibrate_noise()  # noise from the budget when none was given (data-free)
        self._setup_budget()  # the plan (data-free)
        self.privacy.check_supports(sum(self.planned_events(), []), type(self).__name__)  # before any data access
        self._check_worker_releases()
        refusal = self._chain_slot_refusal()  # stops the chain below, before any data is read
        self._rng = torch.Generator(device=self.lik.device)
        self._rng.manual_seed(self._chain_seed(_PURPOSE_ALGO))
        noise_seed = None if self.noise_seed is None else self._chain_seed(_PURPOSE_NOISE, base=self.noise_seed)
        self._noise = NoiseSource(seed=noise_seed, secure_mode=self.secure_mode, device=self.lik.device, warn=False)
        if self._shards is not None:
            self._share_ranks()  # the global N (public) and rank 0's noise inside every release
        if self._num_setups == 1:  # with the run-length notice: delta above 1/N, N over all ranks
            self.privacy.check_delta(self.lik.global_num_rows)
        z0 = _initial_point(self.lik, self._user_initial_params)
        if self._shards is not None:
            self._check_ranks_agree(z0)
        self._initial_params = self.lik.unravel(z0)
        self._state = self._init_state(z0)
        self._init_done = False
        if refusal is not None:
            self.privacy.stop(refusal, iteration=self._iteration)
        self._resume_pending()  # a load_state_dict() before setup(): continue its chain

    def sample(self, params):
        if self._worker_chain_id() is None:
            return self._sample(params)
        try:
            return self._sample(params)
        except Exception as e:  # in an MCMC worker: the chain's releases must come back
            raise ChainFailedError(f"{type(e).__name__}: {e}", self.privacy.live.copy()) from e

    def _sample(self, params):
        if self._state is None:
            raise RuntimeError("call setup() before sample()")
        if not _returned_unchanged(self.__dict__.get("_returned"), params, self._state_z(self._state)):
            # compared in the model's own coordinates, where what sample() returned is exact
            # (a preconditioned chain's u -> z -> u is not: pyro_dp.preconditioning)
            z = self.lik.flatten(params, coordinates=False).detach()
            if not torch.equal(z, self.lik.to_unconstrained(self._state_z(self._state))):
                self._state = self._init_state(self.lik.from_unconstrained(z))  # params were changed from outside
        pending_init = self.init is not None and not self._init_done
        idle = self._idle_left > 0 and self._iteration == 0  # before the chain's first read (data-free)
        self._idle_left -= int(idle)
        declared = None if idle else self._declare(pending_init)  # the plan check: None when no more data is read
        if declared is None:
            self.privacy.end_iteration()  # an iteration that released nothing (the ε curve stays flat)
            return {k: v.clone() for k, v in self.lik.unravel(self._state_z(self._state)).items()}
        if pending_init:
            self._run_private_start()  # the private init's releases, recorded as they are made
        self._state, info = self._step(self._state)
        self._report(info.events, declared)
        self.privacy.end_iteration()  # where this iteration's releases end (pyro_dp.privacy_report's curve)
        self._iteration += 1
        if self._iteration % HEAP_TRIM_EVERY == 0:  # bounded memory over long runs (pyro_dp.heap): a fixed,
            release_free_heap()  # data-free schedule
        if self._iteration > self._warmup_steps and len(self._draws) < MAX_CHECKED_DRAWS:
            self._draws.append(self._state_z(self._state))
        self._num_accepted += int(bool(info.accepted))
        self._clipped_sum += float(info.clipped_fraction)
        self._clipped_count += 1
        z = self._state_z(self._state)
        out = self.lik.unravel(z)
        self._returned = (out, tuple(out.values()), z)
        return out

    def cleanup(self):
        """End of a chain: file its ledger with the finished chains (idempotent). The chain's
        last checkpoint stays available from :meth:`state_dict` (to resume it after
        ``mcmc.run``)."""
        if self._state is not None and self.lik is not None and self.privacy.live:
            self._last_checkpoint = self.state_dict()
        if self.privacy.end_chain(self._worker_slot()):
            self._chain_index += 1
        self._reset_chain_stats()
