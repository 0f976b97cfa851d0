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

from typing import Optional

import torch

from ..compiled import cached_zeros
from ..mechanisms.release import graph_release
from ..mechanisms import (NOT_COUNTED, GaussianReleaseSpec, clip_and_sum, clipped_fraction,
                          gaussian_release_spec)
from . import control_variate as cv_mod
from .base import check_positive
from .path_hook import default_path
from .mh import MHState, RandomWalkKernel, RatioRelease, can_fuse, valid_move
from .prior_sweeps import PriorSweeps
from .releases import Budget, init_events, noise_setting, penalty_noise, penalty_releases
from .proposals import accept_uniform, penalty_log_accept_threshold, pop_target_accept_prob
from .scales import init_to_center

__all__ = ["DPPenalty", "penalty_ratio", "penalty_step_fn", "penalty_release", "penalty_release_accept"]


def _traced_ratio_sum(lik, count=True):
    r"""``ratio_sum(z_new, ll_old, clip) -> (ℓ(θ'), log p(θ'), ClippedSum)`` for the inside of a
    fused graph: the model's terms traced as they are (``lik.clipped_ratio_sum``'s eager branch;
    outside a graph the step calls ``lik.clipped_ratio_sum`` itself, which may run its own graph).
    ``count=False``: the clipped rows are not counted (:data:`~pyro_dp.mechanisms.NOT_COUNTED`)."""
    def ratio_sum(z_new, ll_old, clip):
        ll_new, lp_new = lik.eager_loglik_and_prior(z_new, None)
        return ll_new, lp_new, clip_and_sum(ll_new - ll_old, clip, count=count)

    return ratio_sum


def penalty_ratio(lik, temperature: float, llr_clip: float, spec: GaussianReleaseSpec, ratio_sum, z, z_new,
                  ll_old, xi, shards=None):
    r"""The release of one DP penalty iteration (module docstring), a pure tensor function of its
    inputs (the standard normal ``xi`` drawn before it by ``spec.draw``): the data-free clip
    :math:`c = b\|\theta'-\theta\|` (thesis §3.1, in the likelihood's coordinates), the clipped
    per-example ratio sum of ``ratio_sum`` (``lik.clipped_ratio_sum``, or
    :func:`_traced_ratio_sum` in a graph), and ``spec``'s release :math:`\hat s = \sum_i
    \mathrm{clip}_{\pm c}(\ell_i(\theta')-\ell_i(\theta)) + \sigma\xi` with :math:`\sigma =
    \mathrm{nm}\cdot 2c`. Returns ``(ℓ(θ'), log p(θ'), T ŝ, (T σ)², SumRelease)``."""
    clip = llr_clip * lik.jump_norm(z_new, z)  # b‖θ'−θ‖ (thesis §3.1), likelihood coordinates
    ll_new, lp_new, cs = ratio_sum(z_new, ll_old, clip)  # per-row rule, clip to ±b‖θ'−θ‖, sum
    rel = spec.release(cs, clip, xi, shards)  # ŝ = Σ clip(ℓ_i(θ')−ℓ_i(θ)) + σξ, σ = nm·2b‖θ'−θ‖
    # penalty: λ̂ = T ŝ + ..., accepted w.p. min{1, exp(λ̂ − T²σ²/2)} (Yıldırım & Ermiş 2019 §3.1)
    return ll_new, lp_new, temperature * rel.value, (temperature * rel.noise_std) ** 2, rel


