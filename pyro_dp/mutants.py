"""The audits' mutants: a kernel whose release noise is scaled (:func:`weak_noise`, through
:class:`ScaledNoiseSource`), and the noise-free runs that aim an audit at the neighbours that
separate most (:func:`noise_free_scores`, :func:`separating_seed`). :func:`pyro_dp.audit.audit`,
:func:`pyro_dp.release_audit.audit_releases` and the kit (:mod:`pyro_dp.testing`) use them; a
kernel that passes an audit must fail it as its weak-noise mutant (a test that cannot fail is a
defect). Also importable from :mod:`pyro_dp.testing`.
"""
from __future__ import annotations

import copy
import math
from typing import Callable, Iterable, Optional, Tuple, Union

import torch

from .audit import as_args, factory_caller, one_run, statistic_fn
from .kernels.base import DPKernel
from .mechanisms import NoiseSource

__all__ = ["ScaledNoiseSource", "weak_noise", "noise_free_scores", "separating_seed"]


class ScaledNoiseSource(NoiseSource):
    r"""A :class:`~pyro_dp.mechanisms.NoiseSource` whose Gaussian draws are ``factor`` times
    those of the source it wraps (the same secret generator): a **mutant** for tests, never
    for releases. Batch selection (Poisson, with and without replacement, thinning uniforms)
    is the wrapped source's, unchanged.

    :param base: the kernel's noise source (its generator, ``secure_mode``, device and shards
        are taken over).
    :param float factor: the fraction of the accounted noise actually added (``0`` releases
        the clipped sums without noise).

    >>> src = ScaledNoiseSource(NoiseSource(seed=0, warn=False), 0.5)
    >>> ref = NoiseSource(seed=0, warn=False)
    >>> bool(src.normal(2.0, (3,)).eq(0.5 * ref.normal(2.0, (3,))).all())
    True
    """

    def __init__(self, base: NoiseSource, factor: float):  # noqa: D107 (no super().__init__: no new seed)
        self.__dict__.update({k: v for k, v in base.__dict__.items() if k != "noise_factor"})
        self.noise_factor = float(factor)

    def standard_normal(self, shape=()) -> torch.Tensor:
        """The wrapped source's draw times ``factor`` (what ``normal`` and the release specs scale)."""
        return super().standard_normal(shape) * self.noise_factor

    def __getstate__(self):
        return {**super().__getstate__(), "noise_factor": self.noise_factor}

    def __setstate__(self, state):
        super().__setstate__(state)
        self.noise_factor = state["noise_factor"]


_MUTANT_CLASSES: dict = {}


def _rebuild_mutant(base_cls, state):
    obj = _mutant_class(base_cls).__new__(_mutant_class(base_cls))
    obj.__setstate__(state)
    return obj


def _mutant_class(base_cls: type) -> type:
    """The weak-noise subclass of a kernel class (one per class, cached)."""
    cls = _MUTANT_CLASSES.get(base_cls)
    if cls is not None:
        return cls

    def setup(self, warmup_steps, *args, **kwargs):
        base_cls.setup(self, warmup_steps, *args, **kwargs)
        self._noise = ScaledNoiseSource(self._noise, self.noise_factor)  # every release of this chain

    def __reduce_ex__(self, protocol):  # a dynamic class: pickle by its base class (MCMC's workers)
        return _rebuild_mutant, (base_cls, self.__getstate__())

    cls = type(f"WeakNoise[{base_cls.__name__}]", (base_cls,), {
        "setup": setup,
        "__reduce_ex__": __reduce_ex__,
        "__doc__": f"{base_cls.__name__} releasing with ``noise_factor`` times its ledger's noise (a test mutant).",
        "__module__": __name__,
    })
    _MUTANT_CLASSES[base_cls] = cls
    return cls


