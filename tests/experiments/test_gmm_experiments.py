"""Quick modes of heikkila_fig23 and fastmh_fig1: CSV, figure, resumability, privacy per cell.

Each quick run is what CI runs (well under a minute on one core); no timings are asserted.
"""
import csv
import math

import pytest

from experiments import EXPERIMENTS


# One worker runs this module (pytest-xdist's loadgroup): each quick run below is a module fixture,
# set up once per worker that gets one of its tests (twice in CI before, once per worker).
pytestmark = pytest.mark.xdist_group("gmm_experiments")


@pytest.fixture(scope="module", params=["heikkila_fig23", "fastmh_fig1"])
def quick_run(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    res = EXPERIMENTS[request.param](str(out), quick=True, log=None)
    return request.param, out, res


def test_writes_tidy_csv_and_figure(quick_run):
    name, out, res = quick_run
    with open(out / f"{name}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and rows[0]["experiment"] == name and len(rows) == res["computed"]
    assert (out / f"{name}.png").stat().st_size > 0
    assert {"problem", "algorithm", "epsilon", "repeat", "seconds"} <= set(rows[0])


def test_rerun_resumes_without_recomputing(quick_run):
    name, out, res = quick_run
    again = EXPERIMENTS[name](str(out), quick=True, log=None)
    assert again["computed"] == 0 and again["skipped"] == res["computed"]


def test_ledger_epsilon_within_target_per_cell(quick_run):
    name, _, res = quick_run
    checked = 0
    for r in res["rows"]:
        target = float(r["epsilon"])
        if name == "heikkila_fig23":  # the key is the ledger ε after t iterations, rounded up
            exact = float(r["epsilon_exact"])
            assert exact <= target <= exact + 1e-4 + 1e-12, r
            assert int(r["iterations"]) > 0 and math.isfinite(float(r["mean_error"]))
            checked += 1
        elif r["algorithm"].startswith("dp_fast_mh_pff") and r["step_delta_ledger"] not in ("", "nan"):
            # opt-in privacy for free: the ledger records the delta it certifies, >= 1 - e^{-eps} (the
            # un-noised full-batch branch), far above the run's delta (pyro_dp.kernels.DPFastMH docs)
            assert float(r["step_delta_ledger"]) >= -math.expm1(-target) * (1 - 1e-9) > 1e-5, r
            assert float(r["step_epsilon_ledger"]) >= target * (1 - 1e-9), r
            checked += 1
        elif r["algorithm"] != "exact" and r["step_epsilon_ledger"] not in ("", "nan"):  # per-iteration budget
            assert float(r["step_epsilon_ledger"]) <= target * (1 + 1e-9), r
            if name == "fastmh_fig1":
                assert float(r["step_delta_ledger"]) == 1e-5, r
            checked += 1
    assert checked > 0


def test_heikkila_curves_start_charge_and_sgld_lines(quick_run):
    """heikkila_fig23: the three lines; each chain scored at every t of its grid from one run,
    with ε growing in t; DP Barker's private start is charged (in the key ε and the chain's
    ledger); at the last t the key's exact ε equals the ledger of the chain that ran."""
    name, _, res = quick_run
    if name != "heikkila_fig23":
        pytest.skip("heikkila_fig23 only")
    from experiments.heikkila import ALGORITHMS, HEIKKILA_PARAMS

    p = HEIKKILA_PARAMS["quick"]
    rows = res["rows"]
    assert {r["algorithm"] for r in rows} == set(ALGORITHMS) == {"dp_barker", "dp_sgld", "dp_sgld_authors"}
    for alg in ALGORITHMS:
        grid = p["t_grid"] if alg == "dp_barker" else p["sgld_t_grid"]
        rs = sorted((r for r in rows if r["algorithm"] == alg and r["repeat"] == "0"),
                    key=lambda r: int(r["iterations"]))
        assert [int(r["iterations"]) for r in rs] == list(grid)
        eps = [float(r["epsilon_exact"]) for r in rs]
        assert all(a < b for a, b in zip(eps, eps[1:]))  # ε grows with t
        assert len({r["chain_seconds"] for r in rs}) == 1  # one chain per repeat
        assert float(rs[-1]["epsilon_chain_ledger"]) == pytest.approx(eps[-1], rel=1e-9)
        start = float(rs[0]["epsilon_start"])
        assert (start > 0) if alg == "dp_barker" else (start == 0)
    # the authors' SGLD and eq. 4 release the same mechanism: same ε at every t
    by = {(r["algorithm"], r["iterations"]): r["epsilon_exact"] for r in rows if r["algorithm"] != "dp_barker"}
    assert all(by[("dp_sgld", t)] == by[("dp_sgld_authors", t)] for (_, t) in by)
    # the start's releases are in the chain's ledger: more ε than the same iterations without it
    from experiments.heikkila import _epsilon, _plans

    plan = _plans(p)["dp_barker"]
    t = p["t_grid"][-1]
    assert _epsilon(plan, t, p["delta"]) > _epsilon(((), plan[1]) + plan[2:], t, p["delta"]) + 1e-3


def test_fastmh_lines_and_curves_over_iterations(quick_run):
    """fastmh_fig1: every line of Fig. 1 is present (penalty and the opt-in privacy-for-free line
    included); each chain is scored at every t of its curve from one run, with the sampler's wall
    time growing along it and the chain's total epsilon on its final row only."""
    name, _, res = quick_run
    if name != "fastmh_fig1":
        pytest.skip("fastmh_fig1 only")
    from experiments.fastmh import ALGORITHMS, FASTMH_PARAMS

    p = FASTMH_PARAMS["quick"]
    ts = list(range(p["score_every"], p["iters"] + 1, p["score_every"]))
    rows = res["rows"]
    assert {r["algorithm"] for r in rows} == set(ALGORITHMS)
    assert {"dp_penalty", "dp_fast_mh_pff", "dp_fast_mh_full", "dp_barker"} <= set(ALGORITHMS)
    keys = [(r["algorithm"], r["epsilon"], r["repeat"], r["iterations"]) for r in rows]
    assert len(keys) == len(set(keys))  # the iteration count is part of the key
    chains = {}
    for r in rows:
        chains.setdefault((r["algorithm"], r["epsilon"], r["repeat"]), []).append(r)
    for (alg, eps, _), rs in chains.items():
        rs.sort(key=lambda r: int(r["iterations"]))
        assert [int(r["iterations"]) for r in rs] == ts
        if rs[-1]["sym_kl"] in ("", "nan"):  # infeasible cell (no Barker batch meets eps): empty rows
            assert alg == "dp_barker" and all(r["sym_kl"] == "" for r in rs)
            continue
        assert all(math.isfinite(float(r["sym_kl"])) for r in rs)
        if alg == "exact":
            continue
        wall = [float(r["wall_seconds"]) for r in rs]
        assert all(0 < a < b for a, b in zip(wall, wall[1:])), rs
        assert [r["epsilon_total"] != "" for r in rs] == [False] * (len(ts) - 1) + [True]
        if alg in ("dp_penalty", "dp_fast_mh_full"):
            assert float(rs[-1]["batch_size"]) == p["n"]
            assert math.isfinite(float(rs[-1]["epsilon_total"]))
    assert any(alg == "dp_barker" and rs[-1]["sym_kl"] != "" for (alg, _, _), rs in chains.items())


def test_heikkila_refuses_unknown_algorithm_names(tmp_path):
    """``python3 -m experiments heikkila_fig23 --algorithms NAME`` with a name the figure lacks (a
    typo) is refused before anything runs, naming the valid ones; it used to run no cell and
    report success. (Mutant: the old silent filter runs the quick setting and raises nothing.)"""
    from experiments.cli import main
    from experiments.heikkila import ALGORITHMS, run_heikkila_fig23

    with pytest.raises(ValueError, match=r"heikkila_fig23 has no algorithm\(s\) \['dp_barkr'\]") as e:
        run_heikkila_fig23(str(tmp_path), quick=True, log=None, algorithms=["dp_barker", "dp_barkr"])
    assert all(a in str(e.value) for a in ALGORITHMS)
    with pytest.raises(ValueError, match="choose from"):
        main(["heikkila_fig23", "--quick", "--out", str(tmp_path), "--algorithms", "dp_sgdl"])
    assert not list(tmp_path.iterdir())  # nothing ran, nothing written


def test_heikkila_full_setting_runs_dp_sgld_at_the_papers_length():
    """The full setting's DP-SGLD is the paper's (Heikkilä §4: "20 runs of ... 6 000 000 [iterations]
    with DP SGLD ... burned in for 100 000"; authors' ``dp_sgld_main.py`` l. 22, ``plot_mcmc_vs_sgld.py``
    l. 95), scored up to its last iteration, and its ε grid spans the paper's Fig. 3 axis
    (``plot_mcmc_vs_sgld.py``: ``xlim(0.56, 1.22)``)."""
    from experiments.heikkila import HEIKKILA_PARAMS, _epsilon, _plans

    p = HEIKKILA_PARAMS["full"]
    assert (p["sgld_iters"], p["sgld_burn_in"], p["sgld_repeats"]) == (6_000_000, 100_000, 20)
    assert p["sgld_t_grid"][-1] == p["sgld_iters"] and min(p["sgld_t_grid"]) > p["sgld_burn_in"]
    plan = _plans(p)["dp_sgld"]
    eps = [_epsilon(plan, t, p["delta"]) for t in (p["sgld_t_grid"][0], p["sgld_t_grid"][-1])]
    assert eps[0] < 0.56 < 1.0 < eps[1] < 1.22
