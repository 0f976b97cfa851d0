"""DP MCMC kernels: one file per algorithm, each a thin Pyro ``MCMCKernel`` over a step function."""
from .base import BudgetExhaustedWarning, DPKernel
from .penalty import DPPenalty

__all__ = ["DPKernel", "DPPenalty", "BudgetExhaustedWarning"]