def penalty_step_fn(lik, temperature: float, llr_clip: float, spec: GaussianReleaseSpec, ratio_sum, shards=None):
    r"""One DP penalty iteration after the proposal, written once as a pure tensor function
    ``step(z, z_new, ℓ(θ), log p(θ), ξ, u, log q-ratio) -> (ℓ(θ'), log p(θ'), T ŝ, flags)``: the
    release :func:`penalty_ratio` and the penalty test

    .. math::
        \hat\lambda = T\hat s + \log p(\theta') - \log p(\theta) + \log q\text{-ratio},\quad
        \text{accept iff } \log u < \min\{0, \hat\lambda - (T\sigma)^2/2\}

    (Yıldırım & Ermiş 2019 §3.1; :func:`~.proposals.penalty_log_accept_threshold`), ANDed with
    the data-free validity check :func:`~.mh.valid_move` (finite prior, :math:`\hat\lambda` and
    noise variance). Its randomness is drawn before it: ``ξ`` from the secret stream
    (``spec.draw``), ``u`` from the algorithm stream. The eager path runs it as it is; the
    compiled path traces the same function into one graph
    (:meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph`), where the clipped sum never
    leaves without its noise. ``flags`` is ``(accepted, clipped rows, rows, σ)`` in float64,
    read back in one transfer."""

    def step(z, z_new, ll_old, lp_old, xi, u, log_q_ratio):
        ll, lp, log_ratio, noise_var, rel = penalty_ratio(lik, temperature, llr_clip, spec, ratio_sum, z, z_new,
                                                          ll_old, xi, shards)
        lambda_hat = log_ratio + (lp - lp_old) + log_q_ratio
        accepted = torch.log(u) < penalty_log_accept_threshold(lambda_hat, noise_var)
        valid = valid_move(lp, lambda_hat, noise_var)  # data-free
        f64 = torch.float64
        flags = torch.stack([(accepted & valid).to(f64), rel.num_clipped.to(f64), rel.num_rows.to(f64),
                             rel.noise_std.to(f64)])
        return ll, lp, log_ratio, flags

    return step


def _loglik_at(lik, state: MHState) -> torch.Tensor:
    """The private per-example log-likelihoods at ``state.z`` (the state's cache, or computed:
    released inside this step's mechanism)."""
    return state.cache if state.cache is not None else lik.per_example_loglik(state.z)


def penalty_release(lik, noise, state: MHState, z_new: torch.Tensor, *, llr_clip: float,
                    noise_multiplier: float) -> RatioRelease:
    r"""The release of one DP penalty iteration alone (module docstring; :func:`penalty_ratio`
    run eagerly with its standard normal drawn from the secret stream): the clipped per-example
    log-likelihood ratio sum plus Gaussian noise, tempered. ``state.cache`` holds the private
    per-example log-likelihoods at ``state.z`` (computed here if absent). The kernel itself runs
    the whole step, :func:`penalty_release_accept`."""
    spec = gaussian_release_spec(noise_multiplier)
    loglik = _loglik_at(lik, state)
    xi = spec.draw(noise, (), device=state.z.device)
    ll_new, lp_new, log_ratio, noise_var, rel = penalty_ratio(
        lik, float(lik.temperature), float(llr_clip), spec, lik.clipped_ratio_sum, state.z, z_new, loglik, xi,
        getattr(noise, "shards", None))
    return RatioRelease(log_ratio, noise_var, lp_new, (spec.event,), clipped_fraction(rel.num_clipped, rel.num_rows),
                        float(rel.noise_std), cache_new=ll_new, cache_old=loglik)


