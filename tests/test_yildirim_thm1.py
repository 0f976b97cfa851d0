"""benchmarks/yildirim_thm1.py (Yıldırım & Ermiş Thm 1, issue #41): the theorem's formulas, and
the shipped run shows what docs/results.md says it shows. Under a second; the run itself
(about 1 CPU-minute) is slow-marked."""
import csv
import doctest
import math

import pytest

from tests.benchmark_scripts import ROOT, load_benchmark

y = load_benchmark("yildirim_thm1")


def _rows():
    with open(ROOT / "docs" / "_static" / "results" / "yildirim_thm1.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_formulas():
    assert doctest.testmod(y).failed == 0
    # eq. (3) by hand at c/σ = 0.1, k0 = 1, α = 1/2, β = 1.1: β' = 2.1
    assert y.epsilon_thm1(0.1) == pytest.approx(2 * math.sqrt(2.1 * 1.1) * 0.1 + 4 * 0.01 * 2.1)
    assert y.k_of_n(100_000, k0=2.0) == math.floor(2 * 100_000 / math.log(100_000))


def _noise_is_flat(rows, tol=0.05):
    by = {}
    for r in rows:
        by.setdefault(int(r["n"]), set()).add(float(r["sigma_typical"]))
    means = [sum(v) / len(v) for _, v in sorted(by.items())]
    return len(means) >= 3 and max(means) / min(means) < 1 + tol


def test_shipped_run_shows_the_theorem():
    rows = _rows()
    assert {int(r["n"]) for r in rows} == {1000, 10_000, 100_000}
    for r in rows:
        assert int(r["k"]) == y.k_of_n(int(r["n"]))
        assert float(r["epsilon_ledger"]) <= y.EPSILON + 1e-9  # never over budget
        assert float(r["delta"]) == pytest.approx(int(r["n"]) ** -y.BETA)
    assert _noise_is_flat(rows)
    # mutant: a noise that grew as √n (fixed noise multiplier) would fail the check
    grown = [dict(r, sigma_typical=str(float(r["sigma_typical"]) * math.sqrt(int(r["n"]) / 1000))) for r in rows]
    assert not _noise_is_flat(grown)


@pytest.mark.slow
def test_quick_run(tmp_path):
    assert y.main(["--quick", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "yildirim_thm1.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and all(float(r["epsilon_ledger"]) <= y.EPSILON + 1e-9 for r in rows)
