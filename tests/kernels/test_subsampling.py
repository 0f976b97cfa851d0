"""Subsampling laws: uniform subsets and Poisson inclusion, chi-square style checks."""
import math

import torch
import pytest

from pyro_dp.kernels.subsampling import poisson_subsample, sample_without_replacement


@pytest.mark.parametrize("n, b", [(50, 5), (50, 40), (10, 10)])
def test_without_replacement_is_uniform(n, b):
    g = torch.Generator().manual_seed(0)
    reps = 4000
    counts = torch.zeros(n)
    for _ in range(reps):
        idx = sample_without_replacement(g, n, b)
        assert idx.numel() == b and torch.unique(idx).numel() == b
        counts[idx] += 1
    # each row is included w.p. b/n: binomial(reps, b/n) per row; 4.5 sd over n rows
    p = b / n
    sd = math.sqrt(reps * p * (1 - p)) if p < 1 else 0.0
    assert float((counts - reps * p).abs().max()) <= 4.5 * sd + 1e-9


def test_without_replacement_pairs_uniform():
    """Second-order check: P(0 and 1 both in the subset) = b(b-1)/(n(n-1))."""
    g = torch.Generator().manual_seed(1)
    n, b, reps = 20, 4, 20000
    both = sum(int(bool(((s := sample_without_replacement(g, n, b)) == 0).any() and (s == 1).any())) for _ in range(reps))
    p = b * (b - 1) / (n * (n - 1))
    assert abs(both - reps * p) <= 4 * math.sqrt(reps * p * (1 - p))


def test_poisson_subsample_law():
    g = torch.Generator().manual_seed(2)
    n, q, reps = 1000, 0.05, 2000
    sizes = torch.tensor([poisson_subsample(g, n, q).numel() for _ in range(reps)], dtype=torch.float64)
    assert abs(float(sizes.mean()) - n * q) <= 4 * math.sqrt(n * q * (1 - q) / reps)


def test_bad_arguments():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError):
        sample_without_replacement(g, 5, 6)
    with pytest.raises(ValueError):
        poisson_subsample(g, 5, 0.0)


def _first_distinct_reference(g, n, b):
    """The documented law, written plainly: iid uniform draws in blocks of b + b//2 + 8, the
    first ``b`` distinct values in draw order (what ``sample_without_replacement`` returns)."""
    draws, seen, out = [], set(), []
    while len(out) < b:
        draws = torch.randint(n, (b + b // 2 + 8,), generator=g).tolist()
        for v in draws:
            if v not in seen:
                seen.add(v)
                out.append(v)
    return torch.tensor(out[:b], dtype=torch.long)


@pytest.mark.parametrize("n, b", [(100_000, 1000), (10_000_000, 1000), (50, 20), (100, 49), (20, 3)])
def test_without_replacement_is_first_distinct_draws(n, b):
    """The CPU path (numpy's first occurrences) returns exactly the first ``b`` distinct draws
    in draw order, so seeded chains are unchanged by that speed-up (#17)."""
    for seed in range(20):
        got = sample_without_replacement(torch.Generator().manual_seed(seed), n, b)
        assert torch.equal(got, _first_distinct_reference(torch.Generator().manual_seed(seed), n, b)), seed


def test_first_occurrences_is_numpy_unique_return_index():
    """The sort-key first occurrences (#17) equal ``np.unique(..., return_index=True)[1]`` in
    draw order, also where the key would overflow int64 (the fallback) and for tiny draws."""
    import numpy as np

    from pyro_dp.mechanisms.batches import _first_occurrences

    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 1000, 10**5, 10**7, 2**40, 2**61):
        for m in (1, 5, 100, 1508):
            v = rng.integers(0, n, size=m)
            want = np.sort(np.unique(v, return_index=True)[1])
            assert np.array_equal(_first_occurrences(v, n), want), (n, m)
