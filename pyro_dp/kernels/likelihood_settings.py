"""The data-free settings a kernel builds each chain's likelihood from.

:class:`LikelihoodSettings` is the part of a :class:`~pyro_dp.kernels.base.DPKernel` that
holds the model and how its :class:`~pyro_dp.likelihood.PrivateLikelihood` is built
(``kernel.likelihood_settings``): the tempering, the data plate, the transforms, the data-free
init strategy, the arguments named public (:mod:`pyro_dp.arguments`) and whether the
per-example functions are compiled (:mod:`pyro_dp.compiled`). They are checked when the
kernel is built, before any data is seen; every set-up builds the chain's likelihood from
them on the data it is given (:meth:`LikelihoodSettings.build`). The kernel reads the model,
its temperature and ``jit_compile`` under its own names (``kernel.model``, ...:
:class:`~pyro_dp.kernels.parts.PartAttribute`); ``jit_compile=None`` is decided at the first
set-up (:mod:`~pyro_dp.kernels.auto_compile`).

Decision (issue 63): these are one part because they are given together, checked together and
used together, once per chain, to build the likelihood; nothing else of the kernel reads
them but ``auto_compile``.

>>> import torch, pyro, pyro.distributions as dist
>>> def model(y):
...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
...     with pyro.plate("data", len(y)):
...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y)
>>> settings = LikelihoodSettings(model, temperature=0.5)
>>> lik = settings.build((torch.zeros(4, dtype=torch.float64),), {}, seed=0, jit_cache={})
>>> lik.num_rows, lik.temperature
(4, 0.5)
"""
from __future__ import annotations

from typing import Optional

from pyro.infer.autoguide.initialization import init_to_sample

from ..likelihood import PrivateLikelihood
from .auto_compile import check_settings
from .privacy_engine import check_positive

__all__ = ["LikelihoodSettings"]


class LikelihoodSettings:
    """A kernel's likelihood settings (module doc): the arguments of the same names of
    :class:`~pyro_dp.kernels.base.DPKernel`, checked."""

    def __init__(self, model, *, temperature: float = 1.0, data_plate: Optional[str] = None,
                 transforms: Optional[dict] = None, init_strategy=None, public=(),
                 jit_compile: Optional[bool] = None, jit_options: Optional[dict] = None):
        if not callable(model):
            raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
        self.model = model
        self.temperature = check_positive("temperature", temperature)
        self.data_plate = data_plate
        #: the user's transforms to unconstrained space (``None``: the model's)
        self.transforms = transforms
        self.init_strategy = init_to_sample if init_strategy is None else init_strategy
        #: ``True``/``False`` as given; ``None``: decided from the run's predicted cost
        #: (:mod:`~pyro_dp.kernels.auto_compile`)
        self.jit_compile, self.jit_options = check_settings(jit_compile, jit_options)
        #: arguments named public (:mod:`pyro_dp.arguments`)
        self.public = tuple(public or ())

    def build(self, args: tuple, kwargs: dict, *, seed: int, jit_cache: dict) -> PrivateLikelihood:
        """A chain's likelihood on the data ``args``/``kwargs`` (set-up: data-free), its start
        drawn with ``seed``, its compiled graphs kept in ``jit_cache`` (``jit_compile=None``:
        eager until ``auto_compile`` attaches them)."""
        return PrivateLikelihood(self.model, args, kwargs, data_plate=self.data_plate, temperature=self.temperature,
                                 transforms=self.transforms, init_strategy=self.init_strategy, seed=seed,
                                 jit_compile=bool(self.jit_compile), jit_options=self.jit_options,
                                 jit_cache=jit_cache, public=self.public)
