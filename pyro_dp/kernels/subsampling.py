r"""Row subsampling whose cost does not grow with :math:`N` (data-free: only indices).

* :func:`sample_without_replacement` — a uniformly random subset of fixed size :math:`b`,
  in :math:`O(b \log b)` (no ``randperm(N)``).
* :func:`poisson_subsample` — each row independently with probability :math:`q`
  (Poisson sampling, the scheme of the Poisson-subsampled Gaussian accountants), drawn as
  :math:`K \sim \mathrm{Binomial}(N, q)` followed by a uniform subset of size :math:`K`,
  which has exactly the same law.

Both draw from the algorithm's ``torch.Generator`` (never from global state).

>>> g = torch.Generator().manual_seed(0)
>>> idx = sample_without_replacement(g, 1_000_000, 5)
>>> idx.shape, len(set(idx.tolist())) == 5
(torch.Size([5]), True)
"""
from __future__ import annotations

import torch

__all__ = ["sample_without_replacement", "poisson_subsample"]


def sample_without_replacement(rng: torch.Generator, n: int, b: int, device=None) -> torch.Tensor:
    r"""``b`` distinct indices from ``range(n)``, every subset equally likely.

    Draws iid uniform indices and keeps the first ``b`` *distinct* values in draw order
    (the first :math:`b` distinct draws of an iid uniform sequence form a uniformly random
    :math:`b`-subset). Expected cost :math:`O(b \log b)`.
    """
    n, b = int(n), int(b)
    if not (0 <= b <= n):
        raise ValueError(f"need 0 <= batch size <= N, got b={b}, N={n}")
    if b == 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    if 2 * b > n:  # dense case: a permutation is as cheap
        return torch.randperm(n, generator=rng, device=device)[:b]
    draws = torch.zeros(0, dtype=torch.long, device=device)
    while True:
        extra = torch.randint(n, (b + b // 2 + 8,), generator=rng, device=device)
        draws = torch.cat([draws, extra])
        uniq, inverse = torch.unique(draws, return_inverse=True)
        if uniq.numel() >= b:
            break
    pos = torch.arange(draws.numel(), device=device)
    first = torch.full((uniq.numel(),), draws.numel(), dtype=torch.long, device=device)
    first = first.scatter_reduce(0, inverse, pos, reduce="amin")
    order = torch.argsort(first)[:b]
    return uniq[order]


def poisson_subsample(rng: torch.Generator, n: int, q: float, device=None) -> torch.Tensor:
    """Indices of a Poisson sample: each of ``n`` rows included independently w.p. ``q``."""
    if not (0.0 < q <= 1.0):
        raise ValueError(f"sample rate q must be in (0, 1], got {q!r}")
    count = torch.tensor(float(n), dtype=torch.float64)
    k = int(torch.binomial(count, torch.tensor(float(q), dtype=torch.float64), generator=rng))
    return sample_without_replacement(rng, n, k, device=device)
