"""Issue #60, acceptance 4: Heikkilä Fig. 1(c) (``experiments/heikkila_clipping.py``) and Zhang &
Zhang Fig. 1's non-private references and repeats (``experiments/fastmh.py``): the quick runs,
the shipped CSVs against a recomputation (with mutants), and the figures showing what they say.
About a minute (two quick runs)."""
import math
import pathlib

import numpy as np
import pytest

from experiments import EXPERIMENTS, fastmh, heikkila_clipping
from tests.experiments import read_rows

SHIPPED = pathlib.Path(__file__).resolve().parents[2] / "docs" / "_static" / "results"
plt = pytest.importorskip("matplotlib.pyplot")


# ------------------------------------------------------------------------ Heikkilä Fig. 1(c)

def test_fig1c_quick_run_writes_resumes_and_charges_the_plan(quick_experiment):
    out, res = quick_experiment("heikkila_fig1c")
    rows = read_rows(out / "heikkila_fig1c.csv")
    c = heikkila_clipping.CLIP_PARAMS["quick"]
    assert len(rows) == res["computed"] == len(c["prop_vars"]) * c["repeats"]
    assert (out / "heikkila_fig1c.png").stat().st_size > 0
    for r in rows:
        assert 0.0 <= float(r["clipped_fraction"]) <= 1.0
        exact = float(r["epsilon_exact"])
        assert exact <= float(r["epsilon"]) <= exact + 1e-4 + 1e-12  # key: the ledger's ε rounded up
    again = EXPERIMENTS["heikkila_fig1c"](str(out), quick=True, log=None)
    assert again["computed"] == 0 and again["skipped"] == res["computed"]


def _fig1c_plan_eps(iters, *, drop_start=False):
    from experiments.heikkila import HEIKKILA_PARAMS, _epsilon, _plans

    p = dict(HEIKKILA_PARAMS["full"], iters=iters)
    fixed, per, acc, rel, nm = _plans(p)["dp_barker"]
    return _epsilon(([] if drop_start else fixed, per, acc, rel, nm), iters, p["delta"])


def test_shipped_fig1c_is_the_authors_grid_and_its_epsilon_is_the_plan():
    """The shipped run: the authors' 10 variances (``mog_main_prop_var.py``), N = 10⁶, b = 1000;
    every chain's ε (substitution, δ = 2·10⁻⁶, private start included) is the plan's. Mutant:
    the plan without the start's 12 releases gives another ε."""
    rows = read_rows(SHIPPED / "heikkila_fig1c.csv")
    assert sorted({float(r["proposal_variance"]) for r in rows}) == pytest.approx(list(np.linspace(0.005, 0.02, 10)))
    assert {(int(r["n"]), int(r["batch"])) for r in rows} == {(1_000_000, 1000)}
    iters = {int(r["iterations"]) for r in rows}
    assert len(iters) == 1
    want = _fig1c_plan_eps(iters.pop())
    for r in rows:
        assert float(r["epsilon_exact"]) == pytest.approx(want, rel=1e-9)
        assert 0.0 <= float(r["clipped_fraction"]) <= 1.0
    assert not math.isclose(_fig1c_plan_eps(int(rows[0]["iterations"]), drop_start=True), want, rel_tol=1e-3)


def test_fig1c_figure_labels_its_axes_and_relation(monkeypatch):
    captured = {}
    monkeypatch.setattr(plt, "close", lambda fig=None: captured.setdefault("fig", fig))
    heikkila_clipping.plot_fig1c(read_rows(SHIPPED / "heikkila_fig1c.csv"), "/dev/null", plt)
    ax = captured["fig"].axes[0]
    assert "proposal variance" in ax.get_xlabel() and "clipped" in ax.get_ylabel()
    assert "substitution" in ax.get_title()


# ---------------------------------------------------- Zhang & Zhang Fig. 1: non-private lines

def test_nonprivate_quick_rows(quick_experiment):
    out, res = quick_experiment("fastmh_fig1_nonprivate")
    rows = read_rows(out / "fastmh_fig1_nonprivate.csv")
    assert {r["algorithm"] for r in rows} == set(fastmh.NONPRIVATE_ALGORITHMS)
    n = fastmh.FASTMH_PARAMS["quick"]["n"]
    for r in rows:
        assert float(r["epsilon"]) == math.inf and float(r["step_epsilon_ledger"]) == math.inf
        if r["algorithm"] == "mh":
            assert float(r["batch_size"]) == n
        else:  # TunaMH: K = N, so no iteration ran the full-batch test
            assert float(r["batch_size"]) < n and float(r["full_batch_fraction"]) == 0.0
    assert res["png"] is None  # no fastmh_fig1.csv there: nothing to draw the references on


def test_repeats_argument_adds_repeats_and_keeps_the_old(tmp_path):
    """``repeats=3`` runs repeats 0–2 (here the exact-draws line only: no chains); a second call
    with ``repeats=[3]`` adds repeat 3 alone and recomputes nothing."""
    a = fastmh.run_fastmh_fig1(str(tmp_path), quick=True, log=None, algorithms=("exact",), repeats=3)
    ts = len(range(50, 101, 50))
    assert a["computed"] == 3 * 2 * ts  # 3 repeats x 2 epsilons x 2 scored t
    b = fastmh.run_fastmh_fig1(str(tmp_path), quick=True, log=None, algorithms=("exact",), repeats=[3])
    assert b["computed"] == 2 * ts and {r["repeat"] for r in b["rows"]} == {"0", "1", "2", "3"}
    with pytest.raises(ValueError, match="no algorithm"):
        fastmh.run_fastmh_fig1(str(tmp_path), quick=True, log=None, algorithms=("mh",))


def _legend_labels(fig):
    return {t.get_text() for leg in fig.legends for t in leg.get_texts()}


@pytest.mark.parametrize("draw", ["fig1", "fig4"])
def test_shipped_figures_show_the_nonprivate_references(draw, monkeypatch):
    """Figs. 1 and 4 drawn from the shipped CSVs carry the MH and TunaMH lines; mutant: drawn
    without the non-private CSV they do not (so the check can fail)."""
    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    rows = read_rows(SHIPPED / "fastmh_fig1.csv")
    nonprivate = read_rows(SHIPPED / "fastmh_fig1_nonprivate.csv")
    assert {r["algorithm"] for r in nonprivate} == set(fastmh.NONPRIVATE_ALGORITHMS)
    for np_rows in (nonprivate, ()):
        if draw == "fig1":
            fastmh._plot(rows, "/dev/null", plt, final=10000, curve_eps=0.05, n=50000, nonprivate=np_rows)
            labels = _legend_labels(figs[-1])
        else:
            fastmh.plot_fig4(rows, "/dev/null", plt, eps=0.05, n=50000, nonprivate=np_rows)
            labels = {t.get_text() for t in figs[-1].axes[0].get_legend().get_texts()}
        shown = {a for a in fastmh.NONPRIVATE_ALGORITHMS if any(fastmh._NP_LABELS[a] in lab for lab in labels)}
        assert shown == (set(fastmh.NONPRIVATE_ALGORITHMS) if np_rows else set())
