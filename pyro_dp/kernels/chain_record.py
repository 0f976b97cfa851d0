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

    def count_step(self, info, z, keep_draws: int) -> None:
        """After an iteration that read data: counted, its acceptance and clipped fraction (``info``
        of the step) added, and its state ``z`` kept for the end-of-chain checks when it is after
        warmup (at most ``keep_draws`` of them).

        >>> from types import SimpleNamespace
        >>> r = ChainRecord(); r.count_step(SimpleNamespace(accepted=True, clipped_fraction=0.5), 1.0, keep_draws=10)
        >>> r.iteration, r.acceptance_rate, r.draws, r.nonprivate(with_init=False)
        (1, 1.0, [1.0], {'clipped fraction': 0.5})
        """
        self.iteration += 1
        if self.iteration > self.warmup_steps and len(self.draws) < keep_draws:
            self.draws.append(z)
        self.accepted += int(bool(info.accepted))
        self.clipped_sum += float(info.clipped_fraction)
        self.clipped_count += 1

    def started(self, clipped_fraction: float, preconditioner: Optional[tuple]) -> None:
        """After the chain's private start: done, its clipped fraction, and the chain's coordinates
        (a ``DPAutoTune(whiten=True)`` sets them: post-processing)."""
        self.init_done = True
        self.init_clipped_fraction = clipped_fraction
        self.preconditioner = preconditioner

    def nonprivate(self, with_init: bool) -> dict:
        """The raw-data statistics ``diagnostics()`` shows only under ``nonprivate_diagnostics``
        (the mean clipped fraction, and the private start's with ``with_init``)."""
        out = {"clipped fraction": self.clipped_sum / max(self.clipped_count, 1)}
        if with_init:
            out["init clipped fraction"] = self.init_clipped_fraction
        return out

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
