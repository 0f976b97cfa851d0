"""DP MCMC kernels: one file per algorithm, each a thin Pyro ``MCMCKernel`` over a step function."""
import warnings

from ..accounting import DEFAULT_ACCOUNTANT
from .base import BudgetExhaustedWarning, DPKernel, PrivacyNotice
from .fastmh import DPFastMH
from .barker import DPBarker
from .hmc import DPHMC
from .minibatch_penalty import DPMinibatchPenalty
from .expfam import DPExpFamPenalty, ExpFamily, bernoulli, gaussian_known_variance, poisson
from .multiparty import DPMultiPartyPenalty
from .noise_aware import DPNoiseAware
from .penalty import DPPenalty
from .grouped import DPGroupedPenalty
from .private_init import DPGradientInit
from .tuning import DPAutoTune
from .sgmcmc import DPSGLD, DPSGNHT

__all__ = [
    "DPKernel",
    "DPPenalty",
    "DPGroupedPenalty",
    "DPExpFamPenalty",
    "ExpFamily",
    "gaussian_known_variance",
    "bernoulli",
    "poisson",
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
    "default_accountants",
]


def default_accountants() -> dict:
    """The accountant each kernel uses when none is given, by the kind of event it records
    (read from the kernels themselves, so the docs table and the tightness tests cannot drift).

    >>> default_accountants()["gaussian"], default_accountants()["rdp_curve"]
    ('gdp', 'rdp')
    """
    def model(*args):  # the accountant is chosen in __init__, before any model is traced
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "gaussian": DEFAULT_ACCOUNTANT,  # DPPenalty, DPHMC, DPExpFamPenalty, DPMultiPartyPenalty
            "poisson/add_remove": DPSGLD(model, 10, 1e-3, 1.0, relation="add_remove", public_num_rows=100).accountant,
            "poisson/substitute": DPMinibatchPenalty(model, 10, 0.1, 1.0, 1.0).accountant,
            "without_replacement": DPMinibatchPenalty(model, 10, 0.1, 1.0, 1.0,
                                                      subsampling="without_replacement").accountant,
            "rdp_curve": DPBarker(model, 50, 0.1).accountant,
            "approx_dp": DPFastMH(model, 0.1, 1.0, 10.0, 10, 0.5, 1e-9).accountant,
        }
