r"""The private gradient of DP-SGLD and DP-SGNHT (:mod:`~pyro_dp.kernels.sgmcmc`): one released
clipped gradient sum per iteration, written once as a pure tensor function that the eager path
runs as it is and the compiled path traces into one graph on a batch bucket; optionally around a
clip ball's centre (:mod:`~pyro_dp.default_path.centring`, which the default path releases)."""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..compiled import cached_zeros
from ..mechanisms.release import graph_release
from ..mechanisms import (GaussianReleaseSpec, SubsampledGaussianEvent, clip_and_sum, clipped_fraction,
                          gaussian_release_spec, poisson_batch, subsampled_gaussian_event)
from .mh import can_fuse

__all__ = ["GradientRelease", "private_gradient", "private_gradient_fn", "check_substitute"]


class GradientRelease(NamedTuple):
    """Output of :func:`private_gradient`.

    :ivar grad: :math:`\\tilde g`, the noisy log-posterior gradient estimate (safe to use).
    :ivar event: the event to record.
    :ivar clipped_fraction: non-private diagnostic.
    :ivar noise_std: std of the noise on the clipped sum.
    """

    grad: torch.Tensor
    event: SubsampledGaussianEvent
    clipped_fraction: float
    noise_std: float


def check_substitute(relation: str) -> None:
    r"""Refuse a centred clip ball outside substitution (:mod:`~pyro_dp.default_path.centring`'s
    docstring: under add/remove a row's term can have norm :math:`\|m\| + C`)."""
    if relation != "substitute":
        raise ValueError("a centred clip ball keeps its sensitivity under relation='substitute' only")


def private_gradient_fn(lik, temperature: float, q: float, spec: GaussianReleaseSpec, grad_sum, grad_prior,
                        padded: bool = False, shards=None):
    r"""The private gradient of one DP-SGLD/SGNHT step, written once as a pure tensor function
    ``step(z, C, idx, k, ξ) -> (g̃, flags)``: the per-example gradients on the Poisson batch
    ``idx`` (drawn before it from the secret stream; with ``padded`` a bucket of rows of which
    the first ``k`` are the batch, the rest masked) clipped to L2 norm :math:`C` and summed
    (``grad_sum``), ``spec``'s release of the sum with the standard normals ``ξ`` (secret
    stream; :math:`\sigma = \mathrm{nm}\,\Delta`, :math:`\Delta = 2C` substitute or :math:`C`
    add/remove), the prior's gradient (``grad_prior``, data-free) and
    :math:`\tilde g = \nabla\log p(\theta) + \frac Tq\,(\sum_{i\in B}\mathrm{clip}_C(\nabla\ell_i) + \zeta)`
    (Horvitz–Thompson :math:`1/q`; Welling & Teh 2011, eq. 4). The eager path runs it as it is
    (``lik.clipped_grad_sum``, ``lik.grad_log_prior``); ``jit_compile=True`` traces the same
    function on a batch bucket (the compiled likelihood's gradient terms). ``flags``:
    ``(clipped rows, rows, σ)`` in float64. ``step(..., m)`` clips around the centre
    :math:`m` instead, :math:`\sum_{i\in B}(m + \mathrm{clip}_C(\nabla\ell_i - m))`
    (:mod:`~pyro_dp.default_path.centring`; substitution only)."""
    f64 = torch.float64

    def step(z, clip, idx, k, xi, *centre):
        valid = (torch.arange(idx.shape[0], device=z.device) < k).to(z.dtype) if padded else None
        cs = grad_sum(z, clip, idx, valid, *centre)
        if centre:  # each row's term m + clip(g_i - m) lies in B(m, C): the same sensitivity 2C
            cs = cs._replace(total=cs.total + cs.num_rows.to(z.dtype) * centre[0])
        rel = spec.release(cs, clip, xi, shards)  # clip per example, sum, add N(0, (nm Δ)^2) (Abadi et al. 2016)
        # Horvitz–Thompson scaling 1/q = N/b and tempering T: post-processing (Welling & Teh 2011, eq. 4)
        grad = grad_prior(z) + (temperature / q) * lik.project(rel.value)  # project: post-processing
        return grad, torch.stack([torch.as_tensor(rel.num_clipped).to(f64), torch.as_tensor(rel.num_rows).to(f64),
                                  rel.noise_std.to(f64)])

    return step


