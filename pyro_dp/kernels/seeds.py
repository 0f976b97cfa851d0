"""The randomness of a kernel's chains, and their seeds.

One base seed (``seed=``, ``noise_seed=``) gives each chain and each purpose (its start, its
algorithm's public draws, its secret noise under the test option ``noise_seed``) an independent
63-bit seed, through numpy's ``SeedSequence`` (:func:`derive_seed`, :func:`kernel_chain_seed`).

:class:`ChainRandomness` is the part of a :class:`~pyro_dp.kernels.base.DPKernel` that holds
this (``kernel.randomness``): the seeds and ``secure_mode`` (checked, and the
:class:`~pyro_dp.mechanisms.ReproducibleNoiseWarning` given, when the kernel is built), the
chain it is at, and the two streams of the chain in progress: ``rng``, the data-free
``torch.Generator`` of the algorithm (proposals, momenta, accept uniforms), and ``noise``, the
secret :class:`~pyro_dp.mechanisms.NoiseSource` of every release and batch. The kernel reads
them under its own names (``kernel.seed``, ``kernel.noise_seed``, ``kernel._rng``,
``kernel._noise``: :class:`~pyro_dp.kernels.parts.PartAttribute`). It also decides what a copy
of them carries (``__getstate__``): the data-free stream's state, never the secret one's (the
``NoiseSource`` reseeds itself from OS entropy in a copy), and nothing into a new worker
process, whose ``setup()`` draws both afresh.

Decision (issue 63): the seeds and streams are one part rather than attributes of the kernel
because they change together (a chain's streams derive from the seeds and the chain index), are
checked together (``secure_mode`` refuses ``noise_seed``) and are pickled by one rule; the
kernel and its step functions only draw from them.
"""
from __future__ import annotations

import multiprocessing
import os
import secrets
from typing import Optional

import numpy as np
import torch

from ..mechanisms import NoiseSource, ReproducibleNoiseWarning
from ..warn import warn_user

__all__ = ["kernel_chain_seed", "derive_seed", "PURPOSE_INIT", "PURPOSE_ALGO", "PURPOSE_NOISE", "ChainRandomness"]


def derive_seed(*words: int) -> int:
    """Independent 63-bit seeds for (base seed, chain, purpose) via numpy's SeedSequence."""
    return int(np.random.SeedSequence([int(w) & (2**64 - 1) for w in words]).generate_state(1, np.uint64)[0] >> 1)


PURPOSE_INIT, PURPOSE_ALGO, PURPOSE_NOISE = 1, 2, 3
_STREAMS = {"init": PURPOSE_INIT, "algorithm": PURPOSE_ALGO, "noise": PURPOSE_NOISE}


def kernel_chain_seed(seed: int, chain: int, stream: str) -> int:
    """The seed of stream ``stream`` of chain ``chain`` (0, 1, ... in the order Pyro's runner
    runs them) of a kernel built with ``seed=seed`` (``"init"``: the start; ``"algorithm"``:
    proposals, momenta, accept uniforms) or ``noise_seed=seed`` (``"noise"``: releases and
    batches), in the process that built it (a worker process adds OS entropy). A runner outside
    the kernel uses it to run the kernel's own chains (e.g.
    :func:`~experiments.sgld_chains.run_sgld_chains`' ``noise_seeds``).

    >>> kernel_chain_seed(7, 0, "noise") == kernel_chain_seed(7, 0, "noise") != kernel_chain_seed(7, 1, "noise")
    True
    """
    if stream not in _STREAMS:
        raise ValueError(f"stream must be one of {sorted(_STREAMS)}, got {stream!r}")
    return derive_seed(int(seed), int(chain), _STREAMS[stream])


