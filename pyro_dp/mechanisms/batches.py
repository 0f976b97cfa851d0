r"""Batch selection (:mod:`pyro_dp.mechanisms`): uniform subsets without replacement, Poisson
samples and their sizes, and the functions a kernel selects its batch with. Every batch of a
release is drawn (before the step that reads it, issue 39) from the secret stream
(:class:`~pyro_dp.mechanisms.NoiseSource`): amplification by subsampling assumes the adversary
cannot predict it.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "sample_without_replacement",
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
