r"""DP penalty MH for exponential families via noisy sufficient statistics
(Yıldırım & Ermiş 2019, §3.3, Algorithm 3 and Corollary 1).

For an i.i.d. likelihood :math:`p(y|\theta) = h(y)\,g(\theta)\exp(\varphi(\theta)^\top S(y))`
the log-likelihood ratio of the whole data set is (paper eq. 7)

.. math::
    d_n(\theta,\theta') = n[\log g(\theta') - \log g(\theta)]
                          + [\varphi(\theta') - \varphi(\theta)]^\top S_n,
    \qquad S_n = \sum_{i=1}^n S(y_i).

Each iteration releases an **independent** noisy copy :math:`\hat S_n = S_n +
\mathcal N(0, \xi I)` (Alg. 3, step 1), plugs it into (7) and accepts with the penalty rule
:math:`\min\{1, \exp(\hat\lambda - \sigma_n^2(\theta,\theta')/2)\}` where
:math:`\sigma_n^2(\theta,\theta') = \|\varphi(\theta') - \varphi(\theta)\|^2\xi`
(eq. 8; Alg. 3, step 2). The chain is exact for every :math:`\xi` (penalty method), and after
one pass over the data (the per-row statistics are summed once) the cost of an
iteration does not depend on :math:`n`.

Privacy. Each row's statistic is centred at a public :math:`c` and clipped to the public
norm bound :math:`b` (:math:`\|S(y) - c\| \le b` on the data domain: then nothing is
clipped and the chain is exact). The clipped sum has substitute sensitivity :math:`2b \ge
\nabla_2 S` (paper §3.3), the noise standard deviation is :math:`\sqrt\xi = \mathrm{nm}\cdot 2b`,
so :math:`k` iterations are :math:`k` Gaussian mechanisms with noise multiplier ``nm``,
composed exactly by the ``"gdp"`` accountant (tighter than Corollary 1's advanced
composition). Adding back :math:`n c` (``n`` is public) is post-processing.

Data access. The per-row statistics are the only data this kernel reads, through
:meth:`~pyro_dp.likelihood.PrivateLikelihood.per_example_statistic` (one pass, cached privately) and released only by
:meth:`SufficientStatistic.release`.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Callable, NamedTuple, Optional

import numpy as np
import torch
from torch.utils._pytree import tree_map

from ..arguments import model_arguments as _model_arguments
from ..likelihood import forked_rng
from ..mechanisms import NoisyRelease, add_gaussian_noise, clip_rows, gaussian_event
from ..warn import warn_user
from ..private import diagnostic  # the clipped fraction (issue 58)
from .base import check_positive
from .mh import MHState, RandomWalkKernel, RatioRelease
from .proposals import penalty_accept, pop_target_accept_prob
from .releases import Budget, ReleasePlan, calibrated_scale, init_events, noise_setting, penalty_releases

__all__ = [
    "ExpFamily",
    "gaussian_known_variance",
    "bernoulli",
    "poisson",
    "SufficientStatistic",
    "expfam_release",
    "DPExpFamPenalty",
]


# --------------------------------------------------------------------------- families


def _zeroed_arguments(lik):
    """``lik``'s model arguments with every tensor (and numpy array) replaced by zeros of its
    shape and dtype while the block runs (the data-free model of
    :meth:`DPExpFamPenalty._validate`). Data a model reads from a closure are not arguments
    and cannot be zeroed: such a model needs ``check_family=False`` (documented there)."""

    def zero(t):
        if torch.is_tensor(t):
            return torch.zeros(t.shape, dtype=t.dtype, device=t.device)  # its shape only (model_args: private)
        if isinstance(t, np.ndarray):
            return np.zeros_like(t)
        return t

    return _model_arguments(lik, *tree_map(zero, (lik.model_args, lik.model_kwargs)))


class ExpFamily(NamedTuple):
    r"""An exponential family :math:`p(y|\theta) = h(y)\,g(\theta)\exp(\varphi(\theta)^\top S(y))`
    (Yıldırım & Ermiş 2019, §3.3), with the public facts privacy needs.

    :ivar statistic: :math:`S`: rows ``[n, *event_shape]`` → ``[n, d]`` (or ``[n]`` if
        :math:`d = 1`), vectorised over rows. Applied to the data only inside
        :meth:`~pyro_dp.likelihood.PrivateLikelihood.per_example_statistic`.
    :ivar natural_param: :math:`\varphi`: ``{site: constrained value}`` → tensor of ``d``
        entries (data-free).
    :ivar log_g: :math:`\log g`: ``{site: constrained value}`` → scalar (data-free; the
        negative log-partition :math:`-A(\theta)`).
    :ivar bound: public :math:`b` with :math:`\|S(y) - c\|_2 \le b` for every ``y`` of the data
        domain; rows outside are clipped to it (then the chain targets the posterior of the
        clipped statistics). Substitute sensitivity of :math:`S_n` is :math:`2b`.
    :ivar center: public :math:`c` (scalar or ``d`` entries), default 0.
    :ivar dim: :math:`d`, checked against :math:`\varphi` and :math:`S`.

    >>> fam = bernoulli("p")
    >>> fam.dim, fam.bound, fam.center
    (1, 0.5, 0.5)
    """

    statistic: Callable
    natural_param: Callable
    log_g: Callable
    bound: float
    center: object = 0.0
    dim: Optional[int] = None


def _make_family(statistic, natural_param, log_g, bound, center=0.0, dim=None) -> ExpFamily:
    if bound is None:
        raise ValueError(
            "an exponential family needs a public bound on ||S(y) - center|| over the data domain "
            "(bound=...): it sets the sensitivity of the released statistic"
        )
    bound = check_positive("bound", bound)
    if dim is not None:
        dim = check_positive("dim", dim, integer=True)
    for name, f in (("statistic", statistic), ("natural_param", natural_param), ("log_g", log_g)):
        if not callable(f):
            raise TypeError(f"{name} must be callable, got {type(f).__name__}")
    return ExpFamily(statistic, natural_param, log_g, bound, center, dim)


# Module-level pieces (picklable: MCMC pickles kernels into worker processes).
def _identity_rows(y):
    return y.reshape(y.shape[0], -1)  # S(y) = y


def _gauss_phi(site, s2, p):
    return p[site].reshape(-1) / s2  # φ(μ) = μ / s²


def _gauss_log_g(site, s2, p):
    return -(p[site] ** 2).sum() / (2 * s2)  # log g(μ) = −‖μ‖² / (2s²)


def _bernoulli_phi(site, logits, p):
    v = p[site]
    return (v if logits else torch.logit(v)).reshape(-1)  # φ = logit p


def _bernoulli_log_g(site, logits, p):
    return -torch.nn.functional.softplus(_bernoulli_phi(site, logits, p)).sum()  # log(1 − p)


def _poisson_phi(site, p):
    return torch.log(p[site]).reshape(-1)  # φ = log λ


def _poisson_log_g(site, p):
    return -p[site].sum()  # log g = −λ


def gaussian_known_variance(site: str, scale: float, low: float, high: float, dim: int = 1) -> ExpFamily:
    r""":math:`y \sim \mathcal N(\mu, s^2 I_d)` with known :math:`s`, mean at latent ``site``.

    :math:`S(y) = y`, :math:`\varphi(\mu) = \mu/s^2`, :math:`\log g(\mu) = -\|\mu\|^2/(2s^2)`.
    The public data domain is the box :math:`[\mathrm{low}, \mathrm{high}]^d`: centre
    :math:`c = (\mathrm{low}+\mathrm{high})/2`, bound :math:`b = \sqrt d(\mathrm{high}-\mathrm{low})/2`
    (for :math:`d=1`, :math:`2b = \nabla_2 S` exactly).

    >>> fam = gaussian_known_variance("mu", scale=2.0, low=-3.0, high=3.0)
    >>> fam.natural_param({"mu": torch.tensor([4.0])}), fam.log_g({"mu": torch.tensor([4.0])})
    (tensor([1.]), tensor(-2.))
    """
    s2 = check_positive("scale", scale) ** 2
    dim = check_positive("dim", dim, integer=True)
    low, high = float(low), float(high)
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise ValueError(f"the data domain [low, high] must be finite and non-empty, got [{low}, {high}]")
    return _make_family(
        statistic=_identity_rows,
        natural_param=partial(_gauss_phi, site, s2),
        log_g=partial(_gauss_log_g, site, s2),
        bound=math.sqrt(dim) * (high - low) / 2,
        center=(high + low) / 2,
        dim=dim,
    )


def bernoulli(site: str, logits: bool = False) -> ExpFamily:
    r""":math:`y \sim \mathrm{Bernoulli}(p)`, :math:`p` (or its logit, ``logits=True``) at ``site``.

    :math:`S(y) = y \in \{0,1\}`, :math:`\varphi = \mathrm{logit}\,p`,
    :math:`\log g = \log(1-p) = -\mathrm{softplus}(\varphi)`; centre 1/2 and bound 1/2, so the
    sensitivity is :math:`1 = \nabla_2 S`.
    """
    return _make_family(
        statistic=_identity_rows,
        natural_param=partial(_bernoulli_phi, site, bool(logits)),
        log_g=partial(_bernoulli_log_g, site, bool(logits)),
        bound=0.5,
        center=0.5,
        dim=1,
    )


def poisson(site: str, max_count: Optional[float] = None) -> ExpFamily:
    r""":math:`y \sim \mathrm{Poisson}(\lambda)`, rate at ``site``; counts clipped to the public
    ``[0, max_count]``.

    :math:`S(y) = y`, :math:`\varphi = \log\lambda`, :math:`\log g = -\lambda`; centre and bound
    ``max_count / 2`` (sensitivity ``max_count`` :math:`= \nabla_2 S` on the domain).
    """
    if max_count is None:
        raise ValueError("poisson() needs a public max_count: counts are unbounded, so the sensitivity is infinite")
    m = check_positive("max_count", max_count)
    return _make_family(
        statistic=_identity_rows,
        natural_param=partial(_poisson_phi, site),
        log_g=partial(_poisson_log_g, site),
        bound=m / 2,
        center=m / 2,
        dim=1,
    )


# --------------------------------------------------------------------------- data access


def _single_observed_site(lik) -> str:
    if len(lik.observed_names) != 1:
        raise ValueError(
            f"the exponential-family kernel needs exactly one observed site, got {list(lik.observed_names)}"
        )
    return lik.observed_names[0]


def _rows_of(site, plate_dim: int) -> torch.Tensor:
    """Observed value of ``site`` with the data plate's dim moved first: ``[n, ...]``."""
    value = site["value"]
    return torch.movedim(value, plate_dim - site["fn"].event_dim, 0)


