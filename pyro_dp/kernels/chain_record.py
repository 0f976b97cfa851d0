r"""What one chain in progress has done, as one object (``kernel.chain``): its iteration, its
warmup, its counts, its draws after warmup, and what its private start and the default path
learnt about it. A kernel starts a fresh record with every chain; the report, the end-of-chain
checks (:mod:`~pyro_dp.kernels.diagnostics`) and the checkpoint (:mod:`~pyro_dp.kernels.checkpoint`)
read and write it, never the kernel's own attributes.

Everything in it is public counts or post-processing of released values, except the clipped
counts (``clipped_sum``, ``clipped_count``, ``init_clipped_fraction``), which only the opt-in
``nonprivate_diagnostics`` publishes (:data:`~pyro_dp.kernels.diagnostics.NONPRIVATE_PREFIX`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

__all__ = ["ChainRecord", "RunForecast"]


@dataclass
class ChainRecord:
    """One chain's progress (module doc).

    >>> r = ChainRecord(warmup_steps=10); r.iteration, r.acceptance_rate
    (0, 0.0)
    """

    #: warmup iterations of this chain (``MCMC``'s ``warmup_steps``; a burn-in on an idling default path)
    warmup_steps: int = 0
    #: iterations that read data so far
    iteration: int = 0
    #: accepted proposals
    accepted: int = 0
    #: sum and number of the per-iteration clipped fractions (non-private: raw data)
    clipped_sum: float = 0.0
    clipped_count: int = 0
    #: the chain's states after warmup (at most ``MAX_CHECKED_DRAWS``), for its end-of-chain checks
    draws: list = field(default_factory=list)
    #: idle warmup iterations left before the first release (an idling default path)
    idle_left: int = 0
    #: whether the private start has run
    init_done: bool = False
    #: the private start's clipped fraction (non-private: raw data)
    init_clipped_fraction: float = 0.0
    #: the chain's coordinates, set by its private start (:mod:`pyro_dp.preconditioning`)
    preconditioner: Optional[tuple] = None
    #: the posterior sd its released metric predicts (:func:`~pyro_dp.default_path.whitening.metric_sd`)
    metric_sd: Optional[object] = None
    #: ``(iteration, message)`` pairs ``diagnostics()`` has warned (not checkpointed)
    warned: set = field(default_factory=set)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / max(self.iteration, 1)

    def saved(self) -> dict:
        """The fields a checkpoint keeps (all but ``warned``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "warned"}


@dataclass
class RunForecast:
    """What the default path forecast for the kernel's chains when it took the private tuning's
    result (post-processing, public): whether the privacy noise limits each move, whether a run
    twice as long would help, and ``(kernel, its effective samples, this chain's)`` where another
    kernel is forecast to do better. Kept by the kernel (``kernel.forecast``) across chains and
    runs (the last chain's), read by the end-of-chain advice (:func:`~pyro_dp.kernels.diagnostics.ess_advice`).

    >>> RunForecast().noise_limited is None
    True
    """

    noise_limited: Optional[bool] = None
    longer_helps: Optional[bool] = None
    alternative_ess: Optional[tuple] = None
