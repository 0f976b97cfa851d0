r"""A kernel's releases, declared once (issue 63): :class:`ReleasePlan`, the per-algorithm pure
functions that build it, and the pure calibration of a noise multiplier from a budget.

**The decision.** A kernel says what it releases in *one* method, ``kernel.releases(state=None)``,
which returns a frozen :class:`ReleasePlan`: the releases of every iteration, those made once
per chain (a control variate's reference, DP-HMC's first gradient, a private group clip), the
most the next step may release at ``state`` (a once-per-chain release is released lazily, by the
first step, so set-up stays data-free), the noise multiplier of the ratio release the default
path's clip balances, and the cost triple of :mod:`~pyro_dp.kernels.auto_compile`. Everything
else is derived from it, by the base class and the default path:

=================================  ==========================================================
the plan (budget, steps allowed)   ``once`` (+ the private init's) and ``per_iteration``
the budget check before a step     ``step_events`` (+ the private init's, at its iteration)
the default path's tuner           ``ratio_noise_multiplier``
``jit_compile=None``               ``cost``
:meth:`DPKernel.planned_events`    a reader of the first two
=================================  ==========================================================

Before, a contributor wrote the same releases in four hooks (per iteration, once per chain,
per step, the ratio noise) plus the cost and the default path's noise; they could disagree, and
the forecast had to build a throwaway kernel to learn a noise multiplier. Now the events of an
algorithm are a pure function of its noise multipliers and public settings
(:func:`penalty_releases`, :func:`hmc_releases`, :func:`sgld_releases`), and the noise a budget
funds a pure function of the budget, the run and those settings (:func:`penalty_noise`,
:func:`hmc_noise`, :func:`sgld_noise`, all over :func:`calibrated_scale`): the kernels call
them at set-up, and :func:`pyro_dp.default_path.driver.default_path_noise` (the forecast's)
calls the same functions without building a kernel, so the forecast's noise is the kernel's by
construction (``tests/test_forecast.py`` checks it against built kernels).

Calibration stays a step of its own (``kernel._calibrate()``, called once per set-up after the
default path's tuner has learnt the budget): it *sets* settings (noise multipliers, DP-SGLD's
rate, DP-Fast MH's per-iteration privacy), whereas the declaration only reads them, and a
declaration that calibrated on its first call would make the order of set-up depend on who asks
first. This is Opacus's split: ``get_noise_multiplier`` (pure: budget → noise) apart from the
accountant's history (what was released).

>>> from pyro_dp.mechanisms import GaussianEvent
>>> plan = penalty_releases(10.0)
>>> plan.per_iteration, plan.once, plan.ratio_noise_multiplier
((GaussianEvent(noise_multiplier=10.0),), (), 10.0)
>>> hmc_releases(3, 2.0, 4.0).step_events  # a first step releases G(θ_0) too (thesis Alg. 3)
(GaussianEvent(noise_multiplier=4.0), (GaussianEvent(noise_multiplier=2.0), 1), (GaussianEvent(noise_multiplier=4.0), 3))
>>> nm, ref = penalty_noise(Budget(1.0, 1e-5), 100)
>>> round(nm, 4), ref
(37.3063, None)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple, Optional, Tuple

from ..accounting import DEFAULT_ACCOUNTANT, calibrate, calibrate_noise_multiplier
from ..accounting.algorithms import dphmc_events
from ..mechanisms import GaussianEvent, SubsampledGaussianEvent, gaussian_event
from .privacy_engine import check_positive

__all__ = ["ReleasePlan", "Budget", "calibrated_scale", "init_events", "noise_setting", "penalty_releases", "penalty_noise",
           "hmc_releases", "hmc_noise", "sgld_releases", "sgld_noise", "gradient_mh_releases",
           "reference_noise_multiplier", "hmc_reference_noise_multiplier", "DEFAULT_REFERENCE_SHARE"]


@dataclasses.dataclass(frozen=True)
class ReleasePlan:
    r"""What a kernel releases (module docstring), as events or ``(event, count)`` pairs.

    :ivar per_iteration: the releases of every iteration.
    :ivar once: releases made once per chain besides the private initialisation's (planned and
        calibrated once per chain).
    :ivar step: the most the next step may release (``None``: :attr:`per_iteration`); a kernel
        sets it when asked with a state (``kernel.releases(state)``), e.g. ``once + per_iteration``
        before its lazy first release. The engine checks the budget against it before the step,
        and the step's releases against it after.
    :ivar ratio_noise_multiplier: the noise multiplier of the ratio release whose clip the
        default path's tuner balances (``None``: none).
    :ivar cost: ``(cost kind, log-likelihood rows, gradient rows)`` of one iteration for
        :mod:`~pyro_dp.kernels.auto_compile`, or a function returning it (computed once, when
        ``jit_compile=None`` decides); ``None``: a penalty-type test over every row.
    """

    per_iteration: tuple = ()
    once: tuple = ()
    step: Optional[tuple] = None
    ratio_noise_multiplier: Optional[float] = None
    cost: Optional[Tuple[Optional[str], float, float]] = None

    @property
    def step_events(self) -> tuple:
        """The most the next step may release (:attr:`step`, else :attr:`per_iteration`)."""
        return self.per_iteration if self.step is None else self.step

    def cost_of(self, num_rows: int) -> Tuple[Optional[str], float, float]:
        """:attr:`cost` (called, if it is a function; a penalty-type test over ``num_rows`` rows
        where it is ``None``)."""
        cost = self.cost() if callable(self.cost) else self.cost
        return ("penalty", float(num_rows), 0.0) if cost is None else cost

    def first_step(self, pending: bool) -> "ReleasePlan":
        """This plan with :attr:`step` the ``once`` releases (when ``pending``: not made yet in
        this chain) and one iteration's."""
        return dataclasses.replace(self, step=(self.once if pending else ()) + tuple(self.per_iteration))