class SufficientStatistic:
    r"""Releases independent noisy copies of :math:`S_n` (Alg. 3, step 1).

    The first :meth:`release` makes the one pass over the data: per-row statistics, centred
    at the public :math:`c`, clipped to norm :math:`b`, summed and cached **privately**
    (never returned). Every release adds fresh Gaussian noise of standard deviation
    :math:`\mathrm{nm}\cdot 2b` and emits ``GaussianEvent(nm)``: cost :math:`O(d)`,
    independent of :math:`n`.

    :param lik: a :class:`~pyro_dp.likelihood.PrivateLikelihood`.
    :param family: an :class:`ExpFamily`.
    """

    def __init__(self, lik, family: ExpFamily):
        self._lik, self._family = lik, family
        self._sum: Optional[torch.Tensor] = None
        self._frac = 0.0

    def _one_pass(self):
        fam, lik = self._family, self._lik
        rows = lik.per_example_statistic(fam.statistic)
        if rows.dim() != 2 or rows.shape[0] != lik.num_rows or (fam.dim is not None and rows.shape[1] != fam.dim):
            raise ValueError(
                f"statistic returned shape {tuple(rows.shape)}; expected [{lik.num_rows}, {fam.dim}] "
                "(one d-vector per row of the data plate)"
            )
        center = torch.as_tensor(fam.center, dtype=rows.dtype, device=rows.device)
        # Per-row clipping of S(y_i) - c to norm b: substitute sensitivity 2b (mechanisms convention,
        # Yıldırım & Ermiş 2019 §3.3: ∇₂S = sup ||S(x) - S(y)|| <= 2b).
        clipped, mask = clip_rows(rows - center, fam.bound)
        self._sum = clipped.sum(0)
        self._frac = float(diagnostic(mask).float().mean())
        self._center_total = lik.num_rows * center.expand(self._sum.shape)  # n c: public

    def release(self, noise_multiplier: float, noise) -> NoisyRelease:
        r""":math:`\hat S_n = \sum_i \mathrm{clip}_b(S(y_i) - c) + nc + \mathcal N(0, (\mathrm{nm}\,2b)^2 I)`."""
        if self._sum is None:
            self._one_pass()
        # The cached sum of rows clipped to b gets fresh noise N(0, (nm·2b)² I_d) and emits
        # GaussianEvent(nm) (Gaussian mechanism, paper Thm 2 / §3.3).
        rel = add_gaussian_noise(self._sum, self._family.bound, noise_multiplier, noise)
        return rel._replace(value=rel.value + self._center_total, clipped_fraction=self._frac)


