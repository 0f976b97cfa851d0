"""DP MCMC kernels: one file per algorithm, each a thin Pyro ``MCMCKernel`` over a step function.

The default path's initialisers (``DPAutoTune``, ``DPGradientInit``) and the one-release kernel built on its
tuner (``DPNoiseAware``) live in
:mod:`pyro_dp.default_path`, a layer above the kernels that no module here imports; their old
names ``pyro_dp.kernels.DPAutoTune`` and ``pyro_dp.kernels.DPGradientInit`` are answered by the
registered default path (:mod:`~pyro_dp.kernels.path_hook`)."""
import warnings

from ..accounting import DEFAULT_ACCOUNTANT
from .base import BudgetExhaustedWarning, DPKernel, PrivacyNotice
from .path_hook import default_path
from .fastmh import DPFastMH
from .barker import DPBarker
from .hmc import DPHMC
from .minibatch_penalty import DPMinibatchPenalty
from .expfam import DPExpFamPenalty, ExpFamily, bernoulli, gaussian_known_variance, poisson
from .multiparty import DPMultiPartyPenalty
from .penalty import DPPenalty
from .grouped import DPGroupedPenalty
from .sgmcmc import DPSGLD, DPSGNHT
from .releases import ReleasePlan

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
    "DPHMC",
    "DPBarker",
    "DPMinibatchPenalty",
    "DPFastMH",
    "DPSGLD",
    "DPSGNHT",
    "BudgetExhaustedWarning",
    "PrivacyNotice",
    "ReleasePlan",
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


def __getattr__(name):
    """``pyro_dp.kernels.DPAutoTune`` and ``DPGradientInit``, written before they moved to
    :mod:`pyro_dp.default_path`: the registered default path's names (no import of it here)."""
    names = default_path().names
    if name in names:
        return names[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
