"""Quick modes of the sampling experiments (thesis Figs 6.3-6.9, DP-HMC paper Fig. 1): tidy CSV,
figures, resumability, and every cell's ledger epsilon within its target."""
import csv
import math

import pytest
import torch

from experiments import EXPERIMENTS
from experiments._metrics import mean_error, variance_error
from experiments._sampling import make_kernel, width_scale
from experiments.dphmc_fig1 import COLUMNS as C_DPHMC
from experiments.fig63 import COLUMNS as C63, KEYS as K63
from experiments.grid import KEY_COLUMNS
from experiments.mmd_vs_epsilon import COLUMNS, run_mmd_vs_epsilon

QUIET = dict(quick=True, log=None)


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# One worker runs this module (pytest-xdist's loadgroup): each quick run below is a module fixture,
# set up once per worker that gets one of its tests (twice in CI before, once per worker).
pytestmark = pytest.mark.xdist_group("sampling_experiments")


@pytest.fixture(scope="module", params=["fig63", "fig64", "fig65", "dphmc_fig1"])
def quick_run(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    return request.param, out, EXPERIMENTS[request.param](str(out), **QUIET)


def test_quick_run_writes_tidy_csv_and_figure(quick_run):
    name, out, res = quick_run
    rows = _read(res["csv"])
    keys, cols = (K63, C63) if name == "fig63" else (KEY_COLUMNS, C_DPHMC if name == "dphmc_fig1" else COLUMNS)
    assert list(rows[0]) == list(keys) + cols + ["seconds"]
    assert len(rows) == res["computed"] > 0 and {r["experiment"] for r in rows} == {name}
    assert {r["algorithm"] for r in rows} >= {"exact"} and len({r["algorithm"] for r in rows}) >= 3
    if res.get("png") is not None:  # matplotlib installed
        assert (out / f"{name}.png").exists()


def test_quick_run_resumes(quick_run):
    name, out, res = quick_run
    again = EXPERIMENTS[name](str(out), **QUIET)
    assert (again["computed"], again["skipped"]) == (0, res["computed"])


def test_ledger_epsilon_within_target(quick_run):
    name, _, res = quick_run
    if name == "fig63":  # non-private by design: no epsilon is claimed
        assert "epsilon" not in res["rows"][0]
        return
    for r in res["rows"]:
        if r["algorithm"] == "exact":
            continue
        assert r["epsilon_ok"] == "True"
        assert float(r["epsilon_ledger"]) <= float(r["epsilon"]) * (1 + 1e-9)
        assert float(r["delta"]) == pytest.approx(0.1 / int(r["n"]))  # thesis: delta = 0.1/n


def test_bad_names_are_refused(tmp_path):
    with pytest.raises(KeyError, match="unknown problem"):
        run_mmd_vs_epsilon("x", str(tmp_path), ["nope"], ["dp_penalty"], **QUIET)
    with pytest.raises(KeyError, match="unknown algorithm"):
        run_mmd_vs_epsilon("x", str(tmp_path), ["circle"], ["dp_nope"], **QUIET)
    with pytest.raises(KeyError, match="fig63"):
        EXPERIMENTS["fig63"](str(tmp_path), problems=("circle",), **QUIET)
    with pytest.raises(KeyError, match="unknown problem"):
        EXPERIMENTS["dphmc_fig1"](str(tmp_path), problems=("circle",), **QUIET)


def test_algorithms_option_runs_only_those_and_appends(tmp_path):
    """``python3 -m experiments fig64 --algorithms NAME[,NAME]`` (issue #41: fill in the never-run
    minibatch OCU+GWMH cells of a shipped CSV): only the named algorithms (and the exact
    baselines) run, a second call appends its cells and leaves the rows already there
    byte-identical, and a name the figure does not have is refused before anything runs."""
    from experiments.cli import main

    out = str(tmp_path)
    args = ["fig64", "--quick", "--out", out, "--threads", "1"]
    assert main(args + ["--algorithms", "minibatch_dp_penalty_ocu_gwmh"]) == 0
    path = tmp_path / "fig64.csv"
    first = path.read_bytes()
    assert {r["algorithm"] for r in _read(path)} == {"exact", "minibatch_dp_penalty_ocu_gwmh"}
    assert main(args + ["--algorithms", "minibatch_dp_penalty"]) == 0
    second = path.read_bytes()
    assert second.startswith(first) and len(second) > len(first)
    rows = _read(path)
    assert {r["algorithm"] for r in rows} == {"exact", "minibatch_dp_penalty", "minibatch_dp_penalty_ocu_gwmh"}
    assert sum(r["algorithm"] == "exact" for r in rows) == 2  # the baselines ran once (one per 2-d banana)
    # thesis §6.4: Fig. 6.5 has no minibatch algorithm; fig62 has no algorithm grid at all
    with pytest.raises(ValueError, match="fig65 has no algorithm"):
        main(["fig65", "--quick", "--out", out, "--algorithms", "minibatch_dp_penalty_ocu_gwmh"])
    with pytest.raises(ValueError, match="not supported by fig62"):
        main(["fig62", "--quick", "--out", out, "--algorithms", "dp_penalty"])
    assert not (tmp_path / "fig65.csv").exists() and not (tmp_path / "fig62.csv").exists()
    assert path.read_bytes() == second


def test_metrics_and_width_scale():
    x = torch.tensor([[0.0, 0.0], [2.0, 2.0]])
    assert mean_error(x, torch.ones(2, 2)) == 0.0
    assert variance_error(x, torch.ones(2, 2)) == pytest.approx(math.sqrt(2))
    assert width_scale("flat-banana-2d", 10_000, 1.0) == pytest.approx(math.sqrt(10))
    assert width_scale("tempered-banana-2d", 10_000, 0.1) == pytest.approx(1.0)  # T n = n0 at any n
    from pyro_dp.models import get_problem

    with pytest.raises(KeyError, match="unknown algorithm"):
        make_kernel("nope", get_problem("circle", n=100), epsilon=1.0, delta=1e-3, num_iterations=10, seed=0,
                    params={}, n=100)


def test_dphmc_runs_on_the_circle_flat_prior():
    """Regression: DPHMC used to raise on a flat prior (constant log prior, no autograd graph)."""
    from experiments._sampling import THESIS_PARAMS, run_chain
    from pyro_dp.models import get_problem

    p = get_problem("circle", n=200)
    run_chain("dp_hmc", p, p.reference_sample(50), epsilon=2.0, n=200, num_iterations=8, repeat=0,
              params=THESIS_PARAMS["circle"]["dp_hmc"])


def _thesis_adp_delta(mu, epsilon):
    """The thesis code's own delta of a Gaussian mechanism whose privacy loss is N(mu, 2 mu)
    (``oraisa/masters-thesis`` ``code/dp_penalty.py`` and ``code/hmc.py``, ``adp_delta``;
    Balle & Wang 2018, Thm 8): an oracle independent of our ``"gdp"`` accountant."""
    d = 2 * math.sqrt(mu)
    return 0.5 * (math.erfc((epsilon - mu) / d) - math.exp(epsilon) * math.erfc((epsilon + mu) / d))


@pytest.mark.parametrize("problem", ["flat-banana-2d", "tempered-banana-10d", "correlated-gauss"])
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_thesis_iterations_match_the_thesis_code(problem, epsilon):
    """Full mode runs the thesis's scheme: fixed noise tau, the most iterations ε allows. The
    count must be the thesis code's: its delta within δ at k iterations and over δ at k + 1."""
    from experiments._sampling import THESIS_N, THESIS_PARAMS, thesis_iterations

    n = THESIS_N[problem]
    delta = 0.1 / n
    pen, hmc = THESIS_PARAMS[problem]["dp_penalty"], THESIS_PARAMS[problem]["dp_hmc"]
    k = thesis_iterations("dp_penalty", pen, epsilon=epsilon, delta=delta, n=n)
    mu = lambda k: k / (2 * pen["tau"] ** 2 * n)  # noqa: E731 - dp_penalty.py adp_delta
    assert _thesis_adp_delta(mu(k), epsilon) <= delta < _thesis_adp_delta(mu(k + 1), epsilon)
    k = thesis_iterations("dp_hmc", hmc, epsilon=epsilon, delta=delta, n=n)
    # hmc.py adp_delta, compute_less_grad=False: k ratio releases and k (L + 1) gradient releases
    mu = lambda k: k / (2 * hmc["tau_l"] ** 2 * n) + k * (hmc["L"] + 1) / (2 * hmc["tau_g"] ** 2 * n)  # noqa: E731
    assert _thesis_adp_delta(mu(k), epsilon) <= delta < _thesis_adp_delta(mu(k + 1), epsilon)


def test_thesis_scheme_chain_runs_the_thesis_count_within_budget():
    from experiments._sampling import THESIS_PARAMS, run_chain, thesis_iterations
    from pyro_dp.models import get_problem

    n, eps = 2000, 6.0
    p = get_problem("flat-banana-2d", n=n)
    params = THESIS_PARAMS["flat-banana-2d"]["dp_penalty"]
    row = run_chain("dp_penalty", p, p.reference_sample(100), epsilon=eps, n=n, num_iterations=None, repeat=0,
                    params=params, adapt=False)
    assert row["iterations"] == thesis_iterations("dp_penalty", params, epsilon=eps, delta=0.1 / n, n=n) >= 8
    assert row["epsilon_ok"] and row["epsilon_ledger"] <= eps * (1 + 1e-9)
    # the kernel's calibrated noise is the thesis's tau sqrt(n), up to the count's rounding down
    assert row["noise_multiplier"] <= params["tau"] * math.sqrt(n) * (1 + 1e-9)
    assert row["noise_multiplier"] == pytest.approx(params["tau"] * math.sqrt(n), rel=0.02)
    with pytest.raises(ValueError, match="needs a privacy budget"):
        run_chain("dp_penalty", p, p.reference_sample(10), epsilon=None, n=n, num_iterations=None, repeat=0,
                  params=params, non_private=True)


def test_run_grid_workers_give_the_same_rows(tmp_path):
    from experiments.grid import run_grid

    cells = [{"problem": "p", "algorithm": "a", "epsilon": float(e), "repeat": r} for e in (1, 2, 3) for r in (0, 1)]

    def compute(c):
        g = torch.Generator().manual_seed(int(10 * c["epsilon"] + c["repeat"]))
        return {"mmd": float(torch.randn(3, generator=g, dtype=torch.float64).sum())}

    one = run_grid("a", str(tmp_path), cells, compute, ["mmd"], progress=False, log=None)
    two = run_grid("b", str(tmp_path), cells, compute, ["mmd"], progress=False, log=None, workers=2)
    key = lambda r: (r["epsilon"], r["repeat"])  # noqa: E731 - rows arrive in the order cells finish
    assert [r["mmd"] for r in sorted(one["rows"], key=key)] == [r["mmd"] for r in sorted(two["rows"], key=key)]
    with pytest.raises(ValueError, match="workers"):
        run_grid("c", str(tmp_path), cells, compute, ["mmd"], progress=False, log=None, workers=0)
