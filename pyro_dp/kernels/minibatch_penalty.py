r"""Minibatch DP penalty Metropolis–Hastings (Räisä 2021 thesis §3.3, Lemma 1, Thm 8).

Each iteration proposes :math:`\theta'` (random walk, OCU or GWMH as in
:mod:`~pyro_dp.kernels.penalty`), reads a random batch :math:`B`, clips the per-example ratios
:math:`r_i = \ell_i(\theta') - \ell_i(\theta)` to :math:`\pm L d` (:math:`d = \|\theta'-\theta\|`,
:math:`L` = ``llr_clip``), and releases a noisy :math:`\lambda^* - \sigma_b^2/2`: an estimate of
the tempered log-likelihood ratio minus half an estimate of its own variance. With noise of
variance :math:`\sigma^2` the chain accepts with the penalty rule

.. math::
    \min\{1, \exp(\widehat{\lambda^* - \sigma_b^2/2} + \log\tfrac{p(\theta')q(\theta|\theta')}{p(\theta)q(\theta'|\theta)}
    - \sigma^2/2)\}

(thesis §3.3: :math:`\min\{1, e^{\lambda^* - (\sigma^2+\sigma_b^2)/2}\}`). It is exact for the
tempered target only if :math:`\lambda^*` is exactly Gaussian with variance
:math:`\sigma_b^2` (CLT): the chain is approximate.

Two subsampling schemes, each with the accountant whose assumptions it meets (substitute-one
relation in both):

``subsampling="poisson"`` (default)
    each row enters independently with probability :math:`q = b/N`. The Horvitz–Thompson
    estimate :math:`\lambda^* = \frac{T}{q}\sum_{i\in B} r_i` has variance
    :math:`\frac{1-q}{q}\sum_{i=1}^N (T r_i)^2`, estimated without bias by
    :math:`\sigma_b^2 = \frac{1-q}{q^2}\sum_{i\in B}(T r_i)^2` (Särndal, Swensson & Wretman
    1992, §2.8 and Result 2.8.1 for Poisson sampling). Hence the released quantity is a **sum
    of per-example terms**

    .. math::
        \lambda^* - \tfrac12\sigma_b^2 = \sum_{i\in B} g_i,\qquad
        g_i = \frac{T}{q} r_i - \frac{T^2(1-q)}{2q^2} r_i^2,\qquad
        |g_i| \le \frac{T}{q}Ld + \frac{T^2(1-q)}{2q^2}L^2d^2 =: h,

    released by :func:`~pyro_dp.mechanisms.clipped_sum_with_noise` with clip :math:`h`
    (substitute sensitivity :math:`2h`, contributions in the centred interval :math:`[-h, h]`):
    exactly the Poisson-subsampled Gaussian mechanism that ``dp_accounting``'s PLD analyses
    under ``REPLACE_ONE`` (see :mod:`pyro_dp.accounting.adapters`). Event
    ``SubsampledGaussianEvent(q, nm, "poisson")``; default accountant ``"pld"`` (tight).
    :math:`2h = \frac{2NTLd}{b} + (1-q)\big(\frac{NT}{b}\big)^2L^2d^2` is smaller than the
    thesis's :math:`c(\theta,\theta')` (Thm 8), whose variance term is about 3× larger.

``subsampling="without_replacement"``
    a uniformly random batch of exactly :math:`b` rows; :math:`\lambda^* = \frac{NT}{b}\sum_B r_i`,
    :math:`\sigma_b^2 = (\frac{NT}{b})^2(\sum_B r_i^2 - R^2/b)` and sensitivity
    :math:`c = \Delta_\lambda + \Delta_\sigma` of thesis Lemma 1 / Thm 8; noise std
    :math:`\mathrm{nm}\cdot c` (:math:`\mathrm{nm} = \sqrt\tau`). Event
    ``SubsampledGaussianEvent(b/N, nm, "without_replacement")``; default accountant
    ``"dp_rdp"`` (``dp_accounting``'s WBK19 Thm 27, at least as tight as thesis Thm 8, which
    :func:`pyro_dp.accounting.subsampled.minibatch_penalty_rdp` implements).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch

from ..mechanisms import NonPrivateEvent, SubsampledGaussianEvent, clip_scalars, clipped_sum_with_noise
from .barker import batch_log_ratios
from .base import DPKernel, check_positive
from .proposals import check_proposal_scale, flip_direction, initial_directions, penalty_accept, random_walk

__all__ = [
    "DPMinibatchPenalty",
    "MinibatchPenaltyState",
    "MinibatchPenaltyInfo",
    "minibatch_penalty_init",
    "minibatch_penalty_step",
    "thesis_sensitivity",
    "SCHEMES",
]

#: Batch schemes accepted by ``scheme=``: ``"poisson"`` (each row independently with
#: probability :math:`b/N`, accounted by PLD) and ``"without_replacement"`` (exactly
#: :math:`b` rows, accounted by RDP; Räisä 2021 thesis §3.3).
SCHEMES = ("poisson", "without_replacement")


def thesis_sensitivity(n: int, b: int, temperature: float, llr_clip: float, dist) -> torch.Tensor:
    r""":math:`c(\theta,\theta') = \Delta_\lambda + \Delta_\sigma` of Räisä 2021 thesis, Thm 8
    (:math:`\Delta_\sigma` from Lemma 1), for a batch of exactly ``b`` rows.

    >>> d = torch.tensor(0.1, dtype=torch.float64)
    >>> round(float(thesis_sensitivity(100, 10, 1.0, 1.0, d)), 12)  # 2*10*0.1 + 10^2*(0.9 + 1.8)*0.1^2
    4.7
    """
    s = n * temperature / b
    ld = llr_clip * dist
    d_lambda = 2.0 * s * ld  # thesis Thm 8: 2nTL||θ-θ'||/|B|
    # thesis Lemma 1 / Thm 8 (a bound on the sensitivity of sigma_b^2/2)
    d_sigma = s * s * abs(1.0 - 1.0 / b) * ld * ld + 2.0 * (b - 1) / b * s * s * ld * ld
    return d_lambda + d_sigma


class MinibatchPenaltyState(NamedTuple):
    """State of the minibatch penalty chain.

    :ivar z: current point, flat, in unconstrained space.
    :ivar log_prior: data-free log prior (+ log-Jacobian) at ``z``.
    :ivar direction: guided-walk directions (±1 per coordinate).
    """

    z: torch.Tensor
    log_prior: torch.Tensor
    direction: torch.Tensor


class MinibatchPenaltyInfo(NamedTuple):
    """What one iteration did.

    :ivar accepted: the accept decision (post-processing of the release).
    :ivar events: privacy events released (one subsampled Gaussian mechanism).
    :ivar clipped_fraction: fraction of clipped ratios in the batch (**non-private**).
    :ivar noise_std: standard deviation of the privacy noise (data-free).
    :ivar coord: coordinate moved by a one-component proposal (``-1``: all).
    """

    accepted: bool
    events: Tuple
    clipped_fraction: float
    noise_std: float
    coord: int


def minibatch_penalty_init(lik, z: torch.Tensor, rng: torch.Generator) -> MinibatchPenaltyState:
    """Initial state at ``z`` (data-free)."""
    direction = initial_directions(z, rng)
    with torch.no_grad():
        lp = lik.log_prior(z)
    return MinibatchPenaltyState(z, lp, direction)


def minibatch_penalty_step(
    rng: torch.Generator,
    noise,
    state: MinibatchPenaltyState,
    lik,
    *,
    proposal_scale,
    batch_size: int,
    llr_clip: float,
    noise_multiplier: float,
    subsampling: str = "poisson",
    mode: str = "full",
) -> Tuple[MinibatchPenaltyState, MinibatchPenaltyInfo]:
    """One minibatch DP penalty iteration (formulas in the module docstring)."""
    prop = random_walk(rng, state.z, proposal_scale, mode, state.direction)
    n, b, T = lik.num_rows, int(batch_size), lik.temperature
    q = b / n
    dist = torch.linalg.vector_norm(prop.z - state.z)
    clip = llr_clip * dist  # data-free: L ||θ'-θ||
    if subsampling == "poisson":
        idx = noise.poisson_subsample(n, q, device=state.z.device)  # secret batch
    else:
        idx = noise.sample_without_replacement(n, b, device=state.z.device)  # secret batch
    r, lp_new = batch_log_ratios(lik, state.z, prop.z, idx)
    r, clipped = clip_scalars(r, clip)
    frac = float(clipped.double().mean()) if clipped.numel() else 0.0
    if subsampling == "poisson":
        a1, a2 = T / q, T * T * (1.0 - q) / (2.0 * q * q)
        g = a1 * r - a2 * r * r  # Horvitz–Thompson lambda* minus half its unbiased variance estimate
        h = a1 * clip + a2 * clip * clip  # |g_i| <= h: centred interval, substitute sensitivity 2h
        rel = clipped_sum_with_noise(g, h, noise_multiplier, noise)
        value, std = rel.value, rel.noise_std
        event = SubsampledGaussianEvent(q, noise_multiplier, "poisson") if noise_multiplier > 0 else rel.event
    else:
        s = n * T / b
        big_r = r.sum()
        lam = s * big_r  # thesis §3.3, lambda*
        var_b = s * s * ((r * r).sum() - big_r * big_r / b)  # thesis §3.3, sigma_b^2
        c = thesis_sensitivity(n, b, T, llr_clip, dist)  # thesis Thm 8
        std = noise_multiplier * c  # sigma^2 = tau c^2 (thesis Thm 8)
        value = lam - var_b / 2
        if noise_multiplier > 0:
            value = value + noise.normal(std, (), like=value)
            event = SubsampledGaussianEvent(q, noise_multiplier, "without_replacement")
        else:
            event = NonPrivateEvent()
    lambda_hat = value + (lp_new - state.log_prior) + prop.log_q_ratio
    accepted = penalty_accept(rng, lambda_hat, std * std)  # thesis §3.3: exp(λ* − (σ² + σ_b²)/2)
    accepted = accepted and bool(torch.isfinite(lp_new))  # outside the prior's support: reject
    direction = flip_direction(state.direction, prop.coord, accepted) if mode == "gwmh" else state.direction
    if accepted:
        new = MinibatchPenaltyState(prop.z, lp_new, direction)
    else:
        new = MinibatchPenaltyState(state.z, state.log_prior, direction)
    return new, MinibatchPenaltyInfo(accepted, (event,), frac, float(std), prop.coord)


class DPMinibatchPenalty(DPKernel):
    r"""Minibatch DP penalty MH (Räisä 2021 thesis §3.3) as a Pyro ``MCMCKernel``.

    :param model: Pyro model that indexes its data by the data plate's indices.
    :param int batch_size: :math:`b` (expected batch size :math:`qN` under Poisson sampling),
        :math:`1 < b \le N`.
    :param proposal_scale: random-walk standard deviation in unconstrained space.
    :param float llr_clip: :math:`L`: ratios are clipped to :math:`\pm L\|\theta'-\theta\|`.
    :param float noise_multiplier: noise std / sensitivity (:math:`\sqrt\tau` of thesis Thm 8).
    :param str subsampling: ``"poisson"`` (default; PLD accountant) or
        ``"without_replacement"`` (thesis Thm 8; ``dp_rdp`` accountant). See the module doc.
    :param bool one_component, guided_walk: OCU / GWMH proposals as in
        :class:`~pyro_dp.kernels.penalty.DPPenalty`.

    Other keyword arguments are those of :class:`~pyro_dp.kernels.base.DPKernel`. With
    ``non_private=True`` and ``noise_multiplier=0`` it is the (approximate) non-private
    minibatch penalty chain.

    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import MCMC
    >>> from pyro.infer.autoguide.initialization import init_to_mean
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0., dtype=y.dtype), 10.))
    ...     with pyro.plate("data", len(y)) as idx:
    ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y[idx])
    >>> y = torch.randn(2000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1.0
    >>> kernel = DPMinibatchPenalty(model, batch_size=200, proposal_scale=0.1, llr_clip=5.0,
    ...                             noise_multiplier=1.0, temperature=0.05, init_strategy=init_to_mean, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=200, warmup_steps=50, disable_progbar=True)
    >>> mcmc.run(y)
    >>> abs(float(mcmc.get_samples()["mu"].mean()) - 1.0) < 0.5
    True
    """

    def __init__(
        self,
        model,
        batch_size: int,
        proposal_scale,
        llr_clip: float,
        noise_multiplier: Optional[float] = None,
        *,
        subsampling: str = "poisson",
        one_component: bool = False,
        guided_walk: bool = False,
        accountant: Optional[str] = None,
        **kwargs,
    ):
        if subsampling not in SCHEMES:
            raise ValueError(f"subsampling must be one of {SCHEMES}, got {subsampling!r}")
        if accountant is None:
            accountant = "pld" if subsampling == "poisson" else "dp_rdp"
        super().__init__(model, accountant=accountant, **kwargs)
        self.subsampling = subsampling
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size <= 1:
            raise ValueError(f"batch_size must be an integer > 1, got {batch_size!r}")
        self.batch_size = int(batch_size)
        self.proposal_scale = check_positive("proposal_scale", proposal_scale)
        self.llr_clip = check_positive("llr_clip", llr_clip)
        self.noise_multiplier = self._check_noise_multiplier("noise_multiplier", noise_multiplier)
        self.guided_walk = bool(guided_walk)
        self.one_component = bool(one_component) or self.guided_walk
        self.mode = "gwmh" if self.guided_walk else ("ocu" if self.one_component else "full")

    def _event_for(self, nm: float):
        if nm == 0:
            return NonPrivateEvent()
        return SubsampledGaussianEvent(self.batch_size / self.lik.num_rows, nm, self.subsampling)

    def _check_batch(self):
        if self.batch_size > self.lik.num_rows:
            raise ValueError(f"batch_size={self.batch_size} exceeds the number of rows N={self.lik.num_rows}")

    def _check_accountant(self, nm):
        """The accountant must analyse this scheme under this relation: checked before any data
        is read (Poisson -> 'pld'; without replacement -> 'dp_rdp'; see the module doc)."""
        from ..accounting import UnsupportedEventError, get_accountant

        from ..accounting.base import canonical_event

        acc, event = get_accountant(self.accountant), self._event_for(nm)
        if not isinstance(event, NonPrivateEvent) and not acc.supports(event):
            raise UnsupportedEventError(
                f"accountant {self.accountant!r} cannot analyse {event!r} (relation {acc.relation!r}): "
                f"{acc._unsupported(canonical_event(event))}; use 'pld' for subsampling='poisson' "
                "and 'dp_rdp' for 'without_replacement'"
            )

    def _calibrate(self):
        self._check_batch()
        self._check_accountant(1.0 if self.noise_multiplier is None else self.noise_multiplier)
        if self.noise_multiplier is None:
            self.noise_multiplier = self._calibrate_scale(lambda s: ((), [self._event_for(s)]), rtol=1e-4)

    def _per_iteration_events(self):
        return [self._event_for(self.noise_multiplier)]

    def _init_state(self, z):
        self._check_batch()
        if not self.lik.indexable:
            raise ValueError(
                "DPMinibatchPenalty needs a model that indexes its data by the data plate's indices "
                "(`with pyro.plate('data', N) as idx: ... obs=y[idx]`)"
            )
        scale = check_proposal_scale(self.proposal_scale, z)
        self._scale = scale
        return minibatch_penalty_init(self.lik, z, self._rng)

    def _step(self, state):
        return minibatch_penalty_step(
            self._rng,
            self._noise,
            state,
            self.lik,
            proposal_scale=self._scale,
            batch_size=self.batch_size,
            llr_clip=self.llr_clip,
            noise_multiplier=self.noise_multiplier,
            subsampling=self.subsampling,
            mode=self.mode,
        )
