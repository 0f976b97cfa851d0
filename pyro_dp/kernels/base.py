r"""The Pyro lifecycle shared by every DP kernel: set-up without touching data, the
per-chain privacy ledger, the privacy budget, generators, diagnostics.

Algorithms live in pure-ish ``init``/``step`` functions (one file each); a subclass of
:class:`DPKernel` only says which events one iteration releases and calls its step.

How this fits :class:`pyro.infer.MCMC` (see ``shared/FACTS.md``):

* ``setup()`` may run more than once (``MCMC._set_transforms`` calls it again in the main
  process) — it evaluates no likelihood and records nothing.
* Initial values are drawn from the prior (``init_strategy``) or taken from the user's
  ``initial_params``; Pyro's data-dependent search for a valid starting point never runs.
* Each chain keeps its own :class:`~pyro_dp.mechanisms.PrivacyLedger`, returned by
  ``diagnostics()`` (that is what comes back from worker processes); ``cleanup()`` files
  it with the kernel's finished chains and never loses it. :meth:`DPKernel.get_epsilon`
  composes every chain this kernel object ran *in this process*;
  :func:`pyro_dp.get_epsilon` composes every chain of an ``MCMC`` run, including chains
  run in worker processes.
* Parallel chains would otherwise inherit identical generator states; a kernel running
  in a process other than the one that built it mixes fresh OS entropy into its seeds, so
  noise is independent across chains (such runs are not bit-reproducible).
"""
from __future__ import annotations

import logging
import math
import multiprocessing
import os
import secrets
import time
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from pyro.infer.autoguide.initialization import init_to_sample
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from ..likelihood import PrivateLikelihood
from ..mechanisms import NoiseSource, PrivacyEvent, PrivacyLedger

__all__ = ["DPKernel", "BudgetExhaustedWarning", "check_positive"]

_logger = logging.getLogger("pyro_dp")


class BudgetExhaustedWarning(UserWarning):
    """The privacy budget is spent: the kernel has stopped reading data.

    Turn it into an error when a run must never end early::

        import warnings
        warnings.simplefilter("error", pyro_dp.BudgetExhaustedWarning)

    >>> issubclass(BudgetExhaustedWarning, UserWarning)
    True
    """


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


