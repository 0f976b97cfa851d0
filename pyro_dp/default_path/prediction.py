r"""Data-free predictions of a default-path chain, shared by the default path's warnings and
:mod:`pyro_dp.default_path.forecast`.

The default path quotes them before a chain runs (its noise-limited warning,
:func:`~pyro_dp.default_path.driver.forecast_ess`) and decides with them whether DP-HMC's
gradient releases pay (:func:`gradient_gain`); :func:`pyro_dp.feasibility` builds its whole
forecast on them. Everything here is a pure function of public quantities: the model *profiles*
(:class:`ModelProfile`: synthetic rows, never your data), the noise multiplier, the clips and the
run. The model is :mod:`pyro_dp.default_path.forecast`'s docstring (steps 3–5).

Layer: the default path (it imports :mod:`pyro_dp.kernels`' scales and control-variate formulas,
:mod:`pyro_dp.accounting` and :mod:`pyro_dp.models.profiles` only); no kernel imports it.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import numpy as np
import torch
from scipy.special import gammaln, ndtr, roots_genlaguerre

from ..accounting.algorithms import default_noise_ratio
from ..models.profiles import synthetic_scores
from ..kernels.control_variate import (DEFAULT_CURVATURE_FACTOR, REFERENCE_CLIP_HEADROOM,  # noqa: F401 (re-exported)
                                       default_curvature_clip)
from ..kernels.scales import penalty_jump_length, posterior_scale_guess

__all__ = ["ModelProfile", "model_profile", "PROFILES", "profile_at", "check_int", "check_positive_number",
           "mh_predicted_move", "chi2_accept", "chi2_level", "chi2_nodes", "CV_REACH", "REFERENCE_CLIP_HEADROOM",
           "DEFAULT_CURVATURE_FACTOR", "default_curvature_clip", "gradient_gain", "HMC_GRADIENT_GAIN"]


#: The built-in model profiles (:func:`model_profile`): the default suite's GLMs
#: (:mod:`pyro_dp.models.default_suite`), features uniform in the unit ball.
PROFILES = ("logistic", "linear", "poisson")

# rows of the synthetic sample a built-in profile's gradient norms and Fisher information come from
_PROFILE_ROWS = 50_000

@dataclass(frozen=True)
class ModelProfile:
    r"""What :func:`feasibility` needs to know of a model, all public (no data).

    :ivar name: a label.
    :ivar num_latents: :math:`D`, the unconstrained latent dimension.
    :ivar norms: per-row gradient norms :math:`\|\nabla\ell_i\|` at a typical parameter, sorted
        (a sample: the clip is their quantile, :math:`b` of the ratio clip).
    :ivar fisher: the :math:`D\times D` Fisher information per row (unconstrained coordinates).
    :ivar whitened_norms: per-row norms :math:`\|F^{-1/2}\nabla\ell_i\|` of the same rows in
        Fisher-whitened coordinates, sorted; ``None``: not known (:func:`feasibility` then cannot
        predict a whitened chain, DPPenalty's default, and says so). :meth:`from_scores` fills it.
    """

    name: str
    num_latents: int
    norms: Tuple[float, ...]
    fisher: Tuple[Tuple[float, ...], ...]
    whitened_norms: Optional[Tuple[float, ...]] = None

    @classmethod
    def from_scores(cls, name: str, scores) -> "ModelProfile":
        r"""A profile from ``[rows, D]`` per-row scores :math:`\nabla\ell_i` of *synthetic* rows
        (a guess at a typical parameter: never your data, which this function would read
        without any privacy): the norms, :math:`F = E[\nabla\ell\,\nabla\ell^\top]` and the norms
        in Fisher-whitened coordinates :math:`\|F^{-1/2}\nabla\ell_i\|`.

        >>> p = ModelProfile.from_scores("toy", torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0], [0.0, -2.0]]))
        >>> p.num_latents, p.fisher, [round(v, 3) for v in p.whitened_norms]
        (2, ((0.5, 0.0), (0.0, 2.0)), [1.414, 1.414, 1.414, 1.414])
        """
        scores = torch.as_tensor(scores, dtype=torch.float64)
        if scores.dim() != 2 or scores.shape[0] < 2 or not bool(torch.isfinite(scores).all()):
            raise ValueError("scores must be a finite [rows >= 2, D] tensor of per-row scores")
        norms = torch.sort(torch.linalg.vector_norm(scores, dim=1)).values
        fisher = scores.T @ scores / scores.shape[0]
        evals, evecs = torch.linalg.eigh(fisher)
        if float(evals.min()) <= 1e-12 * max(float(evals.max()), 1e-300):
            raise ValueError("the scores' Fisher information is singular: some direction moves no row's "
                             "likelihood, so no posterior scale can be predicted for it")
        inv_sqrt = evecs @ torch.diag(evals.rsqrt()) @ evecs.T
        white = torch.sort(torch.linalg.vector_norm(scores @ inv_sqrt, dim=1)).values
        return cls(name, scores.shape[1], tuple(norms.tolist()), tuple(map(tuple, fisher.tolist())),
                   tuple(white.tolist()))

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of :attr:`norms` (the largest one above ``1 - 1/len``)."""
        return _quantile(self.norms, q)

    def whitened(self) -> "ModelProfile":
        """The same rows in Fisher-whitened coordinates :math:`u = F^{1/2}\theta`: norms
        :attr:`whitened_norms`, Fisher information the identity (what a chain whitened by the
        posterior's exact metric sees; DPPenalty's default path whitens with a private estimate
        of it, ``docs/tuning.md``)."""
        if self.whitened_norms is None:
            raise ValueError(f"profile {self.name!r} has no whitened_norms (build it with ModelProfile.from_scores)")
        eye = torch.eye(self.num_latents, dtype=torch.float64)
        return ModelProfile(f"{self.name} (whitened)", self.num_latents, self.whitened_norms,
                            tuple(map(tuple, eye.tolist())), self.whitened_norms)


