"""What a kernel reads of the ``pyro.infer.MCMC`` run that calls it: the run's lengths
(:func:`mcmc_run_length`), which fix the run length a budget funds when the user gave none
(:mod:`~pyro_dp.kernels.default_path`), the auto-compile decision's prediction
(:mod:`~pyro_dp.kernels.auto_compile`) and the number of chains a checkpoint may continue
(:mod:`~pyro_dp.kernels.checkpoint`). Public settings of the run, never data.
"""
from __future__ import annotations

import sys
from typing import Optional

from pyro.infer.mcmc.api import AbstractMCMC, _gen_samples  # Pyro's run loop, read to find the run length

__all__ = ["mcmc_run_length"]


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
