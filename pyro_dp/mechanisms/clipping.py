r"""The per-row rule, the clip and the sum (:mod:`pyro_dp.mechanisms`): everything of a release
before its noise, as pure tensor code that the compiled path traces into its graphs.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Optional, Sequence, Tuple

import torch

from ..private import reveal

__all__ = [
    "finite_row_mask",
    "finite_rows",
    "finite_scalars",
    "clip_rows",
    "clip_scalars",
    "ClippedSum",
    "clip_and_sum",
    "clip_and_sum_columns",
    "sum_clipped",
    "NOT_COUNTED",
    "clipped_fraction",
]

# --------------------------------------------------------------------------- per-row rule and clip


def finite_row_mask(values: torch.Tensor) -> torch.Tensor:
    r"""``torch.isfinite(values).all(-1)`` for ``[..., D]`` rows, written as
    :math:`\sum_j (x_j - x_j) = 0`: exact in IEEE arithmetic (:math:`x - x` is 0 for finite
    :math:`x` and NaN for NaN and :math:`\pm\infty`, and a sum with a NaN is NaN). Unlike
    ``torch.isfinite`` and an AND of boolean masks, the compiler of the compiled path vectorises
    it (inductor on the CPU, 10^5 rows of two float64 columns: the per-row rule, clip and sum in
    0.2 ms instead of 0.6 ms). (Not :math:`0\cdot x`: inductor folds ``x * 0`` to 0, which is
    wrong for NaN and :math:`\pm\infty`; ``tests/test_compiled.py`` checks the compiled rule on
    non-finite rows.) The per-row rule uses it.

    For rows of at most :data:`_COLUMN_SUM_MAX` entries the sum is written column by column
    (the same mask: a sum of zeros is 0 in any order, and a NaN anywhere makes it NaN): torch's
    eager reduction over a last dimension of two takes about 1.5 ms on 10^5 rows, the column
    sum 0.1 ms (2026-11-29; the control-variate DP-HMC step clips ``[N, D]`` residual rows
    eagerly every leapfrog step). The choice is made from the shape.

    >>> import torch
    >>> finite_row_mask(torch.tensor([[0.0, -3e38], [float("nan"), 1.0], [2.0, float("inf")]]))
    tensor([ True, False, False])
    """
    d = values - values
    width = d.shape[-1] if d.dim() else 0
    if not 0 < width <= _COLUMN_SUM_MAX:
        return d.sum(-1) == 0
    total = d[..., 0]
    for j in range(1, width):
        total = total + d[..., j]
    return total == 0


#: the widest rows whose :func:`finite_row_mask` adds the columns one by one (measured on 10^5
#: float64 rows, one thread: 2 columns 0.11 against 1.48 ms for ``sum(-1)``, 5 columns 0.14
#: against 0.19 ms, 10 columns 0.24 against 0.11 ms)
_COLUMN_SUM_MAX = 4


def _zero_rows(values: torch.Tensor, finite: torch.Tensor) -> torch.Tensor:
    return torch.where(finite.unsqueeze(-1), values, torch.zeros_like(values))


def finite_rows(values: torch.Tensor, finite: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""The per-row rule for vector terms: a row with any non-finite entry (NaN, ±inf)
    becomes the zero row. Applied by :func:`clip_rows` before clipping, so every released
    sum sees only finite rows of norm at most the clip: the sensitivity bound holds for
    any row an adversary can write, and no branch or exception depends on one row. ``finite``:
    the rows' :func:`finite_row_mask`, where the caller has it already.

    >>> import torch
    >>> finite_rows(torch.tensor([[1.0, float("nan")], [2.0, 3.0], [float("inf"), 0.0]]))
    tensor([[0., 0.],
            [2., 3.],
            [0., 0.]])
    """
    return _zero_rows(values, finite_row_mask(values) if finite is None else finite)


def finite_scalars(values: torch.Tensor, clip) -> torch.Tensor:
    r"""The per-row rule for scalar terms: NaN becomes 0 and :math:`\pm\infty` becomes
    :math:`\pm` ``clip``. Applied by :func:`clip_scalars` before clipping. (A log-likelihood
    ratio of a row outside the likelihood's support is :math:`-\infty - (-\infty)` = NaN;
    ``torch.minimum``/``torch.clamp`` would pass the NaN through to the released sum and
    make every decision depend on that one row.)

    >>> import torch
    >>> finite_scalars(torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5]), 2.0)
    tensor([ 0.0000,  2.0000, -2.0000,  0.5000])
    """
    clip_t = torch.as_tensor(clip, dtype=values.dtype, device=values.device)
    values = torch.where(values != values, torch.zeros_like(values), values)  # NaN != NaN (IEEE)
    return torch.maximum(torch.minimum(values, clip_t), -clip_t)


