r"""An ArviZ ``InferenceData`` that may be published.

``az.from_pyro(mcmc)`` works with pyro_dp kernels (they report an empty ``"divergences"``
record per chain), but it copies the model's **raw observed data** into
``idata.observed_data`` — the private rows, byte for byte — and can add pointwise
log-likelihoods, which are per-row functions of the data. :func:`to_arviz` builds the
``InferenceData`` from released quantities only: the posterior draws, per-chain sample
statistics that are post-processing of releases, and the privacy statement in ``attrs``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .kernels.base import NONPRIVATE_PREFIX
from .run import get_epsilon, get_ledger

__all__ = ["to_arviz"]

# per-chain diagnostics that are post-processing of released values (see DPKernel.diagnostics)
_STATS = ("acceptance rate", "private iterations", "budget exhausted", "epsilon", "step size", "mean batch size")


def to_arviz(mcmc, *, delta: Optional[float] = None):
    r"""The publishable ``arviz.InferenceData`` of a pyro_dp ``MCMC`` run.

    Groups: ``posterior`` (draws per chain, constrained) and ``sample_stats`` (per-chain
    acceptance rate, private iterations, whether the budget ran out, the chain's own ε, and
    DP-HMC's step size or DP-Fast MH's mean batch size where present, each repeated over the
    draws). ``attrs``: ``epsilon`` (every release of the kernel object, all chains and runs),
    ``delta``, ``accountant``, ``relation``, ``kernel``, ``private_iterations`` per chain and
    ``num_releases``. **No** ``observed_data``, ``constant_data`` or ``log_likelihood`` group:
    they are functions of the raw data. Keys computed from raw data (``"non-private ..."``)
    are never included.

    :param mcmc: a :class:`pyro.infer.MCMC` run with a pyro_dp kernel.
    :param float delta: δ of the reported ε (default: the kernel's ``reference_delta``).
    :raises ImportError: without ArviZ (``pip install "arviz<0.24"``).
    """
    try:
        import arviz as az
    except ImportError as e:  # pragma: no cover - exercised only without arviz
        raise ImportError('pyro_dp.to_arviz needs ArviZ: pip install "arviz>=0.17,<0.24"') from e
    ledger = get_ledger(mcmc)  # refuses a run without a pyro_dp kernel
    kernel = mcmc.kernel
    delta = kernel.reference_delta if delta is None else float(delta)
    samples = {k: v.detach().cpu().numpy() for k, v in mcmc.get_samples(group_by_chain=True).items()}
    num_chains, num_draws = next(iter(samples.values())).shape[:2]
    per_chain = mcmc._diagnostics  # kernel.diagnostics() of each chain of the last run (pyro-ppl 1.9)
    stats = {}
    for key in _STATS:
        if all(key in d for d in per_chain):
            vals = np.asarray([float(d[key]) for d in per_chain])
            stats[key.replace(" ", "_")] = np.repeat(vals[:, None], num_draws, axis=1)
    assert not any(k.startswith(NONPRIVATE_PREFIX.strip()) for k in stats)
    attrs = {
        "epsilon": float(get_epsilon(mcmc, delta)),
        "delta": delta,
        "accountant": str(kernel.accountant),
        "relation": str(kernel.relation),
        "kernel": type(kernel).__name__,
        "private_iterations": [int(d["private iterations"]) for d in per_chain],
        "num_releases": int(ledger.num_releases),
        "privacy": "posterior draws and sample_stats are post-processing of the DP releases; no data included",
    }
    return az.from_dict(posterior=samples, sample_stats=stats or None, attrs=attrs)
