r"""Before any data is read: how wide the one-release noise-aware posterior
(:class:`~pyro_dp.default_path.noise_aware.DPNoiseAware`) will be, how far its mean may move, and
whether the iterative default path can be right instead (issue 62: "the forecast says before any
data is read which of these the budget affords and how wide the posterior will be").

Public inputs only: :math:`N`, the budget, the chains, and a :class:`~pyro_dp.default_path.prediction.ModelProfile`
(the per-row gradient norms and Fisher information of a *typical* model of that shape — the
built-in profiles: features uniform in the unit ball — never your data). It follows what the
kernel does, with the kernel's own calibration:

1. **noise.** The tuner (:class:`~pyro_dp.default_path.tuning.DPAutoTune`,
   ``share=DEFAULT_TUNING_SHARE``, unwhitened) takes its share of each chain's budget; the
   score and curvature releases share the rest (:data:`~pyro_dp.default_path.noise_aware.DEFAULT_SCORE_SHARE`
   of its Gaussian-DP :math:`\mu^2` to the score): the noise multipliers
   :math:`\mathrm{nm}_s, \mathrm{nm}_H` come from :func:`pyro_dp.accounting.calibrate` with the
   tuner's releases as the once-per-chain events, as :meth:`DPNoiseAware._calibrate` computes them
   (checked equal in ``tests/test_one_release_forecast.py``).
2. **clips.** The tuner's ratio clip :math:`b` is simulated (:func:`simulated_ratio_clip`): the
   tuner's own releases — its noisy histogram's quantile, then its adaptive clip's noisy counts
   (Andrew et al. 2021, Alg. 1) over its steps, averaged as it averages them — run on :math:`N`
   rows whose norms follow the profile's, with public seeds, median over :data:`CLIP_SIMULATIONS`
   runs. At small budgets the counts' noise holds the clip well below the target quantile
   :meth:`~pyro_dp.default_path.tuning.DPAutoTune.ratio_quantile` (measured on the normal mean,
   :math:`N` = 2 000, ε = 0.5: the kernel's clip 1.23, the 0.98 quantile 2.28, the simulation
   1.2–1.3), and the release's noise is set by the clip, so the quantile alone would forecast a
   posterior about 1.5 times too wide. The score clip :math:`C_g` =
   :data:`~pyro_dp.default_path.noise_aware.CLIP_HEADROOM`:math:`\,b`, the curvature clip
   :math:`C_H = b^2`; the score noise has standard deviation :math:`\sigma_s = \mathrm{nm}_s\cdot
   2C_g` and the curvature's :math:`\sigma_H = \mathrm{nm}_H\cdot 2C_H` (substitution: a sum of
   terms clipped to norm :math:`C` has sensitivity :math:`2C`).
3. **the posterior.** In the eigen-directions of the per-row Fisher information :math:`F`
   (eigenvalues :math:`\lambda_j`), the non-private posterior has variance :math:`1/(N\lambda_j)`
   (Bernstein–von Mises; the prior neglected). The noise-aware likelihood of the kernel
   (``noise_aware.py``, after Bernstein & Sheldon 2018 and Kulkarni et al. 2021) is Gaussian in
   :math:`\delta = \theta - \theta_0` with precision :math:`(N\lambda_j)^2/\Sigma_j`,
   :math:`\Sigma_j = N\lambda_j + \sigma_s^2 + \tfrac{\sigma_H^2}{2}(\mathrm{tr}\,V + V_j)` (the
   score's noise and the curvature noise's :math:`W\delta` at the posterior's own spread
   :math:`V`, solved in closed form; infinite where the curvature noise keeps the likelihood from
   concentrating, and the prior alone then bounds the posterior), so its variance is :math:`V_j = \Sigma_j/(N\lambda_j)^2` and
   its sd over the non-private one is :math:`r_j = (V_j N\lambda_j)^{1/2}`.
4. **the shift.** The released score's noise moves the mean by :math:`\sigma_s/(N\lambda_j)`,
   i.e. :math:`s_j = \sigma_s/\sqrt{N\lambda_j}` non-private sds (issue 62's
   :math:`(\Delta/\mu)/\sqrt{N\lambda_v}`); the chance that the non-private mean lies in the run's
   central 90 % interval is :math:`2\Phi(1.645\,r_j/s_j)-1` (at least 0.9 whenever
   :math:`r_j^2 \ge 1 + s_j^2`, which the noise-aware variance ensures: that is the point of
   carrying the noise).

What it leaves out: clipping bias (the score clip is :data:`CLIP_HEADROOM` times a quantile that
leaves a few rows above it), the quadratic's own error (the centre's distance from the mode, a
non-Gaussian likelihood: the kernel warns where it sees them), and the prior (it narrows every
posterior alike). Temperature 1 only.

>>> f = one_release_forecast("logistic", num_rows=10_000, epsilon=1.0, dim=5)
>>> round(f.sd_ratio, 2), round(f.shift_sd, 2), round(f.coverage90, 3)
(1.55, 1.18, 0.97)
>>> round(f.iterative_ess), f.iterative_usable  # DPPenalty's default path, 1000 + 1000 iterations
(1, False)
>>> g = one_release_forecast("logistic", num_rows=100_000, epsilon=1.0, dim=5)
>>> round(g.sd_ratio, 2), round(g.shift_sd, 2)  # ten times the rows: nearly the non-private posterior
(1.1, 0.45)
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from statistics import NormalDist
from types import SimpleNamespace
from typing import Optional, Union

import torch

from ..accounting import DEFAULT_ACCOUNTANT, calibrate
from ..kernels.scales import private_norm_quantiles
from ..mechanisms import GaussianEvent, NoiseSource, recording
from .forecast import feasibility
from .noise_aware import CLIP_HEADROOM, DEFAULT_SCORE_SHARE, DEFAULT_TUNING_SHARE
from .prediction import ModelProfile, check_delta, check_int, check_positive_number, resolve_profile
from .tuning import ClipSchedule, DPAutoTune

__all__ = ["one_release_forecast", "OneReleaseForecast", "one_release_noise", "simulated_ratio_clip",
           "CLIP_SIMULATIONS"]

#: runs of the tuner's clip simulation whose median :func:`simulated_ratio_clip` returns
CLIP_SIMULATIONS = 5

_Z90 = NormalDist().inv_cdf(0.95)  # the 90 % central interval's half-width in sds


def _noise_aware_variance(info: torch.Tensor, sigma_s: float, sigma_h: float) -> torch.Tensor:
    r""":math:`V_j = (N\lambda_j + \sigma_s^2 + \tfrac{\sigma_H^2}{2}(\mathrm{tr}\,V + V_j))/(N\lambda_j)^2`
    solved in closed form: with :math:`a_j = (N\lambda_j+\sigma_s^2)/(N\lambda_j)^2`,
    :math:`c_j = \sigma_H^2/(2(N\lambda_j)^2)` and :math:`S = \mathrm{tr}\,V`,
    :math:`V_j = (a_j + c_jS)/(1-c_j)` and :math:`S = \sum_j \frac{a_j}{1-c_j} / (1 - \sum_j \frac{c_j}{1-c_j})`.
    Infinite where that has no positive solution (some :math:`c_j \ge 1` or
    :math:`\sum_j c_j/(1-c_j) \ge 1`): the curvature's noise then grows as fast as the quadratic
    with the distance from the centre, the likelihood does not concentrate, and the prior alone
    bounds the posterior.

    >>> v = _noise_aware_variance(torch.tensor([100.0, 400.0], dtype=torch.float64), 0.0, 0.0); v.tolist()  # no noise: 1/(N lambda)
    [0.01, 0.0025]
    >>> _noise_aware_variance(torch.tensor([1.0], dtype=torch.float64), 0.0, 2.0).tolist()  # c = 2: the prior alone
    [inf]
    """
    a = (info + sigma_s ** 2) / info ** 2
    c = 0.5 * sigma_h ** 2 / info ** 2
    if bool((c >= 1).any()):
        return torch.full_like(info, math.inf)
    rest = 1.0 - float((c / (1 - c)).sum())
    if rest <= 0:
        return torch.full_like(info, math.inf)
    total = float((a / (1 - c)).sum()) / rest
    return (a + c * total) / (1 - c)


@dataclass(frozen=True)
class OneReleaseForecast:
    r"""What :func:`one_release_forecast` predicts for ``DPNoiseAware(model, epsilon=ε)`` (module doc).
    Every field is public: from :math:`N`, the budget and the profile, never from data.

    :ivar num_rows: :math:`N`.
    :ivar epsilon: the budget's ε (all chains).
    :ivar delta: the budget's δ.
    :ivar num_chains: the chains sharing it.
    :ivar noise_multiplier: :math:`\mathrm{nm}_s`, of the score release.
    :ivar curvature_noise_multiplier: :math:`\mathrm{nm}_H`, of the curvature release.
    :ivar clip: :math:`b`, the tuner's ratio clip (the profile's quantile).
    :ivar score_noise_sd: :math:`\sigma_s`.
    :ivar curvature_noise_sd: :math:`\sigma_H`.
    :ivar sd_ratio: the largest :math:`r_j`: the one-release posterior's sd over the non-private
        posterior's, in the widest direction.
    :ivar shift_sd: the largest :math:`s_j`: the standard deviation of its mean's shift from the
        non-private mean, in non-private sds.
    :ivar coverage90: the smallest, over directions, chance that the non-private mean lies in the
        run's central 90 % interval.
    :ivar within_half_sd: the smallest, over directions, chance that the mean is within 0.5
        non-private sds (issue 62's "right" at this budget).
    :ivar iterative_ess: the effective sample size :func:`~pyro_dp.default_path.forecast.feasibility`
        forecasts for the iterative default path (``DPPenalty``'s) at this :math:`N` and budget,
        same profile and run length.
    :ivar iterative_usable: whether that reaches ``target_ess``: where it does, the iterative chain
        is exact up to its Monte Carlo error; where it does not, its intervals are too narrow
        (issue 62) and the one-release posterior is the honest choice.
    """

    num_rows: int
    epsilon: float
    delta: float
    num_chains: int
    noise_multiplier: float
    curvature_noise_multiplier: float
    clip: float
    score_noise_sd: float
    curvature_noise_sd: float
    sd_ratio: float
    shift_sd: float
    coverage90: float
    within_half_sd: float
    iterative_ess: float
    iterative_usable: bool


def one_release_noise(*, epsilon: float, delta: float, num_chains: int = 1, score_share: float = DEFAULT_SCORE_SHARE,
                      accountant: str = DEFAULT_ACCOUNTANT):
    r"""``(nm_s, nm_H, tuner)``: the score and curvature noise multipliers that
    ``DPNoiseAware(model, epsilon=epsilon, delta=delta)`` calibrates (its ``_calibrate``: the
    budget the tuner leaves, ``score_share`` of its :math:`\mu^2` to the score; Dong, Roth & Su
    2022 Cor. 3.3 for the split), and its tuner, configured as the kernel configures it. Data-free.

    >>> nm_s, nm_h, tuner = one_release_noise(epsilon=1.0, delta=1e-5)
    >>> round(nm_s, 3), round(nm_h / nm_s, 4)  # nm_H / nm_s = sqrt(0.7 / 0.3)
    (5.329, 1.5275)
    """
    eps = check_positive_number("epsilon", epsilon)
    check_delta(delta)
    chains = check_int("num_chains", num_chains, 1)
    if not 0.0 < float(score_share) < 1.0:
        raise ValueError(f"score_share must be in (0, 1), got {score_share!r}")
    tuner = DPAutoTune(share=DEFAULT_TUNING_SHARE)
    tuner.configure(epsilon=eps, delta=float(delta), num_chains=chains, non_private=False)
    ratio = math.sqrt(score_share / (1.0 - score_share))  # nm_H / nm_s, as DPNoiseAware._calibrate
    fixed = list(tuner.events())
    nm_s = calibrate(eps, float(delta), 1, lambda s: (fixed, [GaussianEvent(s), GaussianEvent(s * ratio)]),
                     accountant=accountant, num_chains=chains)
    tuner.set_ratio_noise(nm_s)  # the kernel tells its tuner the score's noise (the clip's quantile)
    return nm_s, nm_s * ratio, tuner


def simulated_ratio_clip(profile: ModelProfile, num_rows: int, tuner: DPAutoTune,
                         runs: int = CLIP_SIMULATIONS) -> float:
    r"""The ratio clip :math:`b` the ``tuner`` (configured, its ratio noise set) would release on
    ``num_rows`` rows whose gradient norms follow ``profile`` (module doc, step 2): its phase-1
    histogram quantile and its adaptive clip's steps, run with the tuner's own release functions on
    the profile's norms (the quantile function at :math:`(i+\tfrac12)/N`, fixed where the tuner's
    ascent moves them: the profile is taken at the parameter the tuner converges to), with public
    seeds ``0 .. runs-1``; the median. Data-free: the rows are the profile's, never yours, and the
    simulated releases are recorded in a scope of their own and dropped.

    >>> from pyro_dp.default_path.prediction import model_profile
    >>> tuner = one_release_noise(epsilon=1.0, delta=1e-5)[2]
    >>> p = model_profile("logistic", 5)
    >>> round(simulated_ratio_clip(p, 10_000, tuner), 3), round(p.quantile(tuner.ratio_quantile(10_000)), 3)
    (0.938, 1.017)
    """
    n = check_int("num_rows", num_rows, 2)
    norms_sorted = torch.tensor(profile.norms, dtype=torch.float64)
    idx = ((torch.arange(n, dtype=torch.float64) + 0.5) / n * len(norms_sorted)).long().clamp_max(len(norms_sorted) - 1)
    norms = norms_sorted[idx]
    rows = SimpleNamespace(device=norms.device, num_rows=n, global_num_rows=n)
    nm_hist, _, nm_count = tuner.noise_multipliers
    q = tuner.ratio_quantile(n)
    out = []
    for seed in range(int(runs)):
        noise = NoiseSource(seed=seed, warn=False)
        with recording():  # the simulation's own scope: nothing here is a release of a chain
            (c0, c0_q), _ = private_norm_quantiles(rows, norms, (tuner.grad_quantile, q), nm_hist, noise)
            sched = ClipSchedule(tuner, n, c0, c0_q)  # the tuner's schedule (DPAutoTune.run), its ratio clip only
            for t in range(tuner.num_steps):
                sched.step(t, norms, nm_count, noise, "substitute", lambda ev: None, which=(1,))
        out.append(sched.means()[1])
    return float(statistics.median(out))


@functools.lru_cache(maxsize=128)
def one_release_forecast(model: Union[str, ModelProfile], *, num_rows: int, epsilon: float, delta: float = 1e-5,
                         dim: Optional[int] = None, num_chains: int = 1, num_samples: int = 1000,
                         warmup_steps: int = 1000, target_ess: float = 100.0, noise_sd: float = 1.0,
                         rate: float = 3.0) -> OneReleaseForecast:
    r"""Predict ``DPNoiseAware(model, epsilon=ε, delta=δ)`` on ``num_rows`` rows (module doc), and
    whether the iterative default path would be usable instead.

    :param model: ``"logistic"``, ``"linear"`` or ``"poisson"`` (built-in profiles, ``dim``
        features in the unit ball), or a :class:`~pyro_dp.default_path.prediction.ModelProfile`.
    :param int num_rows: :math:`N` (public).
    :param float epsilon: the budget's ε, all chains together.
    :param float delta: the budget's δ.
    :param int dim: features of a built-in profile (default 5 for logistic, 3 otherwise).
    :param int num_chains: chains (each makes its own releases).
    :param int num_samples, warmup_steps: the run, for the iterative path's forecast.
    :param float target_ess: the ESS that makes the iterative run usable (:func:`~pyro_dp.default_path.forecast.feasibility`'s).
    :param float noise_sd, rate: the linear and Poisson profiles' settings.
    :returns: a frozen :class:`OneReleaseForecast`.

    >>> one_release_forecast("linear", num_rows=5_000, epsilon=0.5).sd_ratio > 2
    True
    """
    n = check_int("num_rows", num_rows, 2)
    profile = resolve_profile(model, dim, noise_sd, rate)
    nm_s, nm_h, tuner = one_release_noise(epsilon=epsilon, delta=delta, num_chains=num_chains)
    b = simulated_ratio_clip(profile, n, tuner)
    sigma_s = nm_s * 2.0 * CLIP_HEADROOM * b
    sigma_h = nm_h * 2.0 * b * b
    info = n * torch.linalg.eigvalsh(torch.as_tensor(profile.fisher, dtype=torch.float64)).clamp_min(1e-300)
    var = _noise_aware_variance(info, sigma_s, sigma_h)
    ratio = (var * info).sqrt()
    shift = sigma_s / info.sqrt()
    coverage = 2.0 * torch.distributions.Normal(0.0, 1.0).cdf(_Z90 * ratio / shift) - 1.0
    half = 2.0 * torch.distributions.Normal(0.0, 1.0).cdf(0.5 / shift) - 1.0
    iterative = feasibility(profile, num_rows=n, epsilon=float(epsilon), delta=float(delta),
                            num_chains=int(num_chains), num_samples=num_samples, warmup_steps=warmup_steps,
                            target_ess=target_ess)
    return OneReleaseForecast(n, float(epsilon), float(delta), int(num_chains), nm_s, nm_h, b, sigma_s, sigma_h,
                              float(ratio.max()), float(shift.max()), float(coverage.min()), float(half.min()),
                              float(iterative.ess), bool(iterative.usable))
