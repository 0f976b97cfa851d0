r"""One Metropolis–Hastings core for every DP kernel that releases a noisy log-likelihood
ratio, with the proposal and the accept rule as arguments (BlackJAX's ``build_rmh`` over one
``mh`` accept step): penalty, exponential-family and multi-party penalty, DP Barker, minibatch
penalty, DP-Fast MH, and a user's kernel such as the DP-MALA of ``docs/new_kernel.md``.

An iteration is always the same four moves, :func:`mh_step`:

1. **propose** ``propose(rng, noise, state) -> Proposal(z', log q-ratio, ...)``: a Gaussian
   random walk (:func:`random_walk_proposal`: full, one-component or guided walk) from the
   seeded, data-free algorithm stream, or a gradient-guided move (:func:`langevin_proposal`)
   whose released gradients come from the secret stream and are reported as its events;
2. **release** :math:`\hat\lambda_{\rm data}` — a noisy estimate of the tempered
   log-likelihood ratio :math:`T(\ell(\theta')-\ell(\theta))` — the only move that reads data
   (every noise draw and batch from the secret :class:`~pyro_dp.mechanisms.NoiseSource`);
3. form :math:`\hat\lambda = \hat\lambda_{\rm data} + \log p(\theta') - \log p(\theta) +
   \log q(\theta|\theta') - \log q(\theta'|\theta)` (data-free terms) and
   **accept** with the injected rule (the penalty test: Yıldırım & Ermiş 2019 §3.1; Barker's:
   Heikkilä et al. 2019 eq. (9); DP-Fast MH's). The rule's uniform (or correction) is
   **always** drawn, then ANDed with the one data-free validity check :func:`valid_move` — the
   proposal's prior, :math:`\hat\lambda` and the noise variance must be finite — so the
   algorithm stream stays aligned whatever happens (the one rejection idiom). Moves 2–3 are
   one function ``release_accept(noise, rng, state, z', log q-ratio) -> (RatioRelease,
   accepted)``: a kernel's step written once (a pure tensor function run eagerly or compiled,
   e.g. :func:`~.penalty.penalty_release_accept`), or :func:`release_then_accept` of a separate
   release and accept rule;
4. keep :math:`\theta'` or :math:`\theta` and flip the guided-walk direction after a rejection
   (Gustafson 1998).

DP-HMC goes through the same core: its trajectory is a proposal
(:func:`~.hmc.trajectory_proposal`, the kinetic energies as its log q-ratio) and its ratio
release with the penalty test a ``release_accept`` (:func:`~.hmc.trajectory_release_accept`);
:func:`propose_release_accept` (moves 1–3) composes them into its one pure step,
:func:`~.hmc.dphmc_step_fn`, which the compiled path traces whole, trajectory, releases and test
in a single graph; the keep (move 4) follows on HMC's state. :class:`RandomWalkKernel` owns what the random-walk kernels share: the proposal
mode, the scale and its warmup adaptation, and the batch checks.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Tuple

import torch

from .base import DPKernel, check_positive
from .proposals import (DEFAULT_TARGET_ACCEPT_PROB, ProposalScaleAdaptation, flip_direction, initial_directions,
                        random_walk, release_gradient, sample_momentum)

__all__ = ["gradient_proposal", "MHState", "MHInfo", "RatioRelease", "Proposal", "mh_init", "mh_step", "propose_release_accept",
           "valid_move", "release_then_accept",
           "random_walk_proposal", "langevin_proposal", "RandomWalkKernel", "check_batch_size", "can_fuse"]


class MHState(NamedTuple):
    """State of a random-walk DP chain.

    :ivar z: current point, flat, in unconstrained space.
    :ivar log_prior: data-free log prior (+ log-Jacobian) at ``z``.
    :ivar direction: guided-walk directions (±1 per coordinate), or ``None``.
    :ivar cache: the kernel's private per-point cache (e.g. the per-example log-likelihoods
        at ``z``, used only inside the next release; the exponential family's
        :math:`(\\varphi(\\theta), \\log g(\\theta))`, data-free), or ``None``.
    :ivar grad: the released gradient at ``z`` of a gradient-guided proposal (public, reused by
        the next proposal; :func:`langevin_proposal`), or ``None``.
    """

    z: torch.Tensor
    log_prior: torch.Tensor
    direction: Optional[torch.Tensor]
    cache: object = None
    grad: object = None


class MHInfo(NamedTuple):
    """What one iteration did.

    :ivar accepted: the accept decision (post-processing of the release).
    :ivar events: privacy events released.
    :ivar clipped_fraction: fraction of clipped per-example terms (**non-private**; NaN where
        the release did not count them: DPPenalty's without ``nonprivate_diagnostics=True``).
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
    :ivar clipped_fraction: **non-private** diagnostic (NaN where not counted, as above).
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


def can_fuse(lik, noise) -> bool:
    """Whether a kernel may run a step as one fused graph: the compiled path in one process (no
    shards: their noise enters inside the all-reduce). :meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph`
    decides the rest (the model traces, a full-data pass runs as one graph)."""
    return getattr(lik, "compiled", None) is not None and getattr(noise, "shards", None) is None


class Proposal(NamedTuple):
    """What a proposal ``propose(rng, noise, state)`` returns to :func:`mh_step`.

    :ivar z: the proposed point :math:`\\theta'`.
    :ivar log_q_ratio: :math:`\\log q(\\theta|\\theta') - \\log q(\\theta'|\\theta)` (data-free or
        post-processing of releases).
    :ivar coord: the coordinate a one-component move changed (``-1``: all).
    :ivar flips: a rejection flips ``state.direction[coord]`` (the guided walk, Gustafson 1998).
    :ivar events: what the proposal released (a gradient-guided one; none for a random walk).
    :ivar grad: the released gradient at :math:`\\theta'`, kept if it is accepted.
    :ivar state: the current state with what the proposal released there (the chain's first
        gradient), or ``None`` when unchanged.
    :ivar aux: what the proposal computed at :math:`\theta'` that the release reuses (DP-HMC's
        trajectory end: the per-example log-likelihoods and log prior of its last gradient
        release), handed to ``release_accept`` as its last argument; ``None``: nothing.
    """

    z: torch.Tensor
    log_q_ratio: object = 0.0
    coord: int = -1
    flips: bool = False
    events: Tuple = ()
    grad: object = None
    state: object = None
    aux: object = None


def valid_move(log_prior_new, lambda_hat, noise_var=0.0) -> torch.Tensor:
    r"""The data-free validity check of every accept rule, written once (module docstring): the
    proposal's log prior, :math:`\hat\lambda` and the noise variance must be finite. A pure
    tensor function (a compiled step traces it); numbers are accepted too. ANDed with the rule's
    decision, whose randomness is drawn whatever this says.

    >>> bool(valid_move(torch.tensor(-1.0), torch.tensor(float("nan"))))
    False
    """
    out = torch.isfinite(torch.as_tensor(log_prior_new)).all() & torch.isfinite(torch.as_tensor(lambda_hat)).all()
    return out & torch.isfinite(torch.as_tensor(noise_var)).all()


def release_then_accept(release: Callable[..., RatioRelease], accept: Callable) -> Callable:
    r"""``release_accept`` (:func:`mh_step`'s moves 2–3) of a separate ``release(noise, state, z')
    -> RatioRelease`` and accept rule ``accept(rng, λ̂, noise variance) -> bool``: the rule's
    randomness always drawn, its decision ANDed with :func:`valid_move`."""

    def release_accept(noise, rng, state, z_new, log_q_ratio):
        rel = release(noise, state, z_new)
        lambda_hat = rel.log_ratio + (rel.log_prior - state.log_prior) + log_q_ratio
        accepted = accept(rng, lambda_hat, rel.noise_var)  # always drawn: streams stay aligned
        return rel, accepted and bool(valid_move(rel.log_prior, lambda_hat, rel.noise_var))

    return release_accept


def random_walk_proposal(proposal_scale, mode: str = "full") -> Callable[..., Proposal]:
    """The Gaussian random walk (:func:`~.proposals.random_walk`: ``"full"``, ``"ocu"`` or
    ``"gwmh"``) as a proposal: data-free, symmetric (log q-ratio 0), from the algorithm stream."""

    def propose(rng, noise, state):
        prop = random_walk(rng, state.z, proposal_scale, mode, state.direction)
        return Proposal(prop.z, prop.log_q_ratio, prop.coord, mode == "gwmh")

    return propose


def gradient_proposal(lik, grad_clip: float, noise_multiplier: float, move: Callable,
                      log_q_ratio: Callable) -> Callable[..., Proposal]:
    r"""A proposal ``propose(rng, noise, state) -> Proposal`` from the released gradient (:mod:`~.gradient_proposals`): ``move(rng, z, G(z)) -> z'`` draws from the public stream ``rng`` only (data-free
    given the released :math:`G`), and ``log_q_ratio(z, G(z), z', G(z'))`` is
    :math:`\log q(z\mid z') - \log q(z'\mid z)` for that move. Each gradient is
    :func:`~.proposals.release_gradient`'s :math:`G = T(\sum_i \mathrm{clip}_{b_g}\nabla\ell_i +
    \mathcal N(0, (\mathrm{nm}\cdot 2b_g)^2 I)) + \nabla\log p` from the secret stream ``noise``,
    reported as one Gaussian event: two on the chain's first iteration, one after. The accept
    rule's ratio release needs ``state.cache`` = the per-example log-likelihoods at :math:`z`
    (set with the first gradient, then by the rule)."""

    def propose(rng, noise, state):
        events, s = [], state

        def gradient(z):
            g, (ll, _, rel) = release_gradient(noise, lik, z, grad_clip=grad_clip, noise_multiplier=noise_multiplier)
            events.append(rel.event)
            return g, ll

        if s.grad is None:  # the chain's first gradient, released lazily (set-up stays data-free)
            g0, ll0 = gradient(s.z)
            s = s._replace(grad=g0, cache=ll0)
        z_new = move(rng, s.z, s.grad)
        g_new, _ = gradient(z_new)
        return Proposal(z_new, log_q_ratio(s.z, s.grad, z_new, g_new), events=tuple(events), grad=g_new,
                        state=s if s is not state else None)

    return propose



def langevin_proposal(lik, step_size: float, grad_clip: float, noise_multiplier: float) -> Callable[..., Proposal]:
    r"""The Langevin (MALA) proposal :math:`\theta' = \theta + \tfrac h2 G(\theta) + \sqrt h\,\xi`
    (Roberts & Tweedie 1996) on the released gradient :math:`G` of
    :func:`~.proposals.release_gradient` (DP-HMC's, Räisä 2021 thesis Alg. 3: reused from the
    state; the chain's first one released here), written on :func:`gradient_proposal`: releases
    :math:`G(\theta')`, which the reverse density needs, :math:`\log q(\theta|\theta') -
    \log q(\theta'|\theta)` with :math:`q(a|b) = \mathcal N(b + \tfrac h2 G(b), hI)`. MH on
    :math:`(\theta, G(\theta))`; the accept rule's ratio release needs ``state.cache`` = the
    per-example log-likelihoods."""
    h = float(step_size)

    def move(rng, z, g):
        xi = sample_momentum(rng, 1.0, z)  # N(0, I) from the public stream (MALA is one-step HMC)
        return z + h / 2 * g + math.sqrt(h) * xi

    def log_q_ratio(z, g, z_new, g_new):
        return (((z_new - z - h / 2 * g) ** 2).sum() - ((z - z_new - h / 2 * g_new) ** 2).sum()) / (2 * h)

    return gradient_proposal(lik, grad_clip, noise_multiplier, move, log_q_ratio)


def propose_release_accept(rng, noise, state, *, propose: Callable[..., Proposal], release_accept: Callable):
    """Moves 1–3 of :func:`mh_step`: ``(state, Proposal, release, accepted)``, where ``state``
    is the current state with what the proposal released there. ``release_accept(noise, rng,
    state, z', log q-ratio[, aux]) -> (release, accepted)`` gets the proposal's ``aux`` when it
    has one. A pure tensor function when ``propose`` and ``release_accept`` are (their
    randomness drawn before, ``rng``/``noise`` then unused): DP-HMC's compiled iteration traces it
    whole, trajectory, releases and test in one graph (:func:`~.hmc.dphmc_step_fn`)."""
    prop = propose(rng, noise, state)
    state = state if prop.state is None else prop.state
    aux = () if prop.aux is None else (prop.aux,)
    rel, accepted = release_accept(noise, rng, state, prop.z, prop.log_q_ratio, *aux)
    return state, prop, rel, accepted


def mh_step(rng: torch.Generator, noise, state: MHState, *, propose: Callable[..., Proposal],
            release_accept: Callable) -> Tuple[MHState, MHInfo]:
    """One DP MH iteration (module docstring): ``propose(rng, noise, state) -> Proposal``, then
    ``release_accept(noise, rng, state, z', log q-ratio) -> (RatioRelease, accepted)`` (the
    rule's randomness always drawn, its decision ANDed with :func:`valid_move`;
    :func:`propose_release_accept`), then keep or reject, flipping the guided-walk direction
    after a rejection."""
    state, prop, rel, accepted = propose_release_accept(rng, noise, state, propose=propose,
                                                        release_accept=release_accept)
    direction = flip_direction(state.direction, prop.coord, accepted) if prop.flips else state.direction
    if accepted:
        new = MHState(prop.z, rel.log_prior, direction, rel.cache_new, prop.grad)
    else:
        new = MHState(state.z, state.log_prior, direction, rel.cache_old, state.grad)
    return new, MHInfo(accepted, tuple(prop.events) + tuple(rel.events), rel.clipped_fraction, rel.noise_std,
                       prop.coord, rel.extra)


def check_batch_size(batch_size) -> int:
    """An integer ``b > 1`` (the batch check the minibatch kernels share)."""
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size <= 1:
        raise ValueError(f"batch_size must be an integer > 1, got {batch_size!r}")
    return int(batch_size)


class RandomWalkKernel(DPKernel):
    r"""Base of the random-walk DP kernels: :meth:`_setup_walk` in ``__init__`` sets the
    proposal (``proposal_scale``; ``one_component``/``guided_walk`` modes; warmup adaptation
    of the scale towards ``target_accept_prob``, which reads only accept decisions and costs no
    privacy), and the lifecycle runs :func:`mh_step` with :func:`random_walk_proposal`. A
    subclass defines ``_release_accept`` (its step written once) or ``_release(noise, state,
    z_new) -> RatioRelease`` and ``_accept``,
    its releases (``releases``; ``_calibrate`` where a budget sets its noise), and optionally
    :meth:`_initial_cache` and :meth:`_check_data` (run at set-up, data-free).

    :cvar accept: the accept rule (``penalty_accept`` by default), looked up when each step
        runs.
    """

    batch_size: Optional[int] = None
    _chain_attrs = DPKernel._chain_attrs + ("walk_scale",)
    draws_directions = True  # penalty-type kernels draw guided-walk directions at every chain start

    def _setup_walk(self, proposal_scale, *, one_component=False, guided_walk=False, adapt_proposal=False,
                    target_accept_prob=DEFAULT_TARGET_ACCEPT_PROB) -> None:
        # None: set at each chain's start by the kernel's private tuning (pyro_dp.default_path.tuning)
        self.proposal_scale = None if proposal_scale is None else check_positive("proposal_scale", proposal_scale)
        self.guided_walk = bool(guided_walk)
        self.one_component = bool(one_component) or self.guided_walk
        self.mode = "gwmh" if self.guided_walk else ("ocu" if self.one_component else "full")
        #: warmup adaptation of the scale towards ``target_accept_prob`` (reads only accept decisions)
        self.adapt_proposal = bool(adapt_proposal)
        self.target_accept_prob = float(target_accept_prob)
        if not (0.0 < self.target_accept_prob < 1.0):
            raise ValueError(f"target_accept_prob must be in (0, 1), got {target_accept_prob!r}")
        self.walk_scale = ProposalScaleAdaptation()

    # ------------------------------------------------------------------ subclass API
    def _release(self, noise, state: MHState, z_new: torch.Tensor) -> RatioRelease:
        raise NotImplementedError

    def _accept(self, rng, lambda_hat, noise_var) -> bool:
        raise NotImplementedError

    def _initial_cache(self, z: torch.Tensor):
        return None

    #: ``_release_accept(noise, rng, state, z_new, log_q_ratio)``: the release and the accept
    #: test as one function, eager or compiled (:func:`mh_step`'s ``release_accept``), or
    #: ``None``: then :func:`release_then_accept` of :meth:`_release` and :meth:`_accept`
    _release_accept = None

    def _check_data(self) -> None:
        """Data-free checks of the likelihood (shapes, N, indexing) before the first release."""
        if self.batch_size is not None and self.batch_size > self.lik.num_rows:
            raise ValueError(f"batch_size={self.batch_size} exceeds the number of rows N={self.lik.num_rows}")

    @property
    def adapted_proposal_scale(self) -> torch.Tensor:
        """The proposal scale in use: the given one until warmup adaptation changes it."""
        return self.walk_scale.current

    def _adapt(self, info) -> None:
        """Warmup only: the step's accept decision adapts the scale (post-processing)."""
        if self.adapt_proposal and self.chain.iteration < self.chain.warmup_steps:
            self.walk_scale.adapt(info, iteration=self.chain.iteration, target_accept_prob=self.target_accept_prob,
                                  full=self.mode == "full")

    # ------------------------------------------------------------------ DPKernel hooks
    def _init_state(self, z):
        self._check_data()
        if self.chain.iteration == 0 or self.walk_scale.log_scale is None:  # a new chain: the user's scale
            self.walk_scale.start(self.proposal_scale, z)
        return mh_init(self.lik, z, self._rng if self.draws_directions else None, self._initial_cache(z))

    def _step(self, state):
        release_accept = self._release_accept or release_then_accept(self._release, self._accept)
        new, info = mh_step(self._rng, self._noise, state, release_accept=release_accept,
                            propose=random_walk_proposal(self.adapted_proposal_scale, self.mode))
        self._adapt(info)  # warmup only; reads the accept decision (post-processing)
        return new, info
