r"""The default path's side of the kernels' hook (:mod:`pyro_dp.kernels.path_hook`), and the
recipes that set a kernel's left-out settings from a private tuning's result.

:class:`KernelDefaultPath` answers the five calls a kernel makes (``tuner``, ``configure``,
``calibrated``, ``take_tuning``, ``gradients_pay``); :mod:`pyro_dp.default_path` registers it
when imported. What differs between kernels is the *recipe*, :func:`apply_tuning`, dispatched on
the kernel's class (``functools.singledispatch``, which follows the MRO as a method would: a
user's subclass of ``DPPenalty`` takes ``DPPenalty``'s recipe), never on a class name. A recipe
reads and writes only the kernel's public settings and parts (``kernel.chain``,
``kernel.forecast``, ``kernel.reference``, ``kernel.prior_sweeps``) and calls its public methods
(``DPHMC.start_step_size``, ``DPGroupedPenalty.guess_group_scale``); everything it computes is
post-processing of the tuning's releases (recorded in the ledger) or data-free.

Until issue 63 these recipes were the kernels' ``_apply_tuning`` methods, and the control
variate's ``tune`` lived in ``kernels/control_variate.py``; the arithmetic and the order of
its warnings are unchanged (``tests/kernels/golden/default_path.json``, bit for bit).
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Optional, Tuple

from ..checks import SamplingWarning, monte_carlo_min_ess
from ..kernels import control_variate as cv_mod
from ..kernels.base import DPKernel
from ..kernels.grouped import DPGroupedPenalty
from ..kernels.hmc import DPHMC
from ..kernels.path_hook import DefaultPath
from ..kernels.penalty import DPPenalty
from ..kernels.runner import DEFAULT_ITERATIONS
from ..kernels.scales import posterior_scale_guess
from ..kernels.sgmcmc import DPSGLD, langevin_noise_multiplier
from ..warn import warn_user
from . import driver
from .inference import choose_inference
from .forecast import HMC_GRADIENT_GAIN, hmc_gradient_gain, kernel_noise
from .prediction import default_curvature_clip
from .tuning import DPAutoTune

__all__ = ["KernelDefaultPath", "apply_tuning", "control_variate_tuning"]


class KernelDefaultPath(DefaultPath):
    """The default path every kernel asks (:mod:`~pyro_dp.kernels.path_hook`)."""

    def __init__(self, names: dict):
        self.names = dict(names)

    def tuner(self, kernel):
        return driver.auto_tuner(kernel)

    def configure(self, kernel) -> None:
        choose_inference(kernel)  # the one-release mode where the iterative chain cannot be right (data-free)
        driver.configure_tuner(kernel)

    def calibrated(self, kernel, ratio_noise_multiplier: Optional[float]) -> None:
        driver.tell_tuner(kernel, ratio_noise_multiplier)

    def take_tuning(self, kernel, *, first_chain: bool, ratio_noise_multiplier: Optional[float]) -> None:
        if isinstance(kernel.init, DPAutoTune):
            kernel.chain.metric_sd = kernel.init.result.metric_sd  # the end-of-chain spread check (kernels.diagnostics)
            mode = getattr(kernel, "one_release", None)
            if mode is not None:  # the one-release mode's recipe, whatever the kernel's class (issue 62)
                mode.take_tuning(kernel, kernel.init.result)
            else:
                apply_tuning(kernel, kernel.init.result, first_chain=first_chain,
                             ratio_noise_multiplier=ratio_noise_multiplier)

    def gradients_pay(self, kernel) -> bool:
        """:func:`~pyro_dp.default_path.forecast.hmc_gradient_gain` for this :math:`N`, budget and
        run is at least :data:`~pyro_dp.default_path.prediction.HMC_GRADIENT_GAIN` (data-free)."""
        iterations = int(kernel.num_iterations or DEFAULT_ITERATIONS)
        warmup = min(int(kernel.chain.warmup_steps), iterations - 1)
        lik = kernel.lik
        return hmc_gradient_gain(
            num_rows=int(getattr(lik, "global_num_rows", lik.num_rows)), epsilon=float(kernel.epsilon),
            delta=float(kernel.delta), dim=max(int(lik.likelihood_dim), 1), num_samples=iterations - warmup,
            warmup_steps=warmup, num_chains=int(kernel.num_chains or 1), temperature=float(lik.temperature),
            num_steps=kernel.num_steps) >= HMC_GRADIENT_GAIN


@functools.singledispatch
def apply_tuning(kernel, result, *, first_chain: bool, ratio_noise_multiplier: Optional[float]) -> None:
    """Set the settings ``kernel.auto_tuned`` left out from a :class:`~.tuning.DPAutoTune`
    ``result`` (a :class:`~.tuning.TuneResult`), at the first iteration of every chain. A kernel
    class without a recipe takes nothing (as ``DPKernel``)."""
    if not isinstance(kernel, DPKernel):
        raise TypeError(f"apply_tuning: not a pyro_dp kernel: {type(kernel).__name__}")


@apply_tuning.register
def _penalty(kernel: DPPenalty, result, *, first_chain: bool, ratio_noise_multiplier: Optional[float]) -> None:
    if "llr_clip" in kernel.auto_tuned:
        kernel.llr_clip = result.llr_clip
    sd = control_variate_tuning(kernel, result, base_clip=kernel.llr_clip, ratio_noise_multiplier=ratio_noise_multiplier,
                                first_chain=first_chain) if kernel.control_variate else None
    if "proposal_scale" not in kernel.auto_tuned:
        return
    lik = kernel.lik
    sweep = kernel.sweep_mask  # prior-only coordinates: data-free sweeps, held fixed by the walk
    d = (lik.likelihood_dim if sweep is not None else lik.dim) if kernel.mode == "full" else 1
    if kernel.control_variate:  # the residuals' noise does not limit the move near the start
        free = 2.38 / math.sqrt(d) * sd  # Roberts, Gelman & Gilks 1997
        kernel.proposal_scale = free if sweep is None else free * (1.0 - sweep)
    else:
        jump, sd = driver.move_scales(kernel, result, kernel.noise_multiplier)
        # Roberts, Gelman & Gilks 1997: random-walk scale 2.38/sqrt(d) x the posterior sd
        free = 2.38 / math.sqrt(d) * sd
        mask = lik.likelihood_mask
        if mask is None:
            kernel.proposal_scale = min(jump / math.sqrt(d), free)
        else:  # the noise grows with the move of the likelihood's coordinates only (jump_norm):
            # the others (a hierarchical model's mu, tau) move in the sweeps (one-component
            # walks: at the noise-free scale)
            d_lik = lik.likelihood_dim if kernel.mode == "full" else 1
            lik_scale = min(jump / math.sqrt(max(d_lik, 1)), free)
            kernel.proposal_scale = mask * lik_scale + (0.0 if sweep is not None else (1.0 - mask) * free)
    if sweep is not None:  # the sweeps' adaptation starts at the likelihood's noise-free scale
        kernel.prior_sweeps.log_scale = math.log(free)


@apply_tuning.register
def _grouped(kernel: DPGroupedPenalty, result, *, first_chain: bool,
             ratio_noise_multiplier: Optional[float]) -> None:
    coords, lik_others, has_others, prior_only = kernel.groups()
    if "llr_clip" in kernel.auto_tuned:
        kernel.llr_clip = result.llr_clip
    if "proposal_scale" not in kernel.auto_tuned:
        return
    lik = kernel.lik
    n, T, d = getattr(lik, "global_num_rows", lik.num_rows), lik.temperature, lik.dim
    jump, sd = driver.move_scales(kernel, result, kernel.noise_multiplier)
    free = 2.38 / math.sqrt(max(d - coords.numel(), 1)) * sd  # Roberts, Gelman & Gilks 1997
    d_lik = max(int(lik_others.sum()), 1)  # step 1 pays noise for these only (group coordinates fixed)
    lik_scale = min(jump / math.sqrt(d_lik), free)
    # as DPPenalty's; the group coordinates' entries are not used (step 1 holds them fixed), the
    # prior-only coordinates' start the data-free step's adaptation
    kernel.proposal_scale = (1.0 - prior_only) * lik_scale + prior_only * free
    n_g = int(coords.numel())
    k = d_lik + 1  # likelihood coordinates one row moves: its group's and the others'
    kernel.guess_group_scale(posterior_scale_guess(result.grad_clip, max(n // n_g, 1), k, T))  # unless given


@apply_tuning.register
def _hmc(kernel: DPHMC, result, *, first_chain: bool, ratio_noise_multiplier: Optional[float]) -> None:
    # Both clips track the ratio clip's quantile (DPAutoTune.ratio_quantile), about 2 nm rows above
    # it: Amin et al. 2019's bias-variance balance for both sums (a 0.9 quantile froze the chain; docs/tuning.md).
    if "grad_clip" in kernel.auto_tuned:  # the higher one: the tracked clips are noisy and may cross
        kernel.grad_clip = max(result.grad_clip, result.llr_clip)
    if "llr_clip" in kernel.auto_tuned:
        kernel.llr_clip = result.llr_clip
    lik = kernel.lik
    sweep = kernel.sweep_mask
    if kernel.control_variate:  # near the start no move is noise-limited: a noise-free start, adapted in warmup
        sd = control_variate_tuning(kernel, result, base_clip=kernel.grad_clip,
                                    ratio_noise_multiplier=ratio_noise_multiplier, first_chain=first_chain,
                                    alternative=("DPPenalty", functools.partial(penalty_alternative, kernel)))
        if "step_size" in kernel.auto_tuned:
            d_lik = max(lik.likelihood_dim, 1)  # leapfrog on a Gaussian of scale sd (Neal 2011 §5.4.4); the
            # walk's L eta: DPPenalty's start, 2.38 sd / sqrt(D) (Roberts, Gelman & Gilks 1997)
            eta = sd / d_lik ** 0.25 if kernel.uses_gradients else 2.38 * sd / (kernel.num_steps * math.sqrt(d_lik))
            kernel.start_step_size(eta)
    elif "step_size" in kernel.auto_tuned:
        jump, sd = driver.move_scales(kernel, result, kernel.llr_noise_multiplier)
        d_lik = max(lik.likelihood_dim, 1)
        # a trajectory of L steps moves the likelihood's d_lik coordinates about L*eta*sqrt(d_lik)
        # (unit mass; the ratio clip measures only those, PrivateLikelihood.jump_norm): penalty noise sd ~ 1
        kernel.start_step_size(min(jump / (kernel.num_steps * math.sqrt(d_lik)), sd))
    # latents outside the likelihood: data-free sweeps (before 2026-11-28 a lighter mass on the
    # plain path, unit mass on the control variate's; docs/tuning.md)
    if sweep is not None:  # their sweeps' adaptation starts at the likelihood's noise-free scale
        kernel.prior_sweeps.log_scale = math.log(2.38 / math.sqrt(max(lik.likelihood_dim, 1)) * sd)


@apply_tuning.register
def _sgld(kernel: DPSGLD, result, *, first_chain: bool, ratio_noise_multiplier: Optional[float]) -> None:
    lik = kernel.lik
    n, T, d = getattr(lik, "global_num_rows", lik.num_rows), lik.temperature, lik.dim
    unit = functools.partial(langevin_noise_multiplier, "sgld", step_size=1.0, sample_rate=kernel.sample_rate,
                             temperature=T, relation=kernel.relation)
    out = driver.langevin_default(result, kernel.noise_multiplier, lambda c: unit(grad_clip=c), n, d, T)
    kernel.grad_clip, kernel.step_size, kernel.langevin_noise_multiplier, kernel.diffusion = out[:4]
    kernel.centre = result.centre
    # Before the chain runs (post-processing, public): the free step below its cap means the noise
    # sets the step, and eta ∝ 1/iterations: more iterations do not add effective samples.
    sd, kernel.forecast.noise_limited = out.sd, out.noise_limited
    iterations = int(kernel.num_iterations or DEFAULT_ITERATIONS)
    ess = driver.langevin_ess(kernel.step_size, sd, max(iterations - min(int(kernel.chain.warmup_steps), iterations), 1))
    # the forecast is of the ESS itself, not of Pyro's estimate of it (which the end-of-chain check reads)
    if kernel.forecast.noise_limited and ess < monte_carlo_min_ess(int(d)) and first_chain:
        warn_user(f"DPSGLD: at this budget the privacy noise limits the Langevin step to about "
                  f"{math.sqrt(kernel.step_size) / sd:.2g} of the posterior's scale per iteration (guessed from the "
                  f"private clip): expect about {ess:.2g} effective samples in this chain (pyro_dp.feasibility). "
                  "Spend more epsilon or use more rows; more iterations will not help (the step shrinks as "
                  "their number grows) (docs/tuning.md, 'Without an accept test')", SamplingWarning)


def penalty_alternative(kernel, result) -> Optional[float]:
    """For DP-HMC's end-of-chain advice: the effective samples DPPenalty's default path (its
    calibration for this budget and run, :func:`pyro_dp.feasibility`'s; the chain's tuned
    clips) is forecast to give; ``None`` without an ε budget. Data-free."""
    if kernel.epsilon is None:
        return None
    iterations = int(kernel.num_iterations or DEFAULT_ITERATIONS)
    nm, _ = kernel_noise("DPPenalty", float(kernel.epsilon), float(kernel.delta), iterations,
                         int(kernel.num_chains or 1), float(kernel.lik.temperature), 1, True)
    return driver.forecast_ess(kernel, result, nm, control_variate=True, forecast_kernel="DPPenalty")


def control_variate_tuning(kernel, result, *, base_clip: float, ratio_noise_multiplier: Optional[float],
                           first_chain: bool, alternative: Optional[Tuple[str, Callable]] = None) -> float:
    """The default path with a control variate (post-processing of the tuning ``result``): the
    posterior-scale guess (returned, and kept in ``kernel.reference``), the curvature clip from it
    unless given, the chain's forecasts (``kernel.forecast``; ``alternative``: another kernel's name and
    the function of ``result`` that forecasts its effective samples, for the end-of-chain advice), and
    warnings before the first chain runs when the forecast is short of a mean within one sd, or when
    the reference's noise would shift the means by more than
    :data:`~pyro_dp.kernels.control_variate.TILT_WARNING_SD` posterior sds."""
    lik, name = kernel.lik, type(kernel).__name__
    n, T = getattr(lik, "global_num_rows", lik.num_rows), lik.temperature
    kernel.reference.scale_guess = sd = posterior_scale_guess(result.grad_clip, n, lik.dim, T)
    kernel.forecast.noise_limited = False  # the residuals' noise does not grow with the move's length alone
    nm = ratio_noise_multiplier  # what a longer run would buy (the end-of-chain advice)
    ess = driver.forecast_ess(kernel, result, nm, control_variate=True) if nm else None
    kernel.forecast.longer_helps = driver.longer_run_helps(kernel, result, nm, True, ess) if nm else True
    if ess is not None and alternative is not None:  # the end-of-chain advice may name it
        alt = alternative[1](result)
        kernel.forecast.alternative_ess = None if alt is None else (alternative[0], alt, ess)
    if nm and first_chain:  # feasibility before the chain runs (post-processing of the tuning)
        need = monte_carlo_min_ess(lik.dim)  # the ESS itself, not Pyro's estimate of it
        # the privacy noise is the cause: without it a run of this length would be forecast enough
        if ess < need / 2.0 and driver.forecast_ess(kernel, result, 0.0, control_variate=True) >= need:
            warn_user(f"{name}: the forecast for this chain with its private clips (pyro_dp.feasibility) "
                      f"is about {ess:.2g} effective samples, under half the {need:.3g} that a mean within one "
                      "posterior sd needs: expect slow mixing and a warning at the end. Spend more epsilon or use "
                      "more rows",
                      SamplingWarning)
    if not kernel.curvature_clip_given:
        kernel.curvature_clip = default_curvature_clip(max(lik.likelihood_dim, 1), n, sd, T)
    tilt = cv_mod.tilt_sd(T, kernel.reference_noise_multiplier, cv_mod.reference_clip(base_clip), sd)
    if tilt is not None and tilt > cv_mod.TILT_WARNING_SD and first_chain:
        warn_user(f"{name}(control_variate=True): at this budget the reference gradient's noise "
                  f"shifts each posterior mean by about {tilt:.2g} posterior standard deviations (one draw for "
                  "the whole chain; guessed from the private clip): spend more epsilon or use more rows "
                  "(docs/tuning.md, 'Control variates')", SamplingWarning)
    return sd
