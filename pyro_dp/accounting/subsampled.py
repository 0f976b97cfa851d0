r"""Rényi DP of the subsampled DP Metropolis–Hastings kernels: pure functions over integer orders.

* :func:`wbk_amplified_rdp` — privacy amplification by sampling **without replacement** (a
  fixed-size batch of :math:`b` of the :math:`N` rows, :math:`q=b/N`) under the
  **substitute-one** relation: Wang, Balle & Kasiviswanathan 2019 (WBK19), Thm 9, in the
  form of Heikkilä et al. 2019, Cor. 2 and Räisä 2021 thesis, Thm 7–8 (the
  :math:`\varepsilon(\infty)` terms of WBK19 Thm 9 are bounded by their trivial value 2):

  .. math::
      \varepsilon(\alpha) = \frac{1}{\alpha-1}\ln\Big(1 + q^2\binom{\alpha}{2}
      \min\{4(e^{\varepsilon'(2)}-1),\, 2e^{\varepsilon'(2)}\}
      + 2\sum_{j=3}^{\alpha} q^j\binom{\alpha}{j} e^{(j-1)\varepsilon'(j)}\Big).

  It needs :math:`\varepsilon'(j)` at **every integer** :math:`2\le j\le\alpha`, so it is
  defined on integer orders only.
* :func:`barker_batch_rdp` — DP Barker's per-iteration RDP before amplification
  (Heikkilä et al. 2019, Thm 2; thesis Thm 7), valid for integer :math:`\alpha < b/5`:
  :math:`\varepsilon'(\alpha) = \frac{5}{2b} + \frac{1}{2(\alpha-1)}\ln\frac{2b}{b-5\alpha}
  + \frac{2\alpha}{b-5\alpha}`.
* :func:`dp_barker_rdp` — both together, per iteration (compose ``k`` iterations by
  multiplying by ``k``, Mironov 2017 Prop. 1; Heikkilä Cor. 2).
* :func:`minibatch_penalty_rdp` — thesis Thm 8: the minibatch penalty release is a
  Gaussian mechanism with :math:`\varepsilon'(\alpha) = \alpha/(2\tau)` on the batch
  (:math:`\sqrt\tau` = noise multiplier), amplified by WBK19 Thm 9.

Orders where a bound does not hold are **not returned** (never extrapolated): a caller
that needs them gets a ``ValueError``.

Example
-------
>>> orders, eps = dp_barker_rdp(batch_size=1000, num_rows=100_000)
>>> orders[0], orders[-1]  # integer orders 2 <= alpha < b/5
(2, 199)
>>> round(float(eps[0]), 8)  # one iteration at alpha = 2
0.00017225
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from ..mechanisms import RDPCurveEvent

__all__ = [
    "MAX_ORDER",
    "barker_orders",
    "barker_batch_rdp",
    "dp_barker_event",
    "wbk_amplified_rdp",
    "dp_barker_rdp",
    "minibatch_penalty_rdp",
]

#: Largest order computed by default (the sum of WBK19 Thm 9 costs O(alpha) per order;
#: dropping orders can only make the (eps, delta) conversion more pessimistic).
MAX_ORDER = 256


def _check_batch(batch_size, num_rows=None) -> Tuple[int, Optional[int]]:
    b = int(batch_size)
    if b != batch_size or b < 2:
        raise ValueError(f"batch_size must be an integer >= 2, got {batch_size!r}")
    if num_rows is not None:
        n = int(num_rows)
        if n != num_rows or n < b:
            raise ValueError(f"num_rows must be an integer >= batch_size={b}, got {num_rows!r}")
        return b, n
    return b, None


def barker_orders(batch_size: int, max_order: int = MAX_ORDER) -> Tuple[int, ...]:
    r"""Integer orders :math:`2 \le \alpha < b/5` at which Heikkilä et al. 2019, Thm 2 holds
    (capped at ``max_order``). Raises ``ValueError`` when there is none (:math:`b \le 10`).

    >>> barker_orders(16)
    (2, 3)
    """
    b, _ = _check_batch(batch_size)
    top = min((b - 1) // 5, int(max_order))  # largest integer alpha with 5 alpha < b
    if top < 2:
        raise ValueError(
            f"batch_size={b} is too small: DP Barker's RDP bound (Heikkilä et al. 2019, Thm 2) "
            "needs an integer order 2 <= alpha < b/5, i.e. b >= 11"
        )
    return tuple(range(2, top + 1))


def barker_batch_rdp(batch_size: int, orders: Sequence[int]) -> np.ndarray:
    r""":math:`\varepsilon'(\alpha)` of one DP Barker test on a batch of size :math:`b`
    (Heikkilä et al. 2019, Thm 2, eq. (21); Räisä 2021 thesis, Thm 7), valid when every
    tempered per-example ratio satisfies :math:`|T r_i| \le \sqrt b/N` and for integer
    :math:`\alpha < b/5`; other orders raise.

    >>> round(float(barker_batch_rdp(1000, [2])[0]), 6)  # 5/2000 + ln(2000/990)/2 + 4/990
    0.358139
    """
    b, _ = _check_batch(batch_size)
    a = np.asarray(orders)
    if a.ndim != 1 or a.size == 0 or np.any(a != np.round(a)) or np.any(a < 2) or np.any(5 * a >= b):
        raise ValueError(f"Thm 2 of Heikkilä et al. 2019 holds for integer orders 2 <= alpha < b/5 = {b / 5}")
    a = a.astype(np.float64)
    # Heikkilä et al. 2019, Thm 2, eq. (21)
    return 5.0 / (2.0 * b) + np.log(2.0 * b / (b - 5.0 * a)) / (2.0 * (a - 1.0)) + 2.0 * a / (b - 5.0 * a)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def wbk_amplified_rdp(sample_rate: float, base_rdp: Callable[[int], float], orders: Sequence[int]) -> np.ndarray:
    r"""RDP of a mechanism run on a uniformly random fixed-size subset (without replacement,
    :math:`q = b/N`, substitute relation) from its RDP :math:`\varepsilon'(j)` on the subset:
    WBK19 Thm 9 as stated in Heikkilä et al. 2019 Cor. 2 / Räisä 2021 thesis Thm 7–8 (see
    the module docstring). ``base_rdp(j)`` must be valid at every integer ``2 <= j <= max(orders)``.
    Computed in log space.

    >>> wbk_amplified_rdp(1.0, lambda j: j / 2.0, [2]).round(6).tolist()  # ln(1 + 2e), q = 1
    [1.861995]
    """
    q = float(sample_rate)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
    ords = [int(a) for a in orders]
    if not ords or any(a != o or a < 2 for a, o in zip(ords, orders)):
        raise ValueError("WBK19 Thm 9 is stated for integer orders alpha >= 2")
    top = max(ords)
    eps_p = {j: float(base_rdp(j)) for j in range(2, top + 1)}
    log_q = math.log(q)
    out = []
    for alpha in ords:
        e2 = eps_p[2]
        # min{4(e^{eps'(2)} - 1), 2 e^{eps'(2)}} in log space
        term2 = min(math.log(4.0) + e2 + math.log(-math.expm1(-e2)) if e2 > 0 else -math.inf, math.log(2.0) + e2)
        logs = [0.0, 2 * log_q + _log_comb(alpha, 2) + term2]
        for j in range(3, alpha + 1):
            logs.append(math.log(2.0) + j * log_q + _log_comb(alpha, j) + (j - 1) * eps_p[j])
        m = max(logs[1:])
        if m < 0:  # log(1 + small): log1p keeps the relative accuracy of the small part
            log_a = math.log1p(math.fsum(math.exp(v) for v in logs[1:]))
        else:
            log_a = m + math.log(math.fsum(math.exp(v - m) for v in logs))
        out.append(log_a / (alpha - 1))
    return np.array(out)


@functools.lru_cache(maxsize=64)
def _dp_barker_cached(b: int, n: int, max_order: int) -> Tuple[Tuple[int, ...], Tuple[float, ...]]:
    orders = barker_orders(b, max_order)
    base = dict(zip(orders, barker_batch_rdp(b, orders).tolist()))
    eps = wbk_amplified_rdp(b / n, base.__getitem__, orders)
    return orders, tuple(float(e) for e in eps)


def dp_barker_rdp(batch_size: int, num_rows: int, max_order: int = MAX_ORDER) -> Tuple[Tuple[int, ...], np.ndarray]:
    r"""``(orders, rdp)`` of **one** DP Barker iteration with a batch of ``b`` of ``N`` rows
    drawn without replacement: Heikkilä et al. 2019, Thm 2 amplified by Cor. 2 (WBK19
    Thm 9); Räisä 2021 thesis Thm 7. ``k`` iterations are ``k * rdp`` (Mironov 2017, Prop. 1).
    """
    b, n = _check_batch(batch_size, num_rows)
    orders, eps = _dp_barker_cached(b, n, int(max_order))
    return orders, np.array(eps)


def dp_barker_event(batch_size: int, num_rows: int, max_order: int = MAX_ORDER):
    r"""The ledger event of **one** DP Barker iteration: :func:`dp_barker_rdp`'s curve as an
    :class:`~pyro_dp.mechanisms.RDPCurveEvent` (Heikkilä et al. 2019 Thm 2 + Cor. 2).

    >>> ev = dp_barker_event(1000, 100_000)
    >>> ev.orders[:2], len(ev.orders) == len(ev.rdp)
    ((2.0, 3.0), True)
    """
    orders, eps = dp_barker_rdp(batch_size, num_rows, max_order)
    return RDPCurveEvent(tuple(float(a) for a in orders), tuple(eps.tolist()))


def minibatch_penalty_rdp(sample_rate: float, noise_multiplier: float, orders: Sequence[int]) -> np.ndarray:
    r"""Per-iteration RDP of the minibatch DP penalty with a batch drawn without replacement
    (Räisä 2021 thesis, Thm 8): :math:`\varepsilon'(\alpha) = \alpha/(2\tau)` with
    :math:`\sqrt\tau` = ``noise_multiplier`` (noise std / substitute sensitivity
    :math:`c(\theta,\theta')`), amplified by WBK19 Thm 9 at integer orders.

    >>> minibatch_penalty_rdp(1.0, 1.0, [2, 3]).round(6).tolist()  # q = 1: above alpha/2 (a bound)
    [1.861995, 2.025725]
    """
    nm = float(noise_multiplier)
    if not (nm > 0 and math.isfinite(nm)):
        raise ValueError(f"noise_multiplier must be positive and finite, got {noise_multiplier!r}")
    tau = nm * nm
    return wbk_amplified_rdp(sample_rate, lambda j: j / (2.0 * tau), orders)  # thesis Thm 8
