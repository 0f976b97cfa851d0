r"""Scaling out: data-parallel DP MCMC over :mod:`torch.distributed` (``distributed=True``).

Each process (*rank*) holds only its shard of the rows and runs the ordinary Pyro model on it.
Every release of the full-data kernels (:class:`~pyro_dp.DPPenalty`, :class:`~pyro_dp.DPHMC`,
their private start :class:`~pyro_dp.DPGradientInit`) is a sum of clipped per-example terms, so it
shards by rows: each rank clips and sums its own rows, and one ``all_reduce(SUM)`` per release
forms the total. What each rank holds afterwards is the *released* value, identical everywhere:

* **The noise is added inside the all-reduce, once.** Rank 0 draws the Gaussian noise from its
  secret stream (:class:`~pyro_dp.mechanisms.NoiseSource`, seeded from the operating system on
  rank 0, never from the shared data-free ``seed``) and adds it to its own local sum before the
  reduction; the other ranks contribute their local sums. The result, total + noise, is exactly
  the single-process release (same distribution and the same ledger event; the same value for
  the same noise seed, up to the order of summation). The noise stays secret because it never
  leaves rank 0 on its own: it is not stored, not sent, not derived from anything shared, and
  every value another rank receives already contains it. (The alternative, a secret noise seed
  agreed at set-up, would send a secret over the wire and let every rank remove the noise.)
* **Trust boundary.** The guarantee is about what the job releases (the chain, the released
  sums, the diagnostics), exactly as for one process. Ranks hold raw rows and are inside the
  data holder's trust boundary; they are *not* protected from each other: rank 0 knows its
  noise, its own sum and the released value, so it can compute the sum of the other ranks'
  clipped sums exactly (with two ranks, rank 1's own), and depending on the reduction's
  algorithm its messages may carry other ranks' partial sums without noise. For parties that
  must not see each other's sums, see :class:`~pyro_dp.DPMultiPartyPenalty`.
* **Data-free randomness is identical on every rank**: the kernel's ``seed`` (rank 0's,
  broadcast at set-up, so ranks that drew their own default seeds agree) seeds proposals,
  momenta and accept uniforms, so every rank takes the same decisions from the same released
  values with no further communication, and every rank records the same ledger:
  ``get_epsilon`` is the same everywhere.
* **The global number of rows** (public) is agreed at set-up by an all-reduce of the shard sizes.
* **Faults**: a rank that raises stops calling the collectives; the others fail in their next
  all-reduce — at once when the peer's process or connection is gone, or after the process
  group's ``timeout`` (``torch.distributed.init_process_group(timeout=...)``) when it hangs — with
  a ``RuntimeError`` that says so, raised before the release is formed or recorded: nothing is
  released after the failure.

Kernels that read batches (DP Barker, minibatch penalty, DP-Fast MH, DP-SGLD/SGNHT) and the
exponential-family and multi-party kernels refuse ``distributed=True`` with a clear message
(their releases are not all plain sums over rows, or batch selection would need a global draw);
see ``docs/scaling_out.md``.
"""
from __future__ import annotations

from typing import Optional

import torch

__all__ = ["Shards"]


class Shards:
    r"""The process group a sharded kernel reduces its releases over.

    :param group: a :mod:`torch.distributed` process group (default: the default group, which
        must be initialised, e.g. by ``torchrun`` and ``init_process_group("gloo")``).

    On one process (``world_size == 1``) every operation is the identity, so a sharded kernel
    gives the single-process chain.
    """

    def __init__(self, group=None):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "distributed=True needs an initialised torch.distributed process group: launch with torchrun and "
                "call torch.distributed.init_process_group('gloo') (CPU) or ('nccl') (CUDA) first"
            )
        self._dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)

    def __repr__(self):
        return f"Shards(rank={self.rank}, world_size={self.world_size})"

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of ``t`` over ranks (a new tensor; ``t`` is not modified)."""
        out = t.detach().clone().contiguous()
        if self.world_size > 1:
            self._collective("all_reduce", out, op=self._dist.ReduceOp.SUM, group=self.group)
        return out

    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Rank ``src``'s ``t`` on every rank (a new tensor)."""
        out = t.detach().clone().contiguous()
        if self.world_size > 1:
            self._collective("broadcast", out, src=src, group=self.group)
        return out

    def _collective(self, name: str, t: torch.Tensor, **kwargs) -> None:
        """Run ``torch.distributed.<name>`` in place on ``t``; a failure (a peer that raised, died or
        timed out) raises ``RuntimeError`` saying so, before anything is released on this rank."""
        try:
            getattr(self._dist, name)(t, **kwargs)
        except Exception as e:  # gloo/NCCL errors: RuntimeError, DistBackendError, timeouts
            raise RuntimeError(
                f"pyro_dp.distributed: {name} failed on rank {self.rank} of {self.world_size} (a peer rank "
                f"raised, died or timed out); this rank stops here and releases nothing more. Cause: {e}"
            ) from e

    def agree_int(self, value: int) -> int:
        """Rank 0's integer, on every rank (e.g. a seed drawn on each rank)."""
        return int(self.broadcast(torch.tensor([int(value)], dtype=torch.int64))[0])

    def check_same(self, t: torch.Tensor, what: str) -> None:
        """Raise on every rank if ``t`` (data-free) differs from rank 0's."""
        ref = self.broadcast(t)
        bad = torch.tensor([0 if torch.equal(ref, t.detach()) else 1], dtype=torch.int64, device=t.device)
        if int(self.all_reduce_sum(bad)[0]):
            raise ValueError(f"{what} differs between ranks: every rank must build the kernel with the same settings")


def shards_for(distributed: bool, process_group=None) -> Optional[Shards]:
    """``Shards`` for a kernel's ``distributed``/``process_group`` arguments, or ``None``."""
    if not distributed and process_group is None:
        return None
    return Shards(process_group)
