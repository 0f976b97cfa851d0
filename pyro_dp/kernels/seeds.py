"""The seeds of a kernel's chains: one base seed (``seed=``, ``noise_seed=``) gives each chain and
each purpose (its start, its algorithm's public draws, its secret noise under the test option
``noise_seed``) an independent 63-bit seed, through numpy's ``SeedSequence``."""
from __future__ import annotations

import numpy as np

__all__ = ["kernel_chain_seed", "derive_seed", "PURPOSE_INIT", "PURPOSE_ALGO", "PURPOSE_NOISE"]


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