# --------------------------------------------------------------------------- pure core


def _natural(lik, family: ExpFamily, z: torch.Tensor):
    r""":math:`(\varphi(\theta), \log g(\theta))` at unconstrained ``z`` (data-free)."""
    params = lik.constrain(z)
    phi = torch.as_tensor(family.natural_param(params)).reshape(-1)
    log_g = torch.as_tensor(family.log_g(params)).reshape(())
    return phi, log_g


def expfam_release(lik, family: ExpFamily, statistic: SufficientStatistic, noise, state: MHState,
                   z_new: torch.Tensor, *, noise_multiplier: float) -> RatioRelease:
    r"""One iteration's release of Algorithm 3 (Yıldırım & Ermiş 2019, §3.3): a fresh noisy
    :math:`\hat S_n` plugged into eq. (7). ``state.cache`` is :math:`(\varphi, \log g)` at
    ``state.z`` (data-free); ``extra`` is the released :math:`\hat S_n`."""
    with torch.no_grad():
        lp_new = lik.log_prior(z_new)
        phi_new, log_g_new = _natural(lik, family, z_new)
    rel = statistic.release(noise_multiplier, noise)  # Alg. 3, step 1: fresh Ŝ_n every iteration
    phi, log_g = state.cache
    dphi = phi_new - phi
    T = lik.temperature
    # Paper eq. (7) with Ŝ_n: d̂ = n[log g(θ') − log g(θ)] + [φ(θ') − φ(θ)]ᵀ Ŝ_n
    d_hat = lik.num_rows * (log_g_new - log_g) + dphi @ rel.value
    # Paper eq. (8): σ²_n(θ,θ') = ||φ(θ') − φ(θ)||² ξ with ξ = (nm·2b)² (tempered: × T²);
    # Alg. 3, step 2 accepts w.p. min{1, exp(λ̂ − σ²_n/2)}
    noise_var = (T * rel.noise_std) ** 2 * (dphi @ dphi)
    std = float(torch.sqrt(noise_var)) if bool(torch.isfinite(noise_var)) else float("nan")
    return RatioRelease(T * d_hat, noise_var, lp_new, (rel.event,), rel.clipped_fraction, std,
                        cache_new=(phi_new, log_g_new), cache_old=(phi, log_g), extra=rel.value)