def _eager_grad_sum(lik):
    """``grad_sum(z, C, idx, valid=None) -> ClippedSum`` outside a graph: the likelihood's own
    clipped gradient sum (which may run its own graph); an empty batch sums no row."""
    def grad_sum(z, clip, idx, valid, centre=None):
        if not idx.numel():  # an empty batch still releases (pure noise): the event is the same
            return clip_and_sum(z.new_zeros((0, z.numel())), clip)
        if centre is not None:
            return clip_and_sum(lik.per_example_grad(z, idx)[1] - centre, clip)
        return lik.clipped_grad_sum(z, clip, idx)[1]

    return grad_sum


def private_gradient(noise, lik, z, *, sample_rate, grad_clip, noise_multiplier, relation,
                     centre=None) -> GradientRelease:
    r""":math:`\tilde g = \nabla\log p(\theta) + \frac Tq(\sum_{i\in B}\mathrm{clip}_C
    (\nabla\ell_i) + \zeta)` with a Poisson batch :math:`B` and
    :math:`\zeta\sim\mathcal N(0, (\mathrm{nm}\,\Delta)^2 I)` (:func:`private_gradient_fn`), run
    as one compiled graph on the batch's size bucket when it can be (the compiled path in one
    process, a model the trace can represent, a non-empty batch: facts about the model's code
    and the secret batch size only), else as it is. The batch
    (:func:`~pyro_dp.mechanisms.poisson_batch`) and :math:`\zeta`'s standard normals are drawn
    before it, in this order, from ``noise`` (the privacy stream). Cost :math:`O(b)`,
    independent of :math:`N`. ``centre``: the clip ball's centre (``None``: the origin)."""
    if centre is not None:
        check_substitute(relation)
    q, nm, T = float(sample_rate), float(noise_multiplier), float(lik.temperature)
    extra = () if centre is None else (centre,)
    spec = gaussian_release_spec(nm, relation)
    dev = z.device
    idx = poisson_batch(noise, lik.num_rows, q, device=dev)  # the secret batch
    k = int(idx.numel())
    event = subsampled_gaussian_event(q, nm, "poisson")  # the release's event: Poisson-subsampled Gaussian
    xi = spec.draw(noise, z.shape, device=dev, event=event)  # the release's standard normals (secret stream)
    clip, step = grad_clip, None
    if k > 0 and can_fuse(lik, noise):
        cl = lik.compiled
        name = f"private_gradient[n={lik.num_rows},q={q!r},T={T!r},nm={nm!r},rel={relation}{',centred' * bool(extra)}]"
        size = cl.bucket_for(name, k)
        clip_t = torch.as_tensor(grad_clip, dtype=z.dtype, device=dev)
        example = (z, clip_t, cached_zeros((size,), torch.long, dev), cached_zeros((), torch.long, dev),
                   cached_zeros(z.shape, torch.float64, dev)) + extra
        terms = (lambda zz, c, i, v, *m: cl.clipped_grad_terms(zz, c, i, v, minus=m[0] if m else None)[1])
        step = cl.fused_graph(name, private_gradient_fn(lik, T, q, spec, terms, lambda zz: cl.log_prior_terms(zz)[1],
                                                        padded=True), example, full_data=False, bucket=size,
                              released=(0,), diagnostic=(1,), noise=(4,) * spec.adds_noise, release=graph_release)  # (gradient, counts)
        if step is not None:
            clip = clip_t
            if size > k:  # padded with row 0 (masked inside)
                idx = torch.cat([idx, torch.zeros(size - k, dtype=idx.dtype, device=dev)])
    if step is None:  # the same function, run as it is
        step = private_gradient_fn(lik, T, q, spec, _eager_grad_sum(lik), lik.grad_log_prior,
                                   shards=getattr(noise, "shards", None))
    grad, flags = step(z, clip, idx, torch.as_tensor(k, device=dev), xi, *extra)
    n_clipped, n_rows, std = flags.tolist()
    return GradientRelease(grad, event, clipped_fraction(n_clipped, n_rows), std)
