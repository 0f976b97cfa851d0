"""``benchmarks/warning_rates.py``: the bands and counts of issue 40's acceptance 4, on runs
whose answer is known by construction (the numbers in ``docs/tuning.md``, "How often the
warnings are right", come from it)."""
import json
import math

from tests.benchmark_scripts import load_benchmark


def _run(kernel, err, rmin=0.9, rmax=1.1, warned=False, ess=30.0):
    return dict(kernel=kernel, err=err, rmin=rmin, rmax=rmax, warned=warned, ess=ess)


def test_bands_counts_and_verdict():
    wr = load_benchmark("warning_rates")
    assert wr.band(_run("K", 0.5)) == "within 0.5 sd"
    assert wr.band(_run("K", 0.51)) == "between"
    assert wr.band(_run("K", 0.2, rmin=0.45)) == "beyond 1 sd"  # an sd off by more than a factor 2
    assert wr.band(_run("K", math.nan)) == "beyond 1 sd"  # a NaN is never within a band it cannot be read in
    runs = [_run("A", 0.1), _run("A", 0.2), _run("A", 0.3), _run("A", 0.4), _run("A", 0.45, warned=True),
            _run("A", 0.7), _run("A", 1.2, warned=True), _run("B", 1.1, ess=10.4)]
    rows = wr.tally(runs)
    assert rows["A"]["within 0.5 sd"] == [5, 1] and rows["A"]["between"] == [1, 0]
    assert rows["A"]["beyond 1 sd"] == [1, 1] and rows["all"]["beyond 1 sd"] == [2, 1]
    assert wr.verdict(rows["A"]) == "holds"  # 1 of 5 within 0.5 sd warned: a fifth is allowed
    assert wr.verdict(rows["all"]) == "FAILS"  # B's run beyond 1 sd did not warn
    # read against a threshold: B's ESS of 10.4 is below 14.3, A's runs (ESS 30) are not
    again = wr.tally(runs, min_ess=14.3)
    assert again["all"]["beyond 1 sd"] == [2, 2] and wr.verdict(again["all"]) == "holds"
    # mutant: one more warned run within 0.5 sd is more than a fifth
    assert wr.verdict(wr.tally(runs + [_run("A", 0.05, warned=True)])["A"]) == "FAILS"


def test_it_reads_the_lines_unscaled_glms_prints(tmp_path, capsys):
    wr = load_benchmark("warning_rates")
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [_run("DPHMC", 0.3), _run("DPHMC", 1.3, warned=True)])
                    + "\nnot a run line\n")
    wr.main([str(path)])
    out = capsys.readouterr().out
    assert "DPHMC" in out and "holds" in out
