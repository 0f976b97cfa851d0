r"""Batch selection (:mod:`pyro_dp.mechanisms`): uniform subsets without replacement, Poisson
samples and their sizes, and the pieces a compiled graph uses to select its batch from pre-drawn
indices. Every batch of a release is drawn from the secret stream
(:class:`~pyro_dp.mechanisms.NoiseSource`): amplification by subsampling assumes the adversary
cannot predict it.
"""
from __future__ import annotations

import functools
from typing import Optional, Tuple

import numpy as np
import torch

__all__ = [
    "sample_without_replacement",
    "without_replacement_draws",
    "sorted_draw_keys",
    "draw_batch_indices",
    "first_distinct_draws",
    "distinct_draws_and_count",
    "poisson_subsample",
    "poisson_batch_size",
    "poisson_batch",
    "batch_without_replacement",
    "batch_with_replacement",
    "poisson_count",
    "thinning_uniforms",
]

# --------------------------------------------------------------------------- batch selection


def sample_without_replacement(rng: torch.Generator, n: int, b: int, device=None) -> torch.Tensor:
    r"""``b`` distinct indices from ``range(n)``, every subset equally likely, from ``rng``
    (kernels call it only through :meth:`NoiseSource.sample_without_replacement`: batches
    are as secret as the noise).

    Draws iid uniform indices and keeps the first ``b`` *distinct* values in draw order
    (the first :math:`b` distinct draws of an iid uniform sequence form a uniformly random
    :math:`b`-subset). Expected cost :math:`O(b \log b)`, independent of ``n``.

    >>> g = torch.Generator().manual_seed(0)
    >>> idx = sample_without_replacement(g, 1_000_000, 5)
    >>> idx.shape, len(set(idx.tolist())) == 5
    (torch.Size([5]), True)
    """
    n, b = int(n), int(b)
    if not (0 <= b <= n):
        raise ValueError(f"need 0 <= batch size <= N, got b={b}, N={n}")
    gdev = rng.device
    if b == 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    if 2 * b > n:  # dense case: a permutation is as cheap
        return torch.randperm(n, generator=rng, device=gdev)[:b].to(device)
    draws = None
    while True:
        extra = torch.randint(n, (_draws_per_round(b),), generator=rng, device=gdev)
        draws = extra if draws is None else torch.cat([draws, extra])
        if gdev.type == "cpu":
            values = draws.numpy()
            first_pos = _first_occurrences(values, n)  # in draw order
            if first_pos.size >= b:  # the first b distinct draws, in draw order
                return torch.from_numpy(values[first_pos[:b]]).to(device)
            continue
        uniq, inverse = torch.unique(draws, return_inverse=True)
        if uniq.numel() >= b:
            break
    pos = torch.arange(draws.numel(), device=gdev)
    first = torch.full((uniq.numel(),), draws.numel(), dtype=torch.long, device=gdev)
    first = first.scatter_reduce(0, inverse, pos, reduce="amin")
    order = torch.argsort(first)[:b]
    return uniq[order].to(device)


def _draws_per_round(b: int) -> int:
    """Indices :func:`sample_without_replacement` draws per round (enough for ``b`` distinct
    ones in one round, unless ``b`` is close to half of ``n``)."""
    return b + b // 2 + 8


def without_replacement_draws(n: int, b: int) -> Optional[int]:
    """How many indices :func:`sample_without_replacement` draws in its first round (the
    iid-draws branch), or ``None`` when it takes another branch (``b = 0``, the dense
    :math:`2b > n` permutation), or when :func:`sorted_draw_keys` would overflow ``int64``.
    For a graph that
    selects the batch itself from pre-drawn indices (:func:`first_distinct_draws`).

    >>> without_replacement_draws(10**6, 1000), without_replacement_draws(1500, 1000)
    (1508, None)
    """
    n, b = int(n), int(b)
    m = _draws_per_round(b)
    if b <= 0 or 2 * b > n or n << _position_bits(m) >= 2**62:  # sorted_draw_keys would overflow
        return None
    return m


def _position_bits(m: int) -> int:
    """Bits that hold a position in ``range(m)`` (the low bits of a draw's sort key)."""
    return max(int(m) - 1, 1).bit_length()


@functools.lru_cache(maxsize=64)
def _np_arange(m: int) -> np.ndarray:
    out = np.arange(m)
    out.setflags(write=False)
    return out


def sorted_draw_keys(draws: torch.Tensor) -> torch.Tensor:
    """The keys ``value << s | position`` (``s`` bits hold a position in ``range(m)``) of
    ``m`` draws, sorted (numpy's SIMD sort on the CPU, several times faster than
    ``torch.sort`` there): the input of :func:`first_distinct_draws`. Shifts and masks, not
    the ``value * m + position`` of :func:`_first_occurrences`: 64-bit integer division is
    not vectorised (the same order, so the same first occurrences).

    >>> sorted_draw_keys(torch.tensor([5, 3, 5])).tolist()  # 3<<2|1, 5<<2|0, 5<<2|2
    [13, 20, 22]
    """
    m = draws.shape[0]
    s = _position_bits(m)
    if draws.device.type == "cpu":
        keys = (draws.numpy() << s) | _np_arange(m)
        keys.sort()
        return torch.from_numpy(keys)
    return torch.sort((draws << s) | torch.arange(m, device=draws.device))[0]