class Budget(NamedTuple):
    """The budget a noise is calibrated to: ``(epsilon, delta)`` over ``num_chains`` chains, the
    accountant and the neighbouring relation (a kernel's are :meth:`of` it)."""

    epsilon: float
    delta: float
    num_chains: int = 1
    accountant: str = DEFAULT_ACCOUNTANT
    relation: str = "substitute"

    @classmethod
    def of(cls, kernel) -> "Budget":
        """A kernel's budget (its public settings)."""
        return cls(kernel.epsilon, kernel.delta, kernel.num_chains, kernel.accountant, kernel.relation)


def calibrated_scale(releases_at: Callable[[float], ReleasePlan], budget: Budget, num_iterations: int, *,
                     init_events=(), rtol: float = 1e-9, at_least: Optional[float] = None,
                     closed_form: bool = True) -> float:
    r"""The smallest noise scale :math:`s` (verified, rounded up) with which ``num_iterations``
    iterations of ``releases_at(s)`` per chain, its ``once`` releases and ``init_events`` (a
    private initialisation's) fit ``budget`` (:func:`~pyro_dp.accounting.calibrate`). One
    Gaussian release per iteration and nothing else (``closed_form``) takes the closed form of
    :func:`~pyro_dp.accounting.calibrate_noise_multiplier`.

    >>> round(calibrated_scale(penalty_releases, Budget(1.0, 1e-5), 100), 4)
    37.3063
    """
    unit = releases_at(1.0)
    if (closed_form and not init_events and not unit.once and at_least is None
            and tuple(unit.per_iteration) == (GaussianEvent(1.0),)):
        return calibrate_noise_multiplier(budget.epsilon, budget.delta, num_iterations, accountant=budget.accountant,
                                          num_chains=budget.num_chains)

    def events(s):
        plan = releases_at(s)
        return list(plan.once) + list(init_events), list(plan.per_iteration)

    return calibrate(budget.epsilon, budget.delta, num_iterations, events, accountant=budget.accountant,
                     num_chains=budget.num_chains, relation=budget.relation, rtol=rtol, at_least=at_least)


def init_events(kernel) -> list:
    """The releases of a kernel's private initialisation (once per chain; ``[]`` without one)."""
    return [] if kernel.init is None else list(kernel.init.events())


