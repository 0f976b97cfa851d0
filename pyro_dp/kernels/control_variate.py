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
by about :math:`T\,\mathrm{nm}_G\cdot 2b\cdot\mathrm{sd}` (data-free: :func:`tilt_sd`),
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

from typing import NamedTuple, Optional

import torch

from ..mechanisms import ClippedSum, clip_and_sum, clipped_fraction, gaussian_event, gaussian_release_spec
from ..mechanisms.clipping import clip_rows
from .base import check_positive
from .mh import MHState, RatioRelease, valid_move
from .releases import (DEFAULT_REFERENCE_SHARE, hmc_reference_noise_multiplier,  # noqa: F401 (re-exported)
                       noise_setting, reference_noise_multiplier)
from .proposals import accept_uniform, penalty_log_accept_threshold, sample_momentum
from .trajectory import HMCInfo, HMCState, trajectory_proposal

__all__ = ["ChainReference", "Settings", "pop_settings", "set_settings", "reference_clip", "reference_events", "tilt_sd", "ControlVariate", "release_reference", "reference_rows", "release_residual", "cv_penalty_release_accept",
           "default_curvature_clip", "cv_gradient_release_fn", "cv_dphmc_step_fn",
           "cv_walk_step", "hmc_release_fns",
           "DEFAULT_CURVATURE_FACTOR", "REFERENCE_CLIP_HEADROOM", "TILT_WARNING_SD"]

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


#: the reference release's expected shift of the means (posterior sds) above which the kernel
#: warns before the chain runs (issue 40's bar for a right run is 0.5 sd)
TILT_WARNING_SD = 0.25



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


def _clipped_gradients(lik, z0: torch.Tensor, clip: float):
    """``(rows, clipped)``: the per-example gradients at ``z0`` through the per-row rule (a
    non-finite row is the zero row) and clipped to norm ``clip``. **Private.**"""
    return clip_rows(lik.per_example_grad(z0)[1], clip)


def _bound(curvature_clip: float, reach: torch.Tensor, reference_clip: float) -> torch.Tensor:
    r""":math:`\min\{hR, 2b'\}`: the bound of a row's gradient difference from its reference gradient
    at distance :math:`R` from the reference, per unit move (module docstring). Data-free."""
    return torch.minimum(curvature_clip * reach, torch.as_tensor(2.0 * reference_clip, dtype=reach.dtype,
                                                                 device=reach.device))


def release_residual(lik, spec, cv: ControlVariate, z, z_new, ll_old, ll_new, xi, curvature_clip: float,
                     reference_clip: float, shards=None):
    r"""``(SumRelease, estimate)``: the release of the clipped Taylor residuals of the move
    :math:`z\to z'` (module docstring, step 2; ``ll_old``/``ll_new`` the per-example
    log-likelihoods at both ends, ``xi`` the release's standard normal drawn before) and the
    untempered log-likelihood-ratio estimate :math:`\hat s + \hat G\cdot\Delta` built on it."""
    delta = z_new - z
    reach = torch.maximum(lik.jump_norm(z, cv.z0), lik.jump_norm(z_new, cv.z0))  # R: symmetric in (θ, θ')
    clip = _bound(curvature_clip, reach, reference_clip) * lik.jump_norm(z_new, z)  # c = min(hR, 2b')‖Δ‖
    rel = spec.release(_residual_ratio_sum(lik, cv, ll_old, ll_new, delta, clip, shards), clip, xi, shards)
    return rel, rel.value + cv.released.to(rel.value.dtype) @ delta.to(rel.value.dtype)


