r"""Privacy of everything an :class:`pyro.infer.MCMC` object's kernel released.

Each chain reads the same data, so the privacy loss is the composition of every chain's
ledger, over every ``mcmc.run`` call. A pyro_dp kernel keeps one cumulative ledger per
kernel object; chains run in worker processes come back with their ``diagnostics()`` and
are filed with it (:class:`~pyro_dp.kernels.base.ChainLedger`).
"""
from __future__ import annotations

from typing import Optional

from .accounting import DEFAULT_ACCOUNTANT, get_accountant
from .kernels.base import BudgetExhaustedWarning, DPKernel
from .mechanisms import PrivacyLedger
from .warn import warn_user

__all__ = ["get_ledger", "get_epsilon"]

_KEY = "privacy ledger"


def get_ledger(mcmc) -> PrivacyLedger:
    """The merged privacy ledger of every chain of every ``mcmc.run`` of this ``MCMC``'s
    kernel object (chains in worker processes included).

    :raises ValueError: if the run has no ledger (not run yet, or not a pyro_dp kernel).
    
    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import MCMC
    >>> import pyro_dp
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(0., 10.))
    ...     with pyro.plate("data", len(y)) as idx:
    ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y[idx])
    >>> kernel = pyro_dp.DPPenalty(model, 0.1, llr_clip=1.0, noise_multiplier=10.0, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=20, warmup_steps=10, disable_progbar=True)
    >>> mcmc.run(torch.zeros(100))
    >>> pyro_dp.get_ledger(mcmc).entries  # one noisy log-ratio sum per iteration
    (LedgerEntry(event=GaussianEvent(noise_multiplier=10.0), count=30),)
    """
    # Pyro keeps each chain's kernel.diagnostics() of the last run in MCMC._diagnostics
    # (pyro-ppl 1.9); the kernel object holds every run's chains.
    per_chain = getattr(mcmc, "_diagnostics", None)
    if per_chain is None:
        raise TypeError(f"expected a pyro.infer.MCMC object, got {type(mcmc).__name__}")
    kernel = mcmc.kernel
    if not isinstance(kernel, DPKernel):
        raise ValueError("this MCMC object does not use a pyro_dp kernel: no privacy ledger")
    for d in per_chain:  # idempotent: files any chain the kernel has not seen (e.g. unpickled MCMC)
        if d is not None and isinstance(d.get(_KEY), PrivacyLedger):
            kernel.privacy.file_chain(d[_KEY])
    kernel.privacy.require_complete()
    ledger = kernel.ledger
    if not ledger:
        raise ValueError("this MCMC object's kernel has released nothing yet: no privacy ledger")
    return ledger


def get_epsilon(mcmc, delta: float, accountant: Optional[str] = None) -> float:
    r"""Total :math:`\varepsilon` at ``delta`` of everything the ``MCMC`` object's kernel released:
    every chain of every run, in this process and in worker processes.

    :param mcmc: a :class:`pyro.infer.MCMC` whose kernel is a pyro_dp kernel.
    :param delta: target :math:`\delta \in (0, 1)`.
    :param accountant: accountant name (default: the kernel's).

    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import MCMC
    >>> import pyro_dp
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(0., 10.))
    ...     with pyro.plate("data", len(y)) as idx:
    ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y[idx])
    >>> import warnings; warnings.simplefilter("ignore")  # "chains drawn sequentially"
    >>> kernel = pyro_dp.DPPenalty(model, 0.1, llr_clip=1.0, noise_multiplier=10.0, seed=1)
    >>> mcmc = MCMC(kernel, num_samples=50, warmup_steps=50, num_chains=2, disable_progbar=True)
    >>> mcmc.run(torch.zeros(100))
    >>> pyro_dp.get_ledger(mcmc).num_releases  # 2 chains x 100 iterations
    200
    >>> round(pyro_dp.get_epsilon(mcmc, 1e-5), 3)
    6.573
    """
    ledger = get_ledger(mcmc)
    name = accountant or getattr(mcmc.kernel, "accountant", None) or DEFAULT_ACCOUNTANT
    eps = get_accountant(name, ledger).get_epsilon(delta)
    kernel = mcmc.kernel
    budget = getattr(kernel, "epsilon", None)
    if budget is not None and eps > budget * (1 + 1e-9) and getattr(kernel, "delta", None) == delta:
        warn_user(
            f"this run spent epsilon={eps:.4g} > the kernel's budget {budget} "
            f"(please report: the kernel enforces its budget on this ledger)",
            BudgetExhaustedWarning,
        )
    return eps
