r"""The default path: what a kernel does for settings the user left out.

With no budget and no noise the kernel adopts the default budget
(:data:`~pyro_dp.kernels.privacy_engine.DEFAULT_EPSILON`, announced by a
:class:`~pyro_dp.kernels.privacy_engine.PrivacyNotice`); with a budget but no run length it reads
the run length from the ``pyro.infer.MCMC`` that runs it, else assumes
:data:`DEFAULT_ITERATIONS`; settings a kernel lists in ``auto_tuned`` (clips, step sizes) are
tuned privately by :class:`~pyro_dp.kernels.tuning.DPAutoTune` at the first iteration of every
chain, and the kernel takes the result through :meth:`DefaultPath._apply_tuning`. Everything here
is data-free or post-processing of the tuning's releases (recorded in the ledger).
"""
from __future__ import annotations

import math
import warnings
from typing import NamedTuple, Optional, Tuple

import torch

from ..warn import warn_user
from ..checks import SamplingWarning
from .prediction import mh_predicted_move
from .privacy_engine import PrivacyNotice
from .tuning import DPAutoTune, mcmc_run_length, penalty_jump_length, posterior_scale_guess
from .whitening import reshapes, whitens

__all__ = ["DefaultPath", "DEFAULT_ITERATIONS", "NOISE_LIMITED_RATIO", "LONGER_RUN_GAIN", "LANGEVIN_STEP_CAP",
           "LANGEVIN_CLIP_HEADROOM", "LANGEVIN_BURN_IN", "LangevinSettings", "langevin_default", "langevin_ess",
           "langevin_burn_in"]

#: The default path warns before a chain runs when the largest move its noise allows is below
#: this fraction of the (guessed) posterior standard deviation (:meth:`DefaultPath._move_scales`).
NOISE_LIMITED_RATIO = 0.25

#: The end-of-chain effective-sample-size warning advises running longer only where the forecast
#: (:meth:`DefaultPath._longer_run_helps`) gives a run twice as long at the same ε at least this many
#: times the effective samples (issue 40: "run longer" only when longer would help).
LONGER_RUN_GAIN = 1.25

#: Iterations per chain a budget funds when the kernel is used outside ``pyro.infer.MCMC``
#: and no ``num_iterations`` is given (inside ``MCMC`` it reads ``warmup_steps + num_samples``).
DEFAULT_ITERATIONS = 1000


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


#: The default path's DP-SGLD burn-in, as a share of ``num_samples``: the warmup iterations that
#: release a gradient (:func:`langevin_burn_in`); the rest of the warmup is idle, before the chain's
#: first read of the data, and its budget goes to the draws. The free step makes the effective
#: sample size proportional to the share of the releases spent on the draws (``docs/tuning.md``,
#: "Without an accept test"): a chain whose step gives an effective sample size E relaxes
#: :math:`2E\,W/T` times in W of T releases, so 0.15 of the draws (13 % of the releases) relaxes
#: a start 3.6 posterior sd off (the tuner's worst, measured) to under 0.1 sd wherever E ≥ 14,
#: where a 500-iteration warmup before 1 000 draws spent a third of the chain's budget.
LANGEVIN_BURN_IN = 0.15


def _no_model(*args, **kwargs):  # DefaultPath.default_path_noise's kernel needs a callable; it never runs it
    return None


def langevin_burn_in(warmup_steps: int, num_samples: int, share: float = LANGEVIN_BURN_IN) -> int:
    """DP-SGLD default path's releasing warmup iterations: ``share`` (:data:`LANGEVIN_BURN_IN`) of
    the draws, rounded up, at most ``warmup_steps`` (data-free).

    >>> langevin_burn_in(500, 1000), langevin_burn_in(100, 1000), langevin_burn_in(500, 10)
    (150, 100, 2)
    """
    return min(int(warmup_steps), math.ceil(share * int(num_samples)))


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
    :class:`~pyro_dp.kernels.tuning.TuneResult`: post-processing of the tuning's releases) and the
    release's ``noise_multiplier``; ``unit_step_noise(C)`` is the Langevin noise multiplier of
    step 1 with clip :math:`C` (:func:`~pyro_dp.kernels.sgmcmc.langevin_noise_multiplier`).

    * The clip :math:`C`: :data:`LANGEVIN_CLIP_HEADROOM` times the higher of the tuner's two
      quantiles, times the radius ratio of the ball's released centre where there is one
      (``result.centre_ratio``, :mod:`~pyro_dp.kernels.centring`). Without an accept test
      nothing corrects a clipping bias (measured: the 0.99 quantile put a linear model's means
      2.2 sd off, ``benchmarks/langevin_study.py``).
    * The step: "privacy for free" (Wang, Fienberg & Smola 2015), the largest step whose release
      noise fits within Langevin's :math:`\mathcal N(0,\eta I)`. Since
      :math:`\mathrm{nm}_L(\eta) = \mathrm{nm}_L(1)/\sqrt\eta`, that is
      :math:`\eta \le (\mathrm{nm}_L(1)/\mathrm{nm})^2`. It is capped at
      :data:`LANGEVIN_STEP_CAP` times the guessed posterior variance
      (:func:`~pyro_dp.kernels.tuning.posterior_scale_guess`).
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


