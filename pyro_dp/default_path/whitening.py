r"""Posterior-shaped coordinates for the default path (issue 40): a private estimate of the
posterior's covariance at the private start, and the preconditioner it gives
(:mod:`pyro_dp.preconditioning`), for ``DPAutoTune(whiten=True)``.

**The release** (:func:`private_metric`): the sum of the outer products of the clipped
per-example gradients at the start,

.. math::
    \hat M = \sum_{i=1}^N \bar g_i \bar g_i^\top + E,\qquad
    \bar g_i = g_i\min\{1, c/\|g_i\|\},\quad g_i = \nabla\ell_i(z_0),

with :math:`E` symmetric, its upper triangle (diagonal included) i.i.d.
:math:`\mathcal N(0,\sigma^2)`: the Gaussian mechanism on the upper-triangular vector of the
sum ("Analyze Gauss", Dwork, Talwar, Thakurta & Zhang 2014, Alg. 1). One row's vector has L2
norm at most :math:`\|\bar g_i\bar g_i^\top\|_F = \|\bar g_i\|^2 \le c^2`, so the release is the
audited clipped sum of :func:`~pyro_dp.mechanisms.clipped_sum_with_noise` with clip :math:`c^2`
(substitute sensitivity :math:`2c^2`). For a GLM at its mode :math:`\sum_i g_i g_i^\top` is the
empirical Fisher information, which estimates the observed information (the posterior's
precision, Bernstein–von Mises).

**The coordinates** (:func:`whitening_from_metric`, post-processing): the posterior precision
:math:`P = T\,\hat M_+ + H_+` with :math:`\hat M_+` the released matrix with its eigenvalues
raised to at least :math:`2\sqrt{d}\,\sigma` (about the spectral norm of the noise matrix
:math:`E`, so a direction the data do not inform is not read from noise) and :math:`H_+` the
data-free Hessian of the negative log prior (eigenvalues clipped at 0); :math:`L` is the
Cholesky factor of :math:`P^{-1}`. The chain then runs in :math:`u = L^{-1}(z - z_0)`, where
the posterior is close to :math:`\mathcal N(0, I)`.

Measured (``benchmarks/whitening.py``, ``docs/tuning.md`` "Posterior-shaped coordinates"):
on a 0.8-correlated logistic regression (d = 5, N = 5·10⁴) DPPenalty's effective sample sizes at
ε = 8 rose from 6–15 to 26–50 and its smallest sd ratio from 0.73–0.87 to 0.86–0.92; at ε = 2,
2 of 3 runs met the issue's criterion against 1 of 3; over 11 data sets, 11 of 11 met it at
ε = 8 against 6 of 11, and 7 of 11 at ε = 2 against 3 of 11. DPPenalty's default path whitens.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from ..mechanisms import clip_and_sum, clip_rows, clipped_sum_with_noise, finite_rows, sum_clipped

__all__ = ["private_metric", "whitening_from_metric", "metric_is_resolved", "METRIC_SHARE",
           "private_log_scales", "scaling_from_release", "SCALE_SHARE", "LOG_SCALE_BOUND",
           "likelihood_coordinates", "reshapes", "whitens", "MIN_SCALE_SPREAD", "metric_sd", "prior_capped"]

#: share of the tuning's Gaussian-DP :math:`\mu^2` that ``DPAutoTune(whiten=True)`` spends on
#: the metric release (taken from the DP-Adam steps' share)
METRIC_SHARE = 0.1

#: share of the tuning's :math:`\mu^2` spent on the per-coordinate scales (one release, before the
#: private start; taken from the DP-Adam steps' share)
SCALE_SHARE = 0.05

#: :math:`A`: each row's :math:`\log|g_{ij}|` is clipped to :math:`[-A, A]` (gradient magnitudes
#: from :math:`e^{-16}\approx10^{-7}` to :math:`e^{16}\approx9\cdot10^{6}`: a column in cents or
#: in millions of inches is still told apart from one in the unit ball)
LOG_SCALE_BOUND = 16.0

#: :math:`E\log|X| = \log\sigma - (\gamma + \log 2)/2` for :math:`X\sim\mathcal N(0,\sigma^2)`
#: (Euler's :math:`\gamma`): the geometric mean of :math:`|g|` is :math:`e^{-0.635}\approx0.53` of
#: its root mean square for Gaussian gradients (the factor that turns one into the other)
_GAUSS_LOG_ABS_OFFSET = (0.5772156649015329 + math.log(2.0)) / 2.0

#: the scales are used only where the coordinates' typical gradient sizes spread over more than
#: this factor (post-processing of the release). Measured (``docs/tuning.md``, "Columns on their
#: own scales"): with column scales 1/30/1 000 applying them took DPPenalty from 50 posterior sds
#: off to 0.3-0.5; on a two-level model whose sizes spread over a factor of about 4 applying them
#: made it worse (3.0-7.3 sds off against 1.8-2.3 in its own coordinates)
MIN_SCALE_SPREAD = 10.0

#: the spread (in log units) allowed to one coordinate's log-scale around the pooled one before
#: its noise counts (:func:`scaling_from_release`): a factor e ~ 2.7
_SHRINK_SD = 1.0


def likelihood_coordinates(lik) -> Optional[torch.Tensor]:
    r"""The indices (ascending) of the latent coordinates the per-example log-likelihood depends
    on (:attr:`~pyro_dp.likelihood.PrivateLikelihood.likelihood_mask`), or ``None`` for all of
    them. Data-free. The scales and the metric are released for these coordinates only: in the
    others every row's gradient is exactly zero (a hierarchical model's population mean and
    scale), so a release there would be noise alone; they keep the model's own coordinates.

    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro_dp.likelihood import PrivateLikelihood
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(0., 5.))
    ...     theta = pyro.sample("theta", dist.Normal(mu * torch.ones(2), 1.).to_event(1))
    ...     with pyro.plate("data", len(y)):
    ...         pyro.sample("obs", dist.Normal(theta.sum(), 1.), obs=y)
    >>> likelihood_coordinates(PrivateLikelihood(model, (torch.zeros(4),), seed=0))
    tensor([1, 2])
    """
    mask = lik.likelihood_mask
    return None if mask is None else torch.nonzero(mask > 0).reshape(-1)


def reshapes(lik) -> bool:
    """Whether the scales and the metric apply to this model (data-free): at least two
    coordinates in the likelihood (with one, a coordinate change would change no clip's
    balance)."""
    coords = likelihood_coordinates(lik)
    return (lik.dim if coords is None else int(coords.numel())) >= 2


def whitens(lik) -> bool:
    """Whether the default path whitens this model (data-free): :func:`reshapes`, and every latent
    coordinate in the likelihood. Measured: whitening the likelihood's block alone of two
    two-level models (group effects in the likelihood, population mean and scale outside) gave
    1.99 and 2.06 posterior sds off against 1.83-2.27 without (a centred model, ε = 8) and
    10.65, 11.02, 6.49 against 6.53-7.75 (the default suite's non-centred one, ε = 2): no gain,
    so such models keep the scales alone (``docs/tuning.md``)."""
    return reshapes(lik) and lik.likelihood_mask is None


def _restricted(rows, coords):
    return rows if coords is None else (g[:, coords] for g in rows)


def _embedded(block: torch.Tensor, coords, d: int) -> torch.Tensor:
    """The ``[D, D]`` identity with ``block`` in the rows and columns ``coords`` (ascending, so
    a lower-triangular block stays lower-triangular)."""
    if coords is None:
        return block
    out = torch.eye(d, dtype=block.dtype, device=block.device)
    out[coords.unsqueeze(-1), coords] = block
    return out


def private_log_scales(lik, z: torch.Tensor, noise_multiplier: float, noise, relation: str = "substitute",
                       record=None, *, rows, coords: Optional[torch.Tensor] = None
                       ) -> Tuple[torch.Tensor, torch.Tensor, float]:
    r"""``(S [D], C [D], σ)``: per coordinate :math:`j`, the released sum of the rows' clipped
    log-magnitudes :math:`S_j = \sum_i 1[g_{ij}\ne0]\,\mathrm{clip}_{[-A,A]}\log|g_{ij}|`, the
    released count :math:`C_j = \sum_i 1[g_{ij}\ne0]` of rows whose gradient moves coordinate
    :math:`j` (for sparse coordinates: a group's intercept is moved by its group's rows only), and
    the noise's standard deviation in :math:`C` units.

    One Gaussian release of the vector :math:`v_i = (s_{i1},\dots,s_{iD}, A\,c_{i1},\dots,A\,c_{iD})`,
    every entry in :math:`[-A, A]`, so :math:`\|v_i\|\le A\sqrt{2D}` and
    :func:`~pyro_dp.mechanisms.clipped_sum_with_noise` with that clip is the Gaussian mechanism
    with substitute sensitivity :math:`2A\sqrt{2D}` (Dwork & Roth 2014 Thm A.1). Logarithms make
    the release scale-free: a column on a scale 1 000 times another's gives log-magnitudes 6.9
    apart, and one clip :math:`A` (:data:`LOG_SCALE_BOUND`) serves every column, where one clip
    of the gradients themselves would serve only the largest (``docs/tuning.md``). A row whose
    gradient is not finite contributes the zero vector (the per-row rule). ``rows`` yields the
    per-example gradients ``[B, D]`` (**private**: only summed here and released with noise);
    ``record(event)`` is called right after the release. With ``coords``
    (:func:`likelihood_coordinates`) only those coordinates are released (:math:`D` their number)."""
    a = LOG_SCALE_BOUND
    d = lik.dim if coords is None else int(coords.numel())
    # clip_and_sum clips nothing more (kept: the audited sum and its counts)
    parts = (clip_and_sum(_log_magnitude_rows(g, a), a * math.sqrt(2 * d)) for g in _restricted(rows, coords))
    rel = clipped_sum_with_noise(sum_clipped(parts), a * math.sqrt(2 * d), noise_multiplier, noise, relation)
    if record is not None:
        record(rel.event)
    value = rel.value.to(z.dtype)
    return value[:d], value[d:] / a, float(rel.noise_std) / a


def _log_magnitude_rows(g: torch.Tensor, a: float) -> torch.Tensor:
    """``[B, 2D]``: each row's :func:`private_log_scales` vector, every entry in ``[-a, a]``
    (a non-finite row is the zero row: the per-row rule)."""
    g = finite_rows(g)
    nz = g != 0
    logs = torch.where(nz, torch.log(torch.where(nz, g.abs(), torch.ones_like(g))).clamp(-a, a), torch.zeros_like(g))
    return torch.cat([logs, a * nz.to(g.dtype)], dim=-1)


def scaling_from_release(log_sums: torch.Tensor, counts: torch.Tensor, count_std: float,
                         num_rows: Optional[int] = None) -> torch.Tensor:
    r"""``[D]``: the diagonal of the coordinate change :math:`z = z_0 + \mathrm{diag}(l)\,u` in
    which every coordinate's per-example gradients have the same typical size, from
    :func:`private_log_scales` (post-processing):

    .. math::
        l_j = \frac{1}{\sqrt k\,r_j},\qquad r_j = e^{m_j + 0.635},\quad m_j = S_j / C_j,
        \quad k = \mathrm{clip}\Big(\sum_j C_j / N,\ 1,\ D\Big),

    with :math:`r_j` the root mean square of the nonzero :math:`g_{ij}` guessed from their
    geometric mean (:math:`e^{0.635}` turns one into the other for Gaussian gradients). In
    :math:`u` a row's gradient has about unit norm (:math:`k` is the number of coordinates a row
    moves, on average: :math:`D` for dense columns, 3 for a row that moves its group's intercept,
    a slope and a scale; ``num_rows`` is the public :math:`N`, default: :math:`k = D`), each
    coordinate an equal part of it: the
    gradients of a model whose features lie in the unit ball, the setting the defaults are tuned
    for, whatever the scales of the user's columns. A coordinate whose count is under
    :math:`3\sigma_C` (no rows move it, or too few to tell from the noise) keeps its own scale
    (:math:`l_j = 1`); where the resolved :math:`r_j` all lie within a factor
    :data:`MIN_SCALE_SPREAD` of each other every :math:`l_j = 1` (columns on one scale). The noise of :math:`m_j` is :math:`A\sigma_C/C_j`, large for a
    coordinate few rows move (20 group intercepts at :math:`N = 2\cdot10^4`, ε = 8: about 1.5,
    a factor 4.5 in scale, measured to throw the chain 140 posterior sds off); each
    :math:`m_j` is therefore shrunk towards the precision-weighted mean of all of them, as its
    posterior mean under a normal prior of sd 1 around that mean (a coordinate with a precise
    :math:`m_j`, e.g. a dense column at large :math:`N`, keeps its own).

    >>> import torch
    >>> m = torch.tensor([0.0, math.log(1000.0)]) - 0.6352  # mean log|g|: rms 1 and 1000
    >>> l = scaling_from_release(m * 1e4, torch.tensor([1e4, 1e4]), 1.0) * math.sqrt(2)
    >>> [round(float(v), 4) for v in l]
    [1.0, 0.001]
    """
    d = counts.shape[0]
    resolved = counts > 3.0 * float(count_std)
    c = counts.clamp(min=1.0)
    m = torch.where(resolved, log_sums / c, torch.zeros_like(counts))
    if float(count_std) > 0 and bool(resolved.any()):
        # the noise of S_j is sigma_S = A sigma_C, so m_j's is sigma_S / C_j: large for a sparse
        # coordinate (a group's intercept, moved by N/G rows). Shrink m_j towards the
        # precision-weighted mean of the resolved coordinates, as the posterior mean under a
        # N(pooled, SHRINK_SD^2) prior on m_j (normal-normal; post-processing)
        se2 = (LOG_SCALE_BOUND * float(count_std) / c) ** 2
        w = torch.where(resolved, 1.0 / se2, torch.zeros_like(se2))
        pooled = float((w * m).sum() / w.sum())
        keep = _SHRINK_SD ** 2 / (_SHRINK_SD ** 2 + se2)
        m = torch.where(resolved, keep * m + (1.0 - keep) * pooled, m)
    if bool(resolved.any()) and float(m[resolved].max() - m[resolved].min()) < math.log(MIN_SCALE_SPREAD):
        return torch.ones_like(m)  # columns on one scale: the model's own coordinates (see MIN_SCALE_SPREAD)
    k = float(d)
    if num_rows:
        k = min(max(float(torch.where(resolved, counts, torch.zeros_like(counts)).sum()) / num_rows, 1.0), float(d))
    scale = torch.exp(-(m + _GAUSS_LOG_ABS_OFFSET)) / math.sqrt(max(k, 1.0))
    return torch.where(resolved, scale, torch.ones_like(scale))


def prior_capped(lik, z: torch.Tensor, scaling: torch.Tensor, coords: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""``scaling`` (:func:`scaling_from_release`, the likelihood's coordinates ``coords``) with each
    :math:`l_j` capped at the prior's spread at ``z``, :math:`1/\sqrt{h_{jj}}` with :math:`h` the
    Hessian of the negative log prior (Jacobian included) in the current coordinates: where it is not
    positive (a flat prior) no cap. Data-free (post-processing of the release, the prior at a
    data-free ``z``); applied only where the release reshapes (some :math:`l_j\ne 1`).

    Why (issue 59, acceptance 3): the release reads a row's gradient size as the posterior's
    scale, which holds where the curvature barely changes (a GLM's coefficients), not for a shape
    latent far from its posterior: at the data-free start of a Student-t regression
    (:math:`\nu = 20`, nearly normal) most rows' :math:`\partial\ell_i/\partial\log\nu` are
    near 0, so :math:`l_\nu = 11.8` — one unit of the private start's coordinates was 11.8 log
    units of :math:`\nu`, its Adam steps jumped :math:`\nu` between 1.2 and 3 700 and it settled
    at :math:`\nu = 56` against NUTS's 3.75, and the chains ended 31–34 posterior sds off
    (``benchmarks/latent_kinds.py``). A unit wider than the prior's spread is never the
    posterior's scale.

    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro_dp.likelihood import PrivateLikelihood
    >>> def model(y):
    ...     s = pyro.sample("s", dist.LogNormal(0.0, 0.5))
    ...     m = pyro.sample("m", dist.Normal(0.0, 5.0))
    ...     with pyro.plate("data", len(y)):
    ...         pyro.sample("obs", dist.Normal(m, s), obs=y)
    >>> lik = PrivateLikelihood(model, (torch.zeros(3),), seed=0)
    >>> prior_capped(lik, torch.zeros(2), torch.tensor([3.0, 3.0])).tolist()  # log s: prior sd 0.5
    [0.5, 3.0]
    >>> prior_capped(lik, torch.zeros(2), torch.ones(2)).tolist()  # no reshaping: unchanged
    [1.0, 1.0]
    """
    if bool((scaling == 1).all()):
        return scaling
    h = torch.diagonal(-torch.func.hessian(lik.eager_log_prior)(z.detach()))
    if coords is not None:
        h = h[coords]
    h = torch.nan_to_num(h.to(scaling), nan=0.0, posinf=0.0, neginf=0.0)
    cap = torch.where(h > 0, 1.0 / torch.sqrt(h.clamp(min=1e-300)), torch.full_like(h, math.inf))
    return torch.minimum(scaling, cap)