def clip_rows(values: torch.Tensor, clip) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Clip each row of ``values`` (shape ``[B, D]``) to L2 norm ``clip``, after the
    per-row rule :func:`finite_rows`.

    Uses :math:`x \cdot \min(1, b/\|x\|)` written so that a zero row stays zero (no NaN).
    Returns the clipped rows and a boolean mask of rows that were clipped (a non-finite
    row counts as clipped). ``clip`` may be a scalar or a 0-d tensor.

    >>> import torch
    >>> clip_rows(torch.tensor([[3.0, 4.0], [0.0, 0.0]]), 1.0)
    (tensor([[0.6000, 0.8000],
            [0.0000, 0.0000]]), tensor([ True, False]))
    """
    finite = finite_row_mask(values)
    values = finite_rows(values, finite)  # the mask computed once
    norms = torch.linalg.vector_norm(values, dim=-1)
    clip_t = torch.as_tensor(clip, dtype=values.dtype, device=values.device)
    factor = torch.clamp(clip_t / torch.clamp(norms, min=torch.finfo(values.dtype).tiny), max=1.0)
    return values * factor.unsqueeze(-1), (norms > clip_t) | ~finite


def clip_scalars(values: torch.Tensor, clip) -> Tuple[torch.Tensor, torch.Tensor]:
    """Clip each scalar of ``values`` to ``[-clip, clip]`` after the per-row rule
    :func:`finite_scalars`; returns values and the clipped mask (NaN counts as clipped).

    >>> import torch
    >>> clip_scalars(torch.tensor([-3.0, 0.5, 2.0, float("nan")]), 1.0)
    (tensor([-1.0000,  0.5000,  1.0000,  0.0000]), tensor([ True, False,  True,  True]))
    """
    clip_t = torch.as_tensor(clip, dtype=values.dtype, device=values.device)
    mask = ~(values.abs() <= clip_t)  # NaN compares False: counted as clipped
    return finite_scalars(values, clip_t), mask


class ClippedSum(NamedTuple):
    """Result of :func:`clip_and_sum`: the sum of clipped per-example terms, before noise.

    :ivar total: the sum of the clipped terms (**not private**: release it only through
        :func:`clipped_sum_with_noise`).
    :ivar num_clipped: number of rows that were clipped (a 0-d tensor; a data statistic), or
        :data:`NOT_COUNTED` (negative) where the sum was asked not to count them.
    :ivar num_rows: number of rows summed (a 0-d tensor).
    """

    total: torch.Tensor
    num_clipped: torch.Tensor
    num_rows: torch.Tensor


#: :attr:`ClippedSum.num_clipped` of a sum made with ``count=False``: the clipped rows were not
#: counted (sums of such values stay negative). The count is a statistic of the raw data that only
#: ``nonprivate_diagnostics=True`` shows; not computing it takes its reduction out of every pass
#: (the compiled DP-HMC iteration on the thesis banana: about 8 % less time, 2026-11-29).
NOT_COUNTED = -1


def _not_counted(like: torch.Tensor) -> torch.Tensor:
    return torch.full((), NOT_COUNTED, dtype=torch.int64, device=like.device)


def clipped_fraction(num_clipped, num_rows) -> float:
    """The fraction ``num_clipped / num_rows`` of a :class:`ClippedSum`'s counts as a float: NaN
    where the rows were not counted (a negative count, :data:`NOT_COUNTED`), 0 for no rows.

    >>> clipped_fraction(1, 4), clipped_fraction(0, 0), clipped_fraction(NOT_COUNTED, 4)
    (0.25, 0.0, nan)
    """
    num_clipped, num_rows = reveal((num_clipped, num_rows), reason="non-private diagnostic: the clipped fraction")
    num_clipped, num_rows = float(num_clipped), float(num_rows)
    if num_clipped < 0:
        return float("nan")
    return num_clipped / num_rows if num_rows else 0.0


def sum_clipped(parts: Iterable[ClippedSum]) -> ClippedSum:
    """One :class:`ClippedSum` of several (a pass over the rows in chunks): the totals and the
    counts added.

    >>> import torch
    >>> sum_clipped(clip_and_sum(x, 1.0) for x in (torch.tensor([3.0]), torch.tensor([0.5, -2.0])))
    ClippedSum(total=tensor(0.5000), num_clipped=tensor(2), num_rows=tensor(3))
    """
    total, num_clipped, num_rows = 0, 0, 0
    for cs in parts:
        total, num_clipped, num_rows = total + cs.total, num_clipped + cs.num_clipped, num_rows + cs.num_rows
    return ClippedSum(total, num_clipped, num_rows)


def clip_and_sum(values: torch.Tensor, clip, valid: Optional[torch.Tensor] = None, count: bool = True) -> ClippedSum:
    r"""The per-row rule, the clip and the sum of :func:`clipped_sum_with_noise`, without the
    noise: ``values`` ``[B]`` are clipped by :func:`clip_scalars`, ``[B, D]`` by :func:`clip_rows`.

    Pure tensor code (no Python branch on a value), so the compiled path
    (:mod:`pyro_dp.compiled`) traces *this* function into its fused per-example graph:
    the compiled and eager paths apply the same rule. ``valid`` (``[B]``, 0/1) drops padded
    rows of a size bucket from the sum and the counts. ``count=False`` leaves the clipped rows
    uncounted (``num_clipped`` is :data:`NOT_COUNTED`; the total is the same).

    >>> import torch
    >>> clip_and_sum(torch.tensor([[3.0, 4.0], [0.3, 0.4]]), 1.0)
    ClippedSum(total=tensor([0.9000, 1.2000]), num_clipped=tensor(1), num_rows=tensor(2))
    >>> clip_and_sum(torch.tensor([[3.0, 4.0], [0.3, 0.4]]), 1.0, count=False).num_clipped
    tensor(-1)
    """
    if values.dim() == 1:
        clipped, mask = clip_scalars(values, clip)
    elif values.dim() == 2:
        clipped, mask = clip_rows(values, clip)
    else:
        raise ValueError(f"values must have shape [B] or [B, D], got {tuple(values.shape)}")
    if valid is None:
        return ClippedSum(clipped.sum(0), mask.sum() if count else _not_counted(values),
                          torch.tensor(mask.numel(), device=values.device))
    keep = valid.to(torch.bool)
    w = keep.to(values.dtype)
    clipped = clipped * (w if values.dim() == 1 else w.unsqueeze(-1))
    return ClippedSum(clipped.sum(0), (mask & keep).sum() if count else _not_counted(values), keep.sum())


def clip_and_sum_columns(columns: Sequence[torch.Tensor], clip, valid: Optional[torch.Tensor] = None,
                         count: bool = True) -> ClippedSum:
    r""":func:`clip_and_sum` of the ``[B, D]`` rows ``torch.stack(columns, -1)``, computed column
    by column: the same per-row rule (a row with a non-finite entry is the zero row, counted
    as clipped), the same clip to L2 norm ``clip`` and the same sum, written with ``[B]``-shaped
    operations only. The compiled path uses it for small ``D``, where per-example gradients
    come as ``D`` forward-mode columns and a ``[B, D]`` layout would keep the compiler from
    vectorising over rows. ``tests/test_mechanisms.py`` checks it against :func:`clip_and_sum`
    on rows with NaN, ±inf, zero and clipped norms. ``count`` as in :func:`clip_and_sum`.

    >>> import torch
    >>> clip_and_sum_columns([torch.tensor([3.0, 0.3]), torch.tensor([4.0, 0.4])], 1.0)
    ClippedSum(total=tensor([0.9000, 1.2000]), num_clipped=tensor(1), num_rows=tensor(2))
    """
    columns = list(columns)
    if not columns or any(c.dim() != 1 or c.shape != columns[0].shape for c in columns):
        raise ValueError("columns must be a non-empty sequence of [B] tensors of one shape")
    probe = columns[0] - columns[0]  # finite_row_mask, column by column: 0 iff every entry is finite
    for c in columns[1:]:
        probe = probe + (c - c)
    finite = probe == 0
    zero = torch.zeros_like(columns[0])
    columns = [torch.where(finite, c, zero) for c in columns]  # finite_rows, column by column
    if len(columns) == 1:  # torch.linalg.vector_norm over one entry is |x| (no overflow of x^2)
        norms = columns[0].abs()
    else:  # the sum of squares, as vector_norm computes it (a row whose squares overflow: inf, zeroed)
        sq = columns[0] * columns[0]
        for c in columns[1:]:
            sq = sq + c * c
        norms = torch.sqrt(sq)  # as clip_rows: x * min(1, b/||x||), a zero row stays zero
    clip_t = torch.as_tensor(clip, dtype=columns[0].dtype, device=columns[0].device)
    factor = torch.clamp(clip_t / torch.clamp(norms, min=torch.finfo(columns[0].dtype).tiny), max=1.0)
    # The clipped rows, (norms > clip) | ~finite as in clip_rows, counted as a float64 sum of
    # 0/1 (exact below 2^53 rows): an OR of boolean masks and an integer sum kept inductor's
    # CPU code from vectorising the pass (10^5 banana rows: 0.37 ms for the gradient pass
    # instead of 0.22 ms; benchmarks/compiled.py). Nested where, not OR: the same count.
    one = torch.ones((), dtype=torch.float64, device=norms.device)
    zero = torch.zeros((), dtype=torch.float64, device=norms.device)
    clipped = torch.where(finite, torch.where(norms > clip_t, one, zero), one)
    if valid is None:
        keep_count = torch.tensor(norms.numel(), device=norms.device)
    else:
        keep = valid.to(torch.bool)
        factor = factor * keep.to(factor.dtype)
        clipped = torch.where(keep, clipped, zero)
        keep_count = keep.sum()
    total = torch.stack([(c * factor).sum(0) for c in columns])
    return ClippedSum(total, clipped.sum().to(torch.int64) if count else _not_counted(total), keep_count)
