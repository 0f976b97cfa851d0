"""Issue #16, acceptance 1: ``MCMC(K(model, epsilon=2.0), num_samples=..., warmup_steps=...)`` with no
other argument agrees with NUTS on the default suite (:mod:`pyro_dp.models.default_suite`) — or warns.

The quick test runs the smallest configuration of ``benchmarks/default_suite.py`` (``--quick``: N = 1e4,
150 + 150 iterations, eager kernels) on one model and both kernels through the script's own functions;
the slow test runs the full suite (N = 5e4, 1000 + 1000 iterations, about 20–40 minutes on two cores).

The privacy noise is the default (OS entropy: no ``seed=`` is passed, so ``tests/conftest.py`` does
not seed it): the property checked — never silently wrong — must hold for every draw of the noise.
"""
import pathlib

import pytest
import torch

import pyro_dp
from pyro_dp.models.default_suite import SUITE, make_linear_data

from tests.benchmark_scripts import load_benchmark


pytestmark = pytest.mark.usefixtures("one_thread")


def _bench():
    return load_benchmark("default_suite", "_default_suite_benchmark")


def test_suite_data_are_plain_pyro_float64_in_the_unit_ball():
    for name, entry in SUITE.items():
        assert 10_000 <= entry.n <= 100_000 and 10_000 <= entry.quick_n <= entry.n, name
        args = entry.data(quick=True)
        X = args[0]
        assert X.dtype == torch.float64 and X.shape[0] == entry.quick_n, name
        assert bool((torch.linalg.vector_norm(X, dim=1) <= 1.0 + 1e-12).all()), name
        lik = pyro_dp.PrivateLikelihood(entry.model, args, seed=0)
        assert lik.num_rows == entry.quick_n and lik.data_plate == "data", name
    # the data generators are seeded
    assert torch.equal(make_linear_data(100, 3)[1], make_linear_data(100, 3)[1])


def test_quick_suite_linear_both_kernels_never_silently_wrong(tmp_path):
    bench = _bench()
    cells = bench.run_suite(["linear"], ["DPHMC", "DPPenalty"], quick=True, out=str(tmp_path), log=lambda s: None)
    assert [c["kernel"] for c in cells] == ["DPHMC", "DPPenalty"]
    for c in cells:
        k = c["kernel_obj"]
        # no argument but epsilon: every setting left to the default path, the run length read from MCMC
        assert k.epsilon == bench.EPSILON and k.run_length_source == "MCMC", c["kernel"]
        assert set(k.auto_tuned) >= {"llr_clip"}, (c["kernel"], k.auto_tuned)
        assert c["epsilon"] <= bench.EPSILON * (1 + 1e-9), (c["kernel"], c["epsilon"])
        labels = k.ledger.by_label()
        assert "tune:clip" in labels and "tune:start" in labels, (c["kernel"], labels)
        assert c["verdict"] != bench.SILENT, (c["kernel"], c["coords"], c["warnings"])
        assert c["verdict"].startswith(bench.CORRECT) or c["verdict"] in (bench.WARNED, bench.OFF), c["verdict"]
        # the kernel's own end-of-chain check is what warned (>= 100 draws after warmup)
        if c["warned"]:
            assert c["mcmc"].diagnostics()["sampling problems"]["chain 0"], c["kernel"]
        # the measured smallest ESS beside the data-free forecast of it (issue 40, acceptance 5)
        assert c["min_ess"] > 0 and c["predicted_ess"] > 0, (c["min_ess"], c["predicted_ess"])
        assert "ESS" in bench.HEADER and bench.format_row(c).count(".") >= 7
    paths = bench.write_csv(cells, str(tmp_path))
    assert all(pathlib.Path(p).stat().st_size > 0 for p in paths)
    assert (tmp_path / "nuts_reference.json").exists()


def test_verdicts():
    bench = _bench()
    coords = {"a": {"mean_err": 0.4, "sd_ratio": 1.29}, "b": {"mean_err": 0.0, "sd_ratio": 0.71}}
    assert bench.criterion(coords)
    coords["b"]["sd_ratio"] = 0.69
    assert not bench.criterion(coords)
    coords["b"]["sd_ratio"] = float("nan")
    assert not bench.criterion(coords)
    assert bench.verdict(False, False) == bench.SILENT
    assert bench.verdict(False, True) == bench.WARNED
    assert bench.verdict(True, True).startswith(bench.CORRECT)
    # the 1-sd line (issue 40, acceptance 4): between the criterion and it, an unwarned cell is "off"
    assert bench.verdict(False, False, False) == bench.OFF
    band = {"a": {"mean_err": 0.8, "sd_ratio": 1.5}}
    assert not bench.criterion(band) and not bench.wrong(band)
    assert bench.wrong({"a": {"mean_err": 1.2, "sd_ratio": 1.0}}) and bench.wrong({"a": {"mean_err": 0.1, "sd_ratio": 0.4}})
    assert bench.wrong({"a": {"mean_err": float("nan"), "sd_ratio": 1.0}})


@pytest.mark.slow
def test_full_suite_never_silently_wrong(tmp_path):
    bench = _bench()
    cells = bench.run_suite(out=str(tmp_path), log=lambda s: None)
    assert len(cells) == len(SUITE) * len(bench.KERNELS)
    silent = [(c["model"], c["kernel"], {k: v for k, v in c["coords"].items()
                                         if v["mean_err"] > bench.MEAN_TOL or abs(v["sd_ratio"] - 1) > bench.SD_TOL})
              for c in cells if c["verdict"] == bench.SILENT]
    assert not silent, silent
    assert all(c["epsilon"] <= bench.EPSILON * (1 + 1e-9) for c in cells)


def test_correlated_logistic_data_on_their_own_scales_are_the_same_rows_rescaled():
    """``make_correlated_logistic_data(w=, scales=)`` (benchmarks/whitening.py's data sets): the same
    draws with the columns multiplied by ``scales``; a row count or seed gives other rows."""
    from pyro_dp.models.default_suite import make_correlated_logistic_data

    w, s = torch.tensor([1.0, -0.5, 0.8], dtype=torch.float64), torch.tensor([1.0, 30.0, 1000.0], dtype=torch.float64)
    X, y = make_correlated_logistic_data(500, 3, w=w)
    Xs, ys = make_correlated_logistic_data(500, 3, w=w, scales=s)
    assert X.shape == (500, 3) and torch.equal(Xs, X * s) and set(ys.tolist()) <= {0.0, 1.0}
    assert not torch.equal(make_correlated_logistic_data(500, 4, w=w)[0], X)
    assert make_correlated_logistic_data(500, 3)[0].shape == (500, 5)  # the default: issue 40's d = 5