def penalty_release_accept(lik, noise, rng, state: MHState, z_new: torch.Tensor, log_q_ratio: float, *,
                           llr_clip: float, noise_multiplier: float, count_clipped: bool = True):
    r"""``(RatioRelease, accepted)`` of one DP penalty iteration: :func:`penalty_step_fn` run as
    one compiled graph when it can be (the compiled path in one process, a model the trace can
    represent, a pass without chunks: decided before anything is drawn), else as it is. Its
    randomness is drawn before it, in the eager order: the release's standard normal (secret
    stream, ``spec.draw``), then the accept uniform (algorithm stream; in the dtype of
    :math:`\hat\lambda`, as :func:`~.proposals.penalty_accept` draws it). Chain and ledger are
    the same on both paths (``tests/kernels/test_golden.py``, ``tests/test_compiled.py``).
    ``count_clipped=False``: the graph does not count the clipped rows (a statistic of the raw
    data that only ``nonprivate_diagnostics=True`` shows; about 8 % of the compiled banana
    iteration) and the release's clipped fraction is NaN, on both paths."""
    spec = gaussian_release_spec(noise_multiplier)
    T, clip = float(lik.temperature), float(llr_clip)
    z = state.z
    loglik = _loglik_at(lik, state)
    like_u = cached_zeros((), torch.promote_types(loglik.dtype, state.log_prior.dtype), z.device)  # λ̂'s dtype
    step = None
    if can_fuse(lik, noise):
        example = (z, z_new, loglik, state.log_prior, cached_zeros((), torch.float64, z.device), like_u,
                   state.log_prior)
        step = lik.compiled.fused_graph(
            f"penalty_step[T={T!r},L={clip!r},nm={spec.noise_multiplier!r}]{'' if count_clipped else '[uncounted]'}",
            penalty_step_fn(lik, T, clip, spec, _traced_ratio_sum(lik, count_clipped)), example,
            released=(2, 3), noise=(4,) * spec.adds_noise, release=graph_release)  # (ℓ(θ') private, log p(θ'), T ŝ, flags)
    if step is None:  # the same function, run as it is
        step = penalty_step_fn(lik, T, clip, spec, lik.clipped_ratio_sum, getattr(noise, "shards", None))
    xi = spec.draw(noise, (), device=z.device)  # the secret stream, first
    u = accept_uniform(rng, like_u)  # then the algorithm stream (proposals.uniform_log's draw)
    q = torch.as_tensor(log_q_ratio, dtype=z.dtype, device=z.device)
    ll_new, lp_new, log_ratio, flags = step(z, z_new, loglik, state.log_prior, xi, u, q)
    accepted, n_clipped, n_rows, std = flags.tolist()
    frac = clipped_fraction(n_clipped if count_clipped else NOT_COUNTED, n_rows)
    rel = RatioRelease(log_ratio, (T * std) ** 2, lp_new, (spec.event,), frac, std, cache_new=ll_new, cache_old=loglik)
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
    :param bool control_variate: release the clipped *Taylor residuals* of the ratios around the
        chain's start instead of the ratios, after one release of the clipped gradient sum there
        (:mod:`pyro_dp.kernels.control_variate`): far less noise per move near the start, at the
        price of a fixed tilt of the target by that release's noise (:func:`~pyro_dp.kernels.control_variate.tilt_sd`).
        Eager step (the likelihood's passes are compiled when ``jit_compile`` says so). Default
        (``None``): on the default path (``proposal_scale`` or ``llr_clip`` left out), off otherwise
        (explicit settings run the chain they always ran).
    :param float curvature_clip: :math:`h`, the per-row curvature bound of the residuals' clip
        :math:`\min\{hR, 2b\}\|\theta'-\theta\|`. Default: set from the tuner's posterior-scale
        guess (:func:`~pyro_dp.kernels.control_variate.default_curvature_clip`); required with
        ``control_variate`` when ``proposal_scale`` and ``llr_clip`` are both given.
    :param float reference_share: share of the chain's budget (after the tuner's) for the
        reference release (default :data:`~pyro_dp.kernels.control_variate.DEFAULT_REFERENCE_SHARE`),
        when the noise is calibrated to the budget.
    :param float reference_noise_multiplier: the reference release's noise multiplier
        :math:`\mathrm{nm}_G`; required with ``control_variate`` when ``noise_multiplier`` is given
        (both are then used as they are), else calibrated with it.

    **The default path** (``DPPenalty(model)`` or ``DPPenalty(model, epsilon=2.0)``): with
    ``proposal_scale`` or ``llr_clip`` left out, a :class:`~pyro_dp.default_path.tuning.DPAutoTune`
    (``init``) spends a fixed share of each chain's budget on a private start (DP-Adam with an
    adaptive clip, from the prior centre) and on private quantiles of the per-example gradient
    norms there (ledger labels ``"tune:clip"``, ``"tune:start"``): ``llr_clip``
    is their 0.98 quantile (per unit jump), the proposal scale the smaller of the jump whose
    penalty noise has standard deviation 1 and 2.38/√d times a posterior-scale guess (latents
    that enter only the prior, :attr:`~pyro_dp.likelihood.PrivateLikelihood.likelihood_mask`,
    cost no noise and take the second), and the scale adapts during warmup
    (``adapt_proposal`` defaults to ``True`` then). With two or more latent coordinates in the
    likelihood, the tuner also balances the coordinates' scales (``"tune:scale"``, applied where
    they spread over more than a factor 10) and whitens them (:attr:`whiten_by_default`;
    ``"tune:metric"``): the chain runs in coordinates where a private estimate of the posterior
    covariance is the identity (:mod:`pyro_dp.default_path.whitening`). See ``docs/tuning.md``.

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
    #: the default path whitens (measured: docs/tuning.md, "Posterior-shaped coordinates")
    whiten_by_default = True

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
        cv = cv_mod.pop_settings(kwargs)  # control_variate, curvature_clip, reference_share, reference_noise_multiplier
        if kwargs.get("init_strategy") is None and (proposal_scale is None or llr_clip is None):
            kwargs["init_strategy"] = init_to_center  # the tuner's data-free start: the prior centre
        super().__init__(model, **kwargs)
        self.prior_sweeps = PriorSweeps()  # data-free sweeps of the prior-only coordinates (default path)
        #: settings the kernel tunes privately at every chain's start (left out by the user)
        self.auto_tuned = tuple(n for n, v in (("proposal_scale", proposal_scale), ("llr_clip", llr_clip))
                                if v is None)
        if adapt_proposal is None:
            adapt_proposal = "proposal_scale" in self.auto_tuned
        self._setup_walk(proposal_scale, one_component=one_component, guided_walk=guided_walk,
                         adapt_proposal=adapt_proposal,
                         target_accept_prob=target_accept_prob)
        self.llr_clip = None if llr_clip is None else check_positive("llr_clip", llr_clip)
        self.noise_multiplier = noise_setting(self, "noise_multiplier", noise_multiplier)
        cv_mod.set_settings(self, cv, runs_control_variate=self.runs_control_variate,
                            explicit_noise=self.noise_multiplier is not None)
        if self.auto_tuned:
            self.init = default_path().tuner(self)

    #: whether this class's step runs control_variate (a subclass with its own step sets False)
    runs_control_variate = True

    def _calibrate(self):
        if self.noise_multiplier is None:  # control_variate: one reference release per chain + the residual releases
            self.noise_multiplier, ref = penalty_noise(Budget.of(self), self.num_iterations, init_events(self),
                                                       control_variate=self.control_variate,
                                                       reference_share=self.reference_share)
            if self.control_variate:
                self.reference_noise_multiplier = ref

    def releases(self, state=None):
        # thesis Thm 6: one Gaussian mechanism per iteration; control_variate: the reference once per chain,
        # released by the chain's first step
        plan = penalty_releases(self.noise_multiplier, self.reference_noise_multiplier if self.control_variate else None)
        return plan if state is None else plan.first_step(self.reference.released is None)

    _chain_attrs = RandomWalkKernel._chain_attrs + ("llr_clip", "proposal_scale") + \
        ("curvature_clip", "reference", "prior_sweeps")

    @property
    def sweep_mask(self) -> Optional[torch.Tensor]:
        """The coordinates that enter only the prior (0/1, ``None``: none), moved by data-free
        sweeps and held fixed by the walk (:mod:`~pyro_dp.kernels.prior_sweeps`): the default
        path's, not with a given ``proposal_scale`` or one-component walks."""
        return PriorSweeps.mask(self.lik, "proposal_scale" in self.auto_tuned and self.mode == "full")

    # mh_step's release_accept (moves 2-3) as one function, eager or compiled: never None, so
    # RandomWalkKernel's _release/_accept hooks are not used
    def _release_accept(self, noise, rng, state, z_new, log_q_ratio):
        if self.control_variate:
            return cv_mod.cv_penalty_release_accept(
                self.lik, noise, rng, state, z_new, log_q_ratio, cv=self.reference.rows,
                curvature_clip=self.curvature_clip, reference_clip=cv_mod.reference_clip(self.llr_clip),
                noise_multiplier=self.noise_multiplier)
        return penalty_release_accept(self.lik, noise, rng, state, z_new, log_q_ratio, llr_clip=self.llr_clip,
                                      noise_multiplier=self.noise_multiplier, count_clipped=self.nonprivate_diagnostics)

    def _init_state(self, z):
        self.reference.reset()
        return super()._init_state(z)

    def _step(self, state):
        # control_variate: the reference once per chain (declared by releases), then the walk,
        # whose release_accept is the residual test (_release_accept)
        events = self.reference.ensure(self.lik, self._noise, state.z, cv_mod.reference_clip(self.llr_clip),
                                       self.reference_noise_multiplier) if self.control_variate else ()
        sweep = self.sweep_mask
        if sweep is not None:  # data-free steps on the prior-only coordinates (module prior_sweeps)
            state, _ = self.prior_sweeps.run(self.lik, self._rng, state, sweep, iteration=self.chain.iteration,
                                             target_accept_prob=self.target_accept_prob,
                                             warmup=self.adapt_proposal
                                             and self.chain.iteration < self.chain.warmup_steps)
        new, info = super()._step(state)
        return (new, info._replace(events=events + tuple(info.events))) if events else (new, info)
