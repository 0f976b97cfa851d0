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

from typing import Optional

import torch

from ..accounting import UnsupportedEventError, get_accountant
from ..compiled import cached_zeros
from ..private import diagnostic  # the clipped-row count (issue 58)
from ..mechanisms.release import graph_release
from ..mechanisms import (
    ClippedSum,
    GaussianStdReleaseSpec,
    NonPrivateEvent,
    SubsampledGaussianEvent,
    batch_without_replacement,
    clip_and_sum,
    clip_scalars,
    gaussian_release_spec,
    poisson_batch,
    subsampled_gaussian_event,
)
from .barker import traced_log_ratios, batch_log_ratios
from .base import check_positive
from .mh import MHState, RandomWalkKernel, RatioRelease, can_fuse, check_batch_size, valid_move
from .proposals import accept_uniform, penalty_log_accept_threshold
from .releases import Budget, ReleasePlan, calibrated_scale, init_events, noise_setting

__all__ = [
    "DPMinibatchPenalty",
    "minibatch_releases",
    "minibatch_penalty_step_fn",
    "minibatch_penalty_release_accept",
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


def _poisson_statistics(a1: float, a2: float):
    r"""``statistics(r, valid, clip) -> (sum_i clip_h(g_i),)`` with :math:`g_i = a_1 r_i - a_2 r_i^2`
    (Horvitz–Thompson :math:`\lambda^*` minus half its unbiased variance estimate) and
    :math:`h = a_1 L\|\theta'-\theta\| + a_2 (L\|\theta'-\theta\|)^2 \ge |g_i|` (module doc),
    through :func:`~pyro_dp.mechanisms.clip_and_sum` (the per-row rule), for
    :func:`minibatch_penalty_step_fn` (``valid``: the 0/1 mask of a padded bucket's real rows)."""

    def statistics(r, valid, clip):
        g = a1 * r - a2 * r * r  # Horvitz–Thompson lambda* minus half its unbiased variance estimate
        return (clip_and_sum(g, _poisson_bound(a1, a2, clip), valid).total,)

    return statistics


def _poisson_bound(a1: float, a2: float, clip):
    r""":math:`h = a_1 c + a_2 c^2 \ge |g_i|` for ratios clipped to :math:`\pm c` (module doc): the
    centred interval of the Poisson terms, substitute sensitivity :math:`2h`."""
    return a1 * clip + a2 * clip * clip


def _sums(r, valid, clip):
    r"""``(sum r_i, sum r_i^2)`` of the clipped ratios (thesis §3.3's :math:`R` and
    :math:`\sum r_i^2`; padded rows are 0)."""
    return r.sum(), (r * r).sum()


def minibatch_penalty_step_fn(lik, n: int, b: int, temperature: float, subsampling: str, llr_clip: float,
                              noise_multiplier: float, log_ratios, padded: bool = False):
    r"""One minibatch penalty iteration after the proposal, written once as a pure tensor function
    ``step(z, z_new, idx, k, ξ, u, log p(θ), log q-ratio) -> (log p(θ'), λ̂_data, flags)`` (formulas
    in the module docstring; Räisä 2021 thesis §3.3, Thm 8): the batch ``idx`` (drawn before it
    from the secret stream; with ``padded`` a bucket of rows of which the first ``k`` are the
    batch, the rest masked to 0), the ratios clipped to :math:`\pm L\|\theta'-\theta\|` (the
    per-row rule), the release — Poisson: :math:`\sum_B \mathrm{clip}_{\pm h}(g_i)` through the
    release spec (:math:`\sigma = \mathrm{nm}\cdot 2h`); without replacement:
    :math:`\lambda^* - \sigma_b^2/2` with :math:`\sigma = \mathrm{nm}\cdot c(\theta,\theta')`
    (thesis Thm 8) — with the standard normal ``ξ`` (secret stream; none without noise), and the
    penalty test :math:`\log u < \min\{0, \hat\lambda - \sigma^2/2\}` ANDed with the data-free
    validity check :func:`~.mh.valid_move`. The eager path runs it as it is (``padded=False``);
    ``jit_compile=True`` traces the same function on a batch bucket (``padded=True``), so Poisson
    sizes share a few graphs. ``flags``: ``(accepted, clipped rows, σ)`` in float64."""
    q = b / n
    a1, a2 = temperature / q, temperature * temperature * (1.0 - q) / (2.0 * q * q)
    s = n * temperature / b
    nm = float(noise_multiplier)
    spec = gaussian_release_spec(nm)
    f64 = torch.float64

    def step(z, z_new, idx, k, xi, u, lp_old, log_q):
        dist = lik.jump_norm(z_new, z)  # likelihood coordinates (PrivateLikelihood.jump_norm)
        clip = llr_clip * dist  # data-free: L ||θ'-θ||
        r, lp_new = log_ratios(z, z_new, idx)
        r, clipped = clip_scalars(r, clip)  # the per-row rule, then the clip
        valid = None
        if padded:  # a bucket: the rows past k are 0 and not counted
            keep = torch.arange(idx.shape[0], device=z.device) < k
            valid = keep.to(r.dtype)
            r, clipped = r * valid, clipped & keep
        if subsampling == "poisson":
            (total,) = _poisson_statistics(a1, a2)(r, valid, clip)  # the sum of clip_h(g_i)
            bound = _poisson_bound(a1, a2, clip)
            rel = spec.release(ClippedSum(total, clipped.sum(), k), bound, xi)  # sigma = nm * 2h (substitute)
            value, std = rel.value, rel.noise_std
        else:
            big_r, sum_sq = _sums(r, valid, clip)
            lam = s * big_r  # thesis §3.3, lambda*
            var_b = s * s * (sum_sq - big_r * big_r / b)  # thesis §3.3, sigma_b^2
            std = noise_multiplier * thesis_sensitivity(n, b, temperature, llr_clip, dist)  # sigma = sqrt(tau) c, Thm 8
            value = lam - var_b / 2
            # released also at nm = 0 (xi is then 0: the value as it is, recorded as NonPrivateEvent)
            value = GaussianStdReleaseSpec.release(value, torch.as_tensor(std, dtype=value.dtype, device=value.device), xi)
        noise_var = std * std
        lambda_hat = value + (lp_new - lp_old) + log_q
        accepted = torch.log(u) < penalty_log_accept_threshold(lambda_hat, noise_var)  # thesis §3.3
        ok = valid_move(lp_new, lambda_hat, noise_var)  # data-free
        flags = torch.stack([(accepted & ok).to(f64), diagnostic(clipped.sum()).to(f64), torch.as_tensor(std).to(f64)])
        return lp_new, value, flags

    return step


def minibatch_penalty_release_accept(lik, noise, rng, state: MHState, z_new: torch.Tensor, log_q_ratio, *,
                                     batch_size: int, llr_clip: float, noise_multiplier: float,
                                     subsampling: str = "poisson"):
    r"""``(RatioRelease, accepted)`` of one minibatch penalty iteration:
    :func:`minibatch_penalty_step_fn` run as one compiled graph on the batch's size bucket
    (:meth:`~pyro_dp.compiled.CompiledLikelihood.bucket_for`; the batch padded with row 0, masked)
    when it can be — the compiled path in one process, a model the trace can represent, a
    non-empty batch: facts about the model's code and the secret batch size only, never the data
    — else as it is. Its randomness is drawn before it, in the eager order: the batch
    (:func:`~pyro_dp.mechanisms.poisson_batch` or
    :func:`~pyro_dp.mechanisms.batch_without_replacement`) and the release's standard normal
    (secret stream), then the accept uniform (algorithm stream, in :math:`\hat\lambda`'s dtype).
    Chain and ledger are the same on both paths (``tests/kernels/test_golden.py``,
    ``tests/test_compiled.py``)."""
    n, b, T = lik.num_rows, int(batch_size), float(lik.temperature)
    nm, L = float(noise_multiplier), float(llr_clip)
    z, dev = state.z, state.z.device
    like_u = cached_zeros((), torch.promote_types(lik.dtype, state.log_prior.dtype), dev)  # λ̂'s dtype
    if subsampling == "poisson":
        idx = poisson_batch(noise, n, b / n, device=dev)  # the secret batch
    else:
        idx = batch_without_replacement(noise, n, b, device=dev)  # the secret batch
    k = int(idx.numel())
    event = subsampled_gaussian_event(b / n, nm, subsampling) if nm > 0 else NonPrivateEvent()  # thesis Thm 8
    xi = gaussian_release_spec(nm).draw(noise, (), device=dev, event=event)  # the release's standard normal (none: nm = 0)
    u = accept_uniform(rng, like_u)  # proposals.penalty_accept's draw (algorithm stream)
    q = torch.as_tensor(log_q_ratio, dtype=z.dtype, device=dev)
    kt = torch.as_tensor(k, device=dev)
    step = None
    if k > 0 and can_fuse(lik, noise):
        name = f"minibatch_step[{subsampling},n={n},b={b},T={T!r},L={L!r},nm={nm!r}]"
        size = lik.compiled.bucket_for(name, k) if subsampling == "poisson" else k
        ints, f64 = cached_zeros((size,), torch.long, dev), cached_zeros((), torch.float64, dev)
        example = (z, z_new, ints, cached_zeros((), torch.long, dev), f64, like_u, state.log_prior,
                   cached_zeros((), z.dtype, dev))
        step = lik.compiled.fused_graph(name, minibatch_penalty_step_fn(lik, n, b, T, subsampling, L, nm,
                                                                        traced_log_ratios(lik), padded=True),
                                        example, full_data=False, bucket=size, released=(1, 2),
                                        noise=(4,) * (nm > 0), release=graph_release)  # (log p(θ'), the released λ̂ part, flags)
        if step is not None and size > k:  # padded with row 0 (masked inside)
            idx = torch.cat([idx, torch.zeros(size - k, dtype=idx.dtype, device=dev)])
    if step is None:  # the same function, run as it is
        step = minibatch_penalty_step_fn(lik, n, b, T, subsampling, L, nm,
                                         lambda z0, z1, i: batch_log_ratios(lik, z0, z1, i))
    lp_new, value, flags = step(z, z_new, idx, kt, xi, u, state.log_prior, q)
    accepted, n_clipped, std = flags.tolist()
    # thesis §3.3: accept w.p. min{1, exp(λ* − (σ² + σ_b²)/2)}
    return RatioRelease(value, std * std, lp_new, (event,), n_clipped / k if k else 0.0, std), accepted == 1.0


def minibatch_releases(noise_multiplier: float, batch_size: int, num_rows: int, subsampling: str) -> ReleasePlan:
    """The minibatch penalty's releases: one subsampled Gaussian per iteration at rate :math:`b/N`
    (thesis Thm 8 for ``"without_replacement"``); its cost, one batch of ratios."""
    event = NonPrivateEvent() if noise_multiplier == 0 else SubsampledGaussianEvent(batch_size / num_rows,
                                                                                   noise_multiplier, subsampling)
    return ReleasePlan((event,), cost=("penalty", float(batch_size), 0.0))


class DPMinibatchPenalty(RandomWalkKernel):
    r"""Minibatch DP penalty MH (Räisä 2021 thesis §3.3) as a Pyro ``MCMCKernel``.

    :param model: Pyro model that indexes its data by the data plate's indices.
    :param int batch_size: :math:`b` (expected batch size :math:`qN` under Poisson sampling),
        :math:`1 < b \le N`; ``None``: the data plate's ``subsample_size``
        (:mod:`~pyro_dp.kernels.declared_batch`), accounted as that :math:`b`.
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
    >>> import torch; from pyro.infer import MCMC; from pyro.infer.autoguide.initialization import init_to_mean
    >>> from pyro_dp.models.examples import normal_mean_model as model  # y_i ~ N(mu, 1), mu ~ N(0, 10^2)
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
        self.batch_size_given = batch_size is not None  # None: the data plate's subsample_size
        self.batch_size = None if batch_size is None else check_batch_size(batch_size)
        self._setup_walk(proposal_scale, one_component=one_component, guided_walk=guided_walk)
        self.llr_clip = check_positive("llr_clip", llr_clip)
        self.noise_multiplier = noise_setting(self, "noise_multiplier", noise_multiplier)

    takes_plate_batch = True
    check_plate_batch_size = staticmethod(check_batch_size)

    def _calibrate(self):
        self._check_data()

        def plan(nm):
            return minibatch_releases(nm, self.batch_size, self.lik.num_rows, self.subsampling)
        # the accountant must analyse this scheme under this relation: checked before any data is read
        # (Poisson -> 'pld'; without replacement -> 'dp_rdp'; see the module doc)
        acc, (event,) = get_accountant(self.accountant), plan(1.0 if self.noise_multiplier is None else
                                                           self.noise_multiplier).per_iteration
        if not isinstance(event, NonPrivateEvent) and not acc.supports(event):
            raise UnsupportedEventError(
                f"accountant {self.accountant!r} cannot analyse {event!r} (relation {acc.relation!r}): "
                f"{acc.unsupported_reason(event)}; use 'pld' for subsampling='poisson' "
                "and 'dp_rdp' for 'without_replacement'"
            )
        if self.noise_multiplier is None:
            self.noise_multiplier = calibrated_scale(plan, Budget.of(self), self.num_iterations,
                                                     init_events=init_events(self), rtol=1e-4, closed_form=False)

    def releases(self, state=None):
        return minibatch_releases(self.noise_multiplier, self.batch_size, self.lik.num_rows, self.subsampling)

    # mh_step's release_accept (moves 2-3) as one function, eager or compiled: never None, so
    # RandomWalkKernel's _release/_accept hooks are not used
    def _release_accept(self, noise, rng, state, z_new, log_q_ratio):
        return minibatch_penalty_release_accept(
            self.lik, noise, rng, state, z_new, log_q_ratio, batch_size=self.batch_size, llr_clip=self.llr_clip,
            noise_multiplier=self.noise_multiplier, subsampling=self.subsampling)