def _quantile(sorted_values, q: float) -> float:
    k = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return float(sorted_values[k])


@functools.lru_cache(maxsize=32)
def model_profile(name: str, dim: int, noise_sd: float = 1.0, rate: float = 3.0) -> ModelProfile:
    r"""A built-in :class:`ModelProfile` from a synthetic sample (fixed seed; never your data,
    :func:`pyro_dp.models.profiles.synthetic_scores`): ``dim`` features uniform in the unit
    ball, coefficients of order one — the per-row scores give the gradient norms and the Fisher
    information :math:`F = E[\nabla\ell\,\nabla\ell^\top]`.

    * ``"logistic"``: :math:`D = d+1`; :math:`\nabla\ell = (y-p)(1,x)`, norms at most
      :math:`\sqrt2` (its Lipschitz bound).
    * ``"linear"`` (unknown :math:`\sigma`, unconstrained :math:`\log\sigma`, residual sd
      ``noise_sd``): :math:`D = d+2`; :math:`\nabla\ell = (e/\sigma\,(1,x),\ e^2-1)`,
      :math:`e` the standardised residual.
    * ``"poisson"`` with a log-exposure offset (exposures uniform on [0.5, 3], mean count
      about ``rate``): :math:`D = d+1`; :math:`\nabla\ell = (y-\mu)(1,x)`.

    >>> p = model_profile("logistic", 5)
    >>> p.num_latents, p.quantile(1.0) <= 2 ** 0.5
    (6, True)
    """
    if name not in PROFILES:
        raise ValueError(f"unknown model profile {name!r}: use one of {PROFILES} or pass a ModelProfile")
    d = check_int("dim", dim, 1)
    return ModelProfile.from_scores(name, synthetic_scores(name, d, noise_sd=noise_sd, rate=rate,
                                                           num_rows=_PROFILE_ROWS))

