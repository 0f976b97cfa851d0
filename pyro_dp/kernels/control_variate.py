r"""The penalty test on Taylor residuals: a control variate that takes the noise out of small moves.

The DP penalty test releases the clipped ratio sum :math:`\sum_i \mathrm{clip}_{\pm b\|\Delta\|}
(\ell_i(\theta')-\ell_i(\theta))` with noise of standard deviation :math:`\mathrm{nm}\cdot
2b\|\Delta\|`, :math:`\Delta = \theta'-\theta` (Yıldırım & Ermiş 2019 §3.1; Räisä 2021 thesis §3.1).
Most of a row's ratio is its linear term :math:`g_i\cdot\Delta`; only the rest depends on where
the chain is. So, as the Taylor-expansion proxies of subsampled MH do (Bardenet, Doucet & Holmes
2017, *On Markov chain Monte Carlo methods for tall data*, JMLR 18(47)), split each ratio at a
reference point :math:`\hat\theta` (the chain's private start):

.. math::
    \ell_i(\theta')-\ell_i(\theta) = \hat g_i\cdot\Delta + r_i(\theta,\theta'),\qquad
    \hat g_i = \mathrm{clip}_b\big(\nabla\ell_i(\hat\theta)\big).

1. **Once per chain**, release the reference gradient :math:`\hat G = \sum_i \hat g_i +
   \mathcal N(0, (\mathrm{nm}_G\cdot 2b)^2 I)` (a Gaussian mechanism; substitute sensitivity
   :math:`2b`), restricted to the likelihood's coordinates (the others' gradients are zero).
2. **Every iteration**, release the clipped residual sum

   .. math::
       \hat s = \sum_i \mathrm{clip}_{\pm c}\big(r_i(\theta,\theta')\big) + \mathcal N(0,\sigma^2),\quad
       c = \min\{hR,\ 2b\}\,\|\Delta\|,\quad R = \max\{\|\theta-\hat\theta\|, \|\theta'-\hat\theta\|\},
       \quad \sigma = \mathrm{nm}\cdot 2c,

   and accept by the penalty test with :math:`\hat\lambda = T(\hat s + \hat G\cdot\Delta) + \log
   p(\theta') - \log p(\theta)`, penalty :math:`T^2\sigma^2/2`.

Why it helps: a row whose curvature is at most :math:`h` has :math:`|r_i| \le h R\|\Delta\|` (the
mean-value theorem on :math:`\nabla\ell_i` between :math:`\hat\theta` and the segment), so near the
reference the residual's clip — and the noise — is :math:`hR/b` times the ratio's. In whitened
coordinates :math:`R` is a few posterior sds and :math:`h` about :math:`D/N` per row, against a
gradient bound :math:`b` of about :math:`\sqrt{D/N}`: the noise shrinks by about :math:`\sqrt{D/N}`
times a few, 30–100× at :math:`N = 5\cdot10^4` (measured: ``docs/tuning.md``, "Control variates").

**What the chain targets.** :math:`c` is symmetric in :math:`(\theta,\theta')` and the residual
antisymmetric, so the penalty test keeps detailed balance (Ceperley & Dewing 1999; Yıldırım &
Ermiş 2019 §3.1) for the log-likelihood estimate's mean. With no row clipped that mean is
:math:`\ell(\theta')-\ell(\theta) + \xi_G\cdot\Delta`, where :math:`\xi_G` is the reference
release's noise: the chain targets the tempered posterior tilted by :math:`\exp(T\xi_G\cdot\theta)`,
exactly. The tilt is one fixed draw per chain; in posterior standard deviations each mean moves
by about :math:`T\,\mathrm{nm}_G\cdot 2b\cdot\mathrm{sd}` (data-free: :attr:`DPPenalty.reference_tilt_sd`),
which is why the reference release takes most of the budget (``reference_share``). Rows whose
residual exceeds :math:`c` (curvature above :math:`h`, or a gradient above :math:`b` at the
reference) are clipped, which biases the target as the ratio clip does.

**Privacy.** Each row's residual is computed from that row alone (its ratio and its own clipped
reference gradient), clipped to a data-free bound and summed: substitute sensitivity :math:`2c`;
:math:`\hat G` is a clipped-gradient sum: sensitivity :math:`2b`. One chain is the adaptive
composition of one Gaussian mechanism with multiplier :math:`\mathrm{nm}_G` and one per iteration
with :math:`\mathrm{nm}`; the reference :math:`\hat\theta`, :math:`h`, :math:`b` and the proposals
are public (the private start's and tuner's releases, or the user's settings).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

from ..mechanisms import ClippedSum, clip_and_sum, gaussian_release_spec
from ..mechanisms.clipping import clip_rows
from .mh import MHState, RatioRelease, valid_move
from .proposals import accept_uniform, penalty_log_accept_threshold

__all__ = ["ControlVariate", "release_reference", "reference_rows", "cv_penalty_release_accept", "default_curvature_clip",
           "reference_noise_multiplier", "DEFAULT_CURVATURE_FACTOR", "DEFAULT_REFERENCE_SHARE",
           "REFERENCE_CLIP_HEADROOM", "TILT_WARNING_SD"]

#: :math:`\kappa` of :func:`default_curvature_clip`: a row's curvature bound in units of the mean
#: row's (measured on logistic regression in whitened coordinates: the rows' 0.99 quantile was
#: 1.8 times the mean row's; ``docs/tuning.md``, "Control variates")
DEFAULT_CURVATURE_FACTOR = 2.0

#: the reference gradients' clip :math:`b` as a multiple of the tuned ratio clip (the tuner's
#: quantile of the gradient norms at the start): a row whose gradient is clipped at the reference
#: keeps a residual of the size of its excess, which the residual clip then cuts, so each such row
#: pulls the chain with a shrunk, fixed gradient. The tuner's counts cannot resolve the few rows a
#: bias-variance balance would leave above (about 2 nm_G), and at the tuned clip (about the 0.98
#: quantile at epsilon = 2) about 2 % of a logistic regression's rows were clipped, moving its means
#: by 0.3-0.9 sd in the same direction in every run; the largest norm was 1.5 times the clip.
#: The price: the reference release's noise, and so the tilt, grows in proportion.
REFERENCE_CLIP_HEADROOM = 2.0

#: the reference release's expected shift of the means (posterior sds) above which the kernel
#: warns before the chain runs (issue 40's bar for a right run is 0.5 sd)
TILT_WARNING_SD = 0.25

#: the share of a chain's budget (Gaussian-DP :math:`\mu^2`, after the tuner's) spent on the one
#: reference release: its noise tilts the target for the whole chain, while the residual releases
#: are small and need little
DEFAULT_REFERENCE_SHARE = 0.9


class ControlVariate(NamedTuple):
    r"""A chain's reference (module docstring).

    :ivar z0: the reference point :math:`\hat\theta` (public: the chain's start).
    :ivar rows: the clipped per-example gradients :math:`\hat g_i` at :math:`\hat\theta` ``[N, D]``
        (**private**: used only inside the residual release, never released or checkpointed).
    :ivar released: :math:`\hat G`, the released noisy sum of ``rows`` (public).
    """

    z0: torch.Tensor
    rows: torch.Tensor
    released: torch.Tensor


def default_curvature_clip(dim: int, num_rows: int, scale: float, temperature: float = 1.0,
                           factor: float = DEFAULT_CURVATURE_FACTOR) -> float:
    r"""The curvature bound :math:`h` per row: :math:`\kappa D / (T N s^2)`, ``factor`` times the
    curvature of a mean row when the posterior has standard deviation :math:`s` per coordinate
    (its precision :math:`1/s^2` is :math:`TN` rows' curvature, and a row's rank-one curvature has
    the trace of :math:`D` coordinates). Post-processing of the public scale guess.

    >>> default_curvature_clip(4, 50_000, 1.0)  # whitened coordinates: s = 1
    0.00016
    """
    return float(factor) * dim / (float(temperature) * num_rows * float(scale) ** 2)


def release_reference(lik, noise, z0: torch.Tensor, clip: float, noise_multiplier: float):
    r"""``(ControlVariate, event)``: the per-example gradients at ``z0``, each through the per-row
    rule and clipped to norm ``clip`` (:math:`b`), and their sum released with Gaussian noise of
    multiplier ``noise_multiplier`` (module docstring, step 1; its standard normals from the
    secret stream), restricted to the likelihood's coordinates. **Reads the data**, once per chain."""
    spec = gaussian_release_spec(noise_multiplier)
    _, g = lik.per_example_grad(z0)
    rows, clipped = clip_rows(g, clip)  # a non-finite row is the zero row (the per-row rule)
    xi = spec.draw(noise, tuple(z0.shape), device=z0.device)
    cs = ClippedSum(rows.sum(0), clipped.sum(), torch.tensor(rows.shape[0], device=z0.device))
    released = spec.release(cs, clip, xi, getattr(noise, "shards", None)).value  # sharded rows: summed over ranks
    mask = lik.likelihood_mask
    if mask is not None:  # post-processing: the other coordinates' gradients are exactly zero
        released = released * mask
    return ControlVariate(z0.detach().clone(), rows.detach(), released.detach()), spec.event


def reference_rows(lik, z0: torch.Tensor, released: torch.Tensor, clip: float) -> ControlVariate:
    """The :class:`ControlVariate` of a released reference (a resumed chain's checkpoint holds
    ``z0`` and ``released``, never the private rows): the clipped per-example gradients at ``z0``
    computed again, as :func:`release_reference` computed them. Releases nothing."""
    _, g = lik.per_example_grad(z0)
    return ControlVariate(z0, clip_rows(g, clip)[0].detach(), released)


def cv_penalty_release_accept(lik, noise, rng, state: MHState, z_new: torch.Tensor, log_q_ratio, *,
                              cv: ControlVariate, curvature_clip: float, reference_clip: float, noise_multiplier: float):
    r"""``(RatioRelease, accepted)`` of one penalty iteration on Taylor residuals (module docstring,
    step 2), eager (the likelihood's passes are compiled when it is). Its randomness is drawn
    before the data is read, in the penalty kernel's order: the release's standard normal (secret
    stream), then the accept uniform (algorithm stream)."""
    spec = gaussian_release_spec(noise_multiplier)
    T, z = float(lik.temperature), state.z
    loglik = state.cache if state.cache is not None else lik.per_example_loglik(z)
    like_u = torch.zeros((), dtype=torch.promote_types(loglik.dtype, state.log_prior.dtype), device=z.device)
    xi = spec.draw(noise, (), device=z.device)
    u = accept_uniform(rng, like_u)
    delta = z_new - z
    reach = torch.maximum(lik.jump_norm(z, cv.z0), lik.jump_norm(z_new, cv.z0))  # R: symmetric in (θ, θ')
    clip = torch.minimum(curvature_clip * reach, torch.as_tensor(2.0 * reference_clip, dtype=reach.dtype)) \
        * lik.jump_norm(z_new, z)  # c = min(hR, 2b)‖Δ‖: data-free
    ll_new, lp_new = lik.loglik_and_prior(z_new)
    residual = (ll_new - loglik) - cv.rows @ delta.to(cv.rows.dtype)  # each row's from that row alone
    rel = spec.release(clip_and_sum(residual, clip), clip, xi, getattr(noise, "shards", None))
    # λ̂ = T(ŝ + Ĝ·Δ) + Δ log p + log q-ratio; penalty T²σ²/2 (Yıldırım & Ermiş 2019 §3.1)
    log_ratio = T * (rel.value + cv.released.to(rel.value.dtype) @ delta.to(rel.value.dtype))
    noise_var = (T * rel.noise_std) ** 2
    lambda_hat = log_ratio + (lp_new - state.log_prior) + torch.as_tensor(log_q_ratio, dtype=log_ratio.dtype)
    accepted = bool(torch.log(u) < penalty_log_accept_threshold(lambda_hat, noise_var)) \
        and bool(valid_move(lp_new, lambda_hat, noise_var))  # data-free validity
    n_rows = float(rel.num_rows)
    return RatioRelease(log_ratio, noise_var, lp_new, (spec.event,), float(rel.num_clipped) / n_rows if n_rows else 0.0,
                        float(rel.noise_std), cache_new=ll_new, cache_old=loglik), accepted


def reference_noise_multiplier(noise_multiplier: float, num_iterations: int, share: float) -> float:
    r""":math:`\mathrm{nm}_G` that gives the reference release the share ``share`` of a chain's
    Gaussian-DP :math:`\mu^2` against ``num_iterations`` releases of multiplier ``noise_multiplier``:
    :math:`1/\mathrm{nm}_G^2 = \frac{s}{1-s}\,I/\mathrm{nm}^2`.

    >>> round(reference_noise_multiplier(100.0, 1000, 0.9), 4)
    1.0541
    """
    return float(noise_multiplier) * math.sqrt((1.0 - share) / (share * num_iterations))


def check_share(share: Optional[float]) -> float:
    """``reference_share`` in (0, 1)."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < share < 1.0:
        raise ValueError(f"reference_share must be in (0, 1), got {share!r}")
    return float(share)
