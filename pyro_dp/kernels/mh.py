r"""One random-walk Metropolis–Hastings skeleton for every DP kernel that releases a noisy
log-likelihood ratio (penalty, exponential-family and multi-party penalty, DP Barker,
minibatch penalty, DP-Fast MH).

An iteration is always the same five moves (BlackJAX's ``mh`` shape, NumPyro's
``BarkerMHState``):

1. **propose** :math:`\theta'` by a Gaussian random walk (:func:`~.proposals.random_walk`:
   full, one-component or guided walk) from the seeded, data-free algorithm stream;
2. **release** :math:`\hat\lambda_{\rm data}` — a noisy estimate of the tempered
   log-likelihood ratio :math:`T(\ell(\theta')-\ell(\theta))` — through the kernel's
   ``release`` function, the only step that reads data (every noise draw and batch comes
   from the secret :class:`~pyro_dp.mechanisms.NoiseSource`);
3. form :math:`\hat\lambda = \hat\lambda_{\rm data} + \log p(\theta') - \log p(\theta) +
   \log q(\theta|\theta') - \log q(\theta'|\theta)` (data-free terms);
4. **accept** with the injected rule (``penalty_accept``: Yıldırım & Ermiş 2019 §3.1;
   ``barker_accept``: Heikkilä et al. 2019 eq. (9)). The rule's uniform (or correction) is
   **always** drawn, then ANDed with one data-free validity check — the proposal's prior,
   :math:`\hat\lambda` and the noise variance must be finite — so the algorithm stream stays
   aligned whatever happens (one rejection idiom for all kernels);
5. **flip** the guided-walk direction after a rejection (Gustafson 1998).

A kernel is then a release function plus a short class. :class:`RandomWalkKernel` owns what
they share: the proposal mode, the scale and its warmup adaptation, and the batch checks.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Tuple

import torch

from ..accounting import calibrate_noise_multiplier
from ..mechanisms import GaussianEvent, gaussian_event
from .base import DPKernel, check_positive
from .proposals import DEFAULT_TARGET_ACCEPT_PROB, AdaptiveProposalScale, flip_direction, initial_directions, random_walk

__all__ = ["MHState", "MHInfo", "RatioRelease", "mh_init", "mh_step", "RandomWalkKernel", "check_batch_size",
           "can_fuse"]


class MHState(NamedTuple):
    """State of a random-walk DP chain.

    :ivar z: current point, flat, in unconstrained space.
    :ivar log_prior: data-free log prior (+ log-Jacobian) at ``z``.
    :ivar direction: guided-walk directions (±1 per coordinate), or ``None``.
    :ivar cache: the kernel's private per-point cache (e.g. the per-example log-likelihoods
        at ``z``, used only inside the next release; the exponential family's
        :math:`(\\varphi(\\theta), \\log g(\\theta))`, data-free), or ``None``.
    """

    z: torch.Tensor
    log_prior: torch.Tensor
    direction: Optional[torch.Tensor]
    cache: object = None


class MHInfo(NamedTuple):
    """What one iteration did.

    :ivar accepted: the accept decision (post-processing of the release).
    :ivar events: privacy events released.
    :ivar clipped_fraction: fraction of clipped per-example terms (**non-private**).
    :ivar noise_std: standard deviation of the noise on :math:`\\hat\\lambda` (data-free).
    :ivar coord: coordinate moved by a one-component proposal (``-1``: all).
    :ivar extra: the kernel's own public facts of the step (e.g. the released statistic).
    """

    accepted: bool
    events: Tuple
    clipped_fraction: float
    noise_std: float
    coord: int
    extra: object = None


class RatioRelease(NamedTuple):
    """What a kernel's ``release(noise, state, z_new)`` returns.

    :ivar log_ratio: the released, noisy, tempered log-likelihood ratio estimate.
    :ivar noise_var: variance the accept rule must correct for (penalty: :math:`\\sigma^2`).
    :ivar log_prior: data-free log prior at ``z_new`` (often from the same model evaluation).
    :ivar events: privacy events released.
    :ivar clipped_fraction: **non-private** diagnostic.
    :ivar noise_std: reported in :class:`MHInfo`.
    :ivar cache_new: the private cache kept if ``z_new`` is accepted.
    :ivar cache_old: the private cache kept if it is rejected (e.g. computed this step).
    :ivar extra: kernel-specific public facts, passed to :class:`MHInfo`.
    """

    log_ratio: torch.Tensor
    noise_var: torch.Tensor
    log_prior: torch.Tensor
    events: Tuple
    clipped_fraction: float
    noise_std: float
    cache_new: object = None
    cache_old: object = None
    extra: object = None


def mh_init(lik, z: torch.Tensor, rng: Optional[torch.Generator] = None, cache=None) -> MHState:
    """Initial state at ``z`` (data-free). With ``rng`` the guided-walk directions are drawn
    (uniform ±1, their stationary law); without, there are none."""
    direction = initial_directions(z, rng) if rng is not None else None
    with torch.no_grad():
        lp = lik.log_prior(z)
    return MHState(z, lp, direction, cache)


def _finite(x) -> bool:
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        return math.isfinite(x.item())  # one element: no tensor ops (the usual case, #17)
    if isinstance(x, (int, float)):
        return math.isfinite(x)
    return bool(torch.isfinite(torch.as_tensor(x)).all())


def can_fuse(lik, noise) -> bool:
    """Whether a kernel may run a step as one fused graph: the compiled path in one process (no
    shards: their noise enters inside the all-reduce). :meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph`
    decides the rest (the model traces, a full-data pass runs as one graph)."""
    return getattr(lik, "compiled", None) is not None and getattr(noise, "shards", None) is None


def mh_step(
    rng: torch.Generator,
    noise,
    state: MHState,
    *,
    proposal_scale,
    release: Callable[..., RatioRelease],
    accept: Callable,
    mode: str = "full",
    fused: Optional[Callable] = None,
) -> Tuple[MHState, MHInfo]:
    """One random-walk DP MH iteration (module docstring): propose, release, accept, flip.

    ``fused(noise, rng, state, z_new, log_q_ratio)`` may do moves 2–4 as one function and return
    ``(RatioRelease, accepted)`` — the same draws from the same streams in the same order, the
    same validity check — or ``None`` (decided before any draw): then ``release`` and ``accept``
    run as usual. ``DPPenalty``, ``DPBarker`` and ``DPMinibatchPenalty`` write their step once
    this way (issue 39: a pure tensor function, run eagerly or compiled into one graph) and never
    return ``None``."""
    prop = random_walk(rng, state.z, proposal_scale, mode, state.direction)
    out = None if fused is None else fused(noise, rng, state, prop.z, prop.log_q_ratio)
    if out is not None:
        rel, accepted = out
    else:
        rel = release(noise, state, prop.z)
        lambda_hat = rel.log_ratio + (rel.log_prior - state.log_prior) + prop.log_q_ratio
        valid = _finite(rel.log_prior) and _finite(lambda_hat) and _finite(rel.noise_var)  # data-free
        accepted = accept(rng, lambda_hat, rel.noise_var) and valid  # always drawn: streams stay aligned
    direction = flip_direction(state.direction, prop.coord, accepted) if mode == "gwmh" else state.direction
    if accepted:
        new = MHState(prop.z, rel.log_prior, direction, rel.cache_new)
    else:
        new = MHState(state.z, state.log_prior, direction, rel.cache_old)
    return new, MHInfo(accepted, tuple(rel.events), rel.clipped_fraction, rel.noise_std, prop.coord, rel.extra)


def check_batch_size(batch_size) -> int:
    """An integer ``b > 1`` (the batch check the minibatch kernels share)."""
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size <= 1:
        raise ValueError(f"batch_size must be an integer > 1, got {batch_size!r}")
    return int(batch_size)


class RandomWalkKernel(AdaptiveProposalScale, DPKernel):
    r"""Base of the random-walk DP kernels: :meth:`_setup_walk` in ``__init__`` sets the
    proposal (``proposal_scale``; ``one_component``/``guided_walk`` modes; warmup adaptation
    of the scale towards ``target_accept_prob``, which reads only accept decisions and costs no
    privacy), and the lifecycle calls the subclass's :meth:`_release` through
    :func:`mh_step`. A subclass defines ``_release(noise, state, z_new) -> RatioRelease``,
    the privacy plan (``_per_iteration_events``, ``_calibrate``), and optionally
    :meth:`_initial_cache` and :meth:`_check_data` (run at set-up, data-free).

    :cvar accept: the accept rule (``penalty_accept`` by default), looked up when each step
        runs.
    """

    batch_size: Optional[int] = None
    _chain_attrs = DPKernel._chain_attrs + AdaptiveProposalScale._chain_attrs
    draws_directions = True  # penalty-type kernels draw guided-walk directions at every chain start

    def _setup_walk(self, proposal_scale, *, one_component=False, guided_walk=False, adapt_proposal=False,
                    target_accept_prob=DEFAULT_TARGET_ACCEPT_PROB) -> None:
        # None: set at each chain's start by the kernel's private tuning (kernels.tuning)
        self.proposal_scale = None if proposal_scale is None else check_positive("proposal_scale", proposal_scale)
        self.guided_walk = bool(guided_walk)
        self.one_component = bool(one_component) or self.guided_walk
        self.mode = "gwmh" if self.guided_walk else ("ocu" if self.one_component else "full")
        self._setup_adaptation(adapt_proposal, target_accept_prob)

    # ------------------------------------------------------------------ Gaussian-per-iteration plans
    @staticmethod
    def _gaussian_events(noise_multiplier) -> list:
        """One Gaussian mechanism per iteration (``NonPrivateEvent`` in the noise-free test mode)."""
        return [gaussian_event(float(noise_multiplier))]

    def _calibrated_gaussian_noise_multiplier(self) -> float:
        """The smallest noise multiplier of one Gaussian release per iteration that fits the
        budget over ``num_iterations`` x ``num_chains`` (the private init's releases included)."""
        if self.init is not None:  # room for the init's releases
            return self._calibrate_scale(lambda s: ((), [GaussianEvent(s)]))
        return calibrate_noise_multiplier(self.epsilon, self.delta, self.num_iterations,
                                          accountant=self.accountant, num_chains=self.num_chains)

    # ------------------------------------------------------------------ subclass API
    def _release(self, noise, state: MHState, z_new: torch.Tensor) -> RatioRelease:
        raise NotImplementedError

    def _accept(self, rng, lambda_hat, noise_var) -> bool:
        raise NotImplementedError

    def _initial_cache(self, z: torch.Tensor):
        return None

    #: ``_fused_release_accept(noise, rng, state, z_new, log_q_ratio)``: the release and the
    #: accept test as one function, eager or compiled (see :func:`mh_step`), or ``None``
    _fused_release_accept = None

    def _check_data(self) -> None:
        """Data-free checks of the likelihood (shapes, N, indexing) before the first release."""
        if self.batch_size is not None and self.batch_size > self.lik.num_rows:
            raise ValueError(f"batch_size={self.batch_size} exceeds the number of rows N={self.lik.num_rows}")

    # ------------------------------------------------------------------ DPKernel hooks
    def _init_state(self, z):
        self._check_data()
        self._start_scale(z)
        return mh_init(self.lik, z, self._rng if self.draws_directions else None, self._initial_cache(z))

    def _step(self, state):
        new, info = mh_step(self._rng, self._noise, state, proposal_scale=self.adapted_proposal_scale,
                            release=self._release, accept=self._accept, mode=self.mode,
                            fused=self._fused_release_accept)
        self._adapt(info)  # warmup only; reads the accept decision (post-processing)
        return new, info
