r"""pyro_dp: differentially private MCMC for Pyro models.

>>> import pyro_dp
>>> sorted(n for n in pyro_dp.__all__ if n.startswith("DP"))
['DPAutoTune', 'DPBarker', 'DPExpFamPenalty', 'DPFastMH', 'DPGradientInit', 'DPHMC', 'DPKernel', 'DPMinibatchPenalty', 'DPMultiPartyPenalty', 'DPPenalty', 'DPSGLD', 'DPSGNHT']
"""
from .kernels import (
    BudgetExhaustedWarning,
    DPAutoTune,
    PrivacyNotice,
    DPBarker,
    DPExpFamPenalty,
    DPFastMH,
    DPGradientInit,
    DPHMC,
    DPKernel,
    DPMinibatchPenalty,
    DPMultiPartyPenalty,
    DPPenalty,
    DPSGLD,
    DPSGNHT,
)
from .arviz import to_arviz
from .checks import SamplingWarning, check_run
from .likelihood import PrivateLikelihood
from .mechanisms import PrivacyLedger
from .run import get_epsilon, get_ledger

__version__ = "0.1.0"

__all__ = [
    "DPKernel",
    "DPPenalty",
    "DPExpFamPenalty",
    "DPMultiPartyPenalty",
    "DPHMC",
    "DPBarker",
    "DPMinibatchPenalty",
    "DPFastMH",
    "DPSGLD",
    "DPSGNHT",
    "BudgetExhaustedWarning",
    "DPGradientInit",
    "DPAutoTune",
    "PrivacyNotice",
    "PrivateLikelihood",
    "PrivacyLedger",
    "get_epsilon",
    "get_ledger",
    "check_run",
    "SamplingWarning",
    "to_arviz",
]
