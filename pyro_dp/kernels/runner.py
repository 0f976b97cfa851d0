"""What a kernel reads of the ``pyro.infer.MCMC`` run that calls it: the run's lengths
(:func:`mcmc_run_length`), which fix the run length a budget funds when the user gave none
(:func:`resolve_run_length`, at every set-up: every kernel with a budget calibrates its noise for
a run length, with or without the default path), the auto-compile decision's prediction
(:mod:`~pyro_dp.kernels.auto_compile`) and the number of chains a checkpoint may continue
(:mod:`~pyro_dp.kernels.checkpoint`). Public settings of the run, never data.
"""
from __future__ import annotations

import math
import sys
from typing import Optional

from pyro.infer.mcmc.api import AbstractMCMC, _gen_samples  # Pyro's run loop, read to find the run length

from ..warn import warn_user
from .privacy_engine import PrivacyNotice

__all__ = ["mcmc_run_length", "resolve_run_length", "DEFAULT_ITERATIONS", "LANGEVIN_BURN_IN", "langevin_burn_in"]

#: Iterations per chain a budget funds when the kernel is used outside ``pyro.infer.MCMC``
#: and no ``num_iterations`` is given (inside ``MCMC`` it reads ``warmup_steps + num_samples``).
DEFAULT_ITERATIONS = 1000


#: The default path's DP-SGLD burn-in, as a share of ``num_samples``: the warmup iterations that
#: release a gradient (:func:`langevin_burn_in`); the rest of the warmup is idle, before the chain's
#: first read of the data, and its budget goes to the draws. The free step makes the effective
#: sample size proportional to the share of the releases spent on the draws (``docs/tuning.md``,
#: "Without an accept test"): a chain whose step gives an effective sample size E relaxes
#: :math:`2E\,W/T` times in W of T releases, so 0.15 of the draws (13 % of the releases) relaxes
#: a start 3.6 posterior sd off (the tuner's worst, measured) to under 0.1 sd wherever E ≥ 14,
#: where a 500-iteration warmup before 1 000 draws spent a third of the chain's budget.
LANGEVIN_BURN_IN = 0.15


def mcmc_run_length(frame=None) -> Optional[dict]:
    """The run lengths of the :class:`pyro.infer.MCMC` (or ``StreamingMCMC``) whose run is
    calling the kernel, read from the call stack: ``{"warmup_steps", "num_samples",
    "num_chains"}`` (``num_chains`` absent in a spawned worker process, where only Pyro's
    ``_gen_samples`` frame is on the stack), or ``None`` outside such a run. Public settings,
    no data.
    """
    f = frame if frame is not None else sys._getframe(1)
    out = None
    while f is not None:
        loc = f.f_locals
        if f.f_code is _gen_samples.__code__ and out is None:
            out = {"warmup_steps": int(loc["warmup_steps"]), "num_samples": int(loc["num_samples"])}
        owner = loc.get("self")
        if isinstance(owner, AbstractMCMC) and hasattr(owner, "num_samples"):
            out = dict(out or {})
            out.setdefault("warmup_steps", int(owner.warmup_steps))
            out.setdefault("num_samples", int(owner.num_samples))
            out["num_chains"] = int(owner.num_chains)
            return out
        f = f.f_back
    return out


def langevin_burn_in(warmup_steps: int, num_samples: int, share: float = LANGEVIN_BURN_IN) -> int:
    """DP-SGLD default path's releasing warmup iterations: ``share`` (:data:`LANGEVIN_BURN_IN`) of
    the draws, rounded up, at most ``warmup_steps`` (data-free).

    >>> langevin_burn_in(500, 1000), langevin_burn_in(100, 1000), langevin_burn_in(500, 10)
    (150, 100, 2)
    """
    return min(int(warmup_steps), math.ceil(share * int(num_samples)))


def resolve_run_length(kernel) -> None:
    """Fix, once and data-free, the iterations per chain a budget funds and the number of
    chains it is shared by, when the user gave none: from the ``pyro.infer.MCMC`` run that
    calls ``setup`` (``warmup_steps + num_samples``, its ``num_chains``), else
    :data:`DEFAULT_ITERATIONS`. Says what it assumed (:class:`PrivacyNotice`). Never
    overspends either way: the budget is enforced on the ledger. Then, with a burn-in, this
    chain's first ``warmup_steps`` minus the burn-in iterations are idle (the kernel returns the
    data-free start without reading anything) and its own warmup, which its end-of-chain checks
    and forecasts read, is the burn-in."""
    if kernel.epsilon is not None and kernel.run_length_source is None:
        _fix_run_length(kernel)
    if kernel.burn_in is not None:
        chain = kernel.chain
        chain.idle_left = max(chain.warmup_steps - kernel.burn_in, 0)
        chain.warmup_steps = min(chain.warmup_steps, kernel.burn_in)


def _fix_run_length(kernel) -> None:
    run = mcmc_run_length()
    if run is not None:
        warmup, samples = run["warmup_steps"], run["num_samples"]
        if kernel.burn_in_share is not None and kernel.auto_tuned:
            kernel.burn_in = langevin_burn_in(warmup, samples, kernel.burn_in_share)
        releasing = warmup if kernel.burn_in is None else kernel.burn_in
        kernel.num_iterations = max(1, releasing + samples)
        kernel.run_length_source = "MCMC"
        if not kernel.num_chains_given and "num_chains" in run:
            kernel.num_chains = run["num_chains"]
        said = (f"{kernel.num_iterations} iterations per chain (warmup_steps + num_samples of the MCMC)"
                if kernel.burn_in is None else
                f"{kernel.num_iterations} releasing iterations per chain ({kernel.burn_in} of the MCMC's {warmup} "
                f"warmup steps, its burn-in, then its {samples} samples; the first {warmup - kernel.burn_in} "
                "warmup steps are idle and read nothing: docs/tuning.md, 'Without an accept test')"
                ) + f" over {kernel.num_chains} chain(s)"
    else:
        kernel.num_iterations = DEFAULT_ITERATIONS
        kernel.run_length_source = "assumed"
        said = (f"{kernel.num_iterations} iterations per chain over {kernel.num_chains} chain(s) (ASSUMED: not run "
                "by pyro.infer.MCMC and no num_iterations given; longer chains stop at the budget)")
    budget = "the DEFAULT budget" if kernel.default_budget else "the budget"
    warn_user(
        f"{type(kernel).__name__}: {budget} epsilon={kernel.epsilon}, delta={kernel.delta} funds {said}"
        + (". Pass epsilon= (and delta=) for your own budget" if kernel.default_budget else ""),
        PrivacyNotice,
    )
