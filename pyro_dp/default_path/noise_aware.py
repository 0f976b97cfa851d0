r"""One-release noise-aware inference: spend ε once on a quadratic expansion of the
log-likelihood at a private centre, then sample, with Pyro's NUTS, the posterior **given the
released statistics and their known noise** (issue 62's "one-release mode").

**An approximation, named as one.** Every run says so (:data:`APPROXIMATION`: the kernel's
``approximation`` attribute, ``diagnostics()["approximation"]``, and the ledger label of its
releases, which :func:`pyro_dp.privacy_report` and :func:`pyro_dp.to_arviz` show as the purpose
of those releases). Use it where an iterative DP chain cannot be right (small
:math:`\varepsilon\sqrt N`, issue 62); it is not exact at any budget.

The releases (each a Gaussian mechanism in the chain's ledger; substitution of one row, so a
sum of per-row terms clipped to norm :math:`C` has sensitivity :math:`2C`):

0. a **private centre** :math:`\theta_0` and **clip** :math:`C_g`: the default path's tuner
   (:class:`~pyro_dp.kernels.DPAutoTune`, passed as the kernel's ``init``; its own releases
   under its ``tune:*`` labels, ``share`` of the chain's budget): its DP-Adam start and its
   ratio clip :math:`b` (a private quantile of the per-row gradient norms at that start), and
   :math:`C_g` = :data:`CLIP_HEADROOM` :math:`\cdot b`;
1. the clipped **score sum** at :math:`\theta_0`,
   :math:`s = \sum_i \mathrm{clip}_{C_g}(\nabla\ell_i(\theta_0)) + \mathcal N(0, \sigma_s^2 I)`,
   :math:`\sigma_s = \mathrm{nm}_s\cdot 2C_g`;
2. the clipped **curvature sum** at :math:`\theta_0`, the per-row negative Hessians clipped in
   Frobenius norm :math:`C_H`: :math:`\hat H = \sum_i \mathrm{clip}_{C_H}(-\nabla^2\ell_i(\theta_0))
   + W`, released as the vector :math:`v(M) = (M_{jj}, \sqrt2 M_{jk})_{j<k}` whose Euclidean norm
   is :math:`\|M\|_F` (so the Frobenius clip is the vector clip and the sensitivity is
   :math:`2C_H`), plus :math:`\mathcal N(0, \sigma_H^2 I)`, :math:`\sigma_H = \mathrm{nm}_H\cdot 2C_H`.
   In matrix form :math:`W` is symmetric with independent entries, variance :math:`\sigma_H^2` on
   the diagonal and :math:`\sigma_H^2/2` off it (the Gaussian orthogonal ensemble's shape; the
   symmetric release of "Analyze Gauss", Dwork, Talwar, Thakurta & Zhang 2014, STOC, Alg. 1, with
   the off-diagonal entries weighted so that one Frobenius clip bounds them all). The default
   :math:`C_H = b^2`: by the information identity
   :math:`E[-\nabla^2\ell_i] = E[\nabla\ell_i\nabla\ell_i^\top]`, the per-row curvature has the
   size of the squared score (a data-free function of a released clip).

The noise multipliers come from the budget left after the tuner (``score_share`` of it to the
score, the rest to the curvature; Gaussian mechanisms compose exactly in Gaussian DP,
:math:`\mu^2 = \sum 1/\mathrm{nm}_j^2`, Dong, Roth & Su 2022 Cor. 3.3).

**The noise-aware likelihood** (Bernstein & Sheldon 2018, "Differentially private Bayesian
inference for exponential families", NeurIPS: condition on the released statistics, with the
privacy noise in the model; Kulkarni, Jälkö, Koskela, Kaski & Honkela 2021, "Differentially
private Bayesian inference for generalized linear models", ICML, for GLMs). Sign convention:
:math:`\ell_i` is row :math:`i`'s log-likelihood, :math:`s` the sum of its gradients (the score,
zero at the maximum-likelihood point), :math:`H` the sum of its *negative* Hessians (positive
definite at a maximum). Under the local asymptotic model at :math:`\theta_0` (rows independent
given :math:`\theta`; Le Cam's local asymptotic normality), a row's score at :math:`\theta_0` has
:math:`E_\theta[\nabla\ell_i(\theta_0)] \approx I_i(\theta-\theta_0)` and covariance
:math:`\approx I_i`, so by the central limit theorem, with :math:`\delta = \theta-\theta_0`,

.. math::
    s \mid \theta, H \;\sim\; \mathcal N\big(H\delta,\; H + \sigma_s^2 I\big).

Without privacy noise this likelihood is :math:`\propto \exp(-\tfrac12(\delta - H^{-1}s)^\top
H(\delta - H^{-1}s))`, the Laplace approximation around one Newton step from :math:`\theta_0`;
the noise :math:`\sigma_s^2 I` widens it. :math:`H` is known only through
:math:`\hat H = H + W`; with a flat prior on :math:`H`, :math:`H \mid \hat H \sim \hat H - W`, and
:math:`s - \hat H\delta = (s - H\delta) - W\delta`, where :math:`W\delta` is Gaussian with covariance
:math:`\tfrac{\sigma_H^2}2(\|\delta\|^2 I + \delta\delta^\top)` (the ensemble above). Marginalising
:math:`H`'s noise to this Gaussian order,

.. math::
    \log L(\theta) = \log\mathcal N\Big(s - \hat H\delta;\; 0,\;
        \hat H_+ + \sigma_s^2 I + \tfrac{\sigma_H^2}{2}\big(\|\delta\|^2 I + \delta\delta^\top\big)\Big),

with :math:`\hat H_+` the projection of :math:`\hat H` on the positive semi-definite cone (its
eigenvalues floored at 0) in the CLT covariance only. The kernel samples
:math:`p(\theta)\,L(\theta)^T` (:math:`T` the temperature) with Pyro's NUTS in the model's
unconstrained coordinates (:math:`\theta` there; the prior term includes the Jacobian): the
data enter only through :math:`(\theta_0, C_g, s, \hat H)`, so the sampling is post-processing.

**Approximations** (what can make it wrong): the quadratic (local asymptotic) model of the
log-likelihood over the posterior's extent around :math:`\theta_0` — wrong for multimodal or
strongly skewed posteriors (mixtures, boundaries, heavy tails at small :math:`N`), and biased
when :math:`\theta_0` is many posterior sds from the mode (a Newton step's error); the CLT for
the score; clipping bias (a clipped row's score and curvature are shrunk; the clips sit at a
high private quantile); :math:`\hat H_+` for the unknown :math:`H` in the covariance; the
observed curvature for the expected information. The kernel checks what the releases can show
(:func:`approximation_problems`: a curvature that is not concave beyond its noise, a posterior far
from the centre) and what the model's code shows (:func:`mixture_sites`: a mixture likelihood,
whose label switching gives several modes; data-free, at set-up), and warns with
:class:`PoorApproximationWarning`. A local expansion cannot see a second mode: a mixture written
as a ``pyro.factor`` of its log-density goes unnoticed (measured: ``benchmarks/noise_aware.py``,
``docs/choosing.md``).

**How it fits Pyro's kernel protocol.** Each Pyro iteration is one NUTS transition of the
post-processing chain. The releases happen at the chain's first iteration (the tuner as the
kernel's private start, then the two releases), declared to the privacy engine before they are
made; every later iteration releases nothing. Pyro's NUTS draws from torch's global generator:
each transition runs under :func:`~pyro_dp.likelihood.forked_rng`, seeded from the kernel's
public stream, so the global generator is left as it was. With several chains, each chain
makes its own releases from its share of the budget (prefer one chain: NUTS mixes well).

>>> import torch, pyro, pyro.distributions as dist
>>> from pyro.infer import MCMC
>>> def model(y):
...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 10.0))
...     with pyro.plate("data", len(y)):
...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y)
>>> y = torch.randn(10_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1.0
>>> kernel = DPNoiseAware(model, epsilon=1.0, delta=1e-5, seed=0)
>>> mcmc = MCMC(kernel, num_samples=200, warmup_steps=100, disable_progbar=True)
>>> mcmc.run(y)
>>> draws = mcmc.get_samples()["mu"]
>>> abs(float(draws.mean()) - 1.0) < 0.2, round(kernel.get_epsilon(1e-5), 6) <= 1.0
(True, True)
>>> kernel.approximation
'one-release noise-aware (quadratic) approximation of the posterior of model'
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import NamedTuple, Optional, Tuple

import torch
import pyro.distributions as dist
from pyro import poutine
from pyro.infer.mcmc import NUTS
from torch.func import hessian, vmap

from ..isolation import nan_like_rows
from ..likelihood import forked_rng
from ..mechanisms import clip_and_sum, clipped_sum_with_noise, gaussian_event, sum_clipped
from ..warn import warn_user
from ..kernels.base import DPKernel, check_positive
from ..kernels.parts import PartAttribute
from ..kernels.path_hook import route_through
from ..kernels.releases import Budget, ReleasePlan, calibrated_scale, init_events, noise_setting
from .tuning import DPAutoTune

__all__ = ["DPNoiseAware", "OneReleaseMode", "QuadraticRelease", "release_quadratic", "noise_aware_loglik", "approximation_problems",
           "symmetric_to_vector", "vector_to_symmetric", "psd_part", "PoorApproximationWarning", "APPROXIMATION",
           "DEFAULT_TUNING_SHARE", "DEFAULT_SCORE_SHARE", "CLIP_HEADROOM", "MAX_STEP_SDS", "mixture_sites", "MIXTURES"]

#: What every run of :class:`DPNoiseAware` is, in words (its diagnostics, its ledger label).
APPROXIMATION = "one-release noise-aware (quadratic) approximation"

#: Share of each chain's budget (Gaussian-DP :math:`\mu^2`) for the private centre and clip (the tuner).
DEFAULT_TUNING_SHARE = 0.3

#: Share of the rest for the score release (the curvature gets the remainder): the score's noise
#: shifts the posterior mean directly, the curvature's only through :math:`\hat H\delta` and the
#: covariance (a relative error of :math:`\sigma_H/\lambda(H)`, small at any :math:`N` this mode is for).
DEFAULT_SCORE_SHARE = 0.7

# rows per chunk of the per-row Hessians ([rows, D, D] at once)
_CHUNK_ROWS = 1 << 12

#: The score clip over the tuner's ratio clip (data-free headroom, as the default path's DP-SGLD
#: clip, ``LANGEVIN_CLIP_HEADROOM``): nothing corrects a clipped score, and the tuner's quantile
#: leaves a few per cent of the rows above it at small budgets. Measured on the linear model with an
#: unknown noise scale (N = 10⁴, ε = 1, ``benchmarks/noise_aware.py``): at the tuner's clip the
#: scale's mean was 5 NUTS sds low (the largest residuals, clipped, pull it down); at twice the clip,
#: 0.15 sds, with intervals about 1.3–2× wider.
CLIP_HEADROOM = 2.0

#: A Newton step from the centre longer than this many posterior sds (of the noise-aware Gaussian
#: approximation) warns: the quadratic is extrapolated far from where it was released.
MAX_STEP_SDS = 3.0


class PoorApproximationWarning(UserWarning):
    """The releases show that the quadratic (local asymptotic) model behind
    :class:`DPNoiseAware` is poor for this model and data: its posterior may be wrong."""


class QuadraticRelease(NamedTuple):
    r"""What :func:`release_quadratic` released (public: post-processing may use all of it).

    :ivar centre: :math:`\theta_0`, flat, unconstrained (a private start: released).
    :ivar score: :math:`s`, the noisy clipped score sum at :math:`\theta_0` ``[D]``.
    :ivar curvature: :math:`\hat H`, the noisy clipped sum of negative per-row Hessians ``[D, D]``
        (symmetric, not projected).
    :ivar score_std: :math:`\sigma_s`.
    :ivar curvature_std: :math:`\sigma_H`, the noise sd of :math:`\hat H`'s diagonal entries
        (off-diagonal entries: :math:`\sigma_H/\sqrt2`).
    :ivar grad_clip, curvature_clip: :math:`C_g`, :math:`C_H`.
    :ivar events: the two events, in release order.
    """

    centre: torch.Tensor
    score: torch.Tensor
    curvature: torch.Tensor
    score_std: float
    curvature_std: float
    grad_clip: float
    curvature_clip: float
    events: tuple


def symmetric_to_vector(m: torch.Tensor) -> torch.Tensor:
    r"""``[..., D, D]`` symmetric → ``[..., D(D+1)/2]``: the diagonal, then the upper triangle
    times :math:`\sqrt2`, so that the vector's Euclidean norm is the matrix's Frobenius norm.

    >>> m = torch.tensor([[1.0, 2.0], [2.0, 3.0]])
    >>> v = symmetric_to_vector(m); v, bool(torch.isclose(v.norm(), m.norm()))
    (tensor([1.0000, 3.0000, 2.8284]), True)
    """
    d = m.shape[-1]
    i, j = torch.triu_indices(d, d, offset=1, device=m.device)
    return torch.cat([torch.diagonal(m, dim1=-2, dim2=-1), math.sqrt(2.0) * m[..., i, j]], -1)


def vector_to_symmetric(v: torch.Tensor, d: int) -> torch.Tensor:
    """The inverse of :func:`symmetric_to_vector` for ``[D(D+1)/2]`` (a noisy vector gives a
    symmetric matrix whose off-diagonal noise is the vector's over :math:`\\sqrt2`).

    >>> vector_to_symmetric(symmetric_to_vector(torch.tensor([[1.0, 2.0], [2.0, 3.5]])), 2)
    tensor([[1.0000, 2.0000],
            [2.0000, 3.5000]])
    """
    i, j = torch.triu_indices(d, d, offset=1, device=v.device)
    m = torch.diag(v[:d])
    off = v[d:] / math.sqrt(2.0)
    m = m.index_put((i, j), off).index_put((j, i), off)
    return m


def _clipped_curvature_sum(lik, z: torch.Tensor, clip: float):
    r""":func:`~pyro_dp.mechanisms.clip_and_sum` of the per-row :math:`v(-\nabla^2\ell_i(z))`, in
    chunks of rows, each row's Hessian from that row alone (``vmap`` over the isolated rows, as
    the likelihood's gradients; a row whose code raises gets NaN terms, which the per-row rule
    maps to the zero row). **Reads the data**: release only through the mechanism."""
    fn = vmap(hessian(lik.eager_row_term), in_dims=(None,) + (0,) * len(lik.arguments.data_pos),
              chunk_size=lik.vmap_chunk_size)
    d, n = lik.dim, lik.num_rows
    parts = []
    for start in range(0, n, _CHUNK_ROWS):
        idx = torch.arange(start, min(start + _CHUNK_ROWS, n), device=lik.device)
        h = lik.per_row(fn, z, idx, lambda b: nan_like_rows(b, d * d, z.dtype, z.device).reshape(b, d, d))  # private
        parts.append(clip_and_sum(symmetric_to_vector(-h.detach()), clip))
    return sum_clipped(parts)


def release_quadratic(lik, centre: torch.Tensor, grad_clip: float, curvature_clip: float, score_noise: float,
                      curvature_noise: float, noise, relation: str = "substitute"):
    r"""Release the clipped score sum and the clipped curvature sum at ``centre`` (module
    docstring, releases 1 and 2) through :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`,
    which records each release's event in the open recorder as it draws (issue 58: the caller
    reports ``QuadraticRelease.events``, it writes no ledger). Returns ``(QuadraticRelease,
    clipped fraction)``; the clipped fraction (of the score's rows) is a statistic of the raw
    data, for the data holder's diagnostics only."""
    z = centre.detach()
    _, cs = lik.clipped_grad_sum(z, grad_clip)  # reads the data ...
    score = clipped_sum_with_noise(cs, grad_clip, score_noise, noise, relation)  # ... released here
    cv = _clipped_curvature_sum(lik, z, curvature_clip)  # reads the data ...
    curv = clipped_sum_with_noise(cv, curvature_clip, curvature_noise, noise, relation)  # ... released here
    out = QuadraticRelease(z, lik.project(score.value), vector_to_symmetric(curv.value, lik.dim),
                           float(score.noise_std), float(curv.noise_std), float(grad_clip), float(curvature_clip),
                           (score.event, curv.event))
    return out, score.clipped_fraction


def psd_part(m: torch.Tensor) -> torch.Tensor:
    """The projection of a symmetric matrix on the positive semi-definite cone (eigenvalues
    floored at 0; the Frobenius-nearest PSD matrix, Higham 1988)."""
    w, v = torch.linalg.eigh(m)
    return (v * w.clamp_min(0.0)) @ v.T


def noise_aware_loglik(release: QuadraticRelease, z: torch.Tensor, curvature_psd: Optional[torch.Tensor] = None
                       ) -> torch.Tensor:
    r""":math:`\log L(\theta)` of the module docstring at unconstrained ``z`` (differentiable in
    ``z``): :math:`\log\mathcal N(s - \hat H\delta; 0, \hat H_+ + \sigma_s^2 I +
    \tfrac{\sigma_H^2}2(\|\delta\|^2 I + \delta\delta^\top))`, :math:`\delta = z - \theta_0`.
    ``curvature_psd``: :math:`\hat H_+` if already computed.

    Without noise it is the Laplace approximation around one Newton step, :math:`\mathcal
    N(\theta_0 + H^{-1}s, H^{-1})` in :math:`\theta` (here :math:`s = 2`, :math:`H = 4`: mean 0.5,
    variance 1/4, so the log density at 0.5 exceeds that at 0 by :math:`0.5^2/(2\cdot 0.25)`):

    >>> t = lambda *v: torch.tensor(v, dtype=torch.float64)
    >>> r = QuadraticRelease(t(0.0), t(2.0), t([4.0]), 0.0, 0.0, 1.0, 1.0, ())
    >>> round(float(noise_aware_loglik(r, t(0.5)) - noise_aware_loglik(r, t(0.0))), 6)
    0.5
    """
    d = z.shape[-1]
    hp = psd_part(release.curvature) if curvature_psd is None else curvature_psd
    delta = z - release.centre
    eye = torch.eye(d, dtype=z.dtype, device=z.device)
    cov = (hp + release.score_std ** 2 * eye
           + 0.5 * release.curvature_std ** 2 * (delta.dot(delta) * eye + torch.outer(delta, delta)))
    resid = release.score - release.curvature @ delta
    chol = torch.linalg.cholesky(cov)
    w = torch.linalg.solve_triangular(chol, resid.unsqueeze(-1), upper=False).squeeze(-1)
    return -0.5 * w.dot(w) - torch.log(torch.diagonal(chol)).sum() - 0.5 * d * math.log(2 * math.pi)


def approximation_problems(release: QuadraticRelease, max_step_sds: float = MAX_STEP_SDS) -> list:
    r"""What the releases say against the quadratic model (post-processing, public), in words:

    * **not concave at the centre**: :math:`\lambda_{\min}(\hat H) < -(\sqrt{2D}+3)\sigma_H`, below
      the edge of the noise's spectrum (:math:`\approx\sigma_H\sqrt{2D}` for the ensemble of
      :math:`W`, Wigner's semicircle): the log-likelihood curves upwards in some direction, as
      between the modes of a mixture;
    * **far from the centre**: the Newton step :math:`\hat H_+^{-1}s` is longer than
      ``max_step_sds`` sds of the noise-aware Gaussian approximation (precision
      :math:`\hat H_+(\hat H_+ + \sigma_s^2 I)^{-1}\hat H_+`): the quadratic is extrapolated.

    >>> r = QuadraticRelease(torch.zeros(2), torch.zeros(2), torch.diag(torch.tensor([100.0, -50.0])), 1.0, 1.0, 1.0, 1.0, ())
    >>> [p.split(":")[0] for p in approximation_problems(r)]
    ['not concave at the centre']
    """
    out = []
    h = release.curvature.to(torch.float64)
    d = h.shape[-1]
    w, v = torch.linalg.eigh(h)
    edge = (math.sqrt(2.0 * d) + 3.0) * release.curvature_std
    if float(w[0]) < -edge:
        out.append(f"not concave at the centre: the released curvature has an eigenvalue {float(w[0]):.3g}, below "
                   f"-{edge:.3g}, the edge of its noise: the log-likelihood curves upwards in some direction (a "
                   "mixture's saddle between modes, a boundary, heavy tails), which no quadratic represents")
    wp = w.clamp_min(0.0)
    s = (v.T @ release.score.to(torch.float64))
    keep = wp > 0
    if bool(keep.any()):
        step = s[keep] / wp[keep]  # Newton step in the eigenbasis
        prec = wp[keep] ** 2 / (wp[keep] + release.score_std ** 2)  # noise-aware precision per eigendirection
        sds = float(torch.sqrt((step ** 2 * prec).sum()))
        if sds > max_step_sds:
            out.append(f"far from the centre: the posterior the releases imply lies about {sds:.3g} posterior sds "
                       f"from the private centre (more than {max_step_sds:g}): the quadratic is extrapolated "
                       "there, and its error grows with the cube of the distance")
    return out


#: Observed-site distributions whose likelihood is a mixture (:func:`mixture_sites`).
MIXTURES = (dist.MixtureSameFamily, dist.MixtureOfDiagNormals, dist.MixtureOfDiagNormalsSharedCovariance)


def mixture_sites(lik, seed: int = 0) -> list:
    """The observed sites of ``lik``'s model whose distribution is a mixture (:data:`MIXTURES`, also
    inside ``Independent`` or a mask): decided from the model's code on a one-row stand-in of zeros
    with latents drawn from the prior (**never the data**; torch's global generator is seeded and
    restored). A mixture's components can swap (label switching) and its posterior then has several
    modes, which a quadratic at one centre cannot represent. A mixture written as a ``pyro.factor``
    of its log-density is not seen."""
    args, kwargs = lik.arguments.build(lik.arguments.stand_in(1), count=1)
    with forked_rng(seed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr = poutine.trace(lik.model).get_trace(*args, **kwargs)
    out = []
    for name, site in tr.nodes.items():
        if site["type"] == "sample" and name in lik.observed_names:
            fn = site["fn"]
            while hasattr(fn, "base_dist"):  # Independent, MaskedDistribution, ...
                fn = fn.base_dist
            if isinstance(fn, MIXTURES):
                out.append(name)
    return out


def noise_aware_releases(noise_multiplier: float, curvature_noise_multiplier: float) -> ReleasePlan:
    """DPNoiseAware's releases: the score and the curvature, once (its one releasing iteration);
    the tuner's ratio clip balances the score's noise."""
    return ReleasePlan((gaussian_event(noise_multiplier), gaussian_event(curvature_noise_multiplier)),
                       ratio_noise_multiplier=noise_multiplier)


class _Potential:
    """Pyro's NUTS potential :math:`-\\log p(\\theta) - T\\log L(\\theta)` on ``{"z": flat
    unconstrained}`` (post-processing of the release; the prior is data-free). A class, not a
    closure, so that the kernel pickles."""

    def __init__(self, lik, release: QuadraticRelease, temperature: float):
        self.lik, self.release, self.temperature = lik, release, float(temperature)
        self.curvature_psd = psd_part(release.curvature)

    def __call__(self, params):
        z = params["z"]
        return -(self.lik.eager_log_prior(z) + self.temperature * noise_aware_loglik(self.release, z, self.curvature_psd))


class NoiseAwareState(NamedTuple):
    """:ivar z: the current draw, flat unconstrained."""

    z: torch.Tensor


class NoiseAwareInfo(NamedTuple):
    """:ivar accepted: whether the NUTS transition moved. :ivar events: the score and curvature
    releases at the chain's first iteration, empty after. :ivar clipped_fraction: the score
    release's clipped fraction (not private), 0 after the first iteration. :ivar label: the
    ledger label of the releases (:data:`APPROXIMATION`)."""

    accepted: bool
    events: tuple
    clipped_fraction: float
    label: str = APPROXIMATION


class OneReleaseMode:
    r"""The one-release computation (module docstring) as a **part** of a kernel: its settings,
    its calibration, its declaration of releases, its state, its step (the releases at a chain's
    first iteration, then Pyro's NUTS on the noise-aware likelihood) and its diagnostics, each a
    method called with the kernel (:func:`~pyro_dp.kernels.path_hook.route_through` routes the
    kernel's ``_calibrate``, ``releases``, ``_init_state``, ``_step``, ``diagnostics`` and ``logging`` here).
    :class:`DPNoiseAware` is a kernel with this part and nothing else; the default path attaches
    it to ``DPPenalty`` and ``DPHMC`` where their iterative chain cannot be right
    (:func:`pyro_dp.default_path.inference.choose_inference`, issue 62).

    Decision (issue 62): a part, not a kernel the default path swaps in, because ``MCMC`` holds the
    kernel object the user built, and the budget, the seeds, the ledger and the worker processes
    are that object's; attaching a part keeps every one of them and changes only the algorithm.

    :param reason: why it runs, in words (``None``: it was asked for by its kernel, ``DPNoiseAware``);
        the default path's choice says what it decided from (shown by the diagnostics, the report).

    The other parameters are :class:`DPNoiseAware`'s (checked here).
    """

    def __init__(self, *, grad_clip: Optional[float] = None, curvature_clip: Optional[float] = None,
                 noise_multiplier: Optional[float] = None, curvature_noise_multiplier: Optional[float] = None,
                 score_share: float = DEFAULT_SCORE_SHARE, nuts_options: Optional[dict] = None,
                 reason: Optional[str] = None):
        self.grad_clip = None if grad_clip is None else check_positive("grad_clip", grad_clip)
        self.curvature_clip = None if curvature_clip is None else check_positive("curvature_clip", curvature_clip)
        self.score_share = float(score_share)
        if not 0.0 < self.score_share < 1.0:
            raise ValueError(f"score_share must be in (0, 1), got {score_share!r}")
        self.noise_multiplier, self.curvature_noise_multiplier = noise_multiplier, curvature_noise_multiplier
        if (noise_multiplier is None) != (curvature_noise_multiplier is None):
            raise ValueError("give both noise_multiplier and curvature_noise_multiplier, or neither (both from the budget)")
        self.given_clips = (self.grad_clip, self.curvature_clip)
        self.nuts_options = {"full_mass": True, "max_tree_depth": 8, **(nuts_options or {})}
        self.reason = reason
        #: what the kernel's draws are, in words (with the model's name: :meth:`attach`)
        self.approximation = APPROXIMATION
        #: the last chain's release (:class:`QuadraticRelease`) and the problems it showed
        self.release: Optional[QuadraticRelease] = None
        self.problems: list = []
        #: what the model's structure says against the quadratic (data-free, at the first set-up)
        self.structure_problems: list = []
        self.nuts = None  # the chain's NUTS kernel, once its releases are made
        self.nuts_chain = None  # the kernel's ChainRecord it was made for (a new chain releases anew)

    def attach(self, kernel) -> "OneReleaseMode":
        """Check the noise settings on ``kernel`` (the default budget adopted when none is given),
        name the model in :attr:`approximation`, and route the kernel through this part."""
        self.noise_multiplier = noise_setting(kernel, "noise_multiplier", self.noise_multiplier)
        self.curvature_noise_multiplier = noise_setting(kernel, "curvature_noise_multiplier",
                                                        self.curvature_noise_multiplier)
        model = kernel.model
        self.approximation = f"{APPROXIMATION} of the posterior of {getattr(model, '__name__', type(model).__name__)}"
        route_through(kernel, self)
        return self

    def owner(self, kernel) -> str:
        """How warnings name the run: the kernel, and this approximation."""
        return f"{type(kernel).__name__} ({self.approximation})"

    # ------------------------------------------------------------------ the plan (data-free)
    def calibrate(self, kernel) -> None:
        """The kernel's ``_calibrate``: the budget the tuner leaves, split between the two releases;
        at the first set-up, the model's structure checked (:func:`mixture_sites`, data-free)."""
        if self.noise_multiplier is None:
            ratio = math.sqrt(self.score_share / (1.0 - self.score_share))  # nm_H / nm_s for shares of mu^2
            self.noise_multiplier = calibrated_scale(lambda s: noise_aware_releases(s, s * ratio), Budget.of(kernel),
                                                     kernel.num_iterations, init_events=init_events(kernel),
                                                     closed_form=False)
            self.curvature_noise_multiplier = self.noise_multiplier * ratio
        if kernel.num_setups == 1:  # data-free: the model's code on a stand-in row
            sites = mixture_sites(kernel.lik)
            if sites and not self.structure_problems:
                self.structure_problems = [f"mixture likelihood at {sites}: its components can swap and its posterior "
                                           "then has several modes; a quadratic at one centre represents one of them"]
                warn_user(f"{self.owner(kernel)}: {self.structure_problems[0]}. Its posterior is likely wrong (too "
                          "narrow, one mode): use an iterative kernel (docs/choosing.md)", PoorApproximationWarning)

    def released(self, kernel) -> bool:
        """Whether the chain in progress has made its releases."""
        return self.nuts is not None and self.nuts_chain is kernel.chain

    def releases(self, kernel, state=None) -> ReleasePlan:
        """The kernel's ``releases``: the score and the curvature at the chain's first step; nothing after."""
        plan = noise_aware_releases(self.noise_multiplier, self.curvature_noise_multiplier)
        n = float(kernel.lik.num_rows)
        plan = dataclasses.replace(plan, cost=("penalty", n, n))
        return plan if state is None or not self.released(kernel) else dataclasses.replace(plan, step=())

    def take_tuning(self, kernel, result) -> None:
        r"""The default path's recipe (post-processing of the tuning releases): the clips left out
        follow the tuner's ratio clip :math:`b`, the score's at :data:`CLIP_HEADROOM` :math:`\cdot b`,
        the curvature's at :math:`b^2`."""
        grad_clip, curvature_clip = self.given_clips
        b = float(result.llr_clip)
        self.grad_clip = CLIP_HEADROOM * b if grad_clip is None else grad_clip
        self.curvature_clip = b * b if curvature_clip is None else curvature_clip

    # ------------------------------------------------------------------ the chain
    def init_state(self, kernel, z):
        return NoiseAwareState(z.detach())

    def release_and_start(self, kernel, z) -> float:
        """The chain's two releases at ``z`` (the mechanisms record them), their checks, and the
        NUTS kernel on the noise-aware posterior; returns the score's clipped fraction (not private)."""
        release, frac = release_quadratic(kernel.lik, z, self.grad_clip, self.curvature_clip, self.noise_multiplier,
                                          self.curvature_noise_multiplier, kernel.randomness.noise, kernel.relation)
        self.release = release
        self.problems = approximation_problems(release)
        for p in self.problems:
            warn_user(f"{self.owner(kernel)}: {p}. Its posterior may be wrong: check it against what you know, spend "
                      "more epsilon, or use an iterative kernel (docs/choosing.md)", PoorApproximationWarning)
        nuts = NUTS(potential_fn=_Potential(kernel.lik, release, kernel.temperature), **self.nuts_options)
        nuts.initial_params = {"z": z.detach()}
        with forked_rng(_public_seed(kernel)):
            nuts.setup(kernel.chain.warmup_steps)
        self.nuts, self.nuts_chain = nuts, kernel.chain
        return frac

    def step(self, kernel, state):
        """The kernel's ``_step``: the releases at the chain's first iteration, then one NUTS transition."""
        events, frac = (), 0.0
        if not self.released(kernel):
            frac = self.release_and_start(kernel, state.z)
            events = self.release.events
        with forked_rng(_public_seed(kernel)):  # Pyro's NUTS draws from the global generator: seeded, restored
            out = self.nuts.sample({"z": state.z})
        z = out["z"].detach()
        return NoiseAwareState(z), NoiseAwareInfo(not torch.equal(z, state.z), tuple(events), frac)

    def diagnostics(self, kernel) -> dict:
        """The base's diagnostics (:meth:`DPKernel.diagnostics`: not the kernel class's, whose additions
        describe its own chain, which did not run), with what the draws are (``"approximation"``),
        what the releases and the model showed against it, and why it ran (``"inference"``)."""
        out = DPKernel.diagnostics(kernel)
        out["approximation"] = self.approximation
        out["approximation problems"] = list(self.structure_problems) + list(self.problems)
        out["inference"] = "one_release" if self.reason is None else f"one_release: {self.reason}"
        return out

    def logging(self, kernel) -> dict:
        """The kernel's progress-bar postfix: the base's (:meth:`DPKernel.logging`: the share of NUTS
        transitions that moved, ε so far), not the kernel class's, which describes its own chain."""
        return DPKernel.logging(kernel)


def _public_seed(kernel) -> int:
    """A seed for Pyro's NUTS from the kernel's data-free stream."""
    return int(torch.randint(0, 2 ** 62, (1,), generator=kernel.randomness.rng))


class DPNoiseAware(DPKernel):
    r"""One-release noise-aware posterior (module docstring): a private centre and clip (the
    tuner), one clipped score release and one clipped curvature release there, then Pyro's NUTS
    on the prior times the noise-aware likelihood of those releases. **An approximation**
    (:attr:`approximation`); the releases are the whole privacy cost. The kernel is the part
    :class:`OneReleaseMode` and nothing else (its settings are the part's, read and written here).

    :param model: Pyro model (as every kernel's).
    :param float grad_clip: :math:`C_g` (default: :data:`CLIP_HEADROOM` times the tuner's ratio
        clip :math:`b`, a private quantile of the per-row gradient norms).
    :param float curvature_clip: :math:`C_H` (default: :math:`b^2`, the information identity).
    :param float noise_multiplier: :math:`\mathrm{nm}_s` of the score release (default: from the
        budget, :data:`DEFAULT_SCORE_SHARE` of what the tuner leaves).
    :param float curvature_noise_multiplier: :math:`\mathrm{nm}_H` (default: from the budget, the rest).
    :param float score_share: the score's share of the budget the tuner leaves.
    :param init: the private centre: a :class:`~pyro_dp.kernels.DPAutoTune` (default:
        ``DPAutoTune(share=DEFAULT_TUNING_SHARE)``, unwhitened: the quadratic lives in the
        model's unconstrained coordinates).
    :param dict nuts_options: keyword arguments of Pyro's :class:`~pyro.infer.mcmc.NUTS`
        (default: ``full_mass=True``, ``max_tree_depth=8``).
    :param kwargs: the base's (``epsilon``, ``delta``, ``seed``, ``temperature``, ...); its
        ``num_iterations`` is 1: one releasing iteration per chain.
    """

    grad_clip = PartAttribute("one_release")
    curvature_clip = PartAttribute("one_release")
    noise_multiplier = PartAttribute("one_release")
    curvature_noise_multiplier = PartAttribute("one_release")
    score_share = PartAttribute("one_release")
    nuts_options = PartAttribute("one_release")
    approximation = PartAttribute("one_release")
    release = PartAttribute("one_release")
    problems = PartAttribute("one_release")
    structure_problems = PartAttribute("one_release")

    def __init__(self, model, *, grad_clip: Optional[float] = None, curvature_clip: Optional[float] = None,
                 noise_multiplier: Optional[float] = None, curvature_noise_multiplier: Optional[float] = None,
                 score_share: float = DEFAULT_SCORE_SHARE, init=None, nuts_options: Optional[dict] = None,
                 jit_compile: Optional[bool] = False, **kwargs):
        if "num_iterations" in kwargs:
            raise ValueError("DPNoiseAware releases once per chain: its plan is one releasing iteration "
                             "(num_iterations=1); the NUTS draws after it are free. Leave num_iterations out")
        if kwargs.get("inference", "one_release") != "one_release":
            raise ValueError(f"DPNoiseAware is the one-release mode: inference={kwargs['inference']!r} is for "
                             "DPPenalty and DPHMC (leave it out)")
        if init is None:
            init = DPAutoTune(share=DEFAULT_TUNING_SHARE)
        if not isinstance(init, DPAutoTune) or init.whiten or init.scale or init.centre:
            raise ValueError("DPNoiseAware takes its private centre from an unwhitened DPAutoTune "
                             f"(whiten=False, scale=False, centre=False), got {init!r}")
        kwargs["inference"] = "one_release"
        super().__init__(model, init=init, num_iterations=1, jit_compile=jit_compile, **kwargs)
        OneReleaseMode(grad_clip=grad_clip, curvature_clip=curvature_clip, noise_multiplier=noise_multiplier,
                       curvature_noise_multiplier=curvature_noise_multiplier, score_share=score_share,
                       nuts_options=nuts_options).attach(self)
