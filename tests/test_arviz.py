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
    """Why to_arviz exists: ArviZ's own converter publishes the private rows."""
    mcmc, y = _run("penalty")
    idata = az.from_pyro(mcmc)
    assert "observed_data" in idata.groups()
    np.testing.assert_array_equal(idata.observed_data["obs"].values, y.numpy())


def test_to_arviz_refuses_a_non_pyro_dp_run():
    from pyro.infer import NUTS

    from pyro_dp.models.examples import normal_mean_model

    mcmc = MCMC(NUTS(normal_mean_model), num_samples=5, warmup_steps=5, disable_progbar=True)
    mcmc.run(torch.zeros(5))
    with pytest.raises(ValueError, match="pyro_dp kernel"):
        pyro_dp.to_arviz(mcmc)
