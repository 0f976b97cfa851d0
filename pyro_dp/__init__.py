r"""pyro_dp: differentially private MCMC for Pyro models.

>>> import pyro_dp
>>> sorted(n for n in pyro_dp.__all__ if n.startswith("DP"))
['DPAutoTune', 'DPBarker', 'DPExpFamPenalty', 'DPFastMH', 'DPGradientInit', 'DPGroupedPenalty', 'DPHMC', 'DPKernel', 'DPMinibatchPenalty', 'DPMultiPartyPenalty', 'DPNoiseAware', 'DPPenalty', 'DPSGLD', 'DPSGNHT']
"""
from .kernels import (
    BudgetExhaustedWarning,
    PrivacyNotice,
    DPBarker,
    DPExpFamPenalty,
    DPFastMH,
    DPGroupedPenalty,
    DPHMC,
    DPKernel,
    DPMinibatchPenalty,
    DPMultiPartyPenalty,
    DPPenalty,
    DPSGLD,
    DPSGNHT,
)
from .default_path import DPAutoTune, DPGradientInit, DPNoiseAware, Feasibility, ModelProfile, feasibility  # registers its hook
from .default_path.one_release import OneReleaseForecast, one_release_forecast
from .arviz import PrivateDataWarning, to_arviz
from .checks import SamplingWarning, check_run
from .likelihood import PrivateLikelihood
from .mechanisms import PrivacyLedger
from .predictive import posterior_predictive
from .report import PrivacyReport, privacy_report
from .run import get_epsilon, get_ledger

from .version import __version__

__all__ = [
    "DPKernel",
    "DPPenalty",
    "DPGroupedPenalty",
    "DPExpFamPenalty",
    "DPMultiPartyPenalty",
    "DPNoiseAware",
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
    "posterior_predictive",
    "check_run",
    "SamplingWarning",
    "to_arviz",
    "PrivateDataWarning",
    "privacy_report",
    "PrivacyReport",
    "feasibility",
    "one_release_forecast",
    "OneReleaseForecast",
    "Feasibility",
    "ModelProfile",
]

# az.from_pyro on a pyro_dp run warns that it copies the raw data (pyro_dp/arviz.py); installed
# lazily: arviz is imported only if and when the user imports it
from .arviz import install_from_pyro_guard  # noqa: E402

install_from_pyro_guard()
