r"""The default path: the settings a user left out, tuned privately at a chain's start or
forecast data-free before it — a layer above the kernels (issue 63).

``MCMC(DPPenalty(model, epsilon=2.0))`` runs with no other argument: the kernel asks this
layer, through its one hook (:mod:`pyro_dp.kernels.path_hook`), for a private tuner and, at the
chain's start, for the settings the tuning's releases imply. The kernels never import this
package; it imports them, builds them through their public constructor arguments and drives
them through the hook, which it registers here, when imported (``import pyro_dp`` imports it).

=============================================  ================================================
module                                         what it holds
=============================================  ================================================
:mod:`~pyro_dp.default_path.tuning`            :class:`DPAutoTune`: the private tuning run at a
                                               chain's start (``tune:*`` releases)
:mod:`~pyro_dp.default_path.whitening`,        its per-coordinate scales and posterior-
:mod:`~pyro_dp.default_path.centring`          covariance releases; the centre of a gradient
                                               clip ball
:mod:`~pyro_dp.default_path.private_init`      :class:`DPGradientInit`, a private start
:mod:`~pyro_dp.default_path.noise_aware`       :class:`DPNoiseAware`: one release of a quadratic
                                               expansion at the tuner's centre, then NUTS;
                                               the same as a part, ``OneReleaseMode``
:mod:`~pyro_dp.default_path.inference`         the choice of that one-release mode for a
                                               default-path kernel (``inference=``, issue 62)
:mod:`~pyro_dp.default_path.driver`            the functions behind the hook: the tuner's
                                               configuration, move scales, forecasts of the
                                               chain, a kernel class's default-path noise
:mod:`~pyro_dp.default_path.hook`              the hook's implementation and the per-kernel
                                               recipes (``apply_tuning``, dispatched on the
                                               kernel's class)
:mod:`~pyro_dp.default_path.prediction`,       data-free forecasts: :func:`~pyro_dp.feasibility`
:mod:`~pyro_dp.default_path.forecast`          and the profiles it predicts with
=============================================  ================================================

>>> import pyro_dp
>>> from pyro_dp.kernels.path_hook import default_path
>>> type(default_path()).__name__, pyro_dp.kernels.DPAutoTune is DPAutoTune
('KernelDefaultPath', True)
"""
from ..kernels.path_hook import register_default_path
from .forecast import Feasibility, ModelProfile, feasibility
from .hook import KernelDefaultPath
from .noise_aware import DPNoiseAware
from .private_init import DPGradientInit
from .tuning import DPAutoTune, TuneResult

__all__ = ["DPAutoTune", "DPGradientInit", "DPNoiseAware", "TuneResult", "feasibility", "Feasibility", "ModelProfile",
           "KernelDefaultPath"]

register_default_path(KernelDefaultPath({"DPAutoTune": DPAutoTune, "DPGradientInit": DPGradientInit}))