def noise_setting(kernel, name: str, value) -> Optional[float]:
    """A kernel's noise multiplier argument ``name``, checked: ``None`` means calibrate it to the
    budget (the default budget when there is none: adopted here), and 0 is allowed only in the
    ``non_private`` test mode."""
    if value is None:
        if kernel.non_private:
            raise ValueError(f"non_private=True is the noise-free test mode: set {name}=0")
        kernel.privacy.adopt_default_budget()
        return None
    value = check_positive(name, value, allow_zero=kernel.non_private)
    if kernel.non_private and value != 0:
        raise ValueError(f"non_private=True is the noise-free test mode: set {name}=0")
    return value


#: the share of a chain's budget (Gaussian-DP :math:`\mu^2`, after the tuner's) spent on the one
#: reference release: its noise tilts the target for the whole chain, while the residual releases
#: are small and need little
DEFAULT_REFERENCE_SHARE = 0.9


def reference_noise_multiplier(noise_multiplier: float, num_iterations: float, share: float) -> float:
    r""":math:`\mathrm{nm}_G` that gives the reference release the share ``share`` of a chain's
    Gaussian-DP :math:`\mu^2` against ``num_iterations`` releases of multiplier ``noise_multiplier``:
    :math:`1/\mathrm{nm}_G^2 = \frac{s}{1-s}\,I/\mathrm{nm}^2`.

    >>> round(reference_noise_multiplier(100.0, 1000, 0.9), 4)
    1.0541
    """
    return float(noise_multiplier) * math.sqrt((1.0 - share) / (share * num_iterations))


def hmc_reference_noise_multiplier(num_iterations: int, num_steps: int, noise_ratio: float, share: float) -> float:
    r"""DP-HMC's :math:`\mathrm{nm}_G` per unit ratio multiplier :math:`s`: the reference takes the
    share ``share`` of :math:`\mu^2` against ``num_iterations`` iterations of one ratio release
    (:math:`s`) and :math:`L` gradient releases (:math:`rs`):
    :math:`1/\mathrm{nm}_G^2 = \frac{\text{share}}{1-\text{share}}\,I(1 + L/r^2)/s^2`.

    >>> round(hmc_reference_noise_multiplier(1000, 5, 5 ** 0.5, 0.9), 6)
    0.007454
    """
    # reference_noise_multiplier's formula, with each iteration's releases counted in ratio units
    return reference_noise_multiplier(1.0, num_iterations * (1.0 + num_steps / noise_ratio ** 2), share)


# --------------------------------------------------------------------------- the kernels' side


# ---------------------------------------------------------------------- DP penalty (and its family)
def penalty_releases(noise_multiplier: float, reference_noise_multiplier: Optional[float] = None) -> ReleasePlan:
    r"""DP penalty's releases (thesis Thm 6): one Gaussian ratio release per iteration, and with a
    control variate (:mod:`~pyro_dp.kernels.control_variate`) one reference release per chain."""
    once = () if reference_noise_multiplier is None else (gaussian_event(float(reference_noise_multiplier)),)
    return ReleasePlan((gaussian_event(float(noise_multiplier)),), once,
                       ratio_noise_multiplier=noise_multiplier)


def penalty_noise(budget: Budget, num_iterations: int, init_events=(), *, control_variate: bool = False,
                  reference_share: float = DEFAULT_REFERENCE_SHARE) -> Tuple[float, Optional[float]]:
    r"""``(noise multiplier, reference noise multiplier or None)`` of DP penalty for ``budget``:
    with a control variate the reference takes ``reference_share`` of a chain's :math:`\mu^2`
    against the iterations' releases (:func:`reference_noise_multiplier`)."""
    if not control_variate:
        return calibrated_scale(penalty_releases, budget, num_iterations, init_events=init_events), None
    k = reference_noise_multiplier(1.0, int(num_iterations), reference_share)
    s = calibrated_scale(lambda s: penalty_releases(s, s * k), budget, num_iterations, init_events=init_events)
    return s, s * k


