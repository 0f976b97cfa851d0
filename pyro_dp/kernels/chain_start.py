"""Where a kernel's chains start, data-free.

:class:`ChainStart` is the part of a :class:`~pyro_dp.kernels.base.DPKernel` that holds the
start (``kernel.start``): the user's ``initial_params`` (set by the user or by Pyro's ``MCMC``
before ``setup()``) and the start of the chain in progress, which ``MCMC`` reads after
``setup()`` as ``kernel.initial_params`` (:class:`~pyro_dp.kernels.parts.PartAttribute`). A
chain starts at the user's values (checked) or at the likelihood's prototype, its init
strategy's data-free draw; Pyro's data-dependent search for a valid start never runs.

Decision (issue 63): one part, because Pyro's runner writes the user's values and reads the
chain's through one name, and a copy into a new worker process carries neither (its
``setup()`` finds the start again).

>>> import torch
>>> s = ChainStart(); s.initial_params = {"mu": torch.ones(2, requires_grad=True)}
>>> s.initial_params["mu"].requires_grad, s.user is not None
(False, True)
"""
from __future__ import annotations

import multiprocessing
from typing import Dict, Optional

import torch

__all__ = ["ChainStart"]


class ChainStart:
    """A kernel's start (module doc): :attr:`user`, the user's values, and
    :attr:`initial_params`, the chain's (the user's until a set-up finds the chain's)."""

    def __init__(self):
        #: the user's ``initial_params`` (detached), or ``None``: the init strategy's draw
        self.user: Optional[Dict[str, torch.Tensor]] = None
        self.chain: Optional[Dict[str, torch.Tensor]] = None

    @property
    def initial_params(self) -> Optional[Dict[str, torch.Tensor]]:
        """The start of the chain in progress by site (after ``setup()``), else the user's."""
        return self.chain

    @initial_params.setter
    def initial_params(self, params) -> None:
        self.user = None if params is None else {k: v.detach() for k, v in params.items()}
        self.chain = self.user

    def begin(self, lik) -> torch.Tensor:
        """At a chain's set-up: its start on ``lik``, flat (``z0``), from the user's values
        (checked) or the likelihood's prototype (the init strategy's draw); :attr:`initial_params`
        then gives it by site."""
        if self.user is not None:
            missing = set(lik.latent_names) - set(self.user)
            if missing:
                raise ValueError(f"initial_params lacks latent sites {sorted(missing)}")
            params = {k: v.to(dtype=lik.dtype, device=lik.device) for k, v in self.user.items()}
        else:
            params = dict(lik.prototype_params)
        z0 = lik.flatten(params)
        if z0.numel() != lik.dim or not bool(torch.isfinite(z0).all()):
            raise ValueError("initial parameters must be finite and match the model's latent shapes")
        self.chain = lik.unravel(z0)
        return z0

    def __getstate__(self):
        state = self.__dict__.copy()
        if multiprocessing.context.get_spawning_popen() is not None:  # into a new worker: its setup() finds it
            state["chain"] = None
        return state
