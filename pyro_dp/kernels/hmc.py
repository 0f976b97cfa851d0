r"""DP-HMC: noisy clipped leapfrog with penalty acceptance (Räisä, Koskela & Honkela 2021;
Räisä 2021 thesis §4.2, Alg. 3).

Each iteration draws :math:`p_0 \sim \mathcal N(0, M)`, runs ``L`` leapfrog steps with the
released gradient estimate (Räisä et al. 2021, §3; thesis Alg. 3)

.. math::
    G(\theta) = T\Big(\sum_{i=1}^N \mathrm{clip}_{b_g}\big(\nabla\ell_i(\theta)\big)
                + \mathcal N(0, \sigma_g^2 I)\Big) + \nabla\log p(\theta),
    \qquad \sigma_g = \mathrm{nm}_g\cdot 2 b_g,

then releases the clipped log-likelihood ratio sum of the proposal,

.. math::
    \hat s = \sum_i \mathrm{clip}_{\pm b_l\|\theta'-\theta\|}\big(\ell_i(\theta')-\ell_i(\theta)\big)
             + \mathcal N(0, \sigma_l^2), \qquad \sigma_l = \mathrm{nm}_l\cdot 2 b_l\|\theta'-\theta\|,

and accepts with the penalty rule :math:`\min\{1, \exp(\hat\lambda - T^2\sigma_l^2/2)\}`,
:math:`\hat\lambda = T\hat s + \log p(\theta') - \log p(\theta) + K(p_0) - K(p_L)`
(Räisä et al. 2021, Thm 3.1: the chain leaves :math:`\pi(\theta)\mathcal N(p;0,M)` invariant
when the ratios are not clipped; gradient clipping and gradient noise only change the
proposal, thesis Thm 9). Kinetic energy and prior terms are data-free; only the
log-likelihood sums are released. Sensitivities are for the substitute relation:
:math:`2b_g` and :math:`2b_l\|\theta'-\theta\|` (thesis Thm 11 proof).

**Gradient reuse** (thesis Alg. 3): the noisy gradient at the accepted (or kept) point is
reused by the next iteration, so ``k`` iterations release ``kL + 1`` gradients and ``k``
ratios. The first gradient is released lazily in the first iteration (set-up stays
data-free) and declared as a once-per-chain release for planning (:func:`~.releases.hmc_releases`).

**Accounting** (thesis Thm 11, Sommer et al. 2019 Lemma 12): the privacy-loss distribution
is :math:`\mathcal N(\mu_S, 2\mu_S)` with

.. math::
    \mu_S = \frac{k}{2\,\mathrm{nm}_l^2} + \frac{kL+1}{2\,\mathrm{nm}_g^2},

i.e. :math:`\sqrt{2\mu_S}`-GDP — exactly what the ``"gdp"`` accountant composes from the
ledger. :func:`dphmc_max_iterations_zcdp` gives the looser zCDP count of thesis Thm 10.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Optional, Tuple

import torch
from pyro.ops.dual_averaging import DualAveraging

from ..accounting.algorithms import (default_noise_ratio, dphmc_events, dphmc_max_iterations,
                                    dphmc_max_iterations_zcdp, dphmc_mu)
from ..compiled import cached_zeros
from ..mechanisms.release import graph_release
from ..mechanisms import NOT_COUNTED, GaussianReleaseSpec, clipped_fraction, gaussian_release_spec
from . import control_variate as cv_mod
from .base import DPKernel, check_positive
from .path_hook import default_path
from .hmc_graphs import flat_gradient as _flat_gradient, one_graph_or_eager as _one_graph_or_eager, xi_like as _xi_like
from .mh import RatioRelease, can_fuse, propose_release_accept, valid_move
from .prior_sweeps import PriorSweeps
from .releases import Budget, hmc_noise, hmc_releases, init_events
from .proposals import DEFAULT_TARGET_ACCEPT_PROB as WALK_TARGET_ACCEPT
from .proposals import (accept_uniform, gradient_release_fn, jitter_factor,
                        penalty_log_accept_threshold, release_gradient, sample_momentum)
from .trajectory import HMCInfo, HMCState, KineticRatio, TrajectoryEnd, trajectory_proposal
from .scales import init_to_center

#: Leapfrog steps per iteration when ``num_steps`` is not given (each costs one gradient release).
DEFAULT_NUM_STEPS = 5


#: Acceptance the step-size adaptation targets when the step size is tuned privately (the
#: default path). Between the noise-limited optimum (~0.23) and leapfrog's (~0.65): measured on
#: a three-latent model (N = 5000; 2 seeds each; 2026-11-26), the smallest effective sample size
#: over the latents was best at 0.5 of {0.3, 0.5, 0.65, 0.8}, at eps = 100 (7.1-7.6 against
#: 3.2-4.9 at 0.8) and at eps = 10^4 (154-168 against 31-56 at 0.8).
DEFAULT_TARGET_ACCEPT_PROB = 0.5

__all__ = ["default_noise_ratio", "DPHMC", "HMCState", "HMCInfo", "hmc_init", "hmc_step", "release_gradient",
           "gradient_release_fn", "dphmc_step_fn", "trajectory_proposal", "trajectory_release_accept", "KineticRatio",
           "TrajectoryEnd", "jitter_factor", "dphmc_mu", "dphmc_events", "dphmc_max_iterations",
           "dphmc_max_iterations_zcdp", "DEFAULT_NUM_STEPS", "DEFAULT_TARGET_ACCEPT_PROB"]


def trajectory_release_accept(lik, temperature, ratio_spec: GaussianReleaseSpec, ratio_terms, llr_clip, xi_l, u,
                              shards=None):
    r"""DP-HMC's ratio release and penalty test as the MH core's ``release_accept(noise, rng,
    state, z', log q-ratio, end) -> (RatioRelease, accepted)``, a pure tensor function (``xi_l``,
    the ratio's standard normal, and ``u``, the accept uniform, drawn before it): the release of
    the clipped ratio sum at the trajectory's end (``end``, a :class:`TrajectoryEnd`: no second
    model evaluation)

    .. math::
        \hat s = \sum_i\mathrm{clip}_{\pm b_l\|\theta_L-\theta\|}\big(\ell_i(\theta_L)-\ell_i(\theta)\big)
                 + \sigma_l\xi_l,\qquad \sigma_l = \mathrm{nm}_l\cdot 2b_l\|\theta_L-\theta\|

    (thesis Thm 11 proof; ``ratio_terms`` clips and sums) and the penalty test
    :math:`\log u < \min\{0, \hat\lambda - T^2\sigma_l^2/2\}` with :math:`\hat\lambda = T\hat s
    + \log p(\theta_L) - \log p(\theta) + K(p_0) - K(p_L)` (Räisä et al. 2021 Thm 3.1; the
    :class:`KineticRatio`), ANDed with the data-free validity check (a finite trajectory end
    and prior, and :func:`~.mh.valid_move`). ``accepted`` is a tensor; the release's ``extra`` is
    ``(ratio SumRelease, acceptance probability, validity)``: when the trajectory is not valid
    the caller drops the ratio release (a data-free rejection: nothing of it is used)."""

    def release_accept(noise, rng, state, z_new, log_q_ratio, end):
        clip = llr_clip * lik.jump_norm(z_new, state.z)  # b_l ||θ'−θ|| (thesis Thm 11), likelihood coordinates
        r = ratio_spec.release(ratio_terms(end.loglik, state.loglik, clip), clip, xi_l, shards)
        log_ratio = temperature * r.value
        # Räisä et al. 2021 Thm 3.1 / thesis Alg. 3: λ̂ = T ŝ + Δ log p + K(p_0) − K(p_L)
        lambda_hat = log_q_ratio.added_to(log_ratio + (end.log_prior - state.log_prior))
        # penalty −T²σ_l²/2 (Yıldırım & Ermiş 2019 §3.1)
        noise_var = (temperature * r.noise_std) ** 2
        log_prob = penalty_log_accept_threshold(lambda_hat, noise_var)
        prob = torch.exp(log_prob)
        valid = torch.isfinite(z_new).all() & torch.isfinite(end.log_prior)  # data-free: left the support / diverged
        ok = valid & valid_move(end.log_prior, lambda_hat, noise_var)  # mh.valid_move: the one validity check
        accepted = (torch.log(u) < log_prob) & ok
        rel = RatioRelease(log_ratio, noise_var, end.log_prior, (ratio_spec.event,), None, r.noise_std,
                           cache_new=end.loglik, cache_old=state.loglik, extra=(r, torch.where(ok, prob, 0.0), valid))
        return rel, accepted

    return release_accept


def dphmc_step_fn(lik, temperature, num_steps: int, grad_spec: GaussianReleaseSpec, ratio_spec: GaussianReleaseSpec,
                  grad_terms, prior_terms, ratio_terms, shards=None):
    r"""One DP-HMC iteration after its momentum, written once as a pure tensor function
    ``step(θ, p_0, G_0, ℓ(θ), log p(θ), η, M⁻¹, b_g, b_l, ξ [L, D], ξ_l, u) -> (θ_L, p_L, G_L,
    ℓ(θ_L), log p(θ_L), flags)``: moves 1–3 of the MH core (:func:`~.mh.propose_release_accept`)
    with the trajectory as the proposal (:func:`trajectory_proposal`: ``L`` leapfrog steps on the
    released gradients of :func:`gradient_release_fn`, thesis Alg. 3) and the ratio release
    with the penalty test as the rule (:func:`trajectory_release_accept`). Its randomness is
    drawn before it (:func:`hmc_step`); eager runs it as it is, the compiled path traces the
    same function, whole trajectory included, into one graph
    (:meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph`), where no clipped sum leaves
    without its noise. ``flags`` (float64, read in one transfer): the ``L`` gradient releases'
    clipped and total rows, then the ratio's clipped rows, rows and :math:`\sigma_l`, the
    decision, the acceptance probability and the validity. The keep (move 4) is the caller's,
    on the decision read from ``flags``."""
    gradient = gradient_release_fn(lik, temperature, grad_spec, grad_terms, prior_terms, shards)

    def step(z, p0, g0, ll0, lp0, eta, inv_mass, grad_clip, llr_clip, xis, xi_l, u):
        _, prop, rel, accepted = propose_release_accept(
            None, None, HMCState(z, lp0, ll0, g0),
            propose=trajectory_proposal(gradient, num_steps, p0, eta, inv_mass, grad_clip, xis),
            release_accept=trajectory_release_accept(lik, temperature, ratio_spec, ratio_terms, llr_clip, xi_l, u,
                                                     shards))
        r, prob, valid = rel.extra
        counts = [c for g in prop.aux.releases for c in (g.num_clipped, g.num_rows)]
        flags = [*counts, r.num_clipped, r.num_rows, r.noise_std, accepted, prob, valid]
        flags = torch.stack([torch.as_tensor(f).to(dtype=torch.float64, device=z.device) for f in flags])
        return prop.z, prop.log_q_ratio.p, prop.grad, rel.cache_new, rel.log_prior, flags

    return step


def hmc_init(lik, z: torch.Tensor) -> HMCState:
    """Initial state at ``z``: data-free (the first gradient is released lazily)."""
    with torch.no_grad():
        lp = lik.log_prior(z)
    return HMCState(z, lp, None, None)


def hmc_step(
    rng: torch.Generator,
    noise,
    state: HMCState,
    lik,
    *,
    step_size: float,
    num_steps: int,
    inv_mass,
    mass_sqrt,
    grad_clip: float,
    llr_clip: float,
    grad_noise_multiplier: float,
    llr_noise_multiplier: float,
    control_variate=None,
    count_clipped: bool = True,
) -> Tuple[HMCState, HMCInfo]:
    """One DP-HMC iteration (thesis Alg. 3, one pass of the outer loop): :func:`dphmc_step_fn`
    (and, at a chain's first iteration, :func:`gradient_release_fn` for thesis Alg. 3's
    :math:`G_{1,0}`), each one compiled graph when it can be (the compiled path in one process,
    a model the trace can represent, a pass without chunks; decided from code and shapes before
    the draws it needs), else run as it is. The randomness is drawn before them, in the order
    the eager loop always drew it: the momentum (algorithm stream); :math:`G_{1,0}`'s standard
    normal (secret stream, then its release); the ``L`` gradient normals, one release after
    another, and the ratio's (secret stream, by the release specs); the accept uniform
    (algorithm stream, in :math:`\\hat\\lambda`'s dtype). A trajectory that leaves the support
    is rejected data-free with no ratio release: its ratio normal is withdrawn
    (:meth:`~pyro_dp.mechanisms.GaussianReleaseSpec.withdraw`: never added to anything
    released), so the secret stream goes on as if it had not been drawn. ``control_variate``: ``(cv,
    h, b')`` runs :func:`~.control_variate.cv_dphmc_step_fn` (eager) in its place, draws unchanged.
    ``count_clipped=False``: the clipped fractions of the info are NaN, and the graph does not
    count the clipped rows (a statistic of the raw data that only ``nonprivate_diagnostics=True``
    shows; counting it costs the compiled iteration about 8 %)."""
    z, T, L = state.z, lik.temperature, num_steps
    g_spec, l_spec = gaussian_release_spec(grad_noise_multiplier), gaussian_release_spec(llr_noise_multiplier)
    shards = getattr(noise, "shards", None)
    cl = lik.compiled if can_fuse(lik, noise) and control_variate is None else None
    gradient_fn, step_fn = (  # terms -> the gradient release, terms -> the step (plain, or the control variate's)
        (lambda terms: gradient_release_fn(lik, T, g_spec, *terms[:2], shards),
         lambda terms: dphmc_step_fn(lik, T, L, g_spec, l_spec, *terms, shards)) if control_variate is None
        else cv_mod.hmc_release_fns(lik, T, L, g_spec, l_spec, *control_variate, shards))
    names = f"T={T!r},nm_g={g_spec.noise_multiplier!r}"
    events, grad_rows = [], []
    p0 = sample_momentum(rng, mass_sqrt, z)  # the algorithm's stream (momenta); the noise has its own
    if state.grad is None:  # thesis Alg. 3, G_{1,0}: the one extra gradient of the chain
        gradient, (clip,) = _one_graph_or_eager(
            lik, cl, f"dphmc_gradient[{names}]",
            lambda terms: _flat_gradient(gradient_fn(terms)),
            lambda c: (z, c, _xi_like(z)), (grad_clip,), z, count_clipped,
            dict(released=(0,), diagnostic=(3,), noise=(2,) * g_spec.adds_noise, release=graph_release))  # (G, ℓ private, log p, clipped, rows)
        g0, ll0, _, n_clipped, n_rows = gradient(z, clip, g_spec.draw(noise, z.shape, device=z.device))
        events.append(g_spec.event)
        grad_rows.append((float(n_clipped), float(n_rows)))
        state = state._replace(grad=g0, loglik=ll0)
    u_dtype = functools.reduce(torch.promote_types, (state.loglik.dtype, state.log_prior.dtype, z.dtype, p0.dtype))
    step, (eta, gc, lc) = _one_graph_or_eager(
        lik, cl, f"dphmc_step[L={L},{names},nm_l={l_spec.noise_multiplier!r}]",
        step_fn,
        lambda e, g, c: (z, p0, state.grad, state.loglik, state.log_prior, e, inv_mass, g, c, _xi_like(z, L),
                         cached_zeros((), torch.float64, z.device), cached_zeros((), u_dtype, z.device)),
        (step_size, grad_clip, llr_clip), z, count_clipped,  # (θ_L, p_L, G_L, ℓ(θ_L) private, log p(θ_L), flags)
        dict(released=(0, 1, 2, 4, 5), noise=(9,) * g_spec.adds_noise + (10,) * l_spec.adds_noise,
             release=graph_release))
    # the L gradient normals, one release after another (draw_each: as L draws would make them)
    xis = g_spec.draw_each(noise, L, z.shape, device=z.device)
    xi_l = l_spec.draw_tentative(noise, (), device=z.device)  # withdrawn below if the ratio is not released
    rng_mark = rng.get_state() if u_dtype != z.dtype else None
    u = accept_uniform(rng, cached_zeros((), u_dtype, z.device))
    z_new, p_new, g_new, ll_new, lp_new, flags = step(z, p0, state.grad, state.loglik, state.log_prior, eta, inv_mass,
                                                      gc, lc, xis, xi_l, u)
    flags = flags.tolist()
    grad_rows += list(zip(flags[:2 * L:2], flags[1:2 * L:2]))
    llr_clipped, llr_rows, std, accepted, accept_prob, valid = flags[2 * L:]
    events.extend([g_spec.event] * L)
    released = valid == 1.0
    if released:
        events.append(l_spec.event)
        llr_frac, noise_std = clipped_fraction(llr_clipped, llr_rows), std
    else:  # left the support / diverged: a data-free rejection, no ratio released
        l_spec.withdraw(noise)
        if rng_mark is not None:  # the eager loop drew this rejection's uniform in the latents' dtype
            rng.set_state(rng_mark)
            accept_uniform(rng, cached_zeros((), z.dtype, z.device))
        llr_frac, noise_std = 0.0, 0.0
    accepted = accepted == 1.0
    new = HMCState(z_new, lp_new, ll_new, g_new) if accepted else state  # thesis Alg. 3: G_{i+1,0} = G_{i,L} or G_{i,0}
    if not count_clipped:  # not counted (the graph's counts are NOT_COUNTED; eager ones are dropped)
        grad_rows, llr_frac = [(NOT_COUNTED, r) for _, r in grad_rows], float("nan") if released else 0.0
    grad_fracs = [clipped_fraction(c, r) for c, r in grad_rows]
    fracs = grad_fracs + ([llr_frac] if released else [])
    info = HMCInfo(accepted, tuple(events), sum(fracs) / len(fracs), sum(grad_fracs) / len(grad_fracs), llr_frac,
                   accept_prob, float(step_size), z_new, noise_std, released)
    return new, info


class DPHMC(DPKernel):
    r"""Differentially private HMC (Räisä, Koskela & Honkela 2021) as a Pyro ``MCMCKernel``.

    :param model: Pyro model with its observed sites in a data plate.
    :param float step_size: leapfrog step size :math:`\eta > 0` (unconstrained space).
    :param int num_steps: leapfrog steps per iteration :math:`L \ge 1`.
    :param float grad_clip: :math:`b_g`: per-example gradients are clipped to L2 norm
        :math:`b_g` (clipping changes only the proposal; the chain stays exact).
    :param float llr_clip: :math:`b_l`: per-example log-likelihood ratios are clipped to
        :math:`\pm b_l\|\theta'-\theta\|` (exact when nothing is clipped, e.g. a
        :math:`b_l`-Lipschitz log-likelihood).
    :param float grad_noise_multiplier: :math:`\mathrm{nm}_g = \sigma_g/(2b_g)`.
    :param float llr_noise_multiplier: :math:`\mathrm{nm}_l = \sigma_l/(2b_l\|\theta'-\theta\|)`.
        Omit both and give ``epsilon``, ``delta`` and ``num_iterations`` to calibrate
        them with ``grad_noise_multiplier = noise_ratio * llr_noise_multiplier``.
    :param mass: diagonal mass :math:`M` (scalar or one per coordinate; default 1).
    :param bool jitter: multiply :math:`\eta` by :func:`jitter_factor` each iteration.
    :param bool adapt_step_size: dual averaging (Hoffman & Gelman 2014, Alg. 5) of
        :math:`\log\eta` towards ``target_accept_prob`` during the ``warmup_steps`` given
        to ``MCMC``. It reads only the penalty acceptance probability computed from the
        released :math:`\hat\lambda` — post-processing, so it **costs no privacy**; warmup
        iterations release data like any other and are counted in the ledger.
    :param float target_accept_prob: target of the adaptation; default
        :data:`DEFAULT_TARGET_ACCEPT_PROB` (0.5) when the step size is tuned privately (the
        default path), else 0.8 (Pyro's ``HMC``). The penalty rejects long moves, so the
        expected squared jump peaks at a lower acceptance than noise-free HMC's: for a move
        limited by its penalty noise alone, at :math:`2\Phi(-1.2)\approx 0.23` (maximise
        :math:`\sigma^2\cdot 2\Phi(-\sigma/2)`, the acceptance of a noise-only penalty test,
        Yıldırım & Ermiş 2019 §3.1), for leapfrog error alone near 0.65 (Beskos et al. 2013).
    :param float noise_ratio: :math:`\mathrm{nm}_g/\mathrm{nm}_l` used by calibration; default
        :func:`~pyro_dp.accounting.algorithms.default_noise_ratio`, :math:`\sqrt L` (the least noise in the accept test per unit
        move at a fixed budget; measured in ``docs/tuning.md``).
    :param bool control_variate: the gradients and the ratio on Taylor residuals around the
        chain's start, after one reference-gradient release (:mod:`pyro_dp.kernels.control_variate`);
        ``curvature_clip``, ``reference_share`` and ``reference_noise_multiplier`` as for
        :class:`~pyro_dp.kernels.penalty.DPPenalty`. Default (``None``): on the default path.
    :param bool gradients: release gradients (``True``, thesis Alg. 3) or not (``False``: the
        trajectory on a zero gradient, a random walk of ``L`` steps under the same test,
        :func:`~pyro_dp.kernels.control_variate.cv_walk_step`; on the control variate only, and
        with ``llr_noise_multiplier`` alone when the noise is given). Default (``None``): on the default path, where
        :func:`pyro_dp.default_path.forecast.hmc_gradient_gain` forecasts they pay (data-free, from
        :math:`N`, the budget, the run and the model's size; ``docs/choosing.md``), else
        ``True``. :attr:`uses_gradients` says which; so do ``diagnostics()`` and ``logging()``.

    **The default path** (``MCMC(DPHMC(model))``, ``DPHMC(model, epsilon=2.0)``): with
    ``step_size``, ``grad_clip`` or ``llr_clip`` left out, a
    :class:`~pyro_dp.default_path.tuning.DPAutoTune` (``init``) spends a fixed share of each
    chain's budget on a private start (DP-Adam with an adaptive clip, from the prior centre
    :func:`~pyro_dp.kernels.scales.init_to_center`) and on private quantiles of the
    per-example gradient norms there (``llr_clip`` per unit jump and ``grad_clip`` both at the
    ratio clip's quantile, :meth:`~pyro_dp.default_path.tuning.DPAutoTune.ratio_quantile`: 0.98,
    raised at large :math:`N` so that about :math:`2\,\mathrm{nm}` rows lie above); these
    releases are in the ledger as ``"tune:clip"`` and
    ``"tune:start"``. The step size starts at the smaller of the step whose trajectory
    of ``num_steps`` (default :data:`DEFAULT_NUM_STEPS`) steps has penalty noise of standard
    deviation about 1 and a posterior-scale guess, and adapts during warmup (dual averaging on
    released quantities towards acceptance :data:`DEFAULT_TARGET_ACCEPT_PROB`, ``adapt_step_size``
    defaults to ``True`` then) with a floor of a tenth of its start. Latents that enter only the
    prior (:attr:`~pyro_dp.likelihood.PrivateLikelihood.likelihood_mask` 0) move in data-free
    sweeps of their own (:mod:`~pyro_dp.kernels.prior_sweeps`; inverse mass 0 in the trajectory).
    The noise is calibrated to the budget over the iterations ``MCMC`` runs. See ``docs/tuning.md``.

    ``non_private=True`` is the documented test mode: noise multipliers may be 0 (such
    releases are :class:`~pyro_dp.mechanisms.NonPrivateEvent`, ε = ∞). Other keyword
    arguments are those of :class:`~pyro_dp.kernels.base.DPKernel`.

    On the default path the gradients and the test run on the control variate
    (``control_variate``): near the private start their noise no longer grows with the jump.
    The plain kernel's ratio noise does, so start it near the posterior (``initial_params``) and
    choose :math:`b_l` near the per-example log-likelihood's Lipschitz constant.

    Diagnostics add ``"step size"``; with ``nonprivate_diagnostics=True`` also
    ``"non-private gradient clipped fraction"`` and ``"non-private ratio clipped fraction"``
    (computed from the raw data: **not covered by ε**, for the data holder only).

    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import MCMC
    >>> from pyro_dp.models.examples import normal_mean_model as model  # y_i ~ N(mu, 1), mu ~ N(0, 10^2)
    >>> y = (torch.randn(300, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1.0).clamp(-3, 5)
    >>> kernel = DPHMC(model, step_size=0.03, num_steps=3, grad_clip=4.0, llr_clip=4.0,
    ...                grad_noise_multiplier=5.0, llr_noise_multiplier=1.0, seed=0)
    >>> start = {"mu": torch.tensor(1.0, dtype=torch.float64)}  # a public guess
    >>> mcmc = MCMC(kernel, num_samples=100, warmup_steps=30, initial_params=start, disable_progbar=True)
    >>> mcmc.run(y)
    >>> abs(float(mcmc.get_samples()["mu"][50:].mean()) - float(y.mean())) < 0.2
    True
    >>> kernel.ledger.num_releases  # 130 ratios + (130 * 3 + 1) gradients
    521
    """

    #: every release is a clipped sum over all rows: the rows can be sharded (pyro_dp.distributed)
    supports_distributed = True
    #: the default path whitens (a private posterior metric, docs/tuning.md): on a 0.8-correlated
    #: logistic regression at eps = 8, 0.28-0.41 sd off in 3 of 3 runs against 0.60-0.99 unwhitened;
    #: whitening implies the per-coordinate scales (unscaled columns: 29-43 sds off -> 0.6-0.7)
    whiten_by_default = True

    def __init__(
        self,
        model,
        step_size: Optional[float] = None,
        num_steps: int = DEFAULT_NUM_STEPS,
        grad_clip: Optional[float] = None,
        llr_clip: Optional[float] = None,
        grad_noise_multiplier: Optional[float] = None,
        llr_noise_multiplier: Optional[float] = None,
        *,
        mass=None,
        jitter: bool = False,
        adapt_step_size: Optional[bool] = None,
        target_accept_prob: Optional[float] = None,
        noise_ratio: Optional[float] = None,
        gradients: Optional[bool] = None,
        **kwargs,
    ):
        cv = cv_mod.pop_settings(kwargs)  # control_variate, curvature_clip, reference_share, reference_noise_multiplier
        auto = tuple(n for n, v in (("step_size", step_size), ("grad_clip", grad_clip), ("llr_clip", llr_clip))
                     if v is None)
        if auto and kwargs.get("init_strategy") is None:
            kwargs["init_strategy"] = init_to_center  # the tuner's data-free start: the prior centre
        super().__init__(model, **kwargs)
        self.prior_sweeps = PriorSweeps()  # data-free sweeps of the prior-only coordinates (default path)
        #: settings the kernel tunes privately at every chain's start (left out by the user)
        self.auto_tuned = auto
        if adapt_step_size is None:
            adapt_step_size = "step_size" in auto
        self.step_size = None if step_size is None else check_positive("step_size", step_size)
        if isinstance(num_steps, bool) or not isinstance(num_steps, numbers.Real) or num_steps != int(num_steps):
            raise TypeError(f"num_steps must be an integer >= 1, got {num_steps!r}")
        if num_steps < 1:
            raise ValueError(f"num_steps must be an integer >= 1, got {num_steps!r}")
        self.num_steps = int(num_steps)
        self.grad_clip = None if grad_clip is None else check_positive("grad_clip", grad_clip)
        self.llr_clip = None if llr_clip is None else check_positive("llr_clip", llr_clip)
        if isinstance(mass, (list, tuple)):
            mass = torch.tensor(mass, dtype=torch.float64)
        self.mass = None if mass is None else check_positive("mass", mass)
        self.jitter = bool(jitter)
        self.adapt_step_size = bool(adapt_step_size)
        self._target_given = target_accept_prob is not None
        self.target_accept_prob = float(DEFAULT_TARGET_ACCEPT_PROB if "step_size" in auto else 0.8) \
            if target_accept_prob is None else float(target_accept_prob)
        if not 0.0 < self.target_accept_prob < 1.0:
            raise ValueError(f"target_accept_prob must be in (0, 1), got {target_accept_prob!r}")
        self.noise_ratio = default_noise_ratio(self.num_steps) if noise_ratio is None else check_positive(
            "noise_ratio", noise_ratio)
        if gradients is not None and not isinstance(gradients, bool):
            raise TypeError(f"gradients must be True, False or None, got {gradients!r}")
        if gradients is False and grad_noise_multiplier is not None:
            raise ValueError("gradients=False releases no gradients: leave grad_noise_multiplier out")
        given = (grad_noise_multiplier is not None or (gradients is False and llr_noise_multiplier is not None),
                 llr_noise_multiplier is not None)
        if given == (False, False):
            if self.non_private:
                raise ValueError("non_private=True is the noise-free test mode: set both noise multipliers to 0")
            self.privacy.adopt_default_budget()  # calibrated to the budget (the default one if none is given)
        elif given != (True, True):
            raise ValueError("give both grad_noise_multiplier and llr_noise_multiplier, or neither (calibration)")
        else:
            if gradients is not False:
                grad_noise_multiplier = check_positive("grad_noise_multiplier", grad_noise_multiplier,
                                                       allow_zero=self.non_private)
            llr_noise_multiplier = check_positive("llr_noise_multiplier", llr_noise_multiplier,
                                                  allow_zero=self.non_private)
        self.grad_noise_multiplier = grad_noise_multiplier
        self.llr_noise_multiplier = llr_noise_multiplier
        self.llr_noise_multiplier_given = given == (True, True)
        cv_mod.set_settings(self, cv, runs_control_variate=True, explicit_noise=given == (True, True))
        if gradients is False and not self.control_variate:
            raise ValueError("gradients=False (a random walk of num_steps steps under the penalty test) runs on the "
                             "control variate: leave control_variate out (or True), or use DPPenalty")
        self._gradients = gradients
        self._gradients_decided: Optional[bool] = None  # the default path's choice, fixed with its noise (_calibrate)
        self._adapted_step_size = self.step_size
        self._step_floor = 0.0
        if self.auto_tuned:
            self.init = default_path().tuner(self)

    @property
    def uses_gradients(self) -> bool:
        """Whether this run releases gradients (``gradients``): as given; else on the default path
        (step size and noise left to it, control variate on) where
        :func:`~pyro_dp.default_path.forecast.hmc_gradient_gain` is at least
        :data:`~pyro_dp.default_path.forecast.HMC_GRADIENT_GAIN` for this :math:`N`, budget and run (data-free;
        decided at set-up, before the plan, and kept with the noise it calibrates: a later run's
        other warmup length does not change it); else ``True``."""
        if self._gradients is not None:
            return self._gradients
        decided = self.__dict__.get("_gradients_decided")  # (a kernel pickled before it existed: none)
        if decided is not None:
            return decided
        if (self.llr_noise_multiplier_given or not self.control_variate or "step_size" not in self.auto_tuned
                or self.epsilon is None or getattr(self, "lik", None) is None):
            return True
        return default_path().gradients_pay(self)  # the forecast: pyro_dp.default_path (path_hook)

    @property
    def forecast_kernel(self) -> str:
        """The default path's forecast kernel (``DPKernel.forecast_kernel``): without gradient releases DP-HMC is the random walk
        (:func:`~.control_variate.cv_walk_step`) and is forecast as one."""
        return "DPHMC" if self.uses_gradients else "DPPenalty"

    # ------------------------------------------------------------------ privacy plan
    def releases(self, state=None):
        # thesis Alg. 3 / Thm 11: G_{1,0} once per chain; per iteration L gradients + 1 ratio (without gradients:
        # the ratio); auto_compile: num_steps gradient sums and one ratio over every row (the gradient is reused)
        grads, n = self.uses_gradients, float(self.lik.num_rows)
        plan = dataclasses.replace(hmc_releases(self.num_steps, self.llr_noise_multiplier, self.grad_noise_multiplier,
                                                gradients=grads, reference_noise_multiplier=self.reference_noise_multiplier
                                                if self.control_variate else None),
                                   cost=("hmc", n, self.num_steps * n) if grads else ("penalty", n, 0.0))
        if state is None:
            return plan
        # a state without a released gradient (a new chain, or params changed from outside) releases G(z)
        # first: thesis Alg. 3's G_{1,0}, after the chain's reference (once) and before the iteration's releases
        g10 = plan.once[1:] if self.control_variate else plan.once
        return dataclasses.replace(plan, step=tuple(self.reference.events(self.control_variate,
                                                                          self.reference_noise_multiplier))
                                   + (g10 if state.grad is None else ()) + plan.per_iteration)

    def _calibrate(self):
        if self.llr_noise_multiplier is None:
            grads = self.uses_gradients
            self._gradients_decided = grads  # the noise below is calibrated for this choice: it stays
            s, g, ref = hmc_noise(Budget.of(self), self.num_iterations, init_events(self), num_steps=self.num_steps,
                                  noise_ratio=self.noise_ratio, gradients=grads, control_variate=self.control_variate,
                                  reference_share=self.reference_share)
            self.llr_noise_multiplier, self.grad_noise_multiplier = s, g
            if ref is not None:  # control_variate: one reference release per chain
                self.reference_noise_multiplier = ref
            if not self._target_given:  # the walk's target is the random walk's (proposals.DEFAULT_TARGET_ACCEPT_PROB)
                self.target_accept_prob = DEFAULT_TARGET_ACCEPT_PROB if grads else WALK_TARGET_ACCEPT

    # ------------------------------------------------------------------ lifecycle
    _chain_attrs = DPKernel._chain_attrs + ("_grad_clip_sum", "_llr_clip_sum", "_llr_count", "_adapted_step_size",
                                            "_adapter", "_inv_mass", "_mass_sqrt", "step_size", "grad_clip",
                                            "llr_clip", "_step_floor", "curvature_clip", "reference", "prior_sweeps")

    def start_step_size(self, eta: float) -> None:
        """Start the step size's warmup adaptation at ``eta`` (the default path's tuned step,
        :mod:`pyro_dp.default_path`), with a floor of ``eta / 10`` below which the adaptation may
        not shrink it (no frozen chain)."""
        self.step_size = self._adapted_step_size = eta
        self._step_floor = eta / 10.0

    @property
    def sweep_mask(self):
        """The coordinates that enter only the prior (0/1, ``None``: none): the default path's,
        moved by data-free sweeps (:mod:`~pyro_dp.kernels.prior_sweeps`), not with a given mass."""
        return PriorSweeps.mask(self.lik, "step_size" in self.auto_tuned and self.mass is None)

    def _reset_chain_stats(self):
        super()._reset_chain_stats()
        self._grad_clip_sum = 0.0
        self._llr_clip_sum = 0.0
        self._llr_count = 0
        self._adapted_step_size = self.step_size
        self._adapter = None

    def _init_state(self, z):
        mass = self.mass if self.mass is not None else 1.0
        mass = torch.as_tensor(mass, dtype=z.dtype, device=z.device)
        if mass.numel() not in (1, z.numel()):
            raise ValueError(f"mass must be a scalar or have {z.numel()} entries (the flattened latents)")
        self._inv_mass, self._mass_sqrt = 1.0 / mass.reshape(-1), mass.reshape(-1).sqrt()
        if self.sweep_mask is not None:  # held fixed by the trajectory: inverse mass 0 (module prior_sweeps)
            self._inv_mass = self._inv_mass * (1.0 - self.sweep_mask.to(z.dtype))
        self.reference.reset()
        return hmc_init(self.lik, z)

    def _step_size_now(self) -> float:
        eta = self._adapted_step_size
        return eta * jitter_factor(self.chain.iteration) if self.jitter else eta

    def _step(self, state):
        if (sweep := self.sweep_mask) is not None:  # data-free steps on the prior-only coordinates (prior_sweeps)
            state, _ = self.prior_sweeps.run(self.lik, self._rng, state, sweep, iteration=self.chain.iteration,
                                             target_accept_prob=self.target_accept_prob,
                                             warmup=self.adapt_step_size
                                             and self.chain.iteration < self.chain.warmup_steps)
        kw = dict(step_size=self._step_size_now(), num_steps=self.num_steps, inv_mass=self._inv_mass,
                  mass_sqrt=self._mass_sqrt, grad_noise_multiplier=self.grad_noise_multiplier,
                  llr_noise_multiplier=self.llr_noise_multiplier)
        events, cv = (), None
        if self.control_variate:  # module control_variate: the reference once per chain, then its residuals
            clip = cv_mod.reference_clip(self.grad_clip)
            events = self.reference.ensure(self.lik, self._noise, state.z, clip, self.reference_noise_multiplier)
            cv = (self.reference.rows, self.curvature_clip, clip)
        if self.uses_gradients:
            state, info = hmc_step(self._rng, self._noise, state, self.lik, grad_clip=self.grad_clip,
                                   llr_clip=self.llr_clip, control_variate=cv,
                                   count_clipped=self.nonprivate_diagnostics, **kw)
        else:  # the trajectory on a zero gradient: a random walk of L steps (control_variate.cv_walk_step)
            kw.pop("grad_noise_multiplier")
            state, info = cv_mod.cv_walk_step(self._rng, self._noise, state, self.lik, control_variate=cv, **kw)
        if events:
            info = info._replace(events=events + tuple(info.events))
        self._grad_clip_sum += info.grad_clipped_fraction
        if info.ratio_released:
            self._llr_clip_sum += info.llr_clipped_fraction
            self._llr_count += 1
        self._adapt(info)
        return state, info

    def _adapt(self, info):
        # Hoffman & Gelman 2014, Alg. 5 (as Pyro's HMC): dual averaging of log η on the
        # acceptance probability computed from the *released* λ̂ (post-processing: no privacy cost).
        i, warmup = self.chain.iteration, self.chain.warmup_steps
        if not self.adapt_step_size or i >= warmup:
            return
        if self._adapter is None:
            self._adapter = DualAveraging(prox_center=math.log(10 * self.step_size))
        self._adapter.step(self.target_accept_prob - info.accept_prob)
        x, x_avg = self._adapter.get_state()
        self._adapted_step_size = max(math.exp(x_avg if i == warmup - 1 else x), self._step_floor)

    def _nonprivate(self) -> dict:
        return {**super()._nonprivate(), "gradient clipped fraction": self._grad_clip_sum / max(self.chain.iteration, 1),
                "ratio clipped fraction": self._llr_clip_sum / max(self._llr_count, 1)}

    def diagnostics(self) -> dict:
        return {**super().diagnostics(), "step size": self._adapted_step_size, "gradients": self.uses_gradients}

    def logging(self):
        return {**super().logging(), "step size": f"{self._adapted_step_size:.3g}",
                **({} if self.uses_gradients else {"gradients": "none (walk)"})}
