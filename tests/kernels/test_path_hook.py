"""The default path's hook (kernels/path_hook.py, issue 63): the kernels ask the registered default
path at five points and import nothing of it; with none registered a kernel with every setting
given runs as before and one with a setting left out is refused with its cause; the per-kernel
recipes are dispatched on the kernel's class (its MRO), never on a class name."""
import warnings

import pytest

import pyro_dp
from pyro_dp.default_path import hook
from pyro_dp.default_path.hook import KernelDefaultPath, apply_tuning
from pyro_dp.kernels.path_hook import DefaultPath, default_path, register_default_path
from tests.kernels.helpers import gauss_model, make_data


class Recording(KernelDefaultPath):
    """The real default path, recording the calls a kernel makes to it."""

    def __init__(self, inner):
        super().__init__(inner.names)
        self.calls = []

    def tuner(self, kernel):
        self.calls.append("tuner")
        return super().tuner(kernel)

    def configure(self, kernel):
        self.calls.append("configure")
        super().configure(kernel)

    def calibrated(self, kernel, ratio_noise_multiplier):
        self.calls.append(("calibrated", ratio_noise_multiplier == kernel.noise_multiplier))
        super().calibrated(kernel, ratio_noise_multiplier)

    def take_tuning(self, kernel, *, first_chain, ratio_noise_multiplier):
        self.calls.append(("take_tuning", first_chain, kernel.proposal_scale is None))
        super().take_tuning(kernel, first_chain=first_chain, ratio_noise_multiplier=ratio_noise_multiplier)


@pytest.fixture
def registered():
    """Registers a path for one test and puts the package's back."""
    previous = default_path()
    yield register_default_path
    register_default_path(previous)


def test_importing_pyro_dp_registers_the_default_path():
    assert type(default_path()) is KernelDefaultPath
    assert pyro_dp.kernels.DPAutoTune is pyro_dp.DPAutoTune  # the old spelling, answered by the registered path
    assert pyro_dp.kernels.DPGradientInit is pyro_dp.DPGradientInit
    with pytest.raises(AttributeError):
        pyro_dp.kernels.NotAName


def test_a_default_path_kernel_asks_the_hook_in_order(registered):
    rec = Recording(default_path())
    registered(rec)
    y = make_data(200, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = pyro_dp.DPPenalty(gauss_model, epsilon=4.0, num_iterations=5, seed=0, noise_seed=1, inference="iterative")
        assert rec.calls == ["tuner"] and isinstance(k.init, pyro_dp.DPAutoTune)
        k.setup(0, y)
        assert rec.calls == ["tuner", "configure", ("calibrated", True)]
        k.sample(k.initial_params)  # the first iteration: the private start, then its settings
    assert rec.calls[-1] == ("take_tuning", True, True) and k.proposal_scale is not None and k.llr_clip is not None
    assert any(label.startswith("tune:") for _, _, label in k.ledger.labelled_entries())


def test_without_a_default_path_given_settings_run_and_left_out_ones_are_refused(registered):
    registered(DefaultPath())  # the kernels' own answers: none registered
    y = make_data(200, seed=3)
    with pytest.raises(ValueError, match="tuned privately by the default path, which is not loaded"):
        pyro_dp.DPPenalty(gauss_model, epsilon=4.0, inference="iterative")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=5.0, seed=0, noise_seed=1)
        k.setup(0, y)
        for _ in range(3):
            k.sample(k.initial_params)
    assert k.chain.iteration == 3 and len(list(k.ledger.labelled_entries())) > 0
    with pytest.raises(TypeError, match="must be a DefaultPath"):
        register_default_path(object())


def test_the_recipes_are_dispatched_on_the_kernel_class():
    class MyPenalty(pyro_dp.DPPenalty):  # a user's subclass takes DPPenalty's recipe, as it took its method
        pass

    penalty = apply_tuning.dispatch(pyro_dp.DPPenalty)
    assert apply_tuning.dispatch(MyPenalty) is penalty
    assert apply_tuning.dispatch(pyro_dp.DPGroupedPenalty) is hook._grouped is not penalty
    assert apply_tuning.dispatch(pyro_dp.DPHMC) is hook._hmc
    assert apply_tuning.dispatch(pyro_dp.DPSGLD) is hook._sgld
    nothing = apply_tuning.dispatch(object)  # no default path: the settings were all given
    for cls in (pyro_dp.DPBarker, pyro_dp.DPFastMH, pyro_dp.DPSGNHT, pyro_dp.DPMinibatchPenalty):
        assert apply_tuning.dispatch(cls) is nothing
    with pytest.raises(TypeError, match="not a pyro_dp kernel"):
        apply_tuning(object(), None, first_chain=True, ratio_noise_multiplier=None)
