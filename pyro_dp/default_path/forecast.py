r"""Feasibility before data: what a default-path run can deliver at a given :math:`N` and
:math:`\varepsilon`, predicted from public quantities only.

:func:`feasibility` reads no data (it takes a model *profile*, not a data set) and spends no
budget. It follows the default path step by step (``docs/tuning.md``), with the kernel's own code
where the default path has code:

1. **noise multiplier** :math:`\mathrm{nm}` of the ratio release: the kernel's own calibration
   (:mod:`pyro_dp.kernels.releases`' pure calibration, which the kernel runs at set-up; the same accountant
   and the same :class:`~pyro_dp.default_path.tuning.DPAutoTune` share of the budget) for the run
   length, chains, :math:`(\varepsilon,\delta)`;
2. **ratio clip** :math:`b`: the quantile of the per-row gradient norms that the default path
   tracks (:meth:`~pyro_dp.default_path.tuning.DPAutoTune.ratio_quantile`), of the profile's norms
   (:class:`ModelProfile`; the built-in ones: features uniform in the unit ball, coefficients of
   order one — a Lipschitz-type guess, not your data);
3. **the move** (for the plain test; the default paths' control variate replaces :math:`b` by the
   residuals' clip, :func:`predicted_move`): the penalty test (Yıldırım & Ermiş 2019 §3.1; Räisä 2021 thesis §3.1) sees noise
   of standard deviation :math:`\sigma = 2\,\mathrm{nm}\,b\,T\|\theta'-\theta\|` and accepts with
   probability :math:`2\Phi(-\sqrt{\sigma^2+v}/2)`, :math:`v` the variance of the exact log
   ratio (:math:`v = s^2\,\mathrm{tr}(P)` for an isotropic random-walk step of scale :math:`s`,
   :math:`P` the posterior precision; 0 for an HMC trajectory). The default path starts at
   the move of :func:`~pyro_dp.kernels.scales.penalty_jump_length` (capped by
   :func:`~pyro_dp.kernels.scales.posterior_scale_guess`) and adapts it during warmup to the
   acceptance target (0.3 for the random walk, 0.5 for DP-HMC), so after warmup :math:`s` per
   coordinate is where :math:`E_X[2\Phi(-s\sqrt{wX}/2)] = a^\ast`,
   :math:`w = (4\mathrm{nm}^2b^2T^2D + \mathrm{tr}(P))/D`, over the proposal's squared length
   :math:`s^2X`, :math:`X\sim\chi^2_D` (at :math:`X = D`:
   :math:`s = 2\Phi^{-1}(1-a^\ast/2)/\sqrt{wD}`, the rule before 2026-11-28) (DP-HMC:
   :math:`L\eta`, with :math:`\mathrm{tr}(P)` dropped, its momentum's length giving the same
   :math:`\chi^2_D`, and the floor of a tenth of its start);
4. **posterior scale**: :math:`P = TN\,F`, :math:`F` the profile's Fisher information per row
   (Bernstein–von Mises); the slowest direction has standard deviation
   :math:`\mathrm{sd} = \lambda_{\max}(P^{-1})^{1/2}`;
5. **effective sample size**: a random walk whose steps are small against the posterior scale
   is the Langevin diffusion of Roberts, Gelman & Gilks (1997) with speed
   :math:`h = (s/\mathrm{sd})^2 m` per iteration, :math:`m` the accepted share of the squared
   move — the test's noise grows with the move's length :math:`s^2X`, :math:`X\sim\chi^2_D`,
   so the acceptance and :math:`m` are averages over it (:func:`~pyro_dp.default_path.prediction.chi2_accept`; 0.86–0.94 of the
   acceptance rate for :math:`D` = 4–10 at the target, which the step of 3 is then adapted to
   over the same average); its integrated autocorrelation time in the
   slowest direction is :math:`4/h`, so the ESS of ``num_samples`` draws is about
   :math:`\mathrm{num\_samples}\cdot\min(1, h/4)` per chain (warmup is assumed to have reached
   the posterior). ``ess_smallest`` is the smallest of the :math:`D` coordinates' *estimates*,
   which is what a run shows (:func:`smallest_estimate_factor`).

**Coordinates.** DPPenalty's default path whitens: it releases a private estimate of the
posterior's metric and runs the chain (and the clip's quantile) in coordinates where the posterior
is about isotropic (``docs/tuning.md``, "Posterior-shaped coordinates"). Its prediction then uses
the profile in Fisher-whitened coordinates (:meth:`ModelProfile.whitened`: the rows' norms
:math:`\|F^{-1/2}\nabla\ell_i\|` and an identity Fisher information), as if the metric were exact;
DPHMC's default path whitens too, since 2026-11-27 (``whiten=`` overrides both). Measured against the default
path's runs (``docs/choosing.md``): the whitened prediction is within a factor 2 on the cells
tested, where the unwhitened one, still right for ``whiten=False``, under-predicts the whitened
chain's ESS by 1.9–3.0× (``benchmarks/feasibility_check.py``).

**DPSGLD** (its default path, no accept test) follows steps 1, 2 and 4 (the ratio quantile
with no ratio noise, times :data:`~pyro_dp.default_path.driver.LANGEVIN_CLIP_HEADROOM`, is its
gradient clip), and in place of 3 and 5 its free Langevin step and the ESS of an unadjusted
chain on a Gaussian (an AR(1); :func:`predicted_move`), with the budget spread over its burn-in
and draws only (:func:`~pyro_dp.kernels.runner.langevin_burn_in`). Its centred clip ball
(:mod:`~pyro_dp.default_path.centring`) depends on the data's skew, which a data-free forecast cannot
know: the forecast takes the ball around the origin, so it under-predicts where the kernel
centres (by up to the square of the released ratio, about 1.4× on the suite's GLMs).

It then finds the :math:`N` (at this :math:`\varepsilon`) and the :math:`\varepsilon` (at this
:math:`N`) at which the predicted ESS reaches ``target_ess`` — or half the noise-free ESS of the
same run when that is lower (bisection: the ESS grows with both).

The prediction is rough — within a factor of about 2 of the measured ESS on the cells tested
(``tests/test_forecast.py``) — and says nothing about clipping bias or a start far from the
posterior (``docs/tuning.md``, "Never silently wrong"). The table on ``docs/choosing.md`` is
made with it.

>>> f = feasibility("logistic", num_rows=100_000, epsilon=8.0, dim=5)
>>> f.whitened, round(f.move_ratio, 2), round(f.ess), round(f.ess_ceiling)  # 1000 samples after 1000 warmup
(True, 0.92, 47, 49)
>>> f.rows_needed, f.epsilon_needed  # where the ESS reaches half its noise-free ceiling
(15348, 0.949)
>>> p = feasibility("logistic", num_rows=100_000, epsilon=8.0, dim=5, control_variate=False)
>>> round(p.move_ratio, 2), round(p.ess), p.rows_needed  # the plain test: noise-limited sooner
(0.68, 26, 84008)
>>> g = feasibility("logistic", num_rows=100_000, epsilon=8.0, dim=5, whiten=False)
>>> round(g.ess), round(g.ess_ceiling)  # one proposal scale for every coordinate: slower
(21, 22)
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from statistics import NormalDist
from types import SimpleNamespace
from typing import Optional, Tuple, Union

import torch

from .. import kernels as K
from ..kernels.runner import langevin_burn_in
from ..kernels.sgmcmc import langevin_noise_multiplier
from .driver import LANGEVIN_CLIP_HEADROOM, default_path_noise, langevin_default, langevin_ess
from .prediction import (CV_REACH, HMC_GRADIENT_GAIN, PROFILES, ModelProfile, check_delta, check_int,
                         check_positive_number, gradient_gain, mh_predicted_move, model_profile, resolve_profile)

__all__ = ["feasibility", "Feasibility", "ModelProfile", "model_profile", "PROFILES", "predicted_move", "CV_REACH",
           "smallest_estimate_factor", "ESS_ESTIMATE_CV", "hmc_gradient_gain", "HMC_GRADIENT_GAIN", "kernel_noise"]


_PHI = NormalDist()


@dataclass(frozen=True)
class Feasibility:
    r"""What :func:`feasibility` predicts (all public: from :math:`N`, the budget, the run
    length and the model's shapes, never from data).

    :ivar kernel: ``"DPPenalty"``, ``"DPHMC"`` or ``"DPSGLD"``.
    :ivar num_rows: :math:`N`.
    :ivar epsilon: the budget's ε (all chains).
    :ivar delta: the budget's δ.
    :ivar noise_multiplier: of the ratio release, as the kernel calibrates it.
    :ivar clip: :math:`b`, the ratio clip per unit jump the default path would aim at.
    :ivar start_move_ratio: the default path's first move over its posterior-scale guess — the
        quantity its set-up warning compares with :data:`~pyro_dp.default_path.driver.NOISE_LIMITED_RATIO`.
    :ivar move_ratio: the move per coordinate after warmup over the posterior sd in the slowest direction.
    :ivar acceptance: the predicted acceptance rate after warmup.
    :ivar ess: predicted effective sample size in the slowest direction, all chains together.
    :ivar ess_smallest: the smallest of the :math:`D` coordinates' estimated effective sample
        sizes that the run will show (``mcmc.summary()``'s smallest ``n_eff``): ``ess`` times
        :func:`smallest_estimate_factor` — the minimum of :math:`D` noisy estimates lies below
        their common value.
    :ivar ess_ceiling: the same without privacy noise (the kernel's own limit at this run length:
        a random walk of ``num_samples`` steps; unwhitened, with one scale for every coordinate,
        it mixes slowly on an elongated posterior).
    :ivar whitened: whether the prediction is for a chain whitened by the posterior's metric
        (DPPenalty's default path: :attr:`ModelProfile.whitened_norms`) or in the model's coordinates.
    :ivar target_ess: the ESS called usable.
    :ivar usable: ``ess >= target_ess``.
    :ivar rows_needed: the :math:`N` at which ``ess`` reaches ``target_ess`` at this budget or,
        when ``ess_ceiling`` is below ``target_ess``, half the ceiling (beyond it more rows or
        :math:`\varepsilon` buy little: more samples, or another kernel, do); ``None``: not
        below :math:`10^{10}`.
    :ivar epsilon_needed: the :math:`\varepsilon` at which it does on these :math:`N` rows
        (``None``: not below :math:`10^4`).
    :ivar gradients: DPHMC only (else ``None``): whether its default path releases gradients at
        this :math:`N` and budget (:func:`hmc_gradient_gain`); without them it is predicted as the
        random walk it then runs.
    """

    kernel: str
    num_rows: int
    epsilon: float
    delta: float
    noise_multiplier: float
    clip: float
    start_move_ratio: float
    move_ratio: float
    acceptance: float
    ess: float
    ess_smallest: float
    ess_ceiling: float
    whitened: bool
    target_ess: float
    usable: bool
    rows_needed: Optional[int]
    epsilon_needed: Optional[float]
    gradients: Optional[bool] = None


#: the kernels with a default path, by the names :func:`feasibility` takes
KERNELS = {"DPPenalty": K.DPPenalty, "DPHMC": K.DPHMC, "DPSGLD": K.DPSGLD}


@functools.lru_cache(maxsize=256)
def kernel_noise(kernel: str, epsilon: float, delta: float, iterations: int, chains: int, temperature: float,
           num_steps: int, control_variate: bool = True, gradients: bool = True):
    """``(ratio noise multiplier, the tuner)`` exactly as the kernel's default path sets them
    (:func:`~pyro_dp.default_path.driver.default_path_noise`: the pure calibration the kernel
    runs, no kernel built; DPHMC: with ``gradients`` releases or without, :func:`hmc_gradient_gain`).
    Cached: the tuner is only read."""
    return default_path_noise(KERNELS[kernel], epsilon=epsilon, delta=delta, num_iterations=iterations,
                              num_chains=chains, temperature=temperature, num_steps=num_steps,
                              control_variate=bool(control_variate), gradients=gradients)


def _chain_coordinates(profile: ModelProfile, kernel: str, whiten: Optional[bool]) -> Tuple[ModelProfile, bool]:
    """``(profile in the chain's coordinates, whitened)`` (:func:`feasibility`'s ``whiten``)."""
    if whiten is not None and not isinstance(whiten, bool):
        raise TypeError(f"whiten must be True, False or None, got {whiten!r}")
    if whiten is None:
        default = KERNELS[kernel].whiten_by_default and profile.num_latents >= 2
        if default and profile.whitened_norms is None:
            warnings.warn(f"feasibility: profile {profile.name!r} has no whitened_norms, so the prediction is for "
                          f"a chain in the model's coordinates, but {kernel}'s default path whitens this model "
                          "and mixes faster than predicted here (build the profile with ModelProfile.from_scores)",
                          UserWarning, stacklevel=3)
            default = False
        whiten = default
    return (profile.whitened() if whiten else profile), whiten


#: the coefficient of variation of Pyro's effective-sample-size estimate of one coordinate
#: (:func:`smallest_estimate_factor`): 0.18–0.28 on simulated AR(1) chains of 1 000 draws with an
#: ESS of 40–160 (0.13 at 400, 0.33 at 20; 400 chains each, 2026-11-28)
ESS_ESTIMATE_CV = 0.2


def smallest_estimate_factor(num_coords: int) -> float:
    r"""The expected smallest of ``num_coords`` noisy effective-sample-size estimates over their
    common value (whitened chains mix alike in every direction): with log-normal estimates of
    coefficient of variation :data:`ESS_ESTIMATE_CV`, :math:`\exp(-0.2\,e_D)`, :math:`e_D` the
    expected maximum of :math:`D` standard normals (Blom's
    :math:`\Phi^{-1}((D - 0.375)/(D + 0.25))`). Against the simulated chains of
    :data:`ESS_ESTIMATE_CV`: 0.81 for 4 coordinates where the smallest of four estimates averaged
    0.81–0.86 of the chain's ESS (ESS 20–400), 0.79 for 5 (0.77–0.81).

    >>> [round(smallest_estimate_factor(d), 2) for d in (1, 4, 5, 20)]
    [1.0, 0.81, 0.79, 0.69]
    """
    d = check_int("num_coords", num_coords, 1)
    if d == 1:
        return 1.0
    return math.exp(-ESS_ESTIMATE_CV * _PHI.inv_cdf((d - 0.375) / (d + 0.25)))


def predicted_move(*, kernel: str, num_rows: int, noise_multiplier: float, clip: float, grad_norm: float,
                   fisher, num_samples: int, warmup_steps: int, num_chains: int = 1, temperature: float = 1.0,
                   num_steps: int = 5, noise_ratio: Optional[float] = None,
                   control_variate: bool = False) -> Tuple[float, float, float, float]:
    r"""``(start_move_ratio, move_ratio, acceptance, ess)`` of the module doc's steps 3–5 for a
    given noise multiplier, ratio clip :math:`b`, typical gradient norm (the default path's
    posterior-scale guess) and Fisher information per row (a :math:`D\times D` nested sequence or
    tensor). Data-free; also what the default path's pre-run warning quotes with its tuned clips.
    ``noise_ratio``: DP-HMC's :math:`r = \mathrm{nm}_g/\mathrm{nm}_l` (``None``: its default,
    :func:`~pyro_dp.accounting.algorithms.default_noise_ratio`). The released gradients' noise moves the
    momentum, so the kinetic-energy term of :math:`\hat\lambda` carries noise too: over a
    trajectory of :math:`L` steps of :math:`\eta` its standard deviation is about
    :math:`\eta\sqrt L\,T\,2\mathrm{nm}_g b\,\|p\|`, against the ratio's
    :math:`T\,2\mathrm{nm}_l b\,L\eta\|p\|` (gradient and ratio clips equal, as on the default
    path), so the test sees noise of variance :math:`\sigma_l^2(1 + r^2/L)`.
    ``control_variate`` (the default path of DPPenalty and DPHMC since 2026-11-27): the test releases Taylor
    residuals (:mod:`pyro_dp.kernels.control_variate`), whose clip per unit jump is
    :math:`\min\{hR, 2b'\}` in place of :math:`b` — :math:`h` the default curvature clip at the
    posterior-scale guess, :math:`R = \sqrt{2D}\,\mathrm{sd}` (a chain point lies about
    :math:`\sqrt D` posterior sds from the posterior mean, and the private start about as far:
    DP-HMC on the suite's linear model at ε = 8 measured a median :math:`R` of
    :math:`1.4\sqrt D` sds, 2026-11-28; :math:`2\sqrt D` before, which under-forecast DP-HMC's
    effective sample size 1.9–4.9-fold), :math:`b'` the reference clip — and the start's move is
    the noise-free one.

    >>> F = [[0.2, 0.0], [0.0, 0.05]]
    >>> r = predicted_move(kernel="DPPenalty", num_rows=10_000, noise_multiplier=50.0, clip=1.0,
    ...                    grad_norm=0.5, fisher=F, num_samples=1000, warmup_steps=1000)
    >>> [round(x, 3) for x in r]
    [0.354, 0.413, 0.3, 5.189]
    """
    if kernel != "DPSGLD":
        return mh_predicted_move(kernel=kernel, num_rows=num_rows, noise_multiplier=noise_multiplier, clip=clip,
                                 grad_norm=grad_norm, fisher=fisher, num_samples=num_samples,
                                 warmup_steps=warmup_steps, num_chains=num_chains, temperature=temperature,
                                 num_steps=num_steps, noise_ratio=noise_ratio, control_variate=control_variate)
    F = torch.as_tensor(fisher, dtype=torch.float64)
    D = F.shape[0]
    T, n, nm, b = float(temperature), float(num_rows), float(noise_multiplier), float(clip)
    sd_max = math.sqrt(float(torch.linalg.eigvalsh(torch.linalg.inv(T * n * F)).max()))
    # clip: the tuner's ratio quantile (the kernel's clip is derived from it)
    return _langevin_move(nm, b, float(grad_norm), T, n, D, sd_max, num_samples, num_chains)


def _langevin_move(nm, quantile, grad_norm, T, n, D, sd_max, num_samples, num_chains):
    r""":func:`predicted_move` for DPSGLD's default path: its clip and free step
    (:func:`~pyro_dp.default_path.driver.langevin_default`, from the tuner's two quantiles
    ``quantile`` and ``grad_norm``; full batch, substitution). The unadjusted chain on a Gaussian
    of variance :math:`\sigma^2` is an AR(1) with :math:`\rho = 1 - \eta/(2\sigma^2)`, whose
    ESS over :math:`n` draws is :math:`n(1-\rho)/(1+\rho)` (the slowest direction's
    :math:`\sigma`). ``move_ratio``: the diffusion per step :math:`\sqrt\eta` over that
    :math:`\sigma`; no test, acceptance 1."""
    def unit(c):
        return langevin_noise_multiplier("sgld", step_size=1.0, sample_rate=1.0, grad_clip=c, temperature=T)

    s = langevin_default(SimpleNamespace(grad_clip=grad_norm, llr_clip=quantile), nm, unit, int(n), D, T)
    eta, guess = s.step_size, s.sd
    return math.sqrt(eta) / guess, math.sqrt(eta) / sd_max, 1.0, num_chains * langevin_ess(eta, sd_max, num_samples)


@functools.lru_cache(maxsize=256)
def hmc_gradient_gain(*, num_rows: int, epsilon: float, delta: float, dim: int, num_samples: int,
                      warmup_steps: int, num_chains: int = 1, temperature: float = 1.0, num_steps: int = 5) -> float:
    r"""How many times the effective samples DP-HMC's default path is forecast to give with its
    gradient releases over the same kernel without them (``DPHMC(gradients=False)``: the
    trajectory on a zero gradient, a random walk of :math:`L` steps, with the whole per-iteration
    budget on the test, as DPPenalty's default path): the geometric mean over the built-in
    profiles (:data:`PROFILES`, at ``dim`` latents, whitened as the default path is) of
    :func:`predicted_move`'s ratio. Data-free: :math:`N`, the budget, the run and the model's
    size only. The default path releases gradients where it is at least
    :data:`HMC_GRADIENT_GAIN` (``DPHMC(gradients=None)``).

    Why: the test's noise per unit of move grows with the gradients' share of the budget
    (variance :math:`(1 + L/r^2)(1 + r^2/L) \ge 4` times the random walk's, ``docs/tuning.md``),
    and a noise-limited move is short whatever proposes it; the gradients pay once the noise no
    longer limits the move (large :math:`N\varepsilon`). Measured on the default suite at
    :math:`N = 5\cdot10^4` (``docs/choosing.md``): the walk was the more accurate at ε = 2,
    the gradients at ε = 8.

    >>> [round(hmc_gradient_gain(num_rows=50_000, epsilon=e, delta=1e-5, dim=4, num_samples=1000,
    ...                          warmup_steps=500), 2) for e in (2.0, 8.0)]
    [0.81, 6.96]
    """
    return gradient_gain(functools.partial(kernel_noise, "DPHMC"), num_rows=num_rows, epsilon=epsilon, delta=delta, dim=dim,
                         num_samples=num_samples, warmup_steps=warmup_steps, num_chains=num_chains,
                         temperature=temperature, num_steps=num_steps)


def feasibility(model: Union[str, ModelProfile], *, num_rows: int, epsilon: float, delta: float = 1e-5,
                dim: Optional[int] = None, kernel: str = "DPPenalty", num_samples: int = 1000,
                warmup_steps: int = 1000, num_chains: int = 1, temperature: float = 1.0, num_steps: int = 5,
                target_ess: float = 100.0, noise_sd: float = 1.0, rate: float = 3.0,
                whiten: Optional[bool] = None, control_variate: Optional[bool] = None) -> Feasibility:
    r"""Predict, before any data is read, what ``MCMC(kernel(model, epsilon=ε, delta=δ),
    num_samples=..., warmup_steps=...)`` will deliver on ``num_rows`` rows (module doc).

    :param model: ``"logistic"``, ``"linear"`` or ``"poisson"`` (:func:`model_profile`, with
        ``dim`` features in the unit ball), or a :class:`ModelProfile` of your own.
    :param int num_rows: :math:`N` (public).
    :param float epsilon: the budget's ε, all chains together.
    :param float delta: the budget's δ.
    :param int dim: number of features (built-in profiles; default 5 for logistic, 3 otherwise).
    :param str kernel: ``"DPPenalty"``, ``"DPHMC"`` or ``"DPSGLD"`` (its default path).
    :param int num_samples, warmup_steps, num_chains: the run (``MCMC``'s arguments).
    :param float temperature: :math:`T`.
    :param int num_steps: DP-HMC's leapfrog steps :math:`L`.
    :param float target_ess: the effective sample size called usable.
    :param float noise_sd, rate: the linear profile's residual sd and the Poisson profile's mean count.
    :param bool whiten: predict a chain whitened by the posterior's metric (the profile's
        :meth:`ModelProfile.whitened`). ``None``: as the kernel's default path does —
        DPPenalty whitens a model whose latents (two or more) all enter the likelihood, which
        every profile describes (:func:`~pyro_dp.default_path.whitening.whitens`), and so does DPHMC. A
        profile without :attr:`~ModelProfile.whitened_norms` is then predicted unwhitened, with a
        warning (fewer effective samples than the whitened chain gets: pessimistic).
    :param bool control_variate: the test (and DP-HMC's gradients) on Taylor residuals
        (:mod:`pyro_dp.kernels.control_variate`); ``None``: as the default path (on), ``False``:
        the plain kernel (``control_variate=False``). DPPenalty and DPHMC only.
    :returns: a frozen :class:`Feasibility`.

    >>> f = feasibility("linear", num_rows=10_000, epsilon=2.0)
    >>> f.kernel, f.usable, f.rows_needed > 10_000
    ('DPPenalty', False, True)
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {tuple(KERNELS)} (the kernels with a default path), got {kernel!r}")
    if control_variate is not None and (not isinstance(control_variate, bool) or kernel == "DPSGLD"):
        raise ValueError(f"control_variate is DPPenalty's and DPHMC's (True, False or None), got {control_variate!r} "
                         f"for {kernel}")
    cv = kernel != "DPSGLD" and control_variate is not False
    n = check_int("num_rows", num_rows, 2)
    eps = check_positive_number("epsilon", epsilon)
    check_delta(delta)
    samples = check_int("num_samples", num_samples, 1)
    warmup = check_int("warmup_steps", warmup_steps, 0)
    chains = check_int("num_chains", num_chains, 1)
    L = check_int("num_steps", num_steps, 1)
    T = check_positive_number("temperature", temperature)
    target = check_positive_number("target_ess", target_ess)
    profile, whitened = _chain_coordinates(resolve_profile(model, dim, noise_sd, rate), kernel, whiten)
    # DPSGLD's default path releases in its burn-in and its draws only (the rest of warmup idles)
    iterations = samples + (langevin_burn_in(warmup, samples) if kernel == "DPSGLD" else warmup)

    def at(n_rows: int, e: float, silent: bool = False):
        grads = None
        if kernel == "DPHMC" and cv:  # the kernel's own choice (hmc_gradient_gain), data-free
            grads = hmc_gradient_gain(num_rows=n_rows, epsilon=e, delta=float(delta), dim=profile.num_latents,
                                      num_samples=samples, warmup_steps=warmup, num_chains=chains,
                                      temperature=T, num_steps=L) >= HMC_GRADIENT_GAIN
        nm, tuner = kernel_noise(kernel, e, float(delta), iterations, chains, T, L, cv, grads is not False)
        b = profile.quantile(tuner.ratio_quantile(n_rows))
        g = profile.quantile(tuner.grad_quantile)
        as_kernel = "DPPenalty" if grads is False else kernel  # without gradients: the random walk's forecast
        r = predicted_move(kernel=as_kernel, num_rows=n_rows, noise_multiplier=0.0 if silent else nm, clip=b,
                           grad_norm=g, fisher=profile.fisher, num_samples=samples, warmup_steps=warmup,
                           num_chains=chains, temperature=T, num_steps=L, control_variate=cv)
        if kernel == "DPSGLD":  # the clip it reports: the kernel's gradient clip (langevin_default)
            b = LANGEVIN_CLIP_HEADROOM * max(b, g)
        return nm, b, r, grads

    nm, b, (start_ratio, ratio, acc, ess), grads = at(n, eps)
    ceiling = at(n, eps, silent=True)[2][3]
    goal = min(target, ceiling / 2.0)

    def search(f, lo, hi):  # smallest x in [lo, hi] (geometric bisection) with f(x) >= goal, or None
        if f(hi) < goal:
            return None
        if f(lo) >= goal:
            return lo
        for _ in range(40):
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if f(mid) >= goal else (mid, hi)
            if hi / lo < 1.01:
                break
        return hi

    rows = search(lambda x: at(int(round(x)), eps)[2][3], 10.0, 1e10)
    eps_needed = search(lambda e: at(n, e)[2][3], 1e-3, 1e4)
    smallest = ess * smallest_estimate_factor(profile.num_latents)
    return Feasibility(kernel, n, eps, float(delta), nm, b, start_ratio, ratio, acc, ess, smallest, ceiling, whitened,
                       target, ess >= target, None if rows is None else int(math.ceil(rows)),
                       None if eps_needed is None else float(f"{eps_needed:.3g}"), grads)
