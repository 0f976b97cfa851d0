"""The shared experiment grid: resumable CSV, exact keys, clear errors, kernel runner."""
import math

import pytest
import torch

from experiments.grid import fmt, pick_device, read_rows, run_grid, run_kernel, summarise

CELLS = [{"problem": "p", "algorithm": a, "epsilon": e, "repeat": r}
         for a in ("x", "y") for e in (0.5, 1.0) for r in range(2)]


def test_interrupted_run_resumes_without_recomputing(tmp_path):
    calls = []

    def flaky(cell):
        calls.append(cell)
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed mid-run
        return {"m": cell["epsilon"] * (cell["repeat"] + 1)}

    with pytest.raises(KeyboardInterrupt):
        run_grid("g", str(tmp_path), CELLS, flaky, ["m"], progress=False, log=None)
    assert len(read_rows(str(tmp_path / "g.csv"))) == 2  # finished cells survived
    calls.clear()
    r = run_grid("g", str(tmp_path), CELLS, lambda c: {"m": c["epsilon"] * (c["repeat"] + 1)}, ["m"],
                 progress=False, log=None)
    assert (r["computed"], r["skipped"]) == (6, 2)
    fresh = run_grid("g", str(tmp_path / "fresh"), CELLS, lambda c: {"m": c["epsilon"] * (c["repeat"] + 1)},
                     ["m"], progress=False, log=None)
    key = lambda row: (row["algorithm"], row["epsilon"], row["repeat"], row["m"])  # noqa: E731
    assert sorted(map(key, r["rows"])) == sorted(map(key, fresh["rows"]))


def test_header_mismatch_and_bad_cells_are_refused(tmp_path):
    run_grid("g", str(tmp_path), CELLS[:1], lambda c: {"m": 1.0}, ["m"], progress=False, log=None)
    with pytest.raises(ValueError, match="columns"):
        run_grid("g", str(tmp_path), CELLS[:1], lambda c: {"other": 1.0}, ["other"], progress=False, log=None)
    with pytest.raises(KeyError, match="lacks key columns"):
        run_grid("h", str(tmp_path), [{"problem": "p"}], lambda c: {}, ["m"], progress=False, log=None)
    with pytest.raises(KeyError, match="not in"):
        run_grid("k", str(tmp_path), CELLS[:1], lambda c: {"typo": 1}, ["m"], progress=False, log=None)


def test_fmt_and_summarise():
    assert fmt(0.1) == "0.1" and fmt(torch.tensor(2.5)) == "2.5" and fmt(3) == "3" and fmt(True) == "True"
    rows = [{"problem": "p", "algorithm": "a", "epsilon": "1.0", "m": v} for v in ("1.0", "3.0", "nan", "")]
    (s,) = summarise(rows, "m")
    assert s["mean"] == 2.0 and s["n"] == 2 and s["n_bad"] == 2
    assert math.isclose(s["se"], 1.0)


def test_pick_device_falls_back_to_cpu():
    assert pick_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.warns(UserWarning, match="CUDA"):
            assert pick_device("cuda").type == "cpu"


def test_run_kernel_returns_samples_and_ledger_epsilon():
    from pyro_dp import DPPenalty
    from tests.kernels.helpers import gauss_model

    y = torch.linspace(-1, 1, 50, dtype=torch.float64)
    k = DPPenalty(gauss_model, proposal_scale=0.1, llr_clip=3.0, noise_multiplier=5.0, seed=0)
    x, diag = run_kernel(k, (y,), num_samples=20, warmup_steps=5, initial_params={"mu": torch.tensor(0.0, dtype=torch.float64)})
    assert x.shape == (20, 1)
    assert diag["private iterations"] == 25
    assert diag["epsilon_total"] == pytest.approx(k.get_epsilon(diag["delta"]))