def private_metric(lik, z: torch.Tensor, clip: float, noise_multiplier: float, noise, relation: str = "substitute",
                   record=None, *, rows, coords: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, float]:
    r"""``(M̂ [D, D], σ)``: the released sum of outer products of the clipped per-example
    gradients at ``z`` and its noise standard deviation (module docstring). ``rows`` yields the
    per-example gradients ``[B, D]`` in chunks (**private**: only summed here, clipped, and
    released with noise); ``record(event)`` is called right after the release. With ``coords``
    the matrix of those coordinates only (``[d, d]``, :func:`likelihood_coordinates`)."""
    d = lik.dim if coords is None else int(coords.numel())
    iu = torch.triu_indices(d, d, device=z.device)
    c2 = float(clip) ** 2

    def chunk(g):
        g, _ = clip_rows(g, clip)  # the per-row rule, then ||g_i|| <= c
        v = (g.unsqueeze(-1) * g.unsqueeze(-2))[:, iu[0], iu[1]]  # ||v_i|| <= ||g_i||^2 <= c^2
        return clip_and_sum(v, c2)  # clips nothing more (kept: the audited sum and its counts)

    rel = clipped_sum_with_noise(sum_clipped(chunk(g) for g in _restricted(rows, coords)), c2, noise_multiplier,
                                 noise, relation)
    if record is not None:
        record(rel.event)
    m = torch.zeros(d, d, dtype=z.dtype, device=z.device)
    m[iu[0], iu[1]] = rel.value.to(z.dtype)
    m = m + m.T - torch.diag(torch.diagonal(m))
    return m, float(rel.noise_std)


