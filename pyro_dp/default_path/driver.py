r"""The default path's functions: what it does for settings the user left out.

With no budget and no noise the kernel adopts the default budget
(:data:`~pyro_dp.kernels.privacy_engine.DEFAULT_EPSILON`, announced by a
:class:`~pyro_dp.kernels.privacy_engine.PrivacyNotice`); with a budget but no run length it reads
the run length from the ``pyro.infer.MCMC`` that runs it, else assumes
:data:`~pyro_dp.kernels.runner.DEFAULT_ITERATIONS` (:func:`~pyro_dp.kernels.runner.resolve_run_length`:
every kernel with a budget needs it, so it stays in the kernel layer); settings a kernel lists in
``auto_tuned`` (clips, step sizes) are tuned privately by
:class:`~pyro_dp.default_path.tuning.DPAutoTune` at the first iteration of every chain, and
the default path sets them on the kernel from the result (:mod:`~pyro_dp.default_path.hook`'s
recipes). The kernel reaches the functions below only through its hook
(:mod:`~pyro_dp.kernels.path_hook`); they read and write only the kernel's public settings and
its chain record (``kernel.chain``). Everything here is data-free or post-processing of the
tuning's releases (recorded in the ledger).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

import torch

from ..warn import warn_user
from ..checks import SamplingWarning
from .prediction import mh_predicted_move
from ..accounting.algorithms import default_noise_ratio
from ..kernels.hmc import DEFAULT_NUM_STEPS, DPHMC
from ..kernels.penalty import DPPenalty
from ..kernels.releases import Budget, hmc_noise, penalty_noise, sgld_noise
from ..kernels.runner import DEFAULT_ITERATIONS
from ..kernels.sgmcmc import DPSGLD
from .tuning import DPAutoTune, penalty_jump_length, posterior_scale_guess
from .whitening import reshapes, whitens

__all__ = ["default_path_noise", "configure_tuner", "tell_tuner", "auto_tuner", "move_scales",
           "forecast_ess", "longer_run_helps", "NOISE_LIMITED_RATIO", "LONGER_RUN_GAIN", "LANGEVIN_STEP_CAP",
           "LANGEVIN_CLIP_HEADROOM", "LangevinSettings", "langevin_default", "langevin_ess"]

#: The default path warns before a chain runs when the largest move its noise allows is below
#: this fraction of the (guessed) posterior standard deviation (:func:`move_scales`).
NOISE_LIMITED_RATIO = 0.25

#: The end-of-chain effective-sample-size warning advises running longer only where the forecast
#: (:func:`longer_run_helps`) gives a run twice as long at the same ε at least this many
#: times the effective samples (issue 40: "run longer" only when longer would help).
LONGER_RUN_GAIN = 1.25


#: The default path's largest DP-SGLD step in units of the guessed posterior variance
#: (:func:`langevin_default`): the unadjusted Langevin step's variance inflation on a Gaussian,
#: :math:`1/(1-\eta/(4\sigma^2))`, stays below 1.08.
LANGEVIN_STEP_CAP = 0.3

#: The default path's DP-SGLD clip over the highest quantile of the gradient norms its tuner
#: resolves (:func:`langevin_default`): no accept test corrects a clipping bias, and the tuner's
#: count noise cannot place the clip above the top ~0.3% of rows at N = 5·10⁴. Measured on the
#: default suite's linear and Poisson models at ε = 2 (``docs/tuning.md``): the tuned quantile
#: itself left sigma 0.8–1.4 sd off; 1.5× of it, every mean within 0.75 sd (the step, ∝ 1/C²,
#: shrinks 2.25×).
LANGEVIN_CLIP_HEADROOM = 1.5


class LangevinSettings(NamedTuple):
    """:func:`langevin_default`'s result: the first four are the kernel's settings; ``sd`` is the
    guessed posterior scale the step is capped by, ``noise_limited`` whether the free step (the
    noise), not the cap, set the step."""

    grad_clip: float
    step_size: float
    langevin_noise_multiplier: float
    diffusion: float
    sd: float
    noise_limited: bool


def langevin_default(result, noise_multiplier: float, unit_step_noise, num_rows: int, dim: int,
                     temperature: float = 1.0) -> LangevinSettings:
    r"""``(grad_clip, step_size, langevin_noise_multiplier, diffusion, sd, noise_limited)`` of
    :class:`~pyro_dp.kernels.sgmcmc.DPSGLD`'s default path (:class:`LangevinSettings`), from its tuner's ``result`` (a
    :class:`~pyro_dp.default_path.tuning.TuneResult`: post-processing of the tuning's releases) and the
    release's ``noise_multiplier``; ``unit_step_noise(C)`` is the Langevin noise multiplier of
    step 1 with clip :math:`C` (:func:`~pyro_dp.kernels.sgmcmc.langevin_noise_multiplier`).

    * The clip :math:`C`: :data:`LANGEVIN_CLIP_HEADROOM` times the higher of the tuner's two
      quantiles, times the radius ratio of the ball's released centre where there is one
      (``result.centre_ratio``, :mod:`~pyro_dp.default_path.centring`). Without an accept test
      nothing corrects a clipping bias (measured: the 0.99 quantile put a linear model's means
      2.2 sd off, ``benchmarks/langevin_study.py``).
    * The step: "privacy for free" (Wang, Fienberg & Smola 2015), the largest step whose release
      noise fits within Langevin's :math:`\mathcal N(0,\eta I)`. Since
      :math:`\mathrm{nm}_L(\eta) = \mathrm{nm}_L(1)/\sqrt\eta`, that is
      :math:`\eta \le (\mathrm{nm}_L(1)/\mathrm{nm})^2`. It is capped at
      :data:`LANGEVIN_STEP_CAP` times the guessed posterior variance
      (:func:`~pyro_dp.kernels.scales.posterior_scale_guess`).
    * ``diffusion``: the part of :math:`\eta` the release's noise leaves,
      :math:`\eta(1 - (\mathrm{nm}/\mathrm{nm}_L)^2) \ge 0`, drawn data-free.

    >>> from types import SimpleNamespace
    >>> r = SimpleNamespace(grad_clip=1.0, llr_clip=2.0)
    >>> s = langevin_default(r, 10.0, lambda c: 1.0 / c, num_rows=100, dim=1)  # free: (1/30)^2
    >>> [round(x, 6) for x in s[:5]], s.noise_limited
    ([3.0, 0.001111, 10.0, 0.0, 0.1], True)
    >>> s = langevin_default(r, 10.0, lambda c: 1.0 / c, num_rows=10_000, dim=1)  # capped: 0.3/100^2
    >>> [round(x, 6) for x in s[:5]], s.noise_limited
    ([3.0, 3e-05, 60.858062, 2.9e-05, 0.01], False)
    """
    clip = LANGEVIN_CLIP_HEADROOM * max(result.grad_clip, result.llr_clip) * getattr(result, "centre_ratio", 1.0)
    sd = posterior_scale_guess(result.grad_clip, num_rows, dim, temperature)
    nm_unit = unit_step_noise(clip)
    free = math.inf if noise_multiplier == 0 else (nm_unit / noise_multiplier) ** 2
    cap = LANGEVIN_STEP_CAP * sd * sd
    eta = min(free, cap)
    nm_l = nm_unit / math.sqrt(eta)
    return LangevinSettings(clip, eta, nm_l, max(eta * (1.0 - (noise_multiplier / nm_l) ** 2), 0.0), sd, free < cap)


def langevin_ess(step_size: float, sd: float, num_samples: int) -> float:
    r"""Effective sample size of ``num_samples`` draws of the unadjusted Langevin chain with step
    :math:`\eta` on a Gaussian of standard deviation :math:`\sigma`: an AR(1) with
    :math:`\rho = 1 - \eta/(2\sigma^2)`, so :math:`n(1-\rho)/(1+\rho)` (at most :math:`n`).
    Data-free; used by DPSGLD's pre-run warning and by :func:`pyro_dp.feasibility`.

    >>> round(langevin_ess(0.3, 1.0, 1000), 1)
    81.1
    """
    a = min(step_size / (2.0 * sd * sd), 1.0)
    return num_samples * min(1.0, a / (2.0 - a))


def _penalty_path(budget, iterations, init, *, num_steps, control_variate, gradients):
    nm = penalty_noise(budget, iterations, init, control_variate=control_variate)[0]
    return nm, nm


def _hmc_path(budget, iterations, init, *, num_steps, control_variate, gradients):
    nm = hmc_noise(budget, iterations, init, num_steps=num_steps, noise_ratio=default_noise_ratio(num_steps),
                   gradients=gradients, control_variate=control_variate)[0]
    return nm, nm


def _sgld_path(budget, iterations, init, *, num_steps, control_variate, gradients):
    return sgld_noise(budget, iterations, init, sample_rate=1.0), 0.0  # every row (q = 1); no ratio release


#: The kernels with a default path, and the pure calibration of their default path's noise
#: (:mod:`pyro_dp.kernels.releases`): ``(release's noise multiplier, ratio noise the tuner balances)``.
PATH_NOISES = {DPPenalty: _penalty_path, DPHMC: _hmc_path, DPSGLD: _sgld_path}


def default_path_noise(cls, *, epsilon: float, delta: float, num_iterations: int, num_chains: int = 1,
                       temperature: float = 1.0, num_steps: int = DEFAULT_NUM_STEPS, control_variate: bool = True,
                       gradients: bool = True) -> Tuple[float, DPAutoTune]:
    """``(noise multiplier, tuner)``: the noise of the release the default path of kernel class
    ``cls`` (DPPenalty, DPHMC or DPSGLD) calibrates for this budget and run (the ratio's; DPSGLD:
    its gradient's, every row) and its tuner, as the kernel sets them before it reads any data:
    the tuner the kernel's default path builds (:func:`auto_tuner`, from the class's settings),
    configured with the budget, and the same pure calibration the kernel runs at set-up
    (:mod:`pyro_dp.kernels.releases`; no kernel is built). ``num_steps``, ``gradients``: DPHMC's;
    ``control_variate``: DPPenalty's and DPHMC's. Data-free; what :func:`pyro_dp.feasibility` and
    DP-HMC's gradient choice (:func:`~pyro_dp.default_path.prediction.gradient_gain`) calibrate with.

    >>> import pyro_dp
    >>> nm, tuner = default_path_noise(pyro_dp.DPPenalty, epsilon=2.0, delta=1e-5, num_iterations=1000)
    >>> round(nm, 3), tuner.whiten
    (216.259, True)
    """
    tuner = DPAutoTune(whiten=cls.whiten_by_default, scale=cls.whiten_by_default or cls.scale_by_default,
                       centre=cls.centre_by_default)  # auto_tuner's, under substitution
    tuner.configure(epsilon=epsilon, delta=delta, num_chains=num_chains, non_private=False)
    nm, ratio_nm = PATH_NOISES[cls](Budget(epsilon, delta, num_chains), num_iterations, list(tuner.events()),
                                    num_steps=num_steps, control_variate=control_variate, gradients=gradients)
    tuner.set_ratio_noise(ratio_nm)
    return nm, tuner


def grad_to_ratio_noise(kernel) -> Optional[float]:
    r"""DP-HMC's :math:`\mathrm{nm}_g/\mathrm{nm}_l` as set (``None``: not a gradient kernel, or not set)."""
    nm_g, nm_l = getattr(kernel, "grad_noise_multiplier", None), getattr(kernel, "llr_noise_multiplier", None)
    return nm_g / nm_l if nm_g is not None and nm_l else None


def configure_tuner(kernel) -> None:
    """Before the kernel calibrates its noise (data-free): tell the default path's tuner
    (``kernel.init``, a :class:`~pyro_dp.default_path.tuning.DPAutoTune`) the budget, after deciding
    from the model's structure whether whitening and scaling apply."""
    tuner = kernel.init
    if not isinstance(tuner, DPAutoTune):
        return
    if tuner.noise_multipliers is None:  # whitening applies to this model or is not planned (data-free)
        tuner.whiten = tuner.whiten and whitens(kernel.lik)
        tuner.scale = tuner.scale and reshapes(kernel.lik)
        if tuner.centre and not (kernel.centre_by_default and kernel.relation == "substitute"):
            raise ValueError(f"DPAutoTune(centre=True): {type(kernel).__name__} under relation={kernel.relation!r} "
                             "has no centred clip ball (DPSGLD's default path under 'substitute' has)")
    tuner.configure(epsilon=kernel.epsilon, delta=kernel.delta, num_chains=kernel.num_chains,
                    non_private=kernel.non_private)


def tell_tuner(kernel, ratio_noise_multiplier: Optional[float]) -> None:
    """After the kernel calibrated its noise: the tuner's ratio clip balances the ratio noise
    (its quantile depends on N and the noise, data-free); says once when the tuning's counts are
    too noisy to be reliable at this budget."""
    if isinstance(kernel.init, DPAutoTune):
        kernel.init.set_ratio_noise(ratio_noise_multiplier)
        problem = kernel.init.reliability_problem(getattr(kernel.lik, "global_num_rows", kernel.lik.num_rows))
        if problem is not None and kernel.num_setups == 1:
            warn_user(f"{type(kernel).__name__} default path: {problem}", SamplingWarning)


def auto_tuner(kernel) -> DPAutoTune:
    """The :class:`~pyro_dp.default_path.tuning.DPAutoTune` of a kernel whose settings
    ``kernel.auto_tuned`` are left to the default path: the user's ``init`` if it is one,
    else a new one with the kernel's documented defaults."""
    names = ", ".join(kernel.auto_tuned)
    if kernel.distributed:
        raise ValueError(f"the default path (private tuning of {names}) does not support distributed=True yet: "
                         f"give {names} (docs/scaling_out.md)")
    if kernel.init is None:
        return DPAutoTune(whiten=kernel.whiten_by_default, scale=kernel.whiten_by_default or kernel.scale_by_default,
                          centre=kernel.centre_by_default and kernel.relation == "substitute")
    if isinstance(kernel.init, DPAutoTune):
        return kernel.init
    raise ValueError(f"{names} left to the default are tuned privately by DPAutoTune, which finds its own start: "
                     f"pass init=DPAutoTune(...) instead of {type(kernel.init).__name__}, or give {names}")


def move_scales(kernel, result, noise_multiplier: float) -> Tuple[float, float]:
    """``(jump, sd)`` from which the default path sets a kernel's step sizes, both
    post-processing of the tuning releases (``result``, a
    :class:`~pyro_dp.default_path.tuning.TuneResult`): ``jump`` is the move whose penalty noise
    (``noise_multiplier``, the kernel's ``llr_clip``) has standard deviation 1
    (:func:`~pyro_dp.kernels.scales.penalty_jump_length`), ``sd`` a guess of the posterior
    standard deviation from the gradient clip (:func:`~pyro_dp.kernels.scales.posterior_scale_guess`).
    Says before the chain runs when the budget lets each move cover less than
    :data:`NOISE_LIMITED_RATIO` of that scale (and records it in ``kernel.chain``)."""
    lik = kernel.lik
    n, T = getattr(lik, "global_num_rows", lik.num_rows), lik.temperature
    jump = penalty_jump_length(noise_multiplier, kernel.llr_clip, T)
    sd = posterior_scale_guess(result.grad_clip, n, lik.dim, T)
    ratio = jump / sd
    kernel.forecast.noise_limited = ratio < NOISE_LIMITED_RATIO  # public: what the end-of-chain check advises
    ess = forecast_ess(kernel, result, noise_multiplier, control_variate=False)
    kernel.forecast.longer_helps = longer_run_helps(kernel, result, noise_multiplier, False, ess)
    if ratio < NOISE_LIMITED_RATIO:
        warn_user(
            f"{type(kernel).__name__}: at this budget the privacy noise limits each move to about {ratio:.2g} "
            "of the posterior's scale (guessed from the private clip): expect slow mixing and few effective "
            f"samples (predicted: about {ess:.2g} in this chain, pyro_dp.feasibility). Spend more epsilon, run "
            "fewer iterations (the noise per iteration grows with their square root), use more rows"
            + kernel.noise_limited_alternative,  # the kernels that avoid the limit (kernels.diagnostics)
            SamplingWarning,
        )
    return jump, sd


def forecast_ess(kernel, result, noise_multiplier: float, control_variate: bool, longer: int = 1,
                 forecast_kernel: Optional[str] = None) -> float:
    r"""The effective samples :func:`~pyro_dp.default_path.forecast.predicted_move` predicts for the kernel's
    chain (``longer`` times its length) with the tuned clips in place of a profile's guesses
    (isotropic Fisher :math:`g^2/D` per row: the posterior_scale_guess); post-processing, public.
    A run ``longer`` times as long at the same budget draws its noise at :math:`\sqrt{\rm longer}`
    times the noise multiplier (the Gaussian composition of ``longer`` times the releases)."""
    lik = kernel.lik
    n, T = getattr(lik, "global_num_rows", lik.num_rows), lik.temperature
    d, iterations = lik.dim, int(kernel.num_iterations or DEFAULT_ITERATIONS)
    warmup = min(int(kernel.chain.warmup_steps), iterations)
    if forecast_kernel is None:  # DP-HMC without gradient releases is the random walk (control_variate.cv_walk_step)
        forecast_kernel = kernel.forecast_kernel
    return mh_predicted_move(
        kernel=forecast_kernel, num_rows=n,
        noise_multiplier=noise_multiplier * math.sqrt(longer), clip=kernel.llr_clip, grad_norm=result.grad_clip,
        fisher=torch.eye(d, dtype=torch.float64) * float(result.grad_clip) ** 2 / d,
        num_samples=max(iterations - warmup, 1) * longer, warmup_steps=warmup * longer, temperature=T,
        num_steps=int(getattr(kernel, "num_steps", 1) or 1), noise_ratio=grad_to_ratio_noise(kernel),
        control_variate=control_variate)[3]


def longer_run_helps(kernel, result, noise_multiplier: float, control_variate: bool, ess: float) -> bool:
    """Whether a run twice as long at the same ε is forecast to give at least
    :data:`LONGER_RUN_GAIN` times ``ess``, this run's forecast (:func:`forecast_ess`): in the
    noise-limited regime the accepted move shrinks as the run grows and the forecast stays flat.
    What the end-of-chain warning advises (``kernels.diagnostics``)."""
    return forecast_ess(kernel, result, noise_multiplier, control_variate, longer=2) >= LONGER_RUN_GAIN * ess