class DefaultPath:
    """Mixin of :class:`~pyro_dp.kernels.base.DPKernel`: run length, private tuning hooks
    (module doc)."""

    #: whether the default path's tuner whitens (``DPAutoTune(whiten=True)``, ``docs/tuning.md``,
    #: "Posterior-shaped coordinates"): on for the kernels where it was measured to help
    whiten_by_default: bool = False
    #: whether the default path's tuner balances the coordinates' scales first
    #: (``DPAutoTune(scale=True)``; implied by whitening)
    scale_by_default: bool = False
    #: whether the default path's tuner releases a centre for a gradient clip ball
    #: (``DPAutoTune(centre=True)``, :mod:`~pyro_dp.kernels.centring`; under substitution only)
    centre_by_default: bool = False
    #: the releasing share of the warmup (``None``: every warmup iteration releases; DPSGLD's
    #: default path: :data:`LANGEVIN_BURN_IN`, :func:`langevin_burn_in`)
    burn_in_share: Optional[float] = None

    @property
    def forecast_kernel(self) -> str:
        """The default-path kernel whose forecast (:func:`~pyro_dp.kernels.prediction.mh_predicted_move`)
        describes this chain: the random walk's, ``"DPPenalty"`` (DPHMC: ``"DPHMC"`` where it
        releases gradients)."""
        return "DPPenalty"

    @classmethod
    def default_path_noise(cls, *, epsilon: float, delta: float, num_iterations: int, num_chains: int = 1,
                           temperature: float = 1.0, **settings) -> Tuple[float, DPAutoTune]:
        """``(noise multiplier, tuner)``: the noise of the release the default path calibrates for
        this budget and run (the ratio's; DPSGLD: its gradient's, every row) and its tuner, set
        as the kernel sets them before it reads any data — the kernel's own calibration, on an
        instance whose model is never called (``settings``: the kernel's other arguments).
        Data-free; what :func:`pyro_dp.feasibility` and DP-HMC's gradient choice
        (:func:`~pyro_dp.kernels.prediction.gradient_gain`) calibrate with."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            k = cls(_no_model, epsilon=epsilon, delta=delta, num_iterations=num_iterations, num_chains=num_chains,
                    temperature=temperature, seed=0, **settings)
            k.init.configure(epsilon=k.epsilon, delta=k.delta, num_chains=k.num_chains, non_private=False)
            nm, ratio_nm = k._default_path_noises()
            k.init.set_ratio_noise(ratio_nm)
        return nm, k.init

    def _default_path_noises(self) -> Tuple[float, float]:
        """For :meth:`default_path_noise`, after the tuner is configured: ``(the release's noise
        multiplier, the ratio noise the tuner's clip quantile balances)``, both the ratio's."""
        self._calibrate()
        nm = float(self._ratio_noise_multiplier())
        return nm, nm

    def _grad_to_ratio_noise(self):
        r"""DP-HMC's :math:`\mathrm{nm}_g/\mathrm{nm}_l` as set (``None``: not a gradient kernel, or not set)."""
        nm_g, nm_l = getattr(self, "grad_noise_multiplier", None), getattr(self, "llr_noise_multiplier", None)
        return nm_g / nm_l if nm_g is not None and nm_l else None

    def _calibrate_noise(self) -> None:
        """Set the noise from the budget (:meth:`~pyro_dp.kernels.privacy_client.PrivacyClient._calibrate`),
        telling the default path's tuner the budget first and the ratio noise after (data-free:
        the ratio clip's quantile depends on N and the noise)."""
        if isinstance(self.init, DPAutoTune):
            if self.init.noise_multipliers is None:  # whitening applies to this model or is not planned (data-free)
                self.init.whiten = self.init.whiten and whitens(self.lik)
                self.init.scale = self.init.scale and reshapes(self.lik)
                if self.init.centre and not (self.centre_by_default and self.relation == "substitute"):
                    raise ValueError(f"DPAutoTune(centre=True): {type(self).__name__} under relation={self.relation!r} "
                                     "has no centred clip ball (DPSGLD's default path under 'substitute' has)")
            self.init.configure(epsilon=self.epsilon, delta=self.delta, num_chains=self.num_chains,
                                non_private=self.non_private)
        self._calibrate()
        if isinstance(self.init, DPAutoTune):
            self.init.set_ratio_noise(self._ratio_noise_multiplier())
            problem = self.init.reliability_problem(getattr(self.lik, "global_num_rows", self.lik.num_rows))
            if problem is not None and self._num_setups == 1:
                warn_user(f"{type(self).__name__} default path: {problem}", SamplingWarning)

    def _resolve_run_length(self) -> None:
        """Fix, once and data-free, the iterations per chain a budget funds and the number of
        chains it is shared by, when the user gave none: from the ``pyro.infer.MCMC`` run that
        calls ``setup`` (``warmup_steps + num_samples``, its ``num_chains``), else
        :data:`DEFAULT_ITERATIONS`. Says what it assumed (:class:`PrivacyNotice`). Never
        overspends either way: the budget is enforced on the ledger. Then this chain's idle
        warmup (:meth:`_plan_idle_warmup`)."""
        if self.epsilon is not None and self.run_length_source is None:
            self._fix_run_length()
        self._plan_idle_warmup()

    def _fix_run_length(self) -> None:
        run = mcmc_run_length()
        if run is not None:
            warmup, samples = run["warmup_steps"], run["num_samples"]
            if self.burn_in_share is not None and self.auto_tuned:
                self._burn_in = langevin_burn_in(warmup, samples, self.burn_in_share)
            releasing = warmup if self._burn_in is None else self._burn_in
            self.num_iterations = max(1, releasing + samples)
            self.run_length_source = "MCMC"
            if not self._num_chains_given and "num_chains" in run:
                self.num_chains = run["num_chains"]
            said = (f"{self.num_iterations} iterations per chain (warmup_steps + num_samples of the MCMC)"
                    if self._burn_in is None else
                    f"{self.num_iterations} releasing iterations per chain ({self._burn_in} of the MCMC's {warmup} "
                    f"warmup steps, its burn-in, then its {samples} samples; the first {warmup - self._burn_in} "
                    "warmup steps are idle and read nothing: docs/tuning.md, 'Without an accept test')"
                    ) + f" over {self.num_chains} chain(s)"
        else:
            self.num_iterations = DEFAULT_ITERATIONS
            self.run_length_source = "assumed"
            said = (f"{self.num_iterations} iterations per chain over {self.num_chains} chain(s) (ASSUMED: not run "
                    "by pyro.infer.MCMC and no num_iterations given; longer chains stop at the budget)")
        budget = "the DEFAULT budget" if self.default_budget else "the budget"
        warn_user(
            f"{type(self).__name__}: {budget} epsilon={self.epsilon}, delta={self.delta} funds {said}"
            + (". Pass epsilon= (and delta=) for your own budget" if self.default_budget else ""),
            PrivacyNotice,
        )

    def _plan_idle_warmup(self) -> None:
        """With a burn-in fixed by :meth:`_fix_run_length`, a chain's first ``warmup_steps`` minus
        the burn-in iterations are idle (:meth:`~pyro_dp.kernels.base.DPKernel.sample` returns the
        data-free start without reading anything) and the kernel's own warmup, which its
        end-of-chain checks and forecasts read, is the burn-in. Data-free."""
        if self._burn_in is not None:
            self._idle_left = max(self._warmup_steps - self._burn_in, 0)
            self._warmup_steps = min(self._warmup_steps, self._burn_in)

    def _auto_tuner(self) -> DPAutoTune:
        """The :class:`~pyro_dp.kernels.tuning.DPAutoTune` of a kernel whose settings
        :attr:`auto_tuned` are left to the default path: the user's ``init`` if it is one,
        else a new one with the documented defaults."""
        names = ", ".join(self.auto_tuned)
        if self.distributed:
            raise ValueError(f"the default path (private tuning of {names}) does not support distributed=True yet: "
                             f"give {names} (docs/scaling_out.md)")
        if self.init is None:
            return DPAutoTune(whiten=self.whiten_by_default, scale=self.whiten_by_default or self.scale_by_default,
                              centre=self.centre_by_default and self.relation == "substitute")
        if isinstance(self.init, DPAutoTune):
            return self.init
        raise ValueError(f"{names} left to the default are tuned privately by DPAutoTune, which finds its own start: "
                         f"pass init=DPAutoTune(...) instead of {type(self.init).__name__}, or give {names}")

    def _apply_tuning(self, result) -> None:
        """Take the settings a :class:`~pyro_dp.kernels.tuning.DPAutoTune` run found (kernels
        with a default path override it). Called at the first iteration of every chain."""

    def _ratio_noise_multiplier(self) -> Optional[float]:
        """The noise multiplier of the kernel's ratio release, for the default path's ratio
        clip (:meth:`~pyro_dp.kernels.tuning.DPAutoTune.ratio_quantile`); ``None``: no ratio
        release whose clip is tuned (kernels with a default path override it)."""
        return None

    def _move_scales(self, result, noise_multiplier: float) -> Tuple[float, float]:
        """``(jump, sd)`` from which the default path sets a kernel's step sizes, both
        post-processing of the tuning releases (``result``, a
        :class:`~pyro_dp.kernels.tuning.TuneResult`): ``jump`` is the move whose penalty noise
        (``noise_multiplier``, the kernel's ``llr_clip``) has standard deviation 1
        (:func:`~pyro_dp.kernels.tuning.penalty_jump_length`), ``sd`` a guess of the posterior
        standard deviation from the gradient clip (:func:`~pyro_dp.kernels.tuning.posterior_scale_guess`).
        Says before the chain runs when the budget lets each move cover less than
        :data:`NOISE_LIMITED_RATIO` of that scale."""
        n, T = getattr(self.lik, "global_num_rows", self.lik.num_rows), self.lik.temperature
        jump = penalty_jump_length(noise_multiplier, self.llr_clip, T)
        sd = posterior_scale_guess(result.grad_clip, n, self.lik.dim, T)
        ratio = jump / sd
        self._noise_limited = ratio < NOISE_LIMITED_RATIO  # public: what the end-of-chain check advises
        ess = self._forecast_ess(result, noise_multiplier, control_variate=False)
        self._longer_helps = self._longer_run_helps(result, noise_multiplier, False, ess)
        if ratio < NOISE_LIMITED_RATIO:
            warn_user(
                f"{type(self).__name__}: at this budget the privacy noise limits each move to about {ratio:.2g} "
                "of the posterior's scale (guessed from the private clip): expect slow mixing and few effective "
                f"samples (predicted: about {ess:.2g} in this chain, pyro_dp.feasibility). Spend more epsilon, run "
                "fewer iterations (the noise per iteration grows with their square root), use more rows"
                + self._noise_limited_alternative,  # the kernels that avoid the limit (kernels.diagnostics)
                SamplingWarning,
            )
        return jump, sd

    def _forecast_ess(self, result, noise_multiplier: float, control_variate: bool, longer: int = 1,
                      kernel: Optional[str] = None) -> float:
        r"""The effective samples :func:`~pyro_dp.forecast.predicted_move` predicts for this chain
        (``longer`` times its length) with the tuned clips in place of a profile's guesses
        (isotropic Fisher :math:`g^2/D` per row: the posterior_scale_guess); post-processing, public.
        A run ``longer`` times as long at the same budget draws its noise at :math:`\sqrt{\rm longer}`
        times the noise multiplier (the Gaussian composition of ``longer`` times the releases)."""
        n, T = getattr(self.lik, "global_num_rows", self.lik.num_rows), self.lik.temperature
        d, iterations = self.lik.dim, int(self.num_iterations or DEFAULT_ITERATIONS)
        warmup = min(int(self._warmup_steps), iterations)
        if kernel is None:  # DP-HMC without gradient releases is the random walk (control_variate.cv_walk_step)
            kernel = self.forecast_kernel
        return mh_predicted_move(
            kernel=kernel, num_rows=n,
            noise_multiplier=noise_multiplier * math.sqrt(longer), clip=self.llr_clip, grad_norm=result.grad_clip,
            fisher=torch.eye(d, dtype=torch.float64) * float(result.grad_clip) ** 2 / d,
            num_samples=max(iterations - warmup, 1) * longer, warmup_steps=warmup * longer, temperature=T,
            num_steps=int(getattr(self, "num_steps", 1) or 1), noise_ratio=self._grad_to_ratio_noise(),
            control_variate=control_variate)[3]

    def _longer_run_helps(self, result, noise_multiplier: float, control_variate: bool, ess: float) -> bool:
        """Whether a run twice as long at the same ε is forecast to give at least
        :data:`LONGER_RUN_GAIN` times ``ess``, this run's forecast (:meth:`_forecast_ess`): in the
        noise-limited regime the accepted move shrinks as the run grows and the forecast stays flat.
        What the end-of-chain warning advises (``kernels.diagnostics``)."""
        return self._forecast_ess(result, noise_multiplier, control_variate, longer=2) >= LONGER_RUN_GAIN * ess