def weak_noise(kernel: DPKernel, factor: float) -> DPKernel:
    r"""A copy of ``kernel`` that adds ``factor`` times the privacy noise its ledger accounts
    for, in every release — a kernel whose privacy claim is false (for ``factor < 1``), for
    mutation tests of an audit. The copy records exactly the honest kernel's ledger and
    reports its ε; its clipping, batch selection and public draws are the honest kernel's.

    ``factor = 0`` gives the noise-free kernel (the clipped sums released as they are), which
    :func:`noise_free_scores` uses to aim an audit. The copy is a ``copy.deepcopy`` of a
    kernel that was not yet set up, of a subclass named ``WeakNoise[<class>]``; it pickles
    (for ``MCMC``'s worker processes) and survives ``setup`` being called again.

    :param kernel: a :class:`~pyro_dp.kernels.base.DPKernel` that has not been set up.
    :param float factor: in ``[0, 1]`` for a mutant (values above 1 are allowed: more noise).
    :returns: the mutant kernel (``kernel`` itself is not changed).

    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro_dp import DPSGLD
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
    ...     with pyro.plate("data", len(y)) as i:
    ...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])
    >>> weak_noise(DPSGLD(model, 10, 1e-3, grad_clip=1.0, noise_multiplier=2.0), 0.1).noise_factor
    0.1
    """
    if not isinstance(kernel, DPKernel):
        raise TypeError(f"weak_noise needs a pyro_dp DPKernel, got {type(kernel).__name__}")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor < 0:
        raise ValueError(f"factor must be a finite number >= 0, got {factor!r}")
    if kernel.lik is not None or kernel.ledger:
        raise ValueError("weak_noise copies a kernel that was not set up yet (build a new one)")
    base_cls = type(kernel).__mro__[1] if type(kernel).__name__.startswith("WeakNoise[") else type(kernel)
    mutant = copy.deepcopy(kernel)
    mutant.__class__ = _mutant_class(base_cls)
    mutant.noise_factor = float(factor)
    return mutant


def noise_free_scores(kernel_factory: Callable[[], DPKernel], data, neighbour, *, seed: int,
                      statistic: Union[str, Callable] = "accept", num_iterations: int = 1,
                      args_fn: Optional[Callable] = None) -> Tuple[float, float]:
    r"""The scores :func:`~pyro_dp.audit.audit` would see on :math:`D` and :math:`D'` under the
    public ``seed`` if the kernel added no noise (``weak_noise(kernel, 0)``): what the
    auditor, who knows both data sets and the public seed, can compute before the audit.

    For a continuous statistic their midpoint is a threshold fixed before the audited runs
    (pass it as ``thresholds=[t]``: Bonferroni over one threshold uses every run, where the
    default held-out split spends half of them on choosing it). Kernels that subsample keep
    their secret batch selection, so their noise-free score is itself random; it is then one
    draw, still independent of the audited runs.

    :returns: ``(score on D, score on D')``.
    """
    return _noise_free(kernel_factory, data, neighbour, seed, statistic, num_iterations, args_fn, {})


def _noise_free(kernel_factory, data, neighbour, seed, statistic, num_iterations, args_fn, cache):
    make, stat = factory_caller(kernel_factory), statistic_fn(statistic)
    out = []
    for x in (data, neighbour):
        _, s = one_run(weak_noise(make(), 0.0), as_args("data", x, args_fn), stat, num_iterations, int(seed),
                       "the noise-free run", cache)
        out.append(s)
    return out[0], out[1]


def separating_seed(kernel_factory: Callable[[], DPKernel], data, neighbour, *, seeds: Iterable[int] = range(200),
                    statistic: Union[str, Callable] = "accept", num_iterations: int = 1,
                    args_fn: Optional[Callable] = None) -> int:
    r"""The first public seed in ``seeds`` under which the noise-free kernel
    (:func:`noise_free_scores`) gives different scores on :math:`D` and :math:`D'` — e.g.
    accepts on one and rejects on the other. Under such a seed the audited accept bit sits
    where the releases decide it, so an audit there has the most power. The choice looks at
    the data sets and the public seed only, never at the audited runs, so the audit stays
    valid.

    :raises ValueError: if no seed in ``seeds`` separates them (no noise-free difference:
        the neighbours are too close, or the statistic cannot see them).
    """
    cache: dict = {}  # the runs' data-free set-up caches, shared as audit() shares them
    for s in seeds:
        a, b = _noise_free(kernel_factory, data, neighbour, s, statistic, num_iterations, args_fn, cache)
        if a != b:
            return int(s)
    raise ValueError("no public seed in `seeds` makes the noise-free kernel tell D from D'")


# =========================================================================== the kernel contract