def _psd(a: torch.Tensor, floor: float) -> torch.Tensor:
    """The symmetric part of ``a`` with its eigenvalues raised to at least ``floor``."""
    evals, evecs = torch.linalg.eigh(0.5 * (a + a.T))
    return (evecs * evals.clamp(min=floor)) @ evecs.T


def metric_is_resolved(metric: torch.Tensor, noise_std: float) -> bool:
    r"""Whether every direction of the released matrix stands clear of its noise: all eigenvalues
    of its symmetric part above :math:`\sqrt d\,\sigma`, half the noise's spectral norm (about
    :math:`2\sqrt d\,\sigma`, the floor to which :func:`whitening_from_metric` raises them, so a
    direction between the two is given at most twice its estimated precision). If not, the
    default path keeps the model's own coordinates (post-processing of the release): a direction
    read from noise would be given the floor's precision, far too much for a weakly informed
    coordinate. Measured: with covariates on scales 1, 30 and 1 000 one clip serves all columns,
    the small columns' curvature sits under the noise, and whitening made DPPenalty 109 posterior
    sds off where the plain default was 60 (before the per-coordinate scales; ``docs/tuning.md``).
    The threshold was the floor itself until 2026-11-28: with the scales, on the unscaled linear
    model at ε = 2 the smallest eigenvalue lay at 0.57–1.24 of the floor, and DPPenalty ran
    unwhitened in 2 of 2 runs (1.93 and 0.57 sds off, both warned) against 4 of 4 runs right at
    half the floor (``docs/tuning.md``, "Control variates", acceptance 2 at ε = 2).

    >>> import torch
    >>> metric_is_resolved(torch.diag(torch.tensor([100.0, 50.0])), 1.0), metric_is_resolved(torch.eye(2), 1.0)
    (True, False)
    """
    d = metric.shape[0]
    evals = torch.linalg.eigvalsh(0.5 * (metric + metric.T))
    return bool((evals > math.sqrt(d) * float(noise_std)).all())


