r"""DP penalty Metropolis–Hastings (Yıldırım & Ermiş 2019; Räisä 2021 thesis §3.1).

Each iteration proposes :math:`\theta'` by a Gaussian random walk (optionally one component
at a time, optionally guided), releases

.. math::
    \hat s = \sum_{i=1}^N \mathrm{clip}_{[-b\|\theta'-\theta\|,\, b\|\theta'-\theta\|]}
             \big(\ell_i(\theta') - \ell_i(\theta)\big) + \mathcal N(0, \sigma^2),
    \qquad \sigma = \mathrm{nm}\cdot 2b\|\theta'-\theta\|,

(a Gaussian mechanism with noise multiplier ``nm``: the substitute sensitivity of the
clipped sum is :math:`2b\|\theta'-\theta\|`, thesis §3.1 / Thm 6 proof) and accepts with the
penalty rule :math:`\min\{1, \exp(\hat\lambda - T^2\sigma^2/2)\}` where
:math:`\hat\lambda = T\hat s + \log p(\theta') - \log p(\theta)` (+ the log-Jacobian of the
unconstrained parametrisation). With clipping inactive the chain targets the exact
(tempered) posterior (Yıldırım & Ermiş 2019, Thm 1 and §3.1).

Privacy: ``k`` iterations are the adaptive composition of ``k`` Gaussian mechanisms with
noise multiplier ``nm`` (thesis Thm 6: tight; Thm 5: zCDP).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..compiled import cached_zeros
from ..mechanisms import clip_and_sum, clipped_sum_with_noise, gaussian_event
from .base import check_positive
from .mh import MHState, RandomWalkKernel, RatioRelease, can_fuse
from .proposals import accept_uniform, penalty_accept, penalty_log_accept_threshold, pop_target_accept_prob
from .tuning import init_to_center

__all__ = ["DPPenalty", "penalty_release", "fused_penalty_release_accept"]


def penalty_release(lik, noise, state: MHState, z_new: torch.Tensor, *, llr_clip: float,
                    noise_multiplier: float) -> RatioRelease:
    r"""The release of one DP penalty iteration (module docstring): the clipped per-example
    log-likelihood ratio sum plus Gaussian noise, tempered. ``state.cache`` holds the private
    per-example log-likelihoods at ``state.z`` (computed here if absent)."""
    loglik = state.cache
    if loglik is None:
        loglik = lik.per_example_loglik(state.z)  # released inside this step's mechanism
    dist = lik.jump_norm(z_new, state.z)  # ‖θ'−θ‖ in the likelihood's coordinates (PrivateLikelihood.jump_norm)
    # Per-example ratios clipped to ±b‖θ'−θ‖: substitute sensitivity 2b‖θ'−θ‖ (thesis §3.1).
    ll_new, lp_new, ratios = lik.clipped_ratio_sum(z_new, loglik, llr_clip * dist)
    rel = clipped_sum_with_noise(ratios, llr_clip * dist, noise_multiplier, noise)
    T = lik.temperature
    # penalty: λ̂ = T ŝ + ..., accepted w.p. min{1, exp(λ̂ − T²σ²/2)} (Yıldırım & Ermiş 2019 §3.1)
    return RatioRelease(T * rel.value, (T * rel.noise_std) ** 2, lp_new, (rel.event,), rel.clipped_fraction,
                        float(rel.noise_std), cache_new=ll_new, cache_old=loglik)


def _fused_penalty_fn(lik, temperature: float, llr_clip: float, noise_multiplier: float):
    r"""The release and the accept test of :func:`penalty_release` + :func:`~.proposals.penalty_accept`
    as one pure tensor function, for :meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph`
    (the compiled path). The same arithmetic in the same order as the eager path:

    .. math::
        \hat s = \sum_i \mathrm{clip}_{\pm c}(\ell_i(\theta')-\ell_i(\theta)) + \sigma\xi,\quad
        \hat\lambda = T\hat s + \log p(\theta') - \log p(\theta) + \log q\text{-ratio},\quad
        \text{accept iff } \log u < \min\{0, \hat\lambda - (T\sigma)^2/2\}

    (Yıldırım & Ermiş 2019 §3.1; thesis §3.1), ANDed with the data-free validity check of
    :func:`~.mh.mh_step` (finite prior, :math:`\hat\lambda` and noise variance), with the
    data-free clip :math:`c = b\|\theta'-\theta\|` and noise standard deviation
    :math:`\sigma = \mathrm{nm}\cdot 2c` (substitute sensitivity) computed as the eager path
    computes them. The standard normal :math:`\xi` (drawn before the call by
    :meth:`~pyro_dp.mechanisms.NoiseSource.standard_normal` from the secret stream, scaled as
    :meth:`~pyro_dp.mechanisms.NoiseSource.normal` scales it) and :math:`\log u`'s uniform
    (the algorithm stream) are inputs; the clipped sum leaves the graph only inside the accept
    decision, with its noise added. Outputs: ``ℓ(θ') [N], log p(θ')`` and ``(accepted, clipped
    rows, rows, σ)`` as one float64 vector."""
    nm = float(noise_multiplier)

    def step(z, z_new, ll_old, lp_old, xi, u, log_q_ratio):
        clip = llr_clip * lik.jump_norm(z_new, z)  # b‖θ'−θ‖ (thesis §3.1), likelihood coordinates
        ll, lp = lik._eager_loglik_and_prior(z_new, None)
        cs = clip_and_sum(ll - ll_old, clip)
        std = nm * 2.0 * clip  # sigma = nm * 2b‖θ'−θ‖ (mechanisms._gaussian_event, substitute)
        s_hat = cs.total + (xi * std.to(torch.float64)).to(cs.total.dtype) if nm > 0 else cs.total
        log_ratio = temperature * s_hat  # T ŝ
        noise_var = (temperature * std) ** 2  # (T σ)²
        lambda_hat = log_ratio + (lp - lp_old) + log_q_ratio
        accepted = torch.log(u) < penalty_log_accept_threshold(lambda_hat, noise_var)
        valid = torch.isfinite(lp) & torch.isfinite(lambda_hat) & torch.isfinite(noise_var)  # data-free
        flags = torch.stack([(accepted & valid).to(torch.float64), cs.num_clipped.to(torch.float64),
                             cs.num_rows.to(torch.float64), std.to(torch.float64)])  # read back in one transfer
        return ll, lp, flags

    return step


def fused_penalty_release_accept(lik, noise, rng, state: MHState, z_new: torch.Tensor, log_q_ratio: float, *,
                                 llr_clip: float, noise_multiplier: float):
    r"""``(RatioRelease, accepted)`` of one DP penalty iteration in one compiled graph
    (:func:`_fused_penalty_fn`), or ``None`` — decided before anything is drawn — when the
    step cannot be fused (eager path, sharded rows, a model the trace cannot represent, a
    pass that needs chunks). The same draws from the same streams as :func:`penalty_release`
    followed by :func:`~.proposals.penalty_accept`: the release noise (secret stream), then
    the accept uniform (algorithm stream); the chain and the ledger are those of the eager
    path (``tests/test_compiled.py``). The release's ``log_ratio`` is not returned (``None``):
    nothing after the accept decision reads it."""
    if not can_fuse(lik, noise):
        return None
    cl, T, nm = lik.compiled, float(lik.temperature), float(noise_multiplier)
    z = state.z
    loglik = state.cache
    if loglik is None:
        loglik = lik.per_example_loglik(z)  # released inside this step's mechanism
    f64 = cached_zeros((), torch.float64, z.device)
    example = (z, z_new, loglik, state.log_prior, f64, state.log_prior, state.log_prior)
    graph = cl.fused_graph(f"penalty_step[T={T!r},L={float(llr_clip)!r},nm={nm!r}]",
                           _fused_penalty_fn(lik, T, float(llr_clip), nm), example)
    if graph is None:
        return None
    xi = noise.standard_normal(()).to(z.device) if nm > 0 else f64  # the secret stream, as add_gaussian_noise
    u = accept_uniform(rng, z)  # the draw of proposals.uniform_log
    q = torch.as_tensor(log_q_ratio, dtype=z.dtype, device=z.device)
    ll_new, lp_new, flags = graph(z, z_new, loglik, state.log_prior, xi, u, q)
    accepted, n_clipped, n_rows, std = flags.tolist()
    rel = RatioRelease(None, (T * std) ** 2, lp_new, (gaussian_event(nm),), n_clipped / n_rows if n_rows else 0.0,
                       std, cache_new=ll_new, cache_old=loglik)
    return rel, accepted == 1.0


class DPPenalty(RandomWalkKernel):
    r"""Differentially private penalty MH (Yıldırım & Ermiş 2019) as a Pyro ``MCMCKernel``.

    :param model: Pyro model with its observed sites in a data plate.
    :param proposal_scale: random-walk standard deviation in unconstrained space (scalar
        or one per coordinate of the flattened latents). Default: set privately at the start
        of every chain (below).
    :param float llr_clip: :math:`b`: each per-example log-likelihood ratio is clipped to
        :math:`\pm b\|\theta'-\theta\|`. With a :math:`b`-Lipschitz log-likelihood (e.g.
        logistic regression with bounded features) nothing is clipped and the chain is exact.
        Default: set privately (below).
    :param float noise_multiplier: σ / sensitivity of each release (``√τ`` in the thesis's
        notation with :math:`\alpha=0`). Default: calibrated to the budget (``epsilon``,
        ``delta``; the default budget :data:`~pyro_dp.kernels.base.DEFAULT_EPSILON` when none
        is given) over the iterations ``MCMC`` will run.
    :param bool one_component: propose a change of one coordinate at a time (OCU).
    :param bool guided_walk: guided-walk MH (GWMH); implies one-component proposals.
    :param bool adapt_proposal: during warmup, adapt the proposal scale (per coordinate
        for one-component modes) towards ``target_accept_prob`` by Robbins–Monro on the log
        scale (Andrieu & Thoms 2008, Alg. 4). It reads only the accept decisions, which are
        post-processing of released values (thesis Thm 3), so it costs no privacy; warmup
        iterations are accounted like any other. The scale is frozen after warmup, so the
        sampling phase is a valid (time-homogeneous) MCMC.
    :param float target_accept_prob: acceptance rate targeted by the adaptation (default 0.3;
        Pyro's name, as in ``RandomWalkKernel``; the old name ``target_accept`` still works, with a
        ``FutureWarning``).

    **The default path** (``DPPenalty(model)`` or ``DPPenalty(model, epsilon=2.0)``): with
    ``proposal_scale`` or ``llr_clip`` left out, a :class:`~pyro_dp.kernels.tuning.DPAutoTune`
    (``init``) spends a fixed share of each chain's budget on a private start (DP-Adam with an
    adaptive clip, from the prior centre) and on private quantiles of the per-example gradient
    norms there (ledger labels ``"tune:clip"``, ``"tune:start"``): ``llr_clip``
    is their 0.98 quantile (per unit jump), the proposal scale the smaller of the jump whose
    penalty noise has standard deviation 1 and 2.38/√d times a posterior-scale guess (latents
    that enter only the prior, :attr:`~pyro_dp.likelihood.PrivateLikelihood.likelihood_mask`,
    cost no noise and take the second), and the scale adapts during warmup
    (``adapt_proposal`` defaults to ``True`` then). See ``docs/tuning.md``.

    Other keyword arguments are those of :class:`~pyro_dp.kernels.base.DPKernel`
    (``temperature``, ``data_plate``, ``epsilon``, ``delta``, ``num_iterations``,
    ``num_chains``, ``accountant``, ``seed``, ``secure_mode``, ...).

    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import MCMC
    >>> from pyro.infer.autoguide.initialization import init_to_mean
    >>> from pyro_dp import DPPenalty
    >>> from pyro_dp.models.examples import normal_mean_model as model  # y_i ~ N(mu, 1), mu ~ N(0, 10^2)
    >>> y = torch.randn(1000, generator=torch.Generator().manual_seed(0)) + 1.0
    >>> kernel = DPPenalty(model, proposal_scale=0.03, llr_clip=4.0, noise_multiplier=5.0,
    ...                    init_strategy=init_to_mean, seed=0)  # data-free start: prior mean
    >>> mcmc = MCMC(kernel, num_samples=300, warmup_steps=100, disable_progbar=True)
    >>> mcmc.run(y)
    >>> abs(float(mcmc.get_samples()["mu"].mean()) - float(y.mean())) < 0.1
    True
    >>> round(kernel.get_epsilon(1e-5), 3)  # 400 Gaussian releases with noise multiplier 5
    24.382
    """

    #: every release is a clipped sum over all rows: the rows can be sharded (pyro_dp.distributed)
    supports_distributed = True

    def __init__(
        self,
        model,
        proposal_scale=None,
        llr_clip: Optional[float] = None,
        noise_multiplier: Optional[float] = None,
        *,
        one_component: bool = False,
        guided_walk: bool = False,
        adapt_proposal: Optional[bool] = None,
        target_accept_prob: Optional[float] = None,
        **kwargs,
    ):
        target_accept_prob = pop_target_accept_prob(kwargs, target_accept_prob)  # before DPKernel sees kwargs
        if kwargs.get("init_strategy") is None and (proposal_scale is None or llr_clip is None):
            kwargs["init_strategy"] = init_to_center  # the tuner's data-free start: the prior centre
        super().__init__(model, **kwargs)
        #: settings the kernel tunes privately at every chain's start (left out by the user)
        self.auto_tuned = tuple(n for n, v in (("proposal_scale", proposal_scale), ("llr_clip", llr_clip))
                                if v is None)
        if adapt_proposal is None:
            adapt_proposal = "proposal_scale" in self.auto_tuned
        self._setup_walk(proposal_scale, one_component=one_component, guided_walk=guided_walk,
                         adapt_proposal=adapt_proposal,
                         target_accept_prob=target_accept_prob)
        self.llr_clip = None if llr_clip is None else check_positive("llr_clip", llr_clip)
        self.noise_multiplier = self._check_noise_multiplier("noise_multiplier", noise_multiplier)
        if self.auto_tuned:
            self.init = self._auto_tuner()

    def _calibrate(self):
        if self.noise_multiplier is None:
            self.noise_multiplier = self._calibrated_gaussian_noise_multiplier()

    def _per_iteration_events(self):
        return self._gaussian_events(self.noise_multiplier)  # thesis Thm 6: one Gaussian mechanism

    _chain_attrs = RandomWalkKernel._chain_attrs + ("llr_clip", "proposal_scale")

    def _ratio_noise_multiplier(self):
        return self.noise_multiplier

    def _apply_tuning(self, result):
        if "llr_clip" in self.auto_tuned:
            self.llr_clip = result.llr_clip
        if "proposal_scale" in self.auto_tuned:
            d = self.lik.dim if self.mode == "full" else 1  # coordinates one proposal moves
            jump, sd = self._move_scales(result, self.noise_multiplier)
            # Roberts, Gelman & Gilks 1997: random-walk scale 2.38/sqrt(d) x the posterior sd
            free = 2.38 / math.sqrt(d) * sd
            mask = self.lik.likelihood_mask
            if mask is None:
                self.proposal_scale = min(jump / math.sqrt(d), free)
            else:  # the noise grows with the move of the likelihood's coordinates only (jump_norm):
                # the others (a hierarchical model's mu, tau) move at the noise-free scale
                d_lik = int(mask.sum()) if self.mode == "full" else 1
                lik_scale = min(jump / math.sqrt(max(d_lik, 1)), free)
                self.proposal_scale = mask * lik_scale + (1.0 - mask) * free

    def _release(self, noise, state, z_new):
        return penalty_release(self.lik, noise, state, z_new, llr_clip=self.llr_clip,
                               noise_multiplier=self.noise_multiplier)

    def _accept(self, rng, lambda_hat, noise_var):
        return penalty_accept(rng, lambda_hat, noise_var)

    def _fused_release_accept(self, noise, rng, state, z_new, log_q_ratio):
        return fused_penalty_release_accept(self.lik, noise, rng, state, z_new, log_q_ratio, llr_clip=self.llr_clip,
                                            noise_multiplier=self.noise_multiplier)