class ChainRandomness:
    """The seeds and streams of a kernel object's chains (module doc).

    :param int seed: base seed of the data-free streams (default: OS entropy).
    :param int noise_seed: the test option: a reproducible secret stream (warns; refused with
        ``secure_mode``). Default: OS entropy, per chain.
    :param bool secure_mode: the secret stream with :class:`~pyro_dp.mechanisms.NoiseSource`'s
        floating-point mitigation.

    >>> r = ChainRandomness(seed=7)
    >>> r.start_chain("cpu"); r.rng.initial_seed() == kernel_chain_seed(7, 0, "algorithm")
    True
    >>> r.chain = 1; r.chain_seed(PURPOSE_INIT) == kernel_chain_seed(7, 1, "init")
    True
    >>> r.noise.seeded  # OS entropy: no noise_seed
    False
    """

    def __init__(self, seed: Optional[int] = None, noise_seed: Optional[int] = None, secure_mode: bool = False):
        #: base seed of the data-free streams only (proposals, momenta, accept uniforms, prior draws)
        self.seed = int(seed) if seed is not None else secrets.randbits(63)
        self.secure_mode = bool(secure_mode)
        if noise_seed is not None:  # the secret stream's test option: anyone who knows it can remove the noise
            if self.secure_mode:
                raise ValueError("secure_mode=True draws the noise seed from the OS: do not pass noise_seed")
            warn_user("noise_seed makes the privacy noise and batch selection reproducible: anyone who knows it "
                      "can replay the noise and remove it from the released values. Use it for tests only.",
                      ReproducibleNoiseWarning)
        #: base seed of the secret stream (the test option), else ``None`` (OS entropy)
        self.noise_seed = None if noise_seed is None else int(noise_seed)
        #: the process that built the kernel: elsewhere (a worker) the seeds mix in OS entropy
        self.owner_pid = os.getpid()
        #: which chain of the kernel object is (or was last) set up: 0, 1, ... (each seeds apart)
        self.chain = 0
        #: the chain's data-free ``torch.Generator`` and its secret ``NoiseSource`` (:meth:`start_chain`)
        self.rng: Optional[torch.Generator] = None
        self.noise: Optional[NoiseSource] = None

    def chain_seed(self, purpose: int, base: Optional[int] = None) -> int:
        """The seed of ``purpose`` (:data:`PURPOSE_INIT`, ...) for the current chain, from
        :attr:`seed` or ``base``: :func:`kernel_chain_seed`'s in the process that built the
        kernel; a worker process mixes in fresh OS entropy, so parallel chains are independent."""
        words = [self.seed if base is None else base, self.chain, purpose]  # = kernel_chain_seed's
        if os.getpid() != self.owner_pid:  # a worker process: make streams independent
            words.append(secrets.randbits(63))
        return derive_seed(*words)

    def start_chain(self, device) -> None:
        """The current chain's streams on ``device``: the data-free generator from :attr:`seed`,
        and the secret stream from OS entropy (or from :attr:`noise_seed`, the test option)."""
        self.rng = torch.Generator(device=device)
        self.rng.manual_seed(self.chain_seed(PURPOSE_ALGO))
        noise_seed = None if self.noise_seed is None else self.chain_seed(PURPOSE_NOISE, base=self.noise_seed)
        self.noise = NoiseSource(seed=noise_seed, secure_mode=self.secure_mode, device=device, warn=False)

    # torch.Generator cannot be pickled; MCMC(num_chains>1, mp_context="spawn") pickles kernels.
    def __getstate__(self):
        state = self.__dict__.copy()
        if multiprocessing.context.get_spawning_popen() is not None:  # into a new worker: its setup() draws both
            state["rng"] = state["noise"] = None
        rng = state["rng"]
        state["rng"] = None if rng is None else (str(rng.device), rng.get_state())  # data-free: it continues
        return state  # the NoiseSource pickles no secret state (it reseeds itself from the OS)

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.rng is not None:
            device, rng_state = self.rng
            self.rng = torch.Generator(device=device)
            self.rng.set_state(rng_state)

