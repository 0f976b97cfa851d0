r"""The secret stream (:mod:`pyro_dp.mechanisms`): :class:`NoiseSource`, the dedicated generator
behind every privacy-noise draw and every batch selection, and :func:`seed_from_os`, which seeds
its whole state from the operating system.
"""
from __future__ import annotations

import math
import secrets
from typing import Optional

import torch

from ..warn import warn_user
from . import batches as _batches  # looked up at call time: tests patch pyro_dp.mechanisms.batches

__all__ = ["seed_from_os", "ReproducibleNoiseWarning", "NoiseSource"]

# --------------------------------------------------------------------------- noise


#: torch's CPU generator state (``CPUGeneratorImplState``, stable since torch 1.x): a uint64
#: initial seed, int ``left``, int ``seeded``, uint64 ``next``, then the 624 MT19937 words,
#: each in the low half of a uint64, then the normal-sampling caches; 5056 bytes in all
_CPU_STATE_BYTES, _MT_WORDS, _MT_OFFSET = 5056, 624, 24


def seed_from_os(generator: torch.Generator) -> torch.Generator:
    r"""Seed ``generator`` with its **whole** state from the operating system's CSPRNG.

    ``manual_seed`` is not enough on the CPU: torch's MT19937 keeps only the low 32 bits of a
    seed (the state is derived from ``seed & 0xffffffff``), so a 63-bit OS seed gave 2^32
    possible noise streams — about 16 CPU-hours to try them all and replay a run's noise
    (found by a privacy audit, 2026-11-26). Here all 624 state words (19 968 bits) come from
    ``os.urandom``; on CUDA (Philox) the 64-bit seed and the offset do. Refuses (rather than
    seeding weakly) a CPU state layout it does not know.

    >>> a, b = seed_from_os(torch.Generator()), seed_from_os(torch.Generator())
    >>> bool((torch.randn(4, generator=a) == torch.randn(4, generator=b)).all())
    False
    """
    if generator.device.type != "cpu":
        generator.manual_seed(secrets.randbits(64))
        state = generator.get_state()
        if state.numel() == 16:  # Philox: uint64 seed, uint64 offset (a multiple of 4)
            raw = bytearray(state.cpu().numpy().tobytes())
            raw[8:16] = (secrets.randbits(60) * 4).to_bytes(8, "little")
            generator.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())
        return generator
    generator.manual_seed(0)  # left = 1, seeded = 1, next = 0: the next draw regenerates the state
    raw = bytearray(generator.get_state().numpy().tobytes())
    if len(raw) != _CPU_STATE_BYTES:
        raise RuntimeError(f"torch's CPU generator state has {len(raw)} bytes, not {_CPU_STATE_BYTES}: cannot seed its "
                           "whole state from the OS on this torch version (please report)")
    words = secrets.token_bytes(4 * _MT_WORDS)
    if not any(words):  # MT19937 needs a non-zero state (probability 2^-19968)
        words = b"\x01" + words[1:]
    for i in range(_MT_WORDS):
        at = _MT_OFFSET + 8 * i
        raw[at:at + 8] = words[4 * i:4 * i + 4] + bytes(4)
    generator.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())
    if bytes(generator.get_state().numpy().tobytes()) != bytes(raw):
        raise RuntimeError("torch did not take the OS-seeded generator state (please report)")
    return generator


class ReproducibleNoiseWarning(UserWarning):
    """Privacy noise or batch selection was seeded by the user: anyone who knows the seed can
    replay the noise and remove it from the released values. For tests only.

    >>> issubclass(ReproducibleNoiseWarning, UserWarning)
    True
    """


