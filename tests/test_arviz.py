"""#18 item 1: ArviZ. ``az.from_pyro`` works with every kernel (and copies the raw data, which
is why ``pyro_dp.to_arviz`` exists); ``to_arviz`` holds no data and ArviZ's tools run on it."""
import warnings

import numpy as np
import pytest
import torch
from pyro.infer import MCMC

import pyro_dp

az = pytest.importorskip("arviz")

from .kernels.golden_cases import cases  # noqa: E402

CASES = cases()
NAMES = ["penalty", "expfam", "multiparty", "hmc", "barker", "minibatch_poisson", "fastmh", "sgld", "sgnht"]


def _run(name):
    factory, data = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(factory(), num_samples=30, warmup_steps=10, num_chains=2, disable_progbar=True)
        mcmc.run(data)
    return mcmc, data


def _values(idata):
    for group in idata.groups():
        for var in getattr(idata, group).data_vars.values():
            yield np.asarray(var.values, dtype=float).ravel()


@pytest.mark.parametrize("name", NAMES)
def test_to_arviz_has_no_data_and_arviz_tools_run(name):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mcmc, y = _run(name)
    idata = pyro_dp.to_arviz(mcmc)
    assert set(idata.groups()) == {"posterior", "sample_stats"}
    raw = set(np.asarray(y, dtype=float).ravel().tolist())
    for vals in _values(idata):
        assert not raw & set(vals.tolist()), "a raw data value reached the InferenceData"
    assert idata.attrs["epsilon"] == pytest.approx(pyro_dp.get_epsilon(mcmc, mcmc.kernel.reference_delta))
    assert idata.attrs["private_iterations"] == [40, 40]
    assert not any("non-private" in k or "clipped" in k for k in idata.sample_stats.data_vars)
    summary = az.summary(idata)
    assert "mu" in summary.index[0]
    assert float(az.rhat(idata)["mu"]) > 0 and float(az.ess(idata)["mu"]) > 0
    az.plot_trace(idata)
    plt.close("all")


def test_from_pyro_works_and_copies_the_raw_data():
    """Why to_arviz exists: ArviZ's own converter publishes the private rows. On a pyro_dp run
    it now warns (at the caller's line) and marks the result (#42)."""
    mcmc, y = _run("penalty")
    with pytest.warns(pyro_dp.PrivateDataWarning, match="RAW PRIVATE DATA") as caught:
        idata = az.from_pyro(mcmc)
    assert [w.filename for w in caught if w.category is pyro_dp.PrivateDataWarning] == [__file__]
    assert "observed_data" in idata.groups()
    np.testing.assert_array_equal(idata.observed_data["obs"].values, y.numpy())
    assert "not covered by epsilon" in idata.attrs["pyro_dp_private_data"]


def test_from_pyro_warning_check_has_power(monkeypatch):
    """Mutant: ArviZ's converter unguarded: the run converts without a PrivateDataWarning, so the
    pytest.warns above would fail."""
    from arviz.data import io_pyro

    monkeypatch.setattr(io_pyro.PyroConverter, "to_inference_data",
                        io_pyro.PyroConverter.to_inference_data.__wrapped__)
    mcmc, _ = _run("penalty")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        idata = az.from_pyro(mcmc)
    assert not [w for w in caught if w.category is pyro_dp.PrivateDataWarning]
    assert "pyro_dp_private_data" not in idata.attrs


def test_from_pyro_refuses_under_an_error_filter_and_leaves_other_kernels_alone():
    from arviz.data import io_pyro
    from pyro.infer import NUTS

    from pyro_dp.models.examples import normal_mean_model

    mcmc, _ = _run("penalty")
    converted = []
    real = io_pyro.PyroConverter.posterior_to_xarray
    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as m:
        warnings.simplefilter("error", pyro_dp.PrivateDataWarning)
        m.setattr(io_pyro.PyroConverter, "posterior_to_xarray", lambda self: converted.append(1) or real(self))
        with pytest.raises(pyro_dp.PrivateDataWarning):
            az.from_pyro(mcmc)
    assert not converted  # refused before anything was converted
    nuts = MCMC(NUTS(normal_mean_model), num_samples=5, warmup_steps=5, disable_progbar=True)
    nuts.run(torch.zeros(5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", pyro_dp.PrivateDataWarning)
        idata = az.from_pyro(nuts)  # not a pyro_dp run: untouched
    assert "pyro_dp_private_data" not in idata.attrs


def test_from_pyro_is_guarded_whichever_is_imported_first():
    """pyro_dp first (as in this process, where conftest imports it): a finder waited for
    arviz.data.io_pyro and removed itself; ArviZ first (a fresh process): guarded at once."""
    import subprocess
    import sys

    from arviz.data import io_pyro

    import pyro_dp.arviz as guard

    assert io_pyro.PyroConverter.to_inference_data._pyro_dp_guard and guard._FINDER not in sys.meta_path
    code = ("import warnings; warnings.simplefilter('ignore')\nimport arviz\nimport pyro_dp\n"
            "from arviz.data import io_pyro\nprint(io_pyro.PyroConverter.to_inference_data._pyro_dp_guard)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=str(__import__("pathlib").Path(__file__).parent.parent))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True"]


def test_to_arviz_carries_the_privacy_report():
    mcmc, _ = _run("hmc")
    idata = pyro_dp.to_arviz(mcmc)
    report = pyro_dp.PrivacyReport.from_json(idata.attrs["privacy_report"])
    assert report == pyro_dp.privacy_report(mcmc, delta=mcmc.kernel.reference_delta)
    assert report.epsilon == idata.attrs["epsilon"]


def test_to_arviz_refuses_a_non_pyro_dp_run():
    from pyro.infer import NUTS

    from pyro_dp.models.examples import normal_mean_model

    mcmc = MCMC(NUTS(normal_mean_model), num_samples=5, warmup_steps=5, disable_progbar=True)
    mcmc.run(torch.zeros(5))
    with pytest.raises(ValueError, match="pyro_dp kernel"):
        pyro_dp.to_arviz(mcmc)