def check_int(name, value, low) -> int:
    """``value`` as an int, refused unless it is an integer at least ``low`` (``name`` in the message)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def check_positive_number(name, value) -> float:
    """``value`` as a float, refused unless it is a finite positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def check_delta(delta) -> float:
    """``delta`` as a float, refused unless it is a number in (0, 1)."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return float(delta)


def resolve_profile(model, dim: Optional[int] = None, noise_sd: float = 1.0, rate: float = 3.0) -> ModelProfile:
    """The forecasts' ``model`` argument as a :class:`ModelProfile`: a built-in name
    (:func:`model_profile` with ``dim`` features, default 5 for logistic and 3 otherwise) or a
    ModelProfile as it is (then ``dim`` is refused: it has its own ``num_latents``)."""
    if isinstance(model, ModelProfile):
        if dim is not None:
            raise ValueError("dim is for the built-in profiles; a ModelProfile has its own num_latents")
        return model
    if isinstance(model, str):
        return model_profile(model, 5 if dim is None and model == "logistic" else (3 if dim is None else dim),
                             noise_sd, rate)
    raise TypeError(f"model must be one of {PROFILES} or a ModelProfile, got {type(model).__name__}")

#: :math:`R/(\sqrt D\,\mathrm{sd})` of the control-variate forecast: a chain's distance from its
#: reference point in posterior sds per root dimension (:func:`mh_predicted_move`). Chosen over 1,
#: 1.2, 1.7 and 2 on 42 runs of DPPenalty and DPHMC (N = 5·10⁴, ε = 2 and 8): the most forecasts
#: within a factor 2 of the measured smallest ESS (32 of 42; 31 at 2, the value before 2026-11-28)
CV_REACH = math.sqrt(2.0)

def mh_predicted_move(*, kernel: str, num_rows: int, noise_multiplier: float, clip: float, grad_norm: float,
                   fisher, num_samples: int, warmup_steps: int, num_chains: int = 1, temperature: float = 1.0,
                   num_steps: int = 5, noise_ratio: Optional[float] = None,
                   control_variate: bool = False) -> Tuple[float, float, float, float]:
    r"""``(start_move_ratio, move_ratio, acceptance, ess)`` of a default-path DPPenalty or DPHMC chain
    (``kernel``): :func:`pyro_dp.default_path.forecast.predicted_move` for the kernels with an accept test (its
    docstring has the model). The kernels' pre-run warnings call it with their tuned clips.

    >>> F = [[0.2, 0.0], [0.0, 0.05]]
    >>> r = mh_predicted_move(kernel="DPPenalty", num_rows=10_000, noise_multiplier=50.0, clip=1.0,
    ...                       grad_norm=0.5, fisher=F, num_samples=1000, warmup_steps=1000)
    >>> [round(x, 3) for x in r]
    [0.354, 0.413, 0.3, 5.189]
    """
    if kernel not in ("DPPenalty", "DPHMC"):
        raise ValueError(f"kernel must be 'DPPenalty' or 'DPHMC' (an accept test), got {kernel!r}")
    F = torch.as_tensor(fisher, dtype=torch.float64)
    D = F.shape[0]
    T, n, nm, b = float(temperature), float(num_rows), float(noise_multiplier), float(clip)
    precision = T * n * F
    sd_max = math.sqrt(float(torch.linalg.eigvalsh(torch.linalg.inv(precision)).max()))
    guess = posterior_scale_guess(grad_norm, int(n), D, T)
    if control_variate:  # the residuals' (and DP-HMC's gradient differences') clip per unit jump, min{hR, 2b'}
        reach = CV_REACH * math.sqrt(D) * sd_max
        b = min(default_curvature_clip(D, int(n), guess, T) * reach, 2.0 * REFERENCE_CLIP_HEADROOM * b)
    jump = penalty_jump_length(nm, b, T)
    noise_per_step = 4.0 * nm * nm * b * b * T * T * D  # sigma^2 per unit s^2 (sigma = 2 nm b T s sqrt(D))
    if kernel == "DPHMC":
        if noise_ratio is None:
            noise_ratio = default_noise_ratio(num_steps)
        noise_per_step *= 1.0 + float(noise_ratio) ** 2 / num_steps  # + the kinetic term's noise (above)
        s0 = min(jump / math.sqrt(D), num_steps * guess)  # L * eta, eta = min(jump / (L sqrt D), guess)
        if control_variate:  # the default path's noise-free start, eta = guess / D^(1/4)
            s0 = num_steps * guess / D ** 0.25
        target, v = 0.5, 0.0  # hmc.DEFAULT_TARGET_ACCEPT_PROB; an exact trajectory keeps the energy
    elif control_variate:
        s0 = 2.38 / math.sqrt(D) * guess  # the default path's start: the noise-free scale
        target, v = 0.3, float(torch.trace(precision))
    else:
        s0 = min(jump / math.sqrt(D), 2.38 / math.sqrt(D) * guess)  # Roberts, Gelman & Gilks 1997
        target, v = 0.3, float(torch.trace(precision))  # proposals.DEFAULT_TARGET_ACCEPT_PROB
    s = s0
    w = (noise_per_step + v) / D  # the test's variance per unit squared move: sigma^2 + v = s^2 X w, X = |delta|^2/s^2
    if warmup_steps >= 100:  # warmup adaptation towards the acceptance target
        s_star = math.sqrt(chi2_level(target, D) / w) if w > 0 else math.inf
        if math.isfinite(s_star):  # (no noise and an exact trajectory: DP-HMC keeps its start)
            s = max(s_star, s0 / 10.0) if kernel == "DPHMC" else s_star
    acceptance, moved = chi2_accept(s * s * w, D)
    ell = s / sd_max
    h = ell * ell * moved  # the accepted squared move per coordinate over sd^2 (Roberts et al.'s speed)
    ess = num_chains * num_samples * min(1.0, h / 4.0)
    return jump / guess, ell, acceptance, ess

@functools.lru_cache(maxsize=64)
def chi2_nodes(D: int):
    r"""Gauss–Laguerre nodes and weights for :math:`E[f(X)]`, :math:`X\sim\chi^2_D` (64 nodes)."""
    t, wt = roots_genlaguerre(64, D / 2.0 - 1.0)
    return 2.0 * t, wt * np.exp(-gammaln(D / 2.0))


def chi2_accept(k2: float, D: int) -> Tuple[float, float]:
    r"""``(E[α], E[Xα]/D)`` for :math:`X\sim\chi^2_D` and :math:`\alpha = 2\Phi(-\sqrt{k^2X}/2)`: the
    penalty test's acceptance rate and its accepted squared move per coordinate (in units of the
    proposal's :math:`s^2`) when its noise and the exact ratio's spread both grow with the move's
    squared length :math:`s^2X` — a random-walk proposal :math:`\mathcal N(0, s^2I)`, or an HMC
    trajectory :math:`L\eta p`, :math:`p\sim\mathcal N(0, I)`. Long proposals are rejected more
    often, so the accepted moves are shorter than the proposals: at the acceptance target 0.3 the
    chain moves 0.86 (D = 4), 0.89 (D = 5), 0.94 (D = 10) times as far as
    :math:`s^2 D\,E[\alpha]` says, the formula of this module before 2026-11-28 (Yıldırım & Ermiş
    2019 §3.1's acceptance of the penalty test, averaged over the move's length).

    >>> a, m = chi2_accept(1.190 ** 2, 4)
    >>> round(a, 2), round(m / a, 2)  # accepted moves are shorter than the mean proposal (1 per coordinate)
    (0.3, 0.65)
    """
    x, wt = chi2_nodes(int(D))
    alpha = 2.0 * ndtr(-np.sqrt(max(float(k2), 0.0) * x) / 2.0)
    return float(np.dot(wt, alpha)), float(np.dot(wt, x * alpha)) / D


@functools.lru_cache(maxsize=64)
def chi2_level(target: float, D: int) -> float:
    r"""The :math:`k^2` at which :func:`chi2_accept`'s acceptance is ``target`` (bisection in
    :math:`\log k^2`; the acceptance falls as :math:`k^2` grows)."""
    lo, hi = 1e-8, 1e4
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if chi2_accept(mid, D)[0] > target else (lo, mid)
    return math.sqrt(lo * hi)

#: DP-HMC's default path releases gradients where :func:`hmc_gradient_gain` is at least this. Not
#: 1: an iteration with gradients costs ``L`` per-example gradient passes (each about ``D + 1``
#: likelihood passes, forward-mode columns) against the walk's one likelihood pass. Measured on a
#: probit regression of a new user's (N = 2·10⁴, six latents, covariates on their own scales,
#: ε = 16, gain 1.14): 0.34 sd off both ways, 89 s with the gradients against 6 s without; at
#: N = 5·10⁴, ε = 8 (gain 2.1–7.0) the gradients were right in 12 of 12 peer runs (docs/results.md)
HMC_GRADIENT_GAIN = 2.0


@functools.lru_cache(maxsize=64)
def profile_at(name: str, num_latents: int) -> ModelProfile:
    """The built-in profile ``name`` with ``num_latents`` latents as near as it has them
    (logistic and Poisson: :math:`d+1`, linear: :math:`d+2`; at least one feature), whitened."""
    return model_profile(name, max(num_latents - (2 if name == "linear" else 1), 1)).whitened()


def gradient_gain(noise: Callable, *, num_rows: int, epsilon: float, delta: float, dim: int, num_samples: int,
                  warmup_steps: int, num_chains: int = 1, temperature: float = 1.0, num_steps: int = 5) -> float:
    r"""DP-HMC's forecast gain from its gradient releases: :func:`pyro_dp.default_path.forecast.hmc_gradient_gain` (its docstring
    has the model), with DPHMC's default-path calibration given as ``noise(epsilon, delta, iterations,
    chains, temperature, num_steps, control_variate, gradients) -> (noise multiplier, tuner)`` (the
    kernel's :func:`~pyro_dp.default_path.driver.default_path_noise`). Data-free."""
    n, D, L = check_int("num_rows", num_rows, 2), check_int("dim", dim, 1), check_int("num_steps", num_steps, 1)
    samples, warmup = check_int("num_samples", num_samples, 1), check_int("warmup_steps", warmup_steps, 0)
    chains, eps, T = check_int("num_chains", num_chains, 1), check_positive_number("epsilon", epsilon), float(temperature)
    noises = {grads: noise(eps, float(delta), samples + warmup, chains, T, L, True, grads)
              for grads in (True, False)}  # the kernel's calibration with and without gradients: profile-free
    log_gain = 0.0
    for name in PROFILES:
        profile, ess = profile_at(name, D), []
        for grads, (nm, tuner) in noises.items():
            ess.append(mh_predicted_move(
                kernel="DPHMC" if grads else "DPPenalty", num_rows=n, noise_multiplier=nm,
                clip=profile.quantile(tuner.ratio_quantile(n)), grad_norm=profile.quantile(tuner.grad_quantile),
                fisher=profile.fisher, num_samples=samples, warmup_steps=warmup, num_chains=chains, temperature=T,
                num_steps=L, control_variate=True)[3])
        log_gain += math.log(max(ess[0], 1e-300) / max(ess[1], 1e-300)) / len(PROFILES)
    return math.exp(log_gain)
