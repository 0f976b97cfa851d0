"""Evaluation metrics for DP MCMC output (Räisä 2021 thesis §5.4)."""
from .mmd import median_bandwidth, mmd, mmd_unbiased

__all__ = ["mmd", "mmd_unbiased", "median_bandwidth"]