class NoiseSource:
    r"""The secret stream: the dedicated :class:`torch.Generator` behind every privacy-noise
    draw **and every batch selection** of a release. Nothing else draws from it.

    Privacy of the Gaussian mechanism assumes the adversary cannot predict the noise, and
    privacy amplification by subsampling assumes the same of the batch. So by default the
    generator is seeded from the operating system's CSPRNG, whatever seed the kernel was
    given (the kernel's ``seed`` makes only the data-free randomness reproducible:
    proposals, momenta, accept uniforms).

    :param seed: an integer makes the stream reproducible — a **testing option**: it warns
        with :class:`ReproducibleNoiseWarning` unless ``warn=False``. ``None`` (default): OS
        entropy: the generator's whole state from ``os.urandom`` (:func:`seed_from_os`).
    :param secure_mode: refuse a ``seed`` and draw every Gaussian
        as the Opacus/Holohan et al. (2021, §5.1) construction
        :math:`(Z_1+Z_2+Z_3+Z_4)/2` in float64, scaled by σ in float64 before any cast.
        **What it does not guarantee**: torch's generator (MT19937 on CPU, Philox on CUDA)
        is not a cryptographic PRNG — an attacker who saw enough raw draws could in principle
        reconstruct its state (they see only noisy sums); the noise is a floating-point
        Gaussian, not a discrete Gaussian, and no snapping is applied (Mironov 2012's attack
        on the Laplace mechanism has Gaussian analogues that the four-sum mitigates but does
        not provably remove). See ``docs/privacy.md``, "Threat model".
    :param device: device the noise is drawn on (a generator is device-bound).
    :param bool warn: warn when ``seed`` is given (default ``True``).

    **Copies** (``copy.deepcopy``, a pickle round trip, e.g. of a kernel mid-run) never carry
    the secret stream: an OS-seeded source is reseeded from OS entropy in the copy, and its
    pickle holds no generator state at all, so a copy cannot draw the original's next
    normals (two copies run on neighbouring data sets would otherwise release with the same
    noise, and the difference of their releases is one row's noise-free term). An explicitly
    ``seed``-ed source (the test option: whoever knows the seed can replay it anyway) is
    copied with its state, so a copy of a seeded test stream continues it exactly — the
    reproducibility the test option exists for. Checkpoints of the test option carry the
    state explicitly (:meth:`get_state`, :meth:`set_state`).

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", ReproducibleNoiseWarning)
    ...     a, b = NoiseSource(seed=0), NoiseSource(seed=0)
    >>> bool((a.normal(1.0, (3,)) == b.normal(1.0, (3,))).all())  # seeded: reproducible
    True
    >>> bool((NoiseSource().normal(1.0, (3,)) == NoiseSource().normal(1.0, (3,))).all())  # default: fresh
    False
    """

    def __init__(self, seed: Optional[int] = None, secure_mode: bool = False, device=None, *, warn: bool = True):
        self.secure_mode = bool(secure_mode)
        self.device = torch.device(device if device is not None else "cpu")
        if self.secure_mode and seed is not None:
            raise ValueError("secure_mode=True draws its seed from the OS: do not pass a noise seed")
        if seed is not None and warn:
            warn_user(
                "privacy noise and batch selection are seeded: anyone who knows the seed can replay the "
                "noise and remove it from every released value. Use this for tests only.",
                ReproducibleNoiseWarning,
            )
        #: ``True`` for the test option (an explicit ``seed``): the only stream a copy continues
        self.seeded = seed is not None
        self.generator = torch.Generator(device=self.device)
        if seed is None:  # the whole generator state from os.urandom (not a 32-bit CPU seed)
            seed_from_os(self.generator)
        else:
            self.generator.manual_seed(int(seed))
        #: :class:`~pyro_dp.distributed.Shards` of a sharded kernel (``None``: one process). The
        #: releases then sum the ranks' local sums, rank 0's noise added inside the reduction.
        self.shards = None

    def normal(self, std, shape=(), like: Optional[torch.Tensor] = None) -> torch.Tensor:
        r"""Draw :math:`\mathcal N(0, \mathrm{std}^2)` noise of ``shape``: drawn and scaled by
        ``std`` in float64, then cast to the dtype (and device) of ``like``."""
        dtype = like.dtype if like is not None else torch.get_default_dtype()
        z = self.standard_normal(shape) * torch.as_tensor(std, dtype=torch.float64, device=self.device)
        out_device = like.device if like is not None else self.device
        return z.to(dtype=dtype, device=out_device)

    def standard_normal(self, shape=()) -> torch.Tensor:
        r"""The float64 :math:`\mathcal N(0, 1)` draw of ``shape`` that :meth:`normal` scales by its
        ``std`` (the same draws from the same stream, on the generator's device). For a graph
        that scales the noise itself (the compiled path's fused steps, #17): ``normal(std,
        shape, like)`` is ``(standard_normal(shape) * std.double()).to(like.dtype)``.

        >>> a, b = NoiseSource(seed=0, warn=False), NoiseSource(seed=0, warn=False)
        >>> bool(a.standard_normal((2,)).mul(3.0).eq(b.normal(3.0, (2,), like=torch.zeros(2, dtype=torch.float64))).all())
        True
        """
        shape = tuple(shape)
        z = torch.randn(shape, generator=self.generator, dtype=torch.float64, device=self.device)
        if self.secure_mode:  # Holohan et al. 2021 §5.1 / Opacus: (Z1 + Z2 + Z3 + Z4) / 2
            for _ in range(3):
                z += torch.randn(shape, generator=self.generator, dtype=torch.float64, device=self.device)
            z = z / 2
        return z

    def standard_normals(self, count: int, shape=()) -> torch.Tensor:
        r"""``[count, *shape]``: the draws of ``count`` successive :meth:`standard_normal` calls of
        ``shape``, exactly (the same values, and the stream left where those calls leave it), in
        fewer calls where that is provably the same: torch's CPU generator fills a request of
        fewer than 16 values one value after another from one sequence (larger requests use a
        vectorised Box–Muller, :func:`torch.randn`'s ``normal_fill_16``), so ``k`` successive
        requests of ``m`` values equal one request of ``k·m`` values while ``k·m < 16``. Elsewhere
        (a CUDA generator, ``secure_mode``'s four interleaved draws, ``shape`` of 16 values or
        more, a subclass with its own :meth:`standard_normal`) it makes the ``count`` calls.
        Used for DP-HMC's ``L`` gradient normals (#39: fewer calls on the compiled path's
        critical loop).

        >>> a, b = NoiseSource(seed=3, warn=False), NoiseSource(seed=3, warn=False)
        >>> torch.equal(a.standard_normals(10, (2,)), torch.stack([b.standard_normal((2,)) for _ in range(10)]))
        True
        """
        shape, count = tuple(shape), int(count)
        m = math.prod(int(s) for s in shape)  # values per release
        # the fast path only where it is the base draw itself: a subclass's own standard_normal
        # (e.g. pyro_dp.mutants.ScaledNoiseSource, the audits' weak-noise mutant) is called per release
        plain = type(self).standard_normal is NoiseSource.standard_normal
        per_call = 15 // m if (plain and m > 0 and self.generator.device.type == "cpu" and not self.secure_mode) else 0
        if per_call <= 1 or count <= 1:
            if count == 0:
                return torch.zeros((0,) + shape, dtype=torch.float64, device=self.device)
            return torch.stack([self.standard_normal(shape) for _ in range(count)])
        parts, left = [], count
        while left > 0:
            k = min(per_call, left)
            parts.append(torch.randn((k * m,), generator=self.generator, dtype=torch.float64, device=self.device))
            left -= k
        return torch.cat(parts).reshape((count,) + shape)

    # ------------------------------------------------------------ batch selection (secret)
    def poisson_subsample(self, n: int, q: float, device=None) -> torch.Tensor:
        """Indices of a Poisson sample: each of ``n`` rows independently with probability ``q``."""
        return _batches.poisson_subsample(self.generator, n, q, device=device)

    def poisson_subsamples(self, n: int, q: float, num: int, device=None):
        """``num`` independent Poisson samples at once, padded: ``(idx [num, max size], sizes [num])``."""
        return _batches.poisson_subsamples(self.generator, n, q, num, device=device)

    def sample_without_replacement(self, n: int, b: int, device=None) -> torch.Tensor:
        """``b`` distinct row indices, every subset equally likely."""
        return _batches.sample_without_replacement(self.generator, n, b, device=device)

    def sample_with_replacement(self, n: int, b: int, device=None) -> torch.Tensor:
        """``b`` row indices drawn uniformly with replacement."""
        return torch.randint(int(n), (int(b),), generator=self.generator, device=self.device).to(device)

    def poisson(self, rate: float) -> int:
        """One :math:`\\mathrm{Poisson}(\\mathrm{rate})` batch size."""
        r = torch.as_tensor(float(rate), dtype=torch.float64, device=self.device)
        return int(torch.poisson(r, generator=self.generator))

    def uniform(self, shape, like: torch.Tensor) -> torch.Tensor:
        """``Uniform(0, 1)`` draws (e.g. a batch's thinning), dtype/device of ``like``."""
        u = torch.rand(tuple(shape), generator=self.generator, dtype=torch.float64, device=self.device)
        return u.to(dtype=like.dtype, device=like.device)

    # ------------------------------------------------------------ a draw called off
    def mark_tentative(self) -> None:
        """Remember the stream's position (inside this object: the secret never leaves it) for
        :meth:`rewind_tentative`. Only for
        :meth:`~pyro_dp.mechanisms.GaussianReleaseSpec.draw_tentative`, whose contract (the
        draw is added to nothing released) makes the rewind safe."""
        self._marked = self.generator.get_state()

    def rewind_tentative(self) -> None:
        """Back to the position of the last :meth:`mark_tentative`, once. Only for
        :meth:`~pyro_dp.mechanisms.GaussianReleaseSpec.withdraw`."""
        marked, self._marked = self.__dict__.pop("_marked", None), None
        if marked is None:
            raise RuntimeError("internal error: a withdrawn release without its tentative draw (please report)")
        self.generator.set_state(marked)

    # ------------------------------------------------------------ copies and checkpoints
    def get_state(self) -> torch.Tensor:
        """The generator's state, for a checkpoint of the seeded test option only (an OS-seeded
        stream's state is the secret: refused)."""
        if not self.seeded:
            raise RuntimeError("the secret stream's state never leaves the NoiseSource: only a seeded test stream "
                               "(noise_seed) can be saved")
        return self.generator.get_state()

    def set_state(self, state: torch.Tensor) -> None:
        """Continue a seeded test stream from :meth:`get_state`."""
        self.generator.set_state(state)
        self.seeded = True

    # torch.Generator is not picklable, and the secret stream must not travel: a copy
    # (``copy.deepcopy``, pickle) of an OS-seeded source is reseeded from OS entropy; only the
    # seeded test stream carries its state (class docstring).
    def __getstate__(self):
        return {
            "secure_mode": self.secure_mode,
            "device": str(self.device),
            "seeded": self.seeded,
            "state": self.generator.get_state() if self.seeded else None,
        }

    def __setstate__(self, state):
        self.secure_mode = state["secure_mode"]
        self.device = torch.device(state["device"])
        self.generator = torch.Generator(device=self.device)
        self.seeded = bool(state.get("seeded", False)) and state.get("state") is not None
        if self.seeded:
            self.generator.set_state(state["state"])
        else:  # the copy's own secret stream, from os.urandom
            seed_from_os(self.generator)
        self.shards = None  # a process group does not travel: the kernel's setup() sets it again