def _residual_ratio_sum(lik, cv: ControlVariate, ll_old, ll_new, delta, clip, shards=None) -> ClippedSum:
    r""":func:`~pyro_dp.mechanisms.clip_and_sum` of the Taylor residuals :math:`\ell_i(\theta') -
    \ell_i(\theta) - \hat g_i\cdot\Delta`, each row's from that row alone: one small graph on the
    compiled path (rows not sharded), else as it is. Eagerly its elementwise passes over the rows
    took most of the compiled control-variate penalty iteration (10^5 rows: about 2 ms, the
    model's graph 0.1 ms; docs/performance.md)."""
    cl = getattr(lik, "compiled", None) if shards is None else None
    if cl is not None:
        def fused(new, old, rows, d, c):
            cs = clip_and_sum((new - old) - rows @ d, c)
            return cs.total, cs.num_clipped, cs.num_rows

        args = (ll_new, ll_old, cv.rows, delta.to(cv.rows.dtype), torch.as_tensor(clip, dtype=ll_new.dtype,
                                                                                 device=ll_new.device))
        graph = cl.fused_graph("cv_residual_ratio_sum", fused, args, full_data=False)  # reads no data rows itself
        if graph is not None:
            return ClippedSum(*graph(*args))
    residual = (ll_new - ll_old) - cv.rows @ delta.to(cv.rows.dtype)  # each row's from that row alone
    return clip_and_sum(residual, clip)


def release_reference(lik, noise, z0: torch.Tensor, clip: float, noise_multiplier: float):
    r"""``(ControlVariate, event)``: the per-example gradients at ``z0``, each through the per-row
    rule and clipped to norm ``clip`` (:math:`b`), and their sum released with Gaussian noise of
    multiplier ``noise_multiplier`` (module docstring, step 1; its standard normals from the
    secret stream), restricted to the likelihood's coordinates. **Reads the data**, once per chain."""
    spec = gaussian_release_spec(noise_multiplier)
    rows, clipped = _clipped_gradients(lik, z0, clip)
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
    return ControlVariate(z0, _clipped_gradients(lik, z0, clip)[0].detach(), released)


def cv_penalty_release_accept(lik, noise, rng, state: MHState, z_new: torch.Tensor, log_q_ratio, *,
                              cv: ControlVariate, curvature_clip: float, reference_clip: float, noise_multiplier: float):
    r"""``(RatioRelease, accepted)`` of one penalty iteration on Taylor residuals (module docstring,
    step 2), eager (the likelihood's passes are compiled when it is). Its randomness is drawn
    before the data is read, in the penalty kernel's order: the release's standard normal (secret
    stream), then the accept uniform (algorithm stream)."""
    return _cv_penalty_test(lik, noise, rng, state, z_new, log_q_ratio, cv, curvature_clip, reference_clip,
                            noise_multiplier)[:2]


def _cv_penalty_test(lik, noise, rng, state: MHState, z_new, log_q_ratio, cv, curvature_clip, reference_clip,
                     noise_multiplier):
    """:func:`cv_penalty_release_accept`'s ``(RatioRelease, accepted)`` and the test's acceptance
    probability (0 for an invalid move; post-processing, what DP-HMC's step-size adaptation reads)."""
    spec = gaussian_release_spec(noise_multiplier)
    T, z = float(lik.temperature), state.z
    loglik = state.cache if state.cache is not None else lik.per_example_loglik(z)
    like_u = torch.zeros((), dtype=torch.promote_types(loglik.dtype, state.log_prior.dtype), device=z.device)
    xi = spec.draw(noise, (), device=z.device)
    u = accept_uniform(rng, like_u)
    ll_new, lp_new = lik.loglik_and_prior(z_new)
    rel, estimate = release_residual(lik, spec, cv, z, z_new, loglik, ll_new, xi, curvature_clip, reference_clip,
                                     getattr(noise, "shards", None))
    # λ̂ = T(ŝ + Ĝ·Δ) + Δ log p + log q-ratio; penalty T²σ²/2 (Yıldırım & Ermiş 2019 §3.1)
    log_ratio = T * estimate
    noise_var = (T * rel.noise_std) ** 2
    lambda_hat = log_ratio + (lp_new - state.log_prior) + torch.as_tensor(log_q_ratio, dtype=log_ratio.dtype)
    log_prob = penalty_log_accept_threshold(lambda_hat, noise_var)
    ok = bool(valid_move(lp_new, lambda_hat, noise_var))  # data-free validity
    accepted = bool(torch.log(u) < log_prob) and ok
    return (RatioRelease(log_ratio, noise_var, lp_new, (spec.event,), clipped_fraction(rel.num_clipped, rel.num_rows),
                         float(rel.noise_std), cache_new=ll_new, cache_old=loglik), accepted,
            float(torch.exp(log_prob)) if ok else 0.0)


