r"""The default path's choice between a kernel's own (iterative) chain and the one-release mode
(issue 62), made in ``configure(kernel)``: at the first set-up, **before any release, from public
quantities only** (the number of rows :math:`N`, the budget :math:`(\varepsilon, \delta)`, the
chains that share it, the neighbouring relation, which settings the user gave).

**Where it applies.** ``DPPenalty`` and ``DPHMC`` (and a user's subclass; not ``DPGroupedPenalty``,
whose hierarchical models a single quadratic represents poorly) on their default path: every clip,
step and noise setting left to it (``kernel.auto_tuned`` is the whole :data:`OWNED` list and no
noise multiplier was given), a budget, substitution of one row (the one-release analysis's relation).
A user who gave a setting chose the iterative algorithm; the default path does not override it.

**The rule.** Each chain spends :math:`\mu^2 = \mu(\varepsilon, \delta)^2/\text{chains}` (Gaussian
DP, Dong, Roth & Su 2022; the chains share the budget by composition). An iterative DP chain's
effective sample size grows like :math:`\mu^2 N` (issue 62: the thesis's iteration tables fit
:math:`\mu^{*2}N`; :func:`pyro_dp.feasibility`'s forecast follows it), so the rule is

.. math::
    \mu^2 N < \text{ONE\_RELEASE\_MU2N} = 1500 \;\Rightarrow\; \text{one-release mode}.

Why 1 500 (``docs/choosing.md``, "One release"): on the default path's three built-in profiles
(logistic d = 5, linear d = 3, Poisson d = 3; 1 000 + 1 000 iterations) the iterative forecast's
ESS is 0.2–5 below μ²N ≈ 3 000 (N = 10⁴ at ε ≤ 2: 2 516 at ε = 2; N = 5·10⁴ at ε = 0.5: 1 011),
where the one-release forecast is calibrated (90 % coverage 0.93–1.0, sd ratio 1.2–2.4), and
issue 62 measured the iterative default path failing at ε = 1, N = 10⁴ (718: within 1 sd on 1–2
of 11 models, sds 0.04–0.5 of NUTS's). But the mode is calibrated, not right (measured: means
0.6–1.2 sd off, 29–47 % of coordinates within 0.5 sd), and at N = 10⁴, ε = 2 (2 516) the project's
quick default suite measured the iterative chain right or warned (never silently wrong). So the
threshold sits between the measured failure and the measured success: the mode only where the
iterative chain is measured to fail, not where the forecast alone doubts it (first chosen 3 000
from the forecast; lowered on that measurement). Above 3 000 (N = 5·10⁴ at ε = 1: 3 593;
N = 10⁴ at ε = 4: 8 555; N = 10⁵ at ε = 1: 7 185) the iterative forecast is 6–48 and the iterative
default paths were measured right (issue 40's table: within 0.87 sd at ε = 2, N = 5·10⁴); between
1 500 and 3 000 neither is measured wrong, and the iterative chain, which can be right, is kept.
The rule is a pure function of public numbers: neighbouring data sets get the same choice and the
same notice.

**The switch.** ``inference="iterative"`` keeps the kernel's own chain at any budget;
``inference="one_release"`` asks for the one-release mode where the default path owns the settings
(refused elsewhere, with the cause). Both are constructor arguments of every kernel
(:func:`~pyro_dp.kernels.path_hook.check_inference`).

>>> round(mu2n(epsilon=1.0, delta=1e-5, num_rows=10_000), 1), round(mu2n(epsilon=4.0, delta=1e-5, num_rows=10_000))
(718.5, 8555)
"""
from __future__ import annotations

from typing import Optional

from ..accounting.gdp import gdp_mu
from ..kernels.grouped import DPGroupedPenalty
from ..kernels.hmc import DPHMC
from ..kernels.penalty import DPPenalty
from ..kernels.privacy_engine import PrivacyNotice
from ..warn import warn_user
from .noise_aware import DEFAULT_TUNING_SHARE, OneReleaseMode
from .tuning import DPAutoTune

__all__ = ["choose_inference", "one_release_reason", "mu2n", "ONE_RELEASE_MU2N", "OWNED"]

#: Below this :math:`\mu^2 N` per chain the default path runs the one-release mode (module doc).
ONE_RELEASE_MU2N = 1500.0

#: The kernels the default path may run in the one-release mode, and the settings it must own
#: there (all left out by the user).
OWNED = {DPPenalty: ("proposal_scale", "llr_clip"), DPHMC: ("step_size", "grad_clip", "llr_clip")}