# ---------------------------------------------------------------------- a released-gradient proposal
def gradient_mh_releases(noise_multiplier: float) -> ReleasePlan:
    r"""The releases of MH with a proposal from a released gradient (DP-MALA, the DP Barker proposal
    of ``docs/new_kernel.md``) and the penalty test, with one noise multiplier for both releases:
    :math:`G(\theta_0)` once per chain (released lazily by the first iteration), then
    :math:`G(\theta')` and the ratio every iteration (DP-HMC's gradient reuse, Räisä 2021 Alg. 3)."""
    ev = gaussian_event(float(noise_multiplier))
    return ReleasePlan((ev, ev), (ev,))


# ---------------------------------------------------------------------- DP-HMC
def hmc_releases(num_steps: int, llr_noise_multiplier: float, grad_noise_multiplier: Optional[float], *,
                 gradients: bool = True, reference_noise_multiplier: Optional[float] = None) -> ReleasePlan:
    r"""DP-HMC's releases (thesis Alg. 3 / Thm 11): per iteration ``num_steps`` gradients and one
    ratio, the first gradient :math:`G_{1,0}` once per chain; without ``gradients`` the ratio
    alone (the walk); with a control variate the reference once per chain first. Before the
    first step (:meth:`ReleasePlan.first_step`) all of ``once`` may be released."""
    fixed, per = dphmc_events(num_steps, llr_noise_multiplier, grad_noise_multiplier or 0.0)
    if not gradients:
        fixed, per = [], per[:1]
    ref = () if reference_noise_multiplier is None else (gaussian_event(float(reference_noise_multiplier)),)
    return ReleasePlan(tuple(per), ref + tuple(fixed), step=ref + tuple(fixed) + tuple(per),
                       ratio_noise_multiplier=llr_noise_multiplier)


def hmc_noise(budget: Budget, num_iterations: int, init_events=(), *, num_steps: int, noise_ratio: float,
              gradients: bool = True, control_variate: bool = False,
              reference_share: float = DEFAULT_REFERENCE_SHARE) -> Tuple[float, Optional[float], Optional[float]]:
    r"""``(ratio, gradient or None, reference or None)`` noise multipliers of DP-HMC for ``budget``:
    the gradients at ``noise_ratio`` times the ratio's, the reference at its share of :math:`\mu^2`
    (:func:`hmc_reference_noise_multiplier`)."""
    r = noise_ratio
    k = hmc_reference_noise_multiplier(int(num_iterations), num_steps if gradients else 0, r,
                                       reference_share) if control_variate else None
    s = calibrated_scale(lambda s: hmc_releases(num_steps, s, r * s, gradients=gradients,
                                                reference_noise_multiplier=k * s if k else None),
                         budget, num_iterations, init_events=init_events, closed_form=False)
    return s, (r * s if gradients else None), (k * s if k else None)


# ---------------------------------------------------------------------- DP-SGLD / DP-SGNHT
def sgld_releases(sample_rate: float, noise_multiplier: float,
                  ratio_noise_multiplier: Optional[float] = None) -> ReleasePlan:
    r"""SG-MCMC's releases: one Poisson-subsampled Gaussian gradient sum per iteration at rate
    :math:`q` (:math:`q = 1`: every row). ``ratio_noise_multiplier``: what the default path's
    clip balances (DPSGLD's: 0, no ratio release)."""
    return ReleasePlan((SubsampledGaussianEvent(sample_rate, noise_multiplier, "poisson"),),
                       ratio_noise_multiplier=ratio_noise_multiplier)


def sgld_noise(budget: Budget, num_iterations: int, init_events=(), *, sample_rate: float,
               at_least: Optional[float] = None) -> float:
    """The smallest noise multiplier with which ``num_iterations`` × ``num_chains`` Poisson-subsampled
    Gaussians at ``sample_rate`` (plus a private init's releases) fit the budget (as Opacus's
    ``make_private_with_epsilon``), verified, rounded up; or ``at_least`` if larger (no search then)."""
    return calibrated_scale(lambda s: sgld_releases(sample_rate, s), budget, num_iterations,
                            init_events=init_events, rtol=1e-6, at_least=at_least, closed_form=False)