def draw_batch_indices(rng: torch.Generator, n: int, m: int, padded: int, device=None
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(draws, sorted keys)`` on ``device``: the first round of ``m`` iid indices that
    :func:`sample_without_replacement` draws from ``rng`` (``m`` from
    :func:`without_replacement_draws`), padded to ``padded`` with copies of the first draw
    (never a first occurrence, so the batch :func:`distinct_draws_and_count` keeps is unchanged;
    a batch bucket's graph then has fixed shapes), and their :func:`sorted_draw_keys`. The
    fused steps of the compiled path select their batch from these inside the graph (#17).

    >>> d, keys = draw_batch_indices(torch.Generator().manual_seed(0), 100, 5, 7)
    >>> d.shape, bool((d[5:] == d[0]).all()), bool((keys[1:] > keys[:-1]).all())
    (torch.Size([7]), True, True)
    """
    draws = torch.randint(int(n), (int(m),), generator=rng, device=rng.device)
    if padded > m:
        draws = torch.cat([draws, draws[:1].expand(int(padded) - int(m))])
    return draws.to(device), sorted_draw_keys(draws).to(device)


def first_distinct_draws(draws: torch.Tensor, keys: torch.Tensor, b: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(the first b distinct values of draws in draw order, whether there are fewer than b)``
    from the draws and their :func:`sorted_draw_keys`, with fixed shapes and no sort
    (traceable into a graph; #17): what :func:`sample_without_replacement` keeps of its first
    round of draws (values in ``[0, n)`` with :func:`without_replacement_draws` not ``None``).
    Each value's first position is the first of its run of sorted keys; a running count over
    the positions in draw order gives each first occurrence its slot. With fewer than ``b``
    distinct values the batch is padded with row 0 and the flag is set (the caller must then
    draw more).

    >>> d = torch.tensor([5, 3, 5, 9, 3, 1])
    >>> idx, short = first_distinct_draws(d, sorted_draw_keys(d), 3)
    >>> idx.tolist(), bool(short)
    ([5, 3, 9], False)
    >>> d = torch.tensor([5, 3, 5, 3])
    >>> bool(first_distinct_draws(d, sorted_draw_keys(d), 3)[1])
    True
    """
    out, count = distinct_draws_and_count(draws, keys, b)
    return out, count < b


def distinct_draws_and_count(draws: torch.Tensor, keys: torch.Tensor, size: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(the first size distinct values of draws in draw order, padded with row 0, the number
    of distinct values)``: :func:`first_distinct_draws` for a batch whose size is not fixed
    (a Poisson batch of ``k <= size`` rows keeps the first ``k``, and needs ``count >= k``).
    Padding ``draws`` at the end with copies of ``draws[0]`` changes nothing (a copy is never a
    first occurrence).

    >>> d = torch.tensor([5, 3, 5, 9, 3, 1, 5, 5])  # the last two: padding
    >>> out, count = distinct_draws_and_count(d, sorted_draw_keys(d), 5)
    >>> out.tolist(), int(count)
    ([5, 3, 9, 1, 0], 4)
    """
    b = int(size)
    m = draws.shape[0]
    s = _position_bits(m)
    value = keys >> s
    start = torch.cat([torch.ones(1, dtype=torch.bool, device=draws.device), value[1:] != value[:-1]])
    # the sorted keys' positions are a permutation of range(m): a scatter without collisions
    first = torch.zeros(m, dtype=torch.long, device=draws.device).scatter(0, keys & ((1 << s) - 1), start.long())
    rank = torch.cumsum(first, 0) - 1  # slot of each first occurrence, in draw order
    slot = torch.where((first == 1) & (rank < b), rank, b)  # the rest goes to a discarded slot b
    out = torch.zeros(b + 1, dtype=draws.dtype, device=draws.device).scatter(0, slot, draws)
    return out[:b], rank[-1] + 1


def _first_occurrences(values: np.ndarray, n: int) -> np.ndarray:
    """Positions of the first occurrence of each distinct value of ``values`` (integers in
    ``[0, n)``), in increasing order (draw order): ``np.sort(np.unique(values,
    return_index=True)[1])``. Sorts one key ``value * m + position`` with numpy's default (SIMD)
    sort and marks the first positions in a mask, instead of the stable argsort ``unique``
    needs and a second sort (#17)."""
    m = values.size
    if m == 0 or n * m >= 2**62:  # the key would overflow int64
        return np.sort(np.unique(values, return_index=True)[1])
    keys = values * m + np.arange(m)
    keys.sort()
    value = keys // m
    start = np.empty(m, dtype=bool)
    start[0] = True
    np.not_equal(value[1:], value[:-1], out=start[1:])
    first = np.zeros(m, dtype=bool)
    first[keys[start] - value[start] * m] = True
    return np.flatnonzero(first)


def poisson_subsample(rng: torch.Generator, n: int, q: float, device=None) -> torch.Tensor:
    r"""Indices of a Poisson sample from ``rng``: each of ``n`` rows included independently
    with probability ``q``, drawn as :math:`K \sim \mathrm{Binomial}(n, q)` followed by a
    uniform subset of size :math:`K` (the same law), in :math:`O(qn)`.

    >>> len(poisson_subsample(torch.Generator().manual_seed(0), 10, 1.0))
    10
    """
    return sample_without_replacement(rng, n, poisson_batch_size(rng, n, q), device=device)


def poisson_batch_size(rng: torch.Generator, n: int, q: float) -> int:
    r"""The size :math:`K \sim \mathrm{Binomial}(n, q)` of a Poisson sample, drawn from ``rng``
    (:func:`poisson_subsample`'s first draw).

    >>> poisson_batch_size(torch.Generator().manual_seed(0), 10, 1.0)
    10
    """
    if not (0.0 < q <= 1.0):
        raise ValueError(f"sample rate q must be in (0, 1], got {q!r}")
    count = torch.tensor(float(n), dtype=torch.float64, device=rng.device)
    return int(torch.binomial(count, torch.tensor(float(q), dtype=torch.float64, device=rng.device), generator=rng))


# --------------------------------------------------------------------------- a kernel's batches, from the secret stream
#
# What a kernel calls to select its batch: each names the selection it makes and draws it from
# the secret stream of the :class:`~pyro_dp.mechanisms.NoiseSource` it is given (the same draws,
# in the same order, as the source's own methods). No kernel module draws a batch itself
# (``tests/test_release_draws.py``).


def poisson_batch(noise, n: int, q: float, device=None) -> torch.Tensor:
    r"""A Poisson sample of the ``n`` rows with inclusion probability ``q`` (the batch of a
    :class:`~pyro_dp.mechanisms.SubsampledGaussianEvent` with ``scheme="poisson"``), drawn from the secret stream ``noise`` (:func:`poisson_subsample`).

    >>> from pyro_dp.mechanisms import NoiseSource
    >>> len(poisson_batch(NoiseSource(), 10, 1.0))
    10
    """
    return noise.poisson_subsample(n, q, device=device)


def batch_without_replacement(noise, n: int, b: int, device=None) -> torch.Tensor:
    r"""``b`` distinct rows of ``n``, every subset equally likely (the batch of a
    ``scheme="without_replacement"`` subsampled mechanism, or of DP Barker), drawn from the
    secret stream ``noise`` (:func:`sample_without_replacement`).

    >>> from pyro_dp.mechanisms import NoiseSource
    >>> idx = batch_without_replacement(NoiseSource(), 100, 5)
    >>> len(set(idx.tolist()))
    5
    """
    return noise.sample_without_replacement(n, b, device=device)


def batch_with_replacement(noise, n: int, b: int, device=None) -> torch.Tensor:
    r"""``b`` rows of ``n`` drawn uniformly with replacement from the secret stream ``noise``
    (DP-Fast MH's batch, Zhang & Zhang 2023, Alg. 1: :math:`P(i_j = i) = 1/N`).

    >>> from pyro_dp.mechanisms import NoiseSource
    >>> batch_with_replacement(NoiseSource(), 1, 3).tolist()
    [0, 0, 0]
    """
    return noise.sample_with_replacement(n, b, device=device)


def poisson_count(noise, rate: float) -> int:
    r"""One :math:`\mathrm{Poisson}(\mathrm{rate})` batch size from the secret stream ``noise``
    (DP-Fast MH's :math:`B \sim \mathrm{Poisson}(\lambda + CM)`, Zhang & Zhang 2023, Alg. 1).

    >>> from pyro_dp.mechanisms import NoiseSource
    >>> isinstance(poisson_count(NoiseSource(), 3.0), int)
    True
    """
    return noise.poisson(rate)


def thinning_uniforms(noise, shape, like: torch.Tensor) -> torch.Tensor:
    r"""``Uniform(0, 1)`` draws of ``shape`` from the secret stream ``noise``, dtype and device of
    ``like``: the thinning of a batch (DP-Fast MH's ``Batch`` keeps each drawn row with a data-dependent
    probability, Zhang & Zhang 2023, Alg. 1), part of the batch selection and as secret.

    >>> from pyro_dp.mechanisms import NoiseSource
    >>> u = thinning_uniforms(NoiseSource(), (4,), like=torch.zeros((), dtype=torch.float64))
    >>> u.shape, bool(((u >= 0) & (u < 1)).all())
    (torch.Size([4]), True)
    """
    return noise.uniform(shape, like=like)