def metric_sd(lik, L: torch.Tensor) -> torch.Tensor:
    r"""The posterior sd per flat unconstrained coordinate that a whitening ``L`` (of
    :func:`whitening_from_metric`, in the likelihood's current coordinates) predicts:
    :math:`\sqrt{\mathrm{diag}(L_0 L L^\top L_0^\top)}`, :math:`L_0` the current preconditioner's
    factor (identity without one). Post-processing of the release. Where the release is not
    resolved (:func:`metric_is_resolved`) its floor gives a direction read from noise *more*
    precision than it has, so the predicted sd there is too small — on the safe side for the
    end-of-chain spread check that reads it (:data:`~pyro_dp.checks.MIN_SPREAD`).

    >>> import torch
    >>> from pyro_dp.likelihood import PrivateLikelihood
    >>> from pyro_dp.models.examples import normal_mean_model as model
    >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 2.0]),), seed=0)
    >>> lik.set_preconditioner(torch.tensor([1.0]), torch.tensor([[0.5]]))
    >>> metric_sd(lik, torch.tensor([[4.0]])).tolist()  # 0.5 * 4
    [2.0]
    """
    pre = lik.preconditioner
    total = L if pre is None else pre[1].to(L) @ L
    return (total * total).sum(1).sqrt().detach().double().cpu()