def check_share(share: Optional[float]) -> float:
    """``reference_share`` in (0, 1)."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < share < 1.0:
        raise ValueError(f"reference_share must be in (0, 1), got {share!r}")
    return float(share)


# --------------------------------------------------------------------------- DP-HMC
def cv_gradient_release_fn(lik, temperature, spec, cv: ControlVariate, curvature_clip: float, reference_clip: float,
                           shards=None):
    r"""``gradient(z, _, ξ) -> (G(z), ℓ(z) [N], log p(z), SumRelease)``: DP-HMC's gradient release
    (:func:`~.proposals.gradient_release_fn`'s signature) on the reference's control variate,

    .. math::
        G(\theta) = T\Big(\hat G + \sum_i \mathrm{clip}_{c(\theta)}\big(\nabla\ell_i(\theta) - \hat g_i\big)
                    + \mathcal N(0, \sigma^2 I)\Big) + \nabla\log p(\theta),\quad
        c(\theta) = \min\{h\|\theta-\hat\theta\|, 2b'\},\ \sigma = \mathrm{nm}_g\cdot 2c(\theta):

    a row of curvature at most :math:`h` has :math:`\|\nabla\ell_i(\theta)-\hat g_i\|\le
    h\|\theta-\hat\theta\|` (the mean-value theorem; module docstring), so near the reference the
    released gradient is nearly exact. Each row's difference from that row alone, clipped to a
    data-free norm: substitute sensitivity :math:`2c(\theta)`. The clip argument of the plain
    release is ignored (its bound is the reference's)."""

    def gradient(z, _clip, xi):
        clip = _bound(curvature_clip, lik.jump_norm(z, cv.z0), reference_clip)
        ll, cs = _residual_grad_sum(lik, cv, z, clip, shards)
        rel = spec.release(cs, clip, xi, shards)
        lp, grad_lp = lik.log_prior_and_grad(z)
        return temperature * lik.project(rel.value + cv.released.to(rel.value.dtype)) + grad_lp, ll, lp, rel

    return gradient


def _residual_grad_sum(lik, cv: ControlVariate, z, clip, shards=None):
    r"""``(ℓ(z) [N], ClippedSum)`` of the rows :math:`\nabla\ell_i(z) - \hat g_i` clipped to
    ``clip``: on the compiled path one graph (the per-example gradients, the difference, the
    per-row rule, the clip and the sum, :meth:`~pyro_dp.compiled.CompiledLikelihood.clipped_grad_terms`
    with ``minus``; where a full-data pass fits one graph and the rows are not sharded), else the
    likelihood's per-example gradients and :func:`~pyro_dp.mechanisms.clip_and_sum` (the same
    rule; the sums agree to rounding). Eagerly, clipping ``[N, D]`` rows took most of the card's
    DP-HMC iteration (thesis banana, 10^5 rows, epsilon = 8: 32 ms per iteration, 3.8 ms with
    the graph; docs/performance.md, "The control-variate step")."""
    cl = getattr(lik, "compiled", None) if shards is None else None
    if cl is not None:
        def fused(zz, rows, c):
            ll, cs = cl.clipped_grad_terms(zz, c, minus=rows)
            return ll, cs.total, cs.num_clipped, cs.num_rows

        clip_t = torch.as_tensor(clip, dtype=z.dtype, device=z.device)
        graph = cl.fused_graph("cv_residual_grad_sum", fused, (z, cv.rows, clip_t))
        if graph is not None:
            ll, total, n_clipped, n_rows = graph(z, cv.rows, clip_t)
            return ll, ClippedSum(total, n_clipped, n_rows)
    ll, g = lik.per_example_grad(z)
    return ll, clip_and_sum(g - cv.rows, clip)


def cv_dphmc_step_fn(lik, temperature, num_steps: int, grad_spec, ratio_spec, cv: ControlVariate,
                     curvature_clip: float, reference_clip: float, shards=None):
    r"""One DP-HMC iteration after its momentum on the reference's control variate, with
    :func:`~.hmc.dphmc_step_fn`'s signature and outputs (so :func:`~.hmc.hmc_step` draws its
    randomness, keeps or rejects and reports for both): the trajectory of
    :func:`~.hmc.trajectory_proposal` on :func:`cv_gradient_release_fn`'s gradients, then the
    penalty test on the clipped Taylor residual of the trajectory's end (module docstring, step 2,
    with the trajectory's kinetic energies in :math:`\hat\lambda`; Räisä et al. 2021 Thm 3.1).
    Eager: a trajectory that leaves the support releases no ratio (its flags are zero). The
    clip arguments of the plain step are ignored (the bounds are the reference's)."""
    gradient = cv_gradient_release_fn(lik, temperature, grad_spec, cv, curvature_clip, reference_clip, shards)

    def step(z, p0, g0, ll0, lp0, eta, inv_mass, _grad_clip, _llr_clip, xis, xi_l, u):
        state = HMCState(z, lp0, ll0, g0)
        prop = trajectory_proposal(gradient, num_steps, p0, eta, inv_mass, None, xis)(None, None, state)
        end, z_new = prop.aux, prop.z
        valid = bool(torch.isfinite(z_new).all()) and bool(torch.isfinite(end.log_prior))  # data-free
        ratio = [0.0, 0.0, 0.0, False, 0.0]  # clipped rows, rows, sigma, decision, acceptance probability
        if valid:
            r, estimate = release_residual(lik, ratio_spec, cv, z, z_new, ll0, end.loglik, xi_l, curvature_clip,
                                           reference_clip, shards)
            lambda_hat = prop.log_q_ratio.added_to(temperature * estimate + (end.log_prior - lp0))  # + K(p0) - K(pL)
            noise_var = (temperature * r.noise_std) ** 2
            log_prob = penalty_log_accept_threshold(lambda_hat, noise_var)
            ok = bool(valid_move(end.log_prior, lambda_hat, noise_var))
            ratio = [r.num_clipped, r.num_rows, r.noise_std, ok and bool(torch.log(u) < log_prob),
                     torch.exp(log_prob) if ok else 0.0]
        counts = [c for g in end.releases for c in (g.num_clipped, g.num_rows)]
        flags = torch.stack([torch.as_tensor(f).to(dtype=torch.float64, device=z.device)
                             for f in [*counts, *ratio, valid]])
        return z_new, prop.log_q_ratio.p, prop.grad, end.loglik, end.log_prior, flags

    return step


def hmc_release_fns(lik, temperature, num_steps: int, grad_spec, ratio_spec, cv: ControlVariate,
                    curvature_clip: float, reference_clip: float, shards=None):
    """:func:`~.hmc.hmc_step`'s ``terms -> gradient release`` and ``terms -> step`` on the control
    variate (the likelihood's own passes: the terms of a compiled graph are not used)."""
    args = (lik, temperature, grad_spec, cv, curvature_clip, reference_clip, shards)
    return (lambda _: cv_gradient_release_fn(*args),
            lambda _: cv_dphmc_step_fn(lik, temperature, num_steps, grad_spec, ratio_spec, cv, curvature_clip,
                                       reference_clip, shards))


def cv_walk_step(rng, noise, state, lik, *, step_size: float, num_steps: int, inv_mass, mass_sqrt,
                 llr_noise_multiplier: float, control_variate):
    r"""One iteration of DP-HMC without gradient releases (``DPHMC(gradients=False)``, or where
    its default path finds they do not pay: :func:`~pyro_dp.default_path.forecast.hmc_gradient_gain`):
    ``(HMCState, HMCInfo)`` as :func:`~.hmc.hmc_step`'s. The leapfrog on a zero gradient is
    :math:`\theta_L = \theta + L\eta M^{-1}p_0`, :math:`p_L = p_0` — a Gaussian random walk
    (Neal 2011 §5.2 with :math:`U` constant: :math:`K(p_0) - K(p_L) = 0`), symmetric, so its
    log q-ratio is 0 — tested by the penalty test on Taylor residuals
    (:func:`cv_penalty_release_accept`, module docstring step 2). ``control_variate``: ``(cv, h,
    b')``. Draws: the momentum (algorithm stream), the release's standard normal (secret
    stream), the accept uniform (algorithm stream). One release per iteration, the ratio's."""
    cv, h, b = control_variate
    z = state.z
    p0 = sample_momentum(rng, mass_sqrt, z)  # the algorithm's stream, as hmc_step draws it
    z_new = z + (num_steps * step_size) * inv_mass * p0  # L leapfrog steps on a zero gradient (data-free)
    rel, accepted, prob = _cv_penalty_test(lik, noise, rng, MHState(z, state.log_prior, None, state.loglik), z_new,
                                           0.0, cv, h, b, llr_noise_multiplier)
    new = HMCState(z_new, rel.log_prior, rel.cache_new, None) if accepted else state._replace(loglik=rel.cache_old)
    info = HMCInfo(accepted, tuple(rel.events), rel.clipped_fraction, 0.0, rel.clipped_fraction, prob,
                   float(step_size), z_new, rel.noise_std, True)
    return new, info


class Settings(NamedTuple):
    """The control-variate keywords of :class:`~pyro_dp.kernels.penalty.DPPenalty` and
    :class:`~pyro_dp.kernels.hmc.DPHMC` (documented there), with their defaults."""

    control_variate: Optional[bool] = None
    curvature_clip: Optional[float] = None
    reference_share: float = DEFAULT_REFERENCE_SHARE
    reference_noise_multiplier: Optional[float] = None


def pop_settings(kwargs: dict) -> Settings:
    """The control-variate keywords, taken out of a kernel's ``kwargs`` before
    :class:`~pyro_dp.kernels.base.DPKernel` sees them (checked by :func:`set_settings`)."""
    return Settings(**{name: kwargs.pop(name) for name in Settings._fields if name in kwargs})


def set_settings(kernel, settings: Settings, *, runs_control_variate: bool, explicit_noise: bool) -> None:
    """A kernel's control-variate arguments, checked when it is built and kept on it
    (``control_variate``, ``curvature_clip``, ``curvature_clip_given``, ``reference_share``,
    ``reference_noise_multiplier``; ``kernel.reference``: its :class:`ChainReference`).
    ``control_variate=None`` is the default path's choice: on where settings are left to it
    (``kernel.auto_tuned``) and the kernel's step runs it (``runs_control_variate``);
    ``explicit_noise``: the kernel's noise multipliers were given (then the reference's must be too)."""
    control_variate, curvature_clip, reference_share, reference_noise_multiplier = settings
    owner, auto_tuned = type(kernel).__name__, bool(kernel.auto_tuned)
    if control_variate is None:  # the default path (measured: docs/tuning.md, "Control variates")
        control_variate = auto_tuned and runs_control_variate
    if not isinstance(control_variate, bool):
        raise TypeError(f"control_variate must be a bool or None, got {control_variate!r}")
    if control_variate and not runs_control_variate:
        raise ValueError(f"{owner} has its own step: it cannot run control_variate=True")
    kernel.curvature_clip = None if curvature_clip is None else check_positive("curvature_clip", curvature_clip)
    kernel.reference_share = check_share(reference_share)
    if control_variate and curvature_clip is None and not auto_tuned:
        raise ValueError(f"control_variate=True with every clip and step of {owner} given needs "
                         "curvature_clip (the per-row curvature bound h): nothing tunes it privately on this path")
    nm = None if reference_noise_multiplier is None else \
        noise_setting(kernel, "reference_noise_multiplier", reference_noise_multiplier)
    if control_variate and explicit_noise != (nm is not None):
        raise ValueError("control_variate=True: give the noise multipliers and reference_noise_multiplier "
                         "together (or none, to calibrate them to the budget with reference_share)")
    kernel.control_variate, kernel.curvature_clip_given, kernel.reference_noise_multiplier = \
        control_variate, curvature_clip is not None, nm
    kernel.reference = ChainReference()  # this chain's reference release


def reference_clip(base_clip: Optional[float]) -> Optional[float]:
    """The clip :math:`b'` of the reference gradients: :data:`REFERENCE_CLIP_HEADROOM` times the
    kernel's gradient clip (DPPenalty's ``llr_clip``, DPHMC's ``grad_clip``)."""
    return None if base_clip is None else REFERENCE_CLIP_HEADROOM * base_clip


def reference_events(control_variate: bool, noise_multiplier: Optional[float]) -> list:
    """The reference release of every chain, for the plan (``[]`` without control_variate)."""
    return [gaussian_event(noise_multiplier)] if control_variate else []


def tilt_sd(temperature: float, noise_multiplier: Optional[float], clip: Optional[float],
            scale_guess: Optional[float]) -> Optional[float]:
    r"""The standard deviation, in posterior sds (the default path's scale guess), of each mean's
    shift by the reference release's noise, :math:`T\,\mathrm{nm}_G\cdot 2b'\cdot\mathrm{sd}`
    (module docstring); data-free. ``None`` without a reference noise or clip.

    >>> tilt_sd(1.0, 0.5, 2.0, 0.1)
    0.2
    """
    if noise_multiplier is None or clip is None:
        return None
    return float(temperature) * noise_multiplier * 2.0 * clip * (scale_guess or 1.0)


class ChainReference:
    """This chain's reference release (a part of :class:`~pyro_dp.kernels.penalty.DPPenalty` and
    :class:`~pyro_dp.kernels.hmc.DPHMC`, ``kernel.reference``): the released ``(z0, G)`` (public,
    checkpointed), its per-row gradients (``rows``: private, recomputed for a resumed chain, never
    saved) and the default path's posterior-scale guess.

    >>> r = ChainReference(); r.released is None and r.events(True, 3.0) == [gaussian_event(3.0)]
    True
    """

    rows = None  # a ControlVariate: per-row gradients at z0 (private data; not checkpointed)

    def __init__(self):
        self.released = None
        self.scale_guess: Optional[float] = None

    def events(self, control_variate: bool, noise_multiplier: Optional[float]) -> list:
        """The reference release, once per chain (declared until it is made)."""
        return reference_events(control_variate, noise_multiplier) if self.released is None else []

    def ensure(self, lik, noise, z: torch.Tensor, clip: float, noise_multiplier: float) -> tuple:
        """Before a step: the reference release at ``z`` (the chain's first step; its events), or
        a resumed chain's rows computed again (no release); ``()`` when nothing was released."""
        if self.released is None:
            self.rows, event = release_reference(lik, noise, z, clip, noise_multiplier)
            self.released = (self.rows.z0, self.rows.released)
            return (event,)
        if self.rows is None:
            self.rows = reference_rows(lik, *self.released, clip)
        return ()

    def reset(self) -> None:
        """A new state: a new reference (released at the next step, declared)."""
        self.released = self.rows = None

    def checkpoint_state(self) -> dict:
        """What a checkpoint keeps: all but the per-row gradients."""
        return {"released": self.released, "scale_guess": self.scale_guess}

    def __getstate__(self):
        return self.checkpoint_state()  # copies and workers recompute the rows (the same values)
