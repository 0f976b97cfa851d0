"""#42: pyro_dp's warnings point at the user's line (pyro_dp.warn.warn_user), not at a file inside
Pyro's MCMC runner or pyro_dp: the first frame outside pyro_dp's library, Pyro and torch."""
import inspect
import os
import sys
import warnings

import pytest
from pyro.infer import MCMC

import pyro_dp
import pyro_dp.warn as warn_module
from pyro_dp.warn import APPLICATIONS, INTERNAL_PREFIXES, warn_user

from .kernels.helpers import gauss_model, make_data

CATEGORIES = (pyro_dp.PrivacyNotice, pyro_dp.SamplingWarning, pyro_dp.BudgetExhaustedWarning)
NATIVE = [False] + ([True] if sys.version_info >= (3, 12) else [])


def _ours(caught):
    return [w for w in caught if issubclass(w.category, CATEGORIES)]


def _run_and_catch():
    """Warnings of two MCMC runs: a default budget (notices at set-up and at the end of the chain)
    and a budget that stops the chain of a clip so large that it never moves."""
    y = make_data(300, seed=3)
    default = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, seed=0)
    stopped = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1e6, epsilon=1.0, num_iterations=12, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for kernel in (default, stopped):
            mcmc = MCMC(kernel, num_samples=20, warmup_steps=5, disable_progbar=True)
            mcmc.run(y); line = inspect.currentframe().f_lineno  # noqa: E702 (the line of mcmc.run)
        pyro_dp.check_run(mcmc); check_line = inspect.currentframe().f_lineno  # noqa: E702
    return _ours(caught), line, check_line


@pytest.mark.parametrize("native", NATIVE, ids=lambda n: "skip_file_prefixes" if n else "fallback")
def test_warnings_during_mcmc_run_point_at_the_users_line(native, monkeypatch):
    monkeypatch.setattr(warn_module, "_NATIVE", native)
    ours, line, check_line = _run_and_catch()
    kinds = {w.category for w in ours}
    assert {pyro_dp.PrivacyNotice, pyro_dp.BudgetExhaustedWarning, pyro_dp.SamplingWarning} <= kinds, kinds
    for w in ours:
        assert w.filename == __file__, (w.category.__name__, w.filename)
        assert w.lineno in (line, check_line), (w.category.__name__, w.lineno)


def test_location_check_has_power(monkeypatch):
    """Mutant: no frame counted as internal, i.e. the warnings where they are raised (inside
    pyro_dp): the check fails."""
    monkeypatch.setattr(warn_module, "INTERNAL_PREFIXES", ())
    ours, _, _ = _run_and_catch()
    assert any(w.filename != __file__ for w in ours)


def test_a_direct_sample_call_and_the_filters_by_module():
    y = make_data(300, seed=3)
    k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, epsilon=0.5, num_iterations=3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k.setup(0, y)
    params = k.initial_params
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(6):
            params = k.sample(params)
    stop = [w for w in caught if w.category is pyro_dp.BudgetExhaustedWarning]
    assert stop and all(w.filename == __file__ for w in stop)
    # a filter by module names the user's module, as for warnings.warn
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", module=__name__)
        warn_user("hidden", UserWarning)
    assert not caught


def test_internal_prefixes_are_pyro_dp_library_pyro_and_torch():
    package = os.path.dirname(pyro_dp.__file__)
    assert os.path.join(package, "kernels") + os.sep in INTERNAL_PREFIXES
    assert os.path.join(package, "run.py") in INTERNAL_PREFIXES
    for app in APPLICATIONS:  # the demo's own mcmc.run line is where its warnings point
        assert not any(p.startswith(os.path.join(package, app)) for p in INTERNAL_PREFIXES)
    import pyro
    import torch

    assert os.path.dirname(pyro.__file__) + os.sep in INTERNAL_PREFIXES
    assert os.path.dirname(torch.__file__) + os.sep in INTERNAL_PREFIXES