# --------------------------------------------------------------------------- kernel


class DPExpFamPenalty(RandomWalkKernel):
    r"""DP penalty MH for exponential-family likelihoods (Yıldırım & Ermiş 2019, Alg. 3).

    The Pyro model supplies the prior (:meth:`~pyro_dp.likelihood.PrivateLikelihood.log_prior`),
    the latent sites and their transforms; its observed site, inside the data plate, must
    follow ``family`` (checked at set-up on data simulated from the model, not on the data).
    The data enter only through noisy copies of :math:`S_n` (module docstring).

    :param model: Pyro model with one observed site in a data plate and no covariates.
    :param ExpFamily family: e.g. :func:`gaussian_known_variance`, :func:`bernoulli`,
        :func:`poisson`, or :class:`ExpFamily` for your own.
    :param proposal_scale: random-walk standard deviation in unconstrained space.
    :param float noise_multiplier: ``nm``: noise std on :math:`S_n` is :math:`\mathrm{nm}\cdot 2b`
        (:math:`\xi = (\mathrm{nm}\,2b)^2`). Omit it and give ``epsilon``, ``delta`` and
        ``num_iterations`` to calibrate it. Corollary 1's scaling
        :math:`\xi_n \propto n^{2\alpha}` corresponds to ``nm`` :math:`\propto n^\alpha`.
    :param one_component, guided_walk, adapt_proposal, target_accept_prob: the random walk, as for
        :class:`~pyro_dp.kernels.penalty.DPPenalty` (:class:`~pyro_dp.kernels.mh.RandomWalkKernel`).
    :param bool check_family: verify at set-up, on data drawn from the model at two
        parameter values, that the model's log-likelihood ratio equals eq. (7). The check runs
        with the model's tensor and numpy arguments replaced by zeros, so that whether it
        raises depends on no row; a model that reads data any other way (a closure, Python
        lists of numbers) would run it on the real data: pass ``check_family=False`` for it.

    Other keyword arguments are those of :class:`~pyro_dp.kernels.base.DPKernel`.

    Example
    -------
    >>> import torch; from pyro.infer import MCMC; from pyro.infer.autoguide.initialization import init_to_mean
    >>> from pyro_dp.models.examples import normal_mean_model as model  # y_i ~ N(mu, 1), mu ~ N(0, 10^2)
    >>> y = (torch.randn(10_000, generator=torch.Generator().manual_seed(0)) + 1.0).clamp(-4, 4)
    >>> fam = gaussian_known_variance("mu", scale=1.0, low=-4.0, high=4.0)
    >>> kernel = DPExpFamPenalty(model, fam, proposal_scale=0.01, noise_multiplier=50.0,
    ...                          init_strategy=init_to_mean, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=300, warmup_steps=200, disable_progbar=True); mcmc.run(y)
    >>> mu = mcmc.get_samples()["mu"]
    >>> bool(abs(mu.mean() - y.mean()) < 0.05), round(kernel.get_epsilon(1e-5), 3)  # 500 releases, nm 50
    (True, 1.76)
    """

    def __init__(
        self,
        model,
        family: ExpFamily,
        proposal_scale,
        noise_multiplier: Optional[float] = None,
        *,
        one_component: bool = False,
        guided_walk: bool = False,
        adapt_proposal: bool = False,
        target_accept_prob: Optional[float] = None,
        check_family: bool = True,
        **kwargs,
    ):
        target_accept_prob = pop_target_accept_prob(kwargs, target_accept_prob)  # before DPKernel sees kwargs
        super().__init__(model, **kwargs)
        if not isinstance(family, ExpFamily):
            raise TypeError(
                f"family must be an ExpFamily (e.g. gaussian_known_variance(...)), got {type(family).__name__}"
            )
        if family.bound is None:
            raise ValueError("family has no public bound on ||S(y) - center||: the sensitivity would be infinite")
        check_positive("family.bound", family.bound)
        self.family = family
        self._setup_walk(proposal_scale, one_component=one_component, guided_walk=guided_walk,
                         adapt_proposal=adapt_proposal,
                         target_accept_prob=target_accept_prob)
        self.noise_multiplier = noise_setting(self, "noise_multiplier", noise_multiplier)
        self.check_family = bool(check_family)
        self._checked_lik = None

    def _calibrate(self):
        if self.noise_multiplier is None:
            self.noise_multiplier = calibrated_scale(penalty_releases, Budget.of(self), self.num_iterations,
                                                     init_events=init_events(self))

    def releases(self, state=None):
        # One Gaussian mechanism on S_n per iteration (Alg. 3, step 1; Corollary 1); auto_compile:
        # iterations read no rows (the cached sum): never compiled
        return ReleasePlan((gaussian_event(float(self.noise_multiplier)),), cost=(None, 0.0, 0.0))

    def _validate(self, z: torch.Tensor) -> None:
        """Data-free checks of ``family`` against the model (dimension, and eq. (7))."""
        lik, fam = self.lik, self.family
        name = _single_observed_site(lik)
        phi, log_g = _natural(lik, fam, z)
        d = phi.numel()
        if fam.dim is not None and d != fam.dim:
            raise ValueError(f"natural_param returned {d} entries but the family has dim={fam.dim}")
        center = torch.as_tensor(fam.center)
        if center.numel() not in (1, d):
            raise ValueError(f"center has {center.numel()} entries; expected 1 or the statistic dimension {d}")
        # Simulated rows from the model at two parameter values (forked RNG), with the model's
        # tensor arguments replaced by zeros: data-free, so whether a check below raises depends
        # on the model, the family and the data's shapes only, never on a row (a covariate
        # entering the likelihood, against the family's contract, could otherwise decide it).
        m = min(lik.num_rows, 16)
        idx = torch.arange(m, device=lik.device)
        with forked_rng(self.randomness.chain_seed(7)), torch.no_grad():
            z1 = z + 0.1 * torch.randn(z.shape, dtype=z.dtype, device=z.device)
            try:
                with _zeroed_arguments(lik):
                    fn0 = lik.joint_trace(z, idx)[0].nodes[name]["fn"]
                    fn1 = lik.joint_trace(z1, idx)[0].nodes[name]["fn"]
            except Exception as e:  # noqa: BLE001 - decided on zeros: data-free
                warn_user(
                    f"DPExpFamPenalty could not simulate rows from the model with its data arguments replaced "
                    f"by zeros ({type(e).__name__}: {str(e)[:200]}); the family check is skipped. Pass "
                    "check_family=False to silence this.", UserWarning)
                return
            fake = fn0.sample()
            site = {"value": fake, "fn": fn0}
            rows = _rows_of(site, lik.plate_dim)
            s = fam.statistic(rows)
        s = s.reshape(rows.shape[0], -1) if s.dim() == 1 else s
        if s.dim() != 2 or s.shape[1] != d:
            raise ValueError(
                f"statistic dimension mismatch: statistic returns shape {tuple(s.shape)} per batch of rows, "
                f"natural_param has {d} entries"
            )
        if not self.check_family:
            return
        with torch.no_grad():
            phi1, log_g1 = _natural(lik, fam, z1)

            def per_row(fn):
                lp = fn.log_prob(fake)
                lp = lp.expand(fake.shape[: fake.dim() - fn.event_dim])
                return torch.movedim(lp, lik.plate_dim, 0).reshape(rows.shape[0], -1).sum(-1)

            lhs = per_row(fn1) - per_row(fn0)
            rhs = (log_g1 - log_g) + s.to(phi.dtype) @ (phi1 - phi)  # eq. (7) per row
        if not torch.allclose(lhs, rhs.to(lhs.dtype), rtol=1e-4, atol=1e-6):
            raise ValueError(
                "the model's likelihood does not match the exponential family: on data simulated from "
                "the model, log p(y|θ') - log p(y|θ) != log g(θ') - log g(θ) + (φ(θ') - φ(θ))ᵀS(y) "
                f"(max error {float((lhs - rhs).abs().max()):.3g}); check site names and parametrisation"
            )

    def _initial_cache(self, z):
        if self._checked_lik is not self.lik:  # once per setup(), before any data access
            self._validate(z)
            self._statistic = SufficientStatistic(self.lik, self.family)
            self._checked_lik = self.lik
        with torch.no_grad():
            return _natural(self.lik, self.family, z)

    def _release(self, noise, state, z_new):
        return expfam_release(self.lik, self.family, self._statistic, noise, state, z_new,
                              noise_multiplier=self.noise_multiplier)

    def _accept(self, rng, lambda_hat, noise_var):
        return penalty_accept(rng, lambda_hat, noise_var)