class DPKernel(MCMCKernel):
    r"""Base class of pyro_dp's kernels (not used directly).

    :param model: Pyro model (see :class:`~pyro_dp.likelihood.PrivateLikelihood`).
    :param float temperature: tempering :math:`T` of the log-likelihood.
    :param str data_plate: name of the data plate (default: inferred).
    :param dict transforms: optional transforms to unconstrained space.
    :param init_strategy: data-free Pyro init strategy (default: a prior draw).
    :param float epsilon, delta: total privacy budget over all chains. When set, the kernel
        never takes a step that would exceed it: it stops reading data, keeps returning
        the last state, and warns (:class:`BudgetExhaustedWarning`).
    :param int num_iterations: planned iterations per chain, warmup included (used to
        calibrate the noise when no noise multiplier is given).
    :param int num_chains: planned number of chains (each reads the same data).
    :param str accountant: accountant used for ε (default ``"gdp"``: tight Gaussian).
    :param float reference_delta: δ at which diagnostics and the progress bar report ε
        (default: ``delta`` if given, else 1e-5).
    :param int seed: base seed of the proposal/accept stream and of the noise stream.
    :param bool secure_mode: noise from an OS-seeded generator with the floating-point
        mitigation of :class:`~pyro_dp.mechanisms.NoiseSource`.
    :param bool non_private: documented test mode: noise multipliers may be 0; such runs
        record :class:`~pyro_dp.mechanisms.NonPrivateEvent` and report ε = ∞.
    :param str relation: neighbouring relation of the ledger (``"substitute"``, the papers',
        or ``"add_remove"``); noise multipliers are relative to its sensitivity.
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

    def __init__(
        self,
        model,
        *,
        temperature: float = 1.0,
        data_plate: Optional[str] = None,
        transforms: Optional[dict] = None,
        init_strategy=init_to_sample,
        epsilon: Optional[float] = None,
        delta: Optional[float] = None,
        num_iterations: Optional[int] = None,
        num_chains: int = 1,
        accountant: str = "gdp",
        reference_delta: Optional[float] = None,
        seed: Optional[int] = None,
        secure_mode: bool = False,
        non_private: bool = False,
        relation: str = "substitute",
        init=None,
    ):
        if not callable(model):
            raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
        self.model = model
        self.temperature = check_positive("temperature", temperature)
        self.data_plate = data_plate
        self._user_transforms = transforms
        self.init_strategy = init_strategy
        self.non_private = bool(non_private)
        if epsilon is not None or delta is not None:
            if epsilon is None or delta is None:
                raise ValueError("a privacy budget needs both epsilon and delta")
            epsilon = check_positive("epsilon", epsilon)
            delta = float(delta)
            if not (0.0 < delta < 1.0):
                raise ValueError(f"delta must be in (0, 1), got {delta!r}")
            if self.non_private:
                raise ValueError("non_private=True cannot be combined with a privacy budget")
        self.epsilon, self.delta = epsilon, delta
        self.num_iterations = None if num_iterations is None else check_positive("num_iterations", num_iterations, integer=True)
        self.num_chains = check_positive("num_chains", num_chains, integer=True)
        from ..accounting import get_accountant  # validates the name early

        get_accountant(accountant)
        self.accountant = accountant
        rd = reference_delta if reference_delta is not None else (delta if delta is not None else 1e-5)
        if not (0.0 < float(rd) < 1.0):
            raise ValueError(f"reference_delta must be in (0, 1), got {rd!r}")
        self.reference_delta = float(rd)
        self.seed = int(seed) if seed is not None else secrets.randbits(63)
        self.secure_mode = bool(secure_mode)
        self._owner_pid = os.getpid()

        self.transforms = None  # set by setup(); MCMC reads it after the run
        self._user_initial_params: Optional[Dict[str, torch.Tensor]] = None
        self._initial_params: Optional[Dict[str, torch.Tensor]] = None
        self.relation = relation
        if init is not None and not (callable(getattr(init, "run", None)) and callable(getattr(init, "events", None))):
            raise TypeError(f"init must be a private initialiser such as DPGradientInit, got {init!r}")
        if init is not None and getattr(init, "noise_multiplier", None) == 0 and not self.non_private:
            raise ValueError("init with noise_multiplier=0 is only allowed with non_private=True")
        self.init = init
        self._finished_ledgers: List[PrivacyLedger] = []
        self._ledger = PrivacyLedger(relation)  # validates the relation
        self._chain_index = 0
        self._num_setups = 0
        self._steps_allowed: Optional[int] = None
        self._reset_chain_stats()

    def _check_noise_multiplier(self, name: str, value) -> Optional[float]:
        """Validate a noise multiplier; ``None`` is allowed only with a budget to calibrate
        from, and 0 only in the ``non_private`` test mode."""
        if value is None:
            if self.epsilon is None or self.num_iterations is None:
                raise ValueError(f"give {name}, or epsilon, delta and num_iterations to calibrate it")
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
        ...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
        ...     with pyro.plate("data", len(y)) as i:
        ...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])
        >>> k = pyro_dp.DPPenalty(model, 0.1, llr_clip=1.0, noise_multiplier=10.0, seed=0)
        >>> k.setup(0, torch.zeros(5, dtype=torch.float64))
        >>> k.planned_events()
        ([], [GaussianEvent(noise_multiplier=10.0)])
        """
        if getattr(self, "lik", None) is None:
            raise RuntimeError("call setup() first: the plan may depend on the number of rows")
        return self._init_events() + list(self._fixed_events()), list(self._per_iteration_events())

    def _init_events(self) -> list:
        """Releases of the private initialisation (once per chain; ``[]`` without one)."""
        return [] if self.init is None else list(self.init.events())

    def _calibrate_scale(self, events_for_scale, **kwargs) -> float:
        """:func:`~pyro_dp.accounting.calibrate` for this kernel's budget, with the private
        initialisation's releases added to the fixed (once per chain) events."""
        from ..accounting import calibrate

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

    # ------------------------------------------------------------------ lifecycle
    def _reset_chain_stats(self):
        self._iteration = 0
        self._num_accepted = 0
        self._clipped_sum = 0.0
        self._clipped_count = 0
        self._budget_exhausted = False
        self._state = None
        self._init_done = False

    @property
    def initial_params(self):
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params):
        self._user_initial_params = None if params is None else {k: v.detach() for k, v in params.items()}
        self._initial_params = self._user_initial_params

    def _chain_seed(self, purpose: int) -> int:
        words = [self.seed, self._chain_index, purpose]
        if os.getpid() != self._owner_pid:  # a worker process: make streams independent
            words.append(secrets.randbits(63))
        return _derive_seed(*words)

    def _check_parallel_chain(self):
        """Refuse a parallel chain the budget was not planned for (data-free, before any read).

        ``MCMC(num_chains=K)`` with enough CPUs runs each chain in a worker process holding a
        copy of this kernel, so the copies cannot count each other's chains. Pyro names each
        worker process by its chain id (``pyro/infer/mcmc/api.py``, ``_MultiSampler``). When a
        budget (or a calibration target) was given for ``num_chains`` chains, a worker whose
        chain id is ``>= num_chains`` would overspend it: it raises instead. Without a budget,
        extra chains are allowed and :func:`pyro_dp.get_epsilon` reports their total.
        """
        if self.epsilon is None or os.getpid() == self._owner_pid:
            return
        name = multiprocessing.current_process().name
        try:
            chain = int(name)
        except ValueError:  # not Pyro's worker naming: cannot tell, say so
            warnings.warn(
                f"running in a worker process ({name!r}) that does not name its chain; cannot check that "
                f"MCMC runs at most num_chains={self.num_chains} chains against the budget",
                stacklevel=3,
            )
            return
        if chain >= self.num_chains:
            raise ValueError(
                f"MCMC is running chain {chain} in parallel, but this kernel's budget "
                f"(epsilon={self.epsilon}, delta={self.delta}) was planned for num_chains={self.num_chains}: "
                "pass the same num_chains to the kernel and to MCMC"
            )

    def setup(self, warmup_steps, *args, **kwargs):
        """Build the likelihood and the initial state. Data-free: costs no privacy."""
        self._check_parallel_chain()
        self._warmup_steps = int(warmup_steps)
        self._num_setups += 1
        if self._iteration > 0:  # a new run without cleanup(): file the old chain
            self.cleanup()
        self.lik = PrivateLikelihood(
            self.model,
            args,
            kwargs,
            data_plate=self.data_plate,
            temperature=self.temperature,
            transforms=self._user_transforms,
            init_strategy=self.init_strategy,
            seed=self._chain_seed(_PURPOSE_INIT),
        )
        self.transforms = self.lik.transforms
        self._calibrate()
        self._setup_budget()
        self._rng = torch.Generator(device=self.lik.device)
        self._rng.manual_seed(self._chain_seed(_PURPOSE_ALGO))
        self._noise = NoiseSource(
            seed=self._chain_seed(_PURPOSE_NOISE), secure_mode=self.secure_mode, device=self.lik.device
        )
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
        self._initial_params = self.lik.unravel(z0)
        self._state = self._init_state(z0)
        self._init_done = False

    def _setup_budget(self):
        if self.epsilon is None:
            self._steps_allowed = None
            return
        from ..accounting import max_iterations

        self._steps_allowed = max_iterations(
            self.epsilon,
            self.delta,
            list(self._per_iteration_events()),
            fixed=self._init_events() + list(self._fixed_events()),
            accountant=self.accountant,
            num_chains=self.num_chains,
            relation=self.relation,
        )
        if self.num_iterations is not None and self._steps_allowed < self.num_iterations:
            warnings.warn(
                f"the budget (epsilon={self.epsilon}, delta={self.delta}) allows only "
                f"{self._steps_allowed} iterations per chain over {self.num_chains} chain(s), "
                f"fewer than num_iterations={self.num_iterations}",
                BudgetExhaustedWarning,
                stacklevel=3,
            )

    def _budget_allows_step(self) -> bool:
        if self._steps_allowed is None:
            return True
        if len(self._finished_ledgers) >= self.num_chains:
            return False  # more chains than the budget was planned for
        return self._iteration < self._steps_allowed

    def sample(self, params):
        if self._state is None:
            raise RuntimeError("call setup() before sample()")
        z = self.lik.flatten(params).detach()
        if not torch.equal(z, self._state_z(self._state)):
            self._state = self._init_state(z)  # params were changed from outside
        if self._budget_exhausted or not self._budget_allows_step():
            if not self._budget_exhausted:
                self._budget_exhausted = True
                msg = (
                    f"privacy budget (epsilon={self.epsilon}, delta={self.delta}) spent after "
                    f"{self._iteration} iterations of this chain: the kernel has STOPPED READING DATA "
                    "and repeats its last state for every remaining iteration. Samples drawn so far "
                    "are kept; discard the repeated tail (see diagnostics()['private iterations'])."
                )
                warnings.warn(msg, BudgetExhaustedWarning, stacklevel=2)
                _logger.warning(msg)
            return {k: v.clone() for k, v in self.lik.unravel(self._state_z(self._state)).items()}
        if self.init is not None and not self._init_done:
            # private initialisation: reads the data through its own mechanism, in the ledger
            z_init, events, frac = self.init.run(self.lik, self._state_z(self._state), self._noise, self.relation)
            for ev in events:
                self._ledger.record(ev)
            self._init_done = True
            self._init_clipped_fraction = frac
            self._state = self._init_state(z_init)
        self._state, info = self._step(self._state)
        for ev in info.events:
            self._ledger.record(ev)
        self._iteration += 1
        self._num_accepted += int(bool(info.accepted))
        self._clipped_sum += float(info.clipped_fraction)
        self._clipped_count += 1
        return self.lik.unravel(self._state_z(self._state))

    def cleanup(self):
        """End of a chain: file its ledger with the finished chains (idempotent)."""
        if self._ledger:
            self._finished_ledgers.append(self._ledger)
            self._ledger = PrivacyLedger(self.relation)
            self._chain_index += 1
        self._reset_chain_stats()

    # torch.Generator cannot be pickled; MCMC(num_chains>1, mp_context="spawn") pickles kernels.
    def __getstate__(self):
        state = self.__dict__.copy()
        rng = state.pop("_rng", None)
        if rng is not None:
            state["_rng_state"] = (str(rng.device), rng.get_state())
        state.pop("_eps_cache", None)
        return state

    def __setstate__(self, state):
        rng_state = state.pop("_rng_state", None)
        self.__dict__.update(state)
        if rng_state is not None:
            self._rng = torch.Generator(device=rng_state[0])
            self._rng.set_state(rng_state[1])

    # ------------------------------------------------------------------ reporting
    @property
    def ledger(self) -> PrivacyLedger:
        """Every release of every chain this kernel ran in this process."""
        return PrivacyLedger.merged(self._finished_ledgers + [self._ledger], self.relation)

    def get_epsilon(self, delta: Optional[float] = None, accountant: Optional[str] = None) -> float:
        r"""Total ε spent so far by this kernel object, at ``delta``.

        Composes every chain this kernel ran **in this process**. After
        ``MCMC(num_chains>1)`` ran chains in worker processes this kernel holds nothing:
        it then raises rather than report 0 — use :func:`pyro_dp.get_epsilon` on the
        ``MCMC`` object.
        """
        from ..accounting import get_accountant

        delta = self.reference_delta if delta is None else delta
        ledger = self.ledger
        if not ledger and self._num_setups > 0:
            raise RuntimeError(
                "this kernel object recorded no data access in this process. If MCMC ran its chains "
                "in worker processes, their ledgers are in the MCMC object: use "
                "pyro_dp.get_epsilon(mcmc, delta)."
            )
        return get_accountant(accountant or self.accountant, ledger).get_epsilon(delta)

    def _epsilon_now(self, chain_only: bool = False) -> float:
        """ε at the reference δ of this chain (``chain_only``) or of all chains so far (cached)."""
        from ..accounting import get_accountant

        key = (chain_only, len(self._finished_ledgers), self._ledger.num_releases)
        cache = self.__dict__.setdefault("_eps_cache", {})
        if key not in cache:
            ledger = self._ledger if chain_only else self.ledger
            cache.clear()
            cache[key] = get_accountant(self.accountant, ledger).get_epsilon(self.reference_delta) if ledger else 0.0
        return cache[key]

    def diagnostics(self) -> dict:
        """Per-chain diagnostics (merged by ``MCMC.diagnostics()`` as ``{key: {"chain i": v}}``).

        ``"epsilon"`` is this chain's own ε at ``"delta"``; the total over all chains is
        :func:`pyro_dp.get_epsilon`.
        ``"clipped fraction"`` (and, with a private ``init``, ``"init clipped fraction"``) is
        computed from the raw data and is **not covered by ε**:
        it is for the data holder's tuning and must not be published. Everything else is
        post-processing of released values.
        """
        return {
            "acceptance rate": self._num_accepted / max(self._iteration, 1),
            "clipped fraction": self._clipped_sum / max(self._clipped_count, 1),
            "epsilon": self._epsilon_now(chain_only=True),
            "delta": self.reference_delta,
            "private iterations": self._iteration,
            "budget exhausted": self._budget_exhausted,
            "privacy ledger": self._ledger.copy(),
            **({"init clipped fraction": self.__dict__.get("_init_clipped_fraction", 0.0)} if self.init is not None else {}),
        }

    def _logged_epsilon(self) -> str:
        """ε for the progress bar, which Pyro asks for every iteration.

        Closed-form accountants are cheap and refresh every iteration. When one evaluation
        took longer than 10 ms (numerical PLD/PRV, long (ε, δ) ledgers) the value refreshes
        only once the time since the last evaluation exceeds 20 times its cost (so the
        progress bar costs at most ~5% of the run), and says which iteration it refers to.
        ``diagnostics()`` and ``get_epsilon()`` are always exact.
        """
        n = self._iteration
        last = self.__dict__.get("_eps_log")  # (iteration, epsilon, seconds it took, when it ended)
        if last is not None and last[0] == n:
            pass
        elif (last is None or n < last[0] or last[2] < 0.01
              or time.perf_counter() - last[3] >= 20 * last[2]):
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
