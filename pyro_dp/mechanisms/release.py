r"""Releases (:mod:`pyro_dp.mechanisms`): clip per example, sum, add Gaussian noise from the secret
stream, and return the value with its event — the one audited place where noise is added.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch

from .clipping import ClippedSum, clip_and_sum, clipped_fraction
from .events import RELATIONS, NonPrivateEvent, PrivacyEvent, gaussian_event  # noqa: F401 (doctests)
from . import tap as _tap
from .recorder import record_release, withdraw_release
from .noise import NoiseSource
from ..private import reveal

#: why a release reveals (:func:`pyro_dp.private.reveal`): the value is released with the noise this
#: function adds (its draw recorded), so what it returns is public
_RELEASED = "released: the noise drawn and recorded for this release is added here"
#: the clipped-row counts of a release: the documented non-private diagnostic of every release
_DIAGNOSTIC = "non-private diagnostic: the clipped-row count of a release (shown as such, never fed back)"
#: a fused graph's released outputs (pyro_dp.compiled.CompiledLikelihood.fused_graph, graphs.OutputTaint)
_GRAPH_RELEASED = ("released inside a fused graph: the standard normals a release spec drew and recorded are graph "
                   "inputs, added in the graph by the spec's own release (the output's sources checked at the trace)")
#: a release's noise scale: data-free or bounded as its event's analysis assumes (gaussian_release)
_STD = "the noise scale of a release, data-free or bounded as its event's analysis states"

__all__ = [
    "NoisyRelease",
    "clipped_sum_with_noise",
    "draw_gaussian_noise",
    "add_gaussian_noise",
    "gaussian_release",
    "noisy_histogram",
    "noisy_count",
    "GaussianReleaseSpec",
    "gaussian_release_spec",
    "GaussianStdReleaseSpec",
    "SumRelease",
]

# --------------------------------------------------------------------------- release


def graph_release(x, diagnostic: bool = False):
    """A fused graph's output named released (a release spec's value after its noise, or what is
    computed from released values) or ``diagnostic`` (a release's clipped-row count), made public
    here, with the mechanism's reason: the boundary of the compiled path's releases, as
    :meth:`GaussianReleaseSpec.release` is the eager path's (:class:`pyro_dp.graphs.OutputTaint`
    checks, at the trace, that a released output is computed from the graph's noise inputs)."""
    return reveal(x, reason=_DIAGNOSTIC if diagnostic else _GRAPH_RELEASED)


class NoisyRelease(NamedTuple):
    """Result of :func:`clipped_sum_with_noise`.

    :ivar value: the released noisy sum (safe to use anywhere: it is in the ledger).
    :ivar event: the event to record in the ledger.
    :ivar noise_std: standard deviation of the noise that was added.
    :ivar clipped_fraction: fraction of rows whose norm exceeded the clip. This is a
        statistic of the data: it is **not** private, it is for the user's own diagnostics
        and must never feed back into the algorithm.
    
    >>> import torch
    >>> from pyro_dp.mechanisms import recording
    >>> with recording():  # a release records its event here (a kernel's step opens one)
    ...     out = clipped_sum_with_noise(torch.tensor([0.5, 3.0]), clip=1.0, noise_multiplier=0.0,
    ...                                  noise=NoiseSource())
    >>> out.value, out.event, out.clipped_fraction
    (tensor(1.5000), NonPrivateEvent(), 0.5)
    """

    value: torch.Tensor
    event: PrivacyEvent
    noise_std: torch.Tensor
    clipped_fraction: float


def clipped_sum_with_noise(
    values,
    clip,
    noise_multiplier: float,
    noise: NoiseSource,
    relation: str = "substitute",
    *,
    event: Optional[PrivacyEvent] = None,
) -> NoisyRelease:
    r"""Clip per example, sum, add Gaussian noise — in that order, in one audited place.

    ``values`` has shape ``[B]`` (scalars, clipped to ``[-clip, clip]``) or ``[B, D]``
    (vectors, clipped to L2 norm ``clip``), or is the :class:`ClippedSum` that
    :func:`clip_and_sum` returned for them with the same ``clip`` (the compiled path fuses
    that part into its per-example graph). The sum over the ``B`` rows has
    :math:`\ell_2`-sensitivity :math:`\Delta = 2\,\mathrm{clip}` under substitution of one
    row and :math:`\mathrm{clip}` under add/remove; the noise has standard deviation
    :math:`\sigma = \mathrm{noise\_multiplier}\cdot\Delta` (Gaussian mechanism,
    Räisä 2021 thesis Def. 6–7, Thm 4).

    ``clip`` may be a data-free tensor (e.g. :math:`b\|\theta-\theta'\|`); it must not
    depend on the data. ``noise_multiplier = 0`` is the documented non-private test
    mode: no noise is added and the event is :class:`NonPrivateEvent`, for which every
    accountant reports :math:`\varepsilon = \infty`.

    The release is recorded in the open recorder (:mod:`~pyro_dp.mechanisms.recorder`) as its
    Gaussian event, or as ``event`` where the mechanism's analysis states another one for it
    (DP-Fast MH's per-iteration :math:`(\varepsilon,\delta)`, Zhang & Zhang 2023 Thm 2).

    >>> import torch
    >>> from pyro_dp.mechanisms import recording
    >>> with recording():
    ...     out = clipped_sum_with_noise(torch.ones(100, dtype=torch.float64), clip=1.0,
    ...                                  noise_multiplier=5.0, noise=NoiseSource())
    >>> out.event, float(out.noise_std)  # sigma = nm * 2 * clip (substitute one row)
    (GaussianEvent(noise_multiplier=5.0), 10.0)
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    cs = values if isinstance(values, ClippedSum) else clip_and_sum(values, clip)
    counts = reveal((cs.num_clipped, cs.num_rows), reason=_DIAGNOSTIC)
    shards = getattr(noise, "shards", None)
    if shards is not None:  # sharded rows: the counts of all ranks (a non-private diagnostic)
        counts = shards.all_reduce_sum(torch.stack([torch.as_tensor(c, dtype=torch.float64) for c in counts]))
    frac = clipped_fraction(*counts)
    return add_gaussian_noise(cs.total, clip, noise_multiplier, noise, relation,
                              event=event)._replace(clipped_fraction=frac)


def gaussian_release(value: torch.Tensor, std, event: PrivacyEvent, noise: NoiseSource) -> NoisyRelease:
    r"""Release ``value`` + :math:`\mathcal N(0, \mathrm{std}^2 I)` for a mechanism whose privacy
    analysis is ``event`` — the release path of the kernels whose noise is not
    ``noise_multiplier x sensitivity`` of a clipped sum (DP Barker's :math:`C - \sigma_b^2`,
    Heikkilä et al. 2019 eq. (18); the minibatch penalty's :math:`\mathrm{nm}\cdot c(\theta,\theta')`,
    Räisä 2021 thesis Thm 8). ``std`` must be data-independent or bounded as the event's
    analysis assumes.

    >>> from pyro_dp.mechanisms import recording
    >>> with recording():
    ...     out = gaussian_release(torch.tensor(1.0, dtype=torch.float64), 0.0, NonPrivateEvent(), NoiseSource())
    >>> float(out.value), out.event
    (1.0, NonPrivateEvent())
    """
    std_t = reveal(torch.as_tensor(std, dtype=value.dtype, device=value.device), reason=_STD)
    spec = GaussianStdReleaseSpec(event)
    return NoisyRelease(spec.release(value, std_t, spec.draw(noise, value.shape)), event, std_t, 0.0)


def _plus_scaled(value: torch.Tensor, std: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
    """``value + std * xi`` as :meth:`NoiseSource.normal` scales a draw: the float64 standard
    normal ``xi`` times ``std`` in float64, then cast to ``value``'s dtype and device (pure)."""
    return value + (xi * std.to(torch.float64)).to(dtype=value.dtype, device=value.device)


class _spec_or_class_method:
    """A method that also runs when called on the class, with ``self = None`` (what was a
    ``staticmethod``: :meth:`GaussianStdReleaseSpec.release` is called both ways)."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj, cls=None):
        return functools.partial(self.fn, obj)


@dataclass(frozen=True)
class GaussianStdReleaseSpec:
    r""":func:`gaussian_release` split like :class:`GaussianReleaseSpec`, for a mechanism whose noise
    standard deviation its own analysis fixes and whose ``event`` it states (DP Barker's
    :math:`\sqrt{C - \sigma_b^2}`, Heikkilä et al. 2019 eq. (18); the minibatch penalty's
    :math:`\mathrm{nm}\cdot c(\theta,\theta')`, Räisä 2021 thesis Thm 8): :meth:`draw` takes the
    standard normal(s) from the secret stream before the step, :meth:`release` (pure) adds
    ``std`` times them, bit for bit as :func:`gaussian_release` does.

    >>> from pyro_dp.mechanisms import GaussianEvent, recording
    >>> spec = GaussianStdReleaseSpec(GaussianEvent(2.0))
    >>> a, b = NoiseSource(seed=0, warn=False), NoiseSource(seed=0, warn=False)
    >>> v, std = torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64)
    >>> with recording():
    ...     bool(spec.release(v, std, spec.draw(a)) == gaussian_release(v, std, spec.event, b).value)
    True
    """

    event: PrivacyEvent

    def draw(self, noise: NoiseSource, shape=(), device=None) -> torch.Tensor:
        """The float64 standard normal(s) of one release of ``shape`` from the secret stream
        ``noise`` (on ``device``); drawn whatever the event, as :func:`gaussian_release` draws;
        recorded as :attr:`event` (:mod:`~pyro_dp.mechanisms.recorder`)."""
        record_release(self.event)
        xi = noise.standard_normal(shape).to(device if device is not None else noise.device)
        if _tap.ACTIVE is not None:  # pyro_dp.mechanisms.tap: where the normals came from (replay)
            _tap.drew(noise, xi)
        return xi

    @_spec_or_class_method
    def release(self, value: torch.Tensor, std: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
        """``value`` plus ``std`` (a tensor of ``value``'s dtype) times ``xi`` (pure). Callable on
        the class as well (``GaussianStdReleaseSpec.release(value, std, xi)``: no event stated)."""
        value, std = reveal((value, std), reason=_RELEASED)
        out = _plus_scaled(value, std, xi)
        if _tap.ACTIVE is not None:  # pyro_dp.mechanisms.tap (eager only)
            out = _tap.seen(out, std, None if self is None else self.event, _redraw(value, std, xi))
        return out


def add_gaussian_noise(
    total: torch.Tensor,
    clip,
    noise_multiplier: float,
    noise: NoiseSource,
    relation: str = "substitute",
    *,
    event: Optional[PrivacyEvent] = None,
) -> NoisyRelease:
    r"""The noise half of :func:`clipped_sum_with_noise`: ``total`` must already be a sum
    of per-example terms each clipped to norm ``clip`` (e.g. a cached clipped sum that is
    released repeatedly, Yıldırım & Ermiş 2019 Alg. 3). Adds
    :math:`\mathcal N(0, (\mathrm{nm}\cdot\Delta)^2 I)` with :math:`\Delta = 2\,\mathrm{clip}`
    (substitute) or :math:`\mathrm{clip}` (add/remove) and returns the event. Recorded in the
    open recorder as that event, or as ``event`` (:func:`clipped_sum_with_noise`).

    >>> import torch
    >>> from pyro_dp.mechanisms import recording
    >>> with recording():
    ...     out = add_gaussian_noise(torch.tensor(42.0, dtype=torch.float64), clip=0.5, noise_multiplier=2.0,
    ...                              noise=NoiseSource(), relation="add_remove")
    >>> float(out.noise_std)  # nm * clip under add/remove
    1.0
    """
    shards = getattr(noise, "shards", None)
    total = reveal(total, reason=_RELEASED)
    draw = _gaussian_event(total, clip, noise_multiplier, relation)
    record_release(draw.event if event is None else event)  # every rank records; first: no recorder, no draw
    if shards is None or shards.rank == 0:
        draw = _draw_noise(draw, total, noise_multiplier, noise)
    if noise_multiplier > 0:
        if shards is None:
            value = total + draw.value
        else:  # pyro_dp.distributed: rank 0's noise enters once, inside the sum over ranks
            local = total + draw.value if shards.rank == 0 else total
            value = shards.all_reduce_sum(local)
    else:
        value = total if shards is None else shards.all_reduce_sum(total)
    if _tap.ACTIVE is not None:  # pyro_dp.mechanisms.tap (an audit's white-box view; eager only)
        redraw = None
        if shards is None and noise_multiplier > 0:  # the same release again: fresh normals, same stream
            redraw = lambda: total + _draw_noise(draw, total, noise_multiplier, noise).value  # noqa: E731
        value = _tap.seen(value, draw.noise_std, draw.event, redraw)
    return draw._replace(value=value)


def _redraw(value: torch.Tensor, std: torch.Tensor, xi: torch.Tensor):
    """For the tap (:mod:`pyro_dp.mechanisms.tap`, ``replay``): ``value + std * xi'`` with fresh
    normals ``xi'`` from the secret stream that drew ``xi`` (``None`` if no stream drew it)."""
    source = _tap.source_of(xi)
    if source is None:
        return None
    return lambda: _plus_scaled(value, std, source.standard_normal(tuple(xi.shape)).to(xi.device))


def _gaussian_event(like: torch.Tensor, clip, noise_multiplier: float, relation: str) -> NoisyRelease:
    """``(None, event, std, 0)`` of the Gaussian release of a sum clipped to ``clip`` (no draw)."""
    spec = gaussian_release_spec(float(noise_multiplier), relation)
    return NoisyRelease(None, spec.event, spec.std(clip, like), 0.0)


class SumRelease(NamedTuple):
    r"""What :meth:`GaussianReleaseSpec.release` returns: the noisy sum and its facts, all tensors
    (a traced graph returns them as they are).

    :ivar value: the released noisy sum.
    :ivar noise_std: :math:`\sigma` (data-free).
    :ivar num_clipped: clipped rows (**non-private** diagnostic).
    :ivar num_rows: rows summed.
    """

    value: torch.Tensor
    noise_std: torch.Tensor
    num_clipped: torch.Tensor
    num_rows: torch.Tensor


@dataclass(frozen=True)
class GaussianReleaseSpec:
    r"""The Gaussian release of a sum of per-example terms each clipped to ``clip``, as a value:
    it owns the noise scale :math:`\sigma = \mathrm{nm}\cdot\Delta` with :math:`\Delta =
    2\,\mathrm{clip}` under substitution of one row and :math:`\mathrm{clip}` under add/remove
    (Gaussian mechanism, Räisä 2021 thesis Def. 6–7, Thm 4), the event, and the draw of the
    release's standard normals from the secret stream.

    It splits :func:`clipped_sum_with_noise` so that a kernel's step can be one pure tensor
    function with its randomness drawn before it (issue 39): :meth:`draw` takes the standard
    normal :math:`\xi` from the secret :class:`~pyro_dp.mechanisms.NoiseSource` before the step;
    :meth:`release` (pure; a traced graph runs it as it is) adds :math:`\sigma\xi` to the clipped
    sum, scaled as :meth:`~pyro_dp.mechanisms.NoiseSource.normal` scales it (float64, then cast),
    so the value is bit for bit that of :func:`clipped_sum_with_noise` with the same stream.
    The caller adds the draw to exactly one clipped sum and records :attr:`event`.
    ``noise_multiplier = 0`` is the non-private test mode: nothing is drawn or added, the event
    is :class:`NonPrivateEvent`.

    >>> spec = gaussian_release_spec(2.0)
    >>> total = torch.tensor(3.0, dtype=torch.float64)
    >>> float(spec.std(0.5, total)), spec.event  # sigma = nm * 2 * clip (substitute one row)
    (2.0, GaussianEvent(noise_multiplier=2.0))
    >>> a, b = NoiseSource(seed=0, warn=False), NoiseSource(seed=0, warn=False)
    >>> cs = ClippedSum(total, torch.tensor(0), torch.tensor(1))
    >>> from pyro_dp.mechanisms import recording
    >>> with recording():  # both releases record their event here
    ...     out = spec.release(cs, 0.5, spec.draw(a, ()))
    ...     bool(out.value == clipped_sum_with_noise(cs, 0.5, 2.0, b).value)  # the same release
    True
    """

    noise_multiplier: float
    relation: str = "substitute"

    def __post_init__(self):
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        object.__setattr__(self, "noise_multiplier", float(self.noise_multiplier))

    @property
    def event(self) -> PrivacyEvent:
        """The event of one release (:func:`gaussian_event`)."""
        return gaussian_event(self.noise_multiplier)

    @property
    def adds_noise(self) -> bool:
        """``False`` in the non-private test mode (``noise_multiplier = 0``)."""
        return self.noise_multiplier > 0

    def std(self, clip, like: torch.Tensor) -> torch.Tensor:
        r""":math:`\sigma = \mathrm{nm}\cdot\Delta` of a sum clipped to ``clip`` (a number or a
        data-free tensor), a tensor of the dtype and device of ``like``."""
        sens_factor = 2.0 if self.relation == "substitute" else 1.0  # l2-sensitivity 2*clip (substitute) or clip
        clip_t = torch.as_tensor(clip, dtype=like.dtype, device=like.device)
        return self.noise_multiplier * sens_factor * clip_t  # sigma = nm * Delta (Räisä 2021 thesis Def. 7)

    def draw(self, noise: NoiseSource, shape=(), device=None, *, event: Optional[PrivacyEvent] = None,
             releases: int = 1) -> torch.Tensor:
        """The float64 standard normal(s) of one release of ``shape``, from the secret stream
        ``noise`` (on ``device``): zeros, with nothing drawn, in the non-private test mode and on
        the ranks other than 0 of sharded rows (:mod:`pyro_dp.distributed`: rank 0's noise enters
        once, inside the sum over ranks). The release is recorded in the open recorder
        (:mod:`~pyro_dp.mechanisms.recorder`) as :attr:`event`, or as ``event``: the event the
        mechanism's analysis states for it (e.g. the subsampled Gaussian of a Poisson batch).
        ``releases``: the normals of that many releases drawn in this one call (one per entry of
        ``shape``'s leading dimension; a vectorised runner's block of iterations), recorded as
        that many releases."""
        if int(releases) < 1:
            raise ValueError(f"releases must be a positive integer, got {releases!r}")
        return self._secret_draw(noise, tuple(shape), device, lambda: noise.standard_normal(shape), int(releases),
                                 event)

    def draw_each(self, noise: NoiseSource, count: int, shape=(), device=None, *,
                  event: Optional[PrivacyEvent] = None) -> torch.Tensor:
        """``[count, *shape]``: the standard normals of ``count`` releases of ``shape`` made one
        after another, exactly as ``count`` calls of :meth:`draw` (stacked) would draw them
        (:meth:`NoiseSource.standard_normals`: fewer generator calls where that is provably the same),
        recorded as ``count`` releases."""
        return self._secret_draw(noise, (int(count),) + tuple(shape), device,
                                 lambda: noise.standard_normals(count, shape), int(count), event)

    def _secret_draw(self, noise: NoiseSource, full_shape: tuple, device, draw, count: int = 1,
                     event: Optional[PrivacyEvent] = None, tentative: bool = False) -> torch.Tensor:
        """``draw()`` (the secret stream's normals) on ``device``; zeros of ``full_shape``, with
        nothing drawn, in the non-private test mode and on the ranks other than 0 of sharded rows.
        Recorded first (:func:`~pyro_dp.mechanisms.recorder.record_release`: with no recorder open
        nothing is drawn)."""
        if count:
            record_release(self.event if event is None else event, count, tentative)
        shards = getattr(noise, "shards", None)
        out = device if device is not None else noise.device
        if self.adds_noise and (shards is None or shards.rank == 0):
            xi = draw().to(out)
            if _tap.ACTIVE is not None:  # pyro_dp.mechanisms.tap: where the normals came from (replay)
                _tap.drew(noise, xi)
            return xi
        return torch.zeros(full_shape, dtype=torch.float64, device=out)

    def draw_tentative(self, noise: NoiseSource, shape=(), device=None, *,
                       event: Optional[PrivacyEvent] = None) -> torch.Tensor:
        r""":meth:`draw`, for a release that a data-free test made *after* the draw may still call
        off (DP-HMC's ratio release, dropped when the trajectory leaves the support:
        :func:`~pyro_dp.kernels.hmc.hmc_step`). Until the next tentative draw, :meth:`withdraw`
        puts the secret stream back where it was before this draw, and takes its record back.

        >>> from pyro_dp.mechanisms import recording
        >>> spec = gaussian_release_spec(1.0)
        >>> a, b = NoiseSource(seed=0, warn=False), NoiseSource(seed=0, warn=False)
        >>> with recording() as drawn:
        ...     _ = spec.draw_tentative(a)
        ...     spec.withdraw(a)  # called off: a goes on as if it had not drawn
        ...     same = bool(spec.draw(a) == spec.draw(b))
        >>> same, len(drawn.events)
        (True, 2)
        """
        record_release(self.event if event is None else event, 1, tentative=True)
        noise.mark_tentative()
        return self._secret_draw(noise, tuple(shape), device, lambda: noise.standard_normal(shape), 0)

    @staticmethod
    def withdraw(noise: NoiseSource) -> None:
        r"""Call off the release of the last :meth:`draw_tentative`: the secret stream goes on
        as if its normals had never been drawn, so the next release takes them. Only for a draw
        that was added to nothing released (the caller's contract): unseen noise may be used
        once, later (the same law, independent of everything released so far). Its record is
        taken back (:meth:`~pyro_dp.mechanisms.recorder.Recorder.withdraw`)."""
        withdraw_release()
        noise.rewind_tentative()

    def release(self, cs: ClippedSum, clip, xi: torch.Tensor, shards=None) -> SumRelease:
        r"""The clipped sum ``cs`` plus :math:`\sigma\xi` (``xi`` from :meth:`draw`): pure tensor
        code when ``shards`` is ``None``. With ``shards`` (the rows of sharded ranks) the local
        sums and counts are summed over the ranks, rank 0's noise inside the sum, as
        :func:`add_gaussian_noise` does."""
        cs = cs._replace(total=reveal(cs.total, reason=_RELEASED), num_clipped=reveal(cs.num_clipped, reason=_DIAGNOSTIC))
        std = self.std(clip, cs.total)
        counts = (cs.num_clipped, cs.num_rows)
        if shards is None:
            value = _plus_scaled(cs.total, std, xi) if self.adds_noise else cs.total
            if _tap.ACTIVE is not None:  # pyro_dp.mechanisms.tap (eager only)
                value = _tap.seen(value, std, self.event, _redraw(cs.total, std, xi) if self.adds_noise else None)
            return SumRelease(value, std, *counts)
        counts = shards.all_reduce_sum(torch.stack([torch.as_tensor(c, dtype=torch.float64) for c in counts]))
        local = cs.total
        if self.adds_noise and shards.rank == 0:
            local = _plus_scaled(cs.total, std, xi)
        value = shards.all_reduce_sum(local)
        if _tap.ACTIVE is not None:  # pyro_dp.mechanisms.tap (eager only)
            value = _tap.seen(value, std, self.event)
        return SumRelease(value, std, counts[0], counts[1])


@functools.lru_cache(maxsize=64)
def gaussian_release_spec(noise_multiplier: float, relation: str = "substitute") -> GaussianReleaseSpec:
    """``GaussianReleaseSpec(noise_multiplier, relation)``, built once per value (a kernel
    releases with the same one at every iteration).

    >>> gaussian_release_spec(2.0) is gaussian_release_spec(2.0)
    True
    """
    return GaussianReleaseSpec(float(noise_multiplier), relation)


def draw_gaussian_noise(
    like: torch.Tensor,
    clip,
    noise_multiplier: float,
    noise: NoiseSource,
    relation: str = "substitute",
    count: Optional[int] = None,
    *,
    event: Optional[PrivacyEvent] = None,
) -> NoisyRelease:
    r"""The noise of :func:`add_gaussian_noise`, drawn before the clipped sum it will be added
    to exists: ``value`` is the draw :math:`\mathcal N(0, (\mathrm{nm}\cdot\Delta)^2 I)` of the
    shape of ``like`` (zeros when ``noise_multiplier`` is 0, the non-private test mode), with
    the event and the standard deviation. ``add_gaussian_noise(total, ...)`` is
    ``total + draw_gaussian_noise(total, ...).value``, the same draw from the same stream.

    For the compiled path, which adds the draw to the clipped sum *inside* one fused graph
    (:meth:`pyro_dp.compiled.CompiledLikelihood.fused_graph`; the steps written once draw through
    :class:`GaussianReleaseSpec` instead): the
    clipped sum then never leaves the graph without its noise. The caller must add the draw
    to exactly one clipped sum of per-example terms each clipped to ``clip``, record the
    event, and not run sharded (``noise.shards``: the noise must enter inside the all-reduce).
    With ``count``, ``value`` stacks ``count`` such draws (``[count, *like.shape]``), drawn one
    after another exactly as ``count`` calls would draw them, for ``count`` releases of the
    same event, recorded ``count`` times in the open recorder (once without ``count``), as the
    Gaussian event or as ``event``.

    >>> import torch
    >>> from pyro_dp.mechanisms import recording
    >>> with recording() as drawn:
    ...     out = draw_gaussian_noise(torch.zeros(2, dtype=torch.float64), clip=0.5, noise_multiplier=2.0,
    ...                               noise=NoiseSource())
    >>> tuple(out.value.shape), out.event, float(out.noise_std), drawn.events  # sigma = nm * 2 * clip
    ((2,), GaussianEvent(noise_multiplier=2.0), 2.0, [GaussianEvent(noise_multiplier=2.0)])
    """
    like = reveal(like, reason="only the shape, dtype and device of the sum are read")
    out = _gaussian_event(like, clip, noise_multiplier, relation)
    record_release(out.event if event is None else event, 1 if count is None else int(count))
    return _draw_noise(out, like, noise_multiplier, noise, count)


def _draw_noise(out: NoisyRelease, like: torch.Tensor, noise_multiplier: float, noise: NoiseSource,
                count: Optional[int] = None) -> NoisyRelease:
    """:func:`draw_gaussian_noise` without its record, for the release ``out`` (its event and
    std, :func:`_gaussian_event`) of a sum shaped as ``like`` (the caller records:
    :func:`add_gaussian_noise`, or the tap's replay of a release already recorded)."""
    if count is None:
        if noise_multiplier > 0:
            return out._replace(value=noise.normal(out.noise_std, like.shape, like=like))
        return out._replace(value=torch.zeros_like(like))
    if noise_multiplier > 0:  # one draw per release (a single [count, ...] draw would use the stream differently)
        return out._replace(value=torch.stack([noise.normal(out.noise_std, like.shape, like=like)
                                               for _ in range(int(count))]))
    return out._replace(value=torch.zeros((int(count),) + tuple(like.shape), dtype=like.dtype, device=like.device))


def noisy_histogram(
    bin_index: torch.Tensor,
    num_bins: int,
    noise_multiplier: float,
    noise: NoiseSource,
    relation: str = "substitute",
) -> NoisyRelease:
    r"""Release the number of rows in each of ``num_bins`` data-free bins, plus Gaussian noise.

    ``bin_index`` holds one bin per row (a row whose statistic is NaN or infinite must already
    have been given a bin by a data-free per-row rule: every row counts exactly once). Each row
    adds 1 to exactly one count, so the count vector has :math:`\ell_2`-sensitivity
    :math:`\sqrt 2` under substitution of one row (one count loses 1, another gains 1) and 1
    under add/remove (the Gaussian histogram: Dwork & Roth 2014 §3.3 and Thm A.1); the noise
    has standard deviation :math:`\mathrm{noise\_multiplier}\cdot\Delta`. ``bin_index`` of shape ``[N, k]``: ``k`` histograms
    released together (histogram ``j``'s counts at ``j * num_bins`` onwards), each row adding 1 to
    one count of each, so :math:`\Delta = \sqrt{2k}` and :math:`\sqrt k`. Sharded rows
    (:mod:`pyro_dp.distributed`) sum their counts inside the release like every clipped sum.

    >>> from pyro_dp.mechanisms import recording
    >>> with recording():  # every release records its event here (a kernel's step opens one)
    ...     out = noisy_histogram(torch.tensor([0, 0, 2]), 3, noise_multiplier=0.0, noise=NoiseSource())
    ...     one = noisy_histogram(torch.tensor([0]), 3, 2.0, NoiseSource())
    ...     two = noisy_histogram(torch.tensor([[0, 1], [2, 1]]), 3, noise_multiplier=0.0, noise=NoiseSource())
    ...     pair = noisy_histogram(torch.tensor([[0, 1]]), 3, 2.0, NoiseSource())
    >>> out.value.tolist(), out.event
    ([2.0, 0.0, 1.0], NonPrivateEvent())
    >>> round(float(one.noise_std), 4)  # 2 * sqrt(2)
    2.8284
    >>> two.value.tolist()  # two histograms of two rows
    [1.0, 0.0, 1.0, 0.0, 2.0, 0.0]
    >>> round(float(pair.noise_std), 4)  # 2 * sqrt(4)
    4.0
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    num_bins = int(num_bins)
    k = bin_index.shape[1] if bin_index.dim() == 2 else 1  # histograms: one count per row in each
    idx = reveal(bin_index, reason=_RELEASED).to(torch.long)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= num_bins):
        raise ValueError(f"bin indices must lie in [0, {num_bins})")
    if k > 1:
        idx = idx + num_bins * torch.arange(k, device=idx.device)  # histogram j's bins: j·num_bins onwards
    counts = torch.bincount(idx.reshape(-1), minlength=k * num_bins).to(torch.float64)
    # add_gaussian_noise's std is nm * s * clip with s = 2 (substitute) or 1 (add/remove):
    # clip = Δ / s gives Δ = √(2k) (substitute) and √k (add/remove) as above
    clip = math.sqrt(2.0 * k) / 2.0 if relation == "substitute" else math.sqrt(k)
    return add_gaussian_noise(counts, clip, noise_multiplier, noise, relation)


def noisy_count(count: torch.Tensor, noise_multiplier: float, noise: NoiseSource,
                relation: str = "substitute") -> NoisyRelease:
    r"""Release a count of rows (each row adds 0 or 1, decided by a per-row rule), plus
    Gaussian noise of standard deviation ``noise_multiplier``: one row changes the count by at
    most 1 under either relation (substituting it moves it between counted and not counted),
    so :math:`\Delta = 1` (Dwork & Roth 2014 Thm A.1; the unclipped count of the adaptive clip
    of Andrew et al. 2021, Alg. 1). Sharded rows sum their counts inside the release.

    >>> from pyro_dp.mechanisms import recording
    >>> with recording() as drawn:
    ...     out = noisy_count(torch.tensor(7), noise_multiplier=0.0, noise=NoiseSource())
    ...     nm3 = noisy_count(torch.tensor(7), 3.0, NoiseSource())
    >>> float(out.value), out.event
    (7.0, NonPrivateEvent())
    >>> float(nm3.noise_std)  # nm * 1
    3.0
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    # add_gaussian_noise's std is nm * s * clip with s = 2 (substitute) or 1 (add/remove): Δ = 1
    clip = 0.5 if relation == "substitute" else 1.0
    return add_gaussian_noise(torch.as_tensor(reveal(count, reason=_RELEASED)).to(torch.float64), clip,
                              noise_multiplier, noise, relation)