#: The noise settings that, given, mean the user chose the iterative chain's noise.
_NOISES = ("noise_multiplier", "grad_noise_multiplier", "llr_noise_multiplier", "reference_noise_multiplier")


def mu2n(*, epsilon: float, delta: float, num_rows: int, num_chains: int = 1) -> float:
    r""":math:`\mu(\varepsilon, \delta)^2 N/\text{chains}`: one chain's Gaussian-DP budget times the rows."""
    return gdp_mu(float(epsilon), float(delta)) ** 2 * int(num_rows) / max(int(num_chains), 1)


def _owned(kernel) -> Optional[str]:
    """``None`` where the default path owns the kernel's settings, else why not (data-free)."""
    name = type(kernel).__name__
    owned = next((v for cls, v in OWNED.items() if isinstance(kernel, cls)), None)
    if owned is None or isinstance(kernel, DPGroupedPenalty):
        return f"{name} has no one-release mode (DPPenalty and DPHMC have; or use DPNoiseAware)"
    given = [n for n in owned if n not in kernel.auto_tuned]
    given += [n for n in _NOISES if getattr(kernel, n, None) is not None]
    if given:
        return f"{name} was given {', '.join(given)}: the one-release mode is the default path's, which owns no setting here"
    if kernel.epsilon is None or kernel.non_private:
        return f"{name} has no privacy budget to spend in one release"
    if kernel.relation != "substitute":
        return f"the one-release mode's analysis is under relation='substitute', not {kernel.relation!r}"
    return None


def one_release_reason(kernel) -> Optional[str]:
    """Why the default path runs ``kernel`` in the one-release mode (``None``: it does not), from
    public quantities only. Raises where ``inference="one_release"`` cannot be honoured."""
    if kernel.inference == "iterative":
        return None
    problem = _owned(kernel)
    if kernel.inference == "one_release":
        if problem is not None:
            raise ValueError(f"inference='one_release': {problem}. Leave the settings out, or leave inference out")
        return "asked for (inference='one_release')"
    if problem is not None:
        return None
    n = int(getattr(kernel.lik, "global_num_rows", kernel.lik.num_rows))
    chains = int(kernel.num_chains or 1)
    value = mu2n(epsilon=kernel.epsilon, delta=kernel.delta, num_rows=n, num_chains=chains)
    if value >= ONE_RELEASE_MU2N:
        return None
    return (f"mu(eps, delta)^2 N = {value:.3g} < {ONE_RELEASE_MU2N:g} per chain (epsilon={kernel.epsilon:g}, "
            f"delta={kernel.delta:g}, N = {n}, {chains} chain(s)): an iterative chain's effective sample size grows "
            "like mu^2 N and is forecast to barely move here")


def choose_inference(kernel) -> None:
    """At set-up, before the kernel calibrates (``configure``): at the first set-up, attach the
    one-release mode where :func:`one_release_reason` gives a reason — the kernel's private start
    becomes the unwhitened :class:`~pyro_dp.default_path.tuning.DPAutoTune` the mode takes its
    centre from, its plan one releasing iteration per chain, its step the mode's — and say so
    (:class:`~pyro_dp.kernels.privacy_engine.PrivacyNotice`). Data-free."""
    if getattr(kernel, "one_release", None) is not None or kernel.num_setups != 1:
        return  # DPNoiseAware, or decided at the first set-up (the kernel keeps its choice)
    reason = one_release_reason(kernel)
    if reason is None:
        return
    kernel.init = DPAutoTune(share=DEFAULT_TUNING_SHARE)  # DPNoiseAware's centre: unwhitened (the quadratic's coordinates)
    kernel.num_iterations = 1  # one releasing iteration per chain; the NUTS draws after it are free
    if kernel.jit_compile is None:
        kernel.jit_compile = False  # DPNoiseAware's: one release, nothing to compile
    mode = OneReleaseMode(reason=reason).attach(kernel)
    warn_user(f"{type(kernel).__name__}: the default path runs the ONE-RELEASE MODE, an approximation "
              f"({mode.approximation}): a private centre and clip, one clipped score and one clipped curvature "
              "release per chain, then NUTS on the posterior given those releases and their noise (DPNoiseAware's "
              f"computation; only each chain's first iteration releases, whatever the run length). Why: {reason}. Its intervals are wider and honest, not exact; the run says so in "
              "diagnostics()['approximation'], pyro_dp.privacy_report and to_arviz. For the iterative chain anyway, "
              "pass inference='iterative' (docs/choosing.md, 'One release')", PrivacyNotice)