def whitening_from_metric(lik, z: torch.Tensor, metric: torch.Tensor, noise_std: float,
                          coords: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, float]:
    r"""``(L, f)``: the Cholesky factor of the posterior covariance guess
    :math:`(T\hat M_+ + H_+)^{-1}` (module docstring) and the factor ``f`` by which typical
    per-example gradient norms shrink in the new coordinates,
    :math:`f = \sqrt{\mathrm{tr}(L^\top\hat M_+L)/\mathrm{tr}(\hat M_+)}` (the clips found in
    :math:`z` carry over to :math:`u` as ``clip * f``). Post-processing of ``metric`` and
    data-free (the prior's Hessian at ``z`` from a stand-in row). With ``coords``, ``metric`` is
    those coordinates' (:func:`private_metric`) and ``L`` is the identity elsewhere (the prior's
    Hessian restricted to them: the guess of their covariance given the others)."""
    d = metric.shape[0]
    scale = float(torch.linalg.matrix_norm(metric, ord=2)) if d else 0.0
    floor = max(2.0 * math.sqrt(d) * float(noise_std), 1e-12 * scale, 1e-300)
    m_plus = _psd(metric, floor)
    h = -torch.func.hessian(lik.eager_log_prior)(z.detach())
    if coords is not None:
        h = h[coords.unsqueeze(-1), coords]
    h_plus = _psd(torch.nan_to_num(h, nan=0.0, posinf=0.0, neginf=0.0), 0.0)
    precision = lik.temperature * m_plus + h_plus
    cov = torch.linalg.inv(_psd(precision, floor * 1e-6))
    L = torch.linalg.cholesky(0.5 * (cov + cov.T))
    f = math.sqrt(float(torch.trace(L.T @ m_plus @ L)) / max(float(torch.trace(m_plus)), 1e-300))
    return _embedded(L, coords, lik.dim), f
