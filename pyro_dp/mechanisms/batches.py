r"""Batch selection (:mod:`pyro_dp.mechanisms`): uniform subsets without replacement, Poisson
samples and their sizes, and the functions a kernel selects its batch with. Every batch of a
release is drawn (before the step that reads it, issue 39) from the secret stream
(:class:`~pyro_dp.mechanisms.NoiseSource`): amplification by subsampling assumes the adversary
cannot predict it.
"""
from __future__ import annotations

import numpy as np
import torch

from . import tap as _tap

__all__ = [
    "sample_without_replacement",
    "poisson_subsample",
    "poisson_subsamples",
    "poisson_batch_size",
    "poisson_batch",
    "poisson_batches",
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


def poisson_subsamples(rng: torch.Generator, n: int, q: float, num: int, device=None):
    r"""``num`` independent Poisson samples of the ``n`` rows at once, each row of the result
    one sample (inclusion probability ``q``): returns ``(idx, sizes)``, ``sizes[j]`` :math:`\sim
    \mathrm{Binomial}(n, q)` and ``idx[j, :sizes[j]]`` a uniformly random subset of that size,
    ``idx[j, sizes[j]:]`` padding (row 0, to be masked by ``sizes``); ``idx`` has
    ``max(sizes)`` columns. The law of each row is :func:`poisson_subsample`'s.

    The construction is :func:`poisson_subsample`'s, vectorised: all sizes from one
    ``torch.binomial`` call, then per row :math:`m = w + \lfloor w/2\rfloor + 8` iid uniform
    indices (:math:`w` = the largest size) of which the first ``sizes[j]`` *distinct* ones, in
    draw order, are the sample (the first :math:`k` distinct draws of an iid uniform sequence are a
    uniformly random :math:`k`-subset). A row whose :math:`m` draws hold fewer distinct values
    than its size (rare: :math:`k \ll \sqrt n` makes a repeat unlikely) is drawn again, alone,
    by :func:`sample_without_replacement`: a fresh uniform subset, so the law is unchanged. The
    sizes, the column count and every redraw depend on ``n``, ``q`` and the stream only (no
    data). With ``num = 1`` and no redraw the draws are :func:`poisson_subsample`'s, in its
    order (the same sample from the same stream). For the long vectorised reproductions
    (:mod:`experiments.sgld_chains`); a kernel draws one batch per step
    (:func:`poisson_batch`).

    >>> idx, sizes = poisson_subsamples(torch.Generator().manual_seed(0), 1000, 0.01, 3)
    >>> idx.shape == (3, int(sizes.max())), [len(set(r[:k].tolist())) == k for r, k in zip(idx, sizes.tolist())]
    (True, [True, True, True])
    """
    n, num = int(n), int(num)
    if num < 1:
        raise ValueError(f"num must be >= 1, got {num}")
    if not (0.0 < q <= 1.0):
        raise ValueError(f"sample rate q must be in (0, 1], got {q!r}")
    gdev = rng.device
    sizes = torch.binomial(torch.full((num,), float(n), dtype=torch.float64, device=gdev),
                           torch.full((num,), float(q), dtype=torch.float64, device=gdev), generator=rng).long()
    width = int(sizes.max())
    if width == 0:
        return torch.zeros((num, 0), dtype=torch.long, device=device), sizes.to(device)
    if 2 * width > n:  # dense case: row by row (sample_without_replacement permutes)
        idx = torch.zeros((num, width), dtype=torch.long, device=gdev)
        for j, k in enumerate(sizes.tolist()):
            idx[j, :k] = sample_without_replacement(rng, n, k, device=gdev)
        return idx.to(device), sizes.to(device)
    m = _draws_per_round(width)
    draws = torch.randint(n, (num, m), generator=rng, device=gdev)
    first = _first_occurrence_mask(draws, n)  # [num, m]: the first draw of each value, draw order
    keep = first & (first.cumsum(1) <= sizes[:, None])  # the first sizes[j] distinct draws of row j
    rows, cols = keep.nonzero(as_tuple=True)
    idx = torch.zeros((num, width), dtype=torch.long, device=gdev)  # padding: row 0
    idx[rows, keep.cumsum(1)[rows, cols] - 1] = draws[rows, cols]  # kept draws first, in draw order
    for j in (first.sum(1) < sizes).nonzero().flatten().tolist():  # too few distinct draws: a fresh subset
        k = int(sizes[j])
        idx[j, :k] = sample_without_replacement(rng, n, k, device=gdev)
    return idx.to(device), sizes.to(device)


def _first_occurrence_mask(draws: torch.Tensor, n: int) -> torch.Tensor:
    """``[rows, m]`` bool: where each row of ``draws`` (integers in ``[0, n)``) has the first
    occurrence, in draw order, of its value. One sort of the key ``value * m + position`` per row
    (numpy's SIMD sort on the CPU, 10x torch's there; as :func:`_first_occurrences`)."""
    num, m = draws.shape
    if draws.device.type == "cpu" and n * m < 2**62:
        keys = draws.numpy() * m + np.arange(m)
        keys.sort(axis=1)
        value = keys // m
        start = np.ones(keys.shape, dtype=bool)
        np.not_equal(value[:, 1:], value[:, :-1], out=start[:, 1:])
        first = np.zeros(keys.shape, dtype=bool)
        first[np.nonzero(start)[0], (keys - value * m)[start]] = True
        return torch.from_numpy(first)
    srt, order = draws.sort(dim=1, stable=True)  # a repeated value: its first draw comes first
    start = torch.ones_like(srt, dtype=torch.bool)
    start[:, 1:] = srt[:, 1:] != srt[:, :-1]
    return torch.empty_like(start).scatter_(1, order, start)


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
    idx = noise.poisson_subsample(n, q, device=device)
    return idx if _tap.ACTIVE is None else _tap.batch(idx, fixed_size=False)  # the audit's view (tap.py)


def poisson_batches(noise, n: int, q: float, num: int, device=None):
    r"""``num`` Poisson samples of the ``n`` rows at once (each the batch of one
    :class:`~pyro_dp.mechanisms.SubsampledGaussianEvent` with ``scheme="poisson"``), drawn from
    the secret stream ``noise``: ``(idx, sizes)``, padded as :func:`poisson_subsamples`
    returns them. For a vectorised runner that draws a block of steps' batches before running
    them (:mod:`experiments.sgld_chains`).

    >>> from pyro_dp.mechanisms import NoiseSource
    >>> idx, sizes = poisson_batches(NoiseSource(), 10, 1.0, 2)
    >>> sizes.tolist(), sorted(idx[0].tolist()) == list(range(10))
    ([10, 10], True)
    """
    return noise.poisson_subsamples(n, q, num, device=device)


def batch_without_replacement(noise, n: int, b: int, device=None) -> torch.Tensor:
    r"""``b`` distinct rows of ``n``, every subset equally likely (the batch of a
    ``scheme="without_replacement"`` subsampled mechanism, or of DP Barker), drawn from the
    secret stream ``noise`` (:func:`sample_without_replacement`).

    >>> from pyro_dp.mechanisms import NoiseSource
    >>> idx = batch_without_replacement(NoiseSource(), 100, 5)
    >>> len(set(idx.tolist()))
    5
    """
    idx = noise.sample_without_replacement(n, b, device=device)
    return idx if _tap.ACTIVE is None else _tap.batch(idx, fixed_size=True)  # the audit's view (tap.py)


def batch_with_replacement(noise, n: int, b: int, device=None) -> torch.Tensor:
    r"""``b`` rows of ``n`` drawn uniformly with replacement from the secret stream ``noise``
    (DP-Fast MH's batch, Zhang & Zhang 2023, Alg. 1: :math:`P(i_j = i) = 1/N`).

    >>> from pyro_dp.mechanisms import NoiseSource
    >>> batch_with_replacement(NoiseSource(), 1, 3).tolist()
    [0, 0, 0]
    """
    idx = noise.sample_with_replacement(n, b, device=device)
    return idx if _tap.ACTIVE is None else _tap.batch(idx, fixed_size=True, pinnable=False)  # recorded only (tap.py)


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
