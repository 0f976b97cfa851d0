"""The results figures are readable and shown (issue #41 acceptance 3): every PNG under
docs/_static/results is referenced from a docs page; the shared plot labels its axes (no raw
column names), keeps its legend off the panels, and no series hides another.

A few seconds: one figure drawn from the shipped DP-HMC paper CSV; the full redraw
(``python benchmarks/result_figures.py``, ~25 s) is slow-marked.
"""
import csv
import re

import pytest

from tests.benchmark_scripts import ROOT, load_benchmark

SHIPPED = ROOT / "docs" / "_static" / "results"

plt = pytest.importorskip("matplotlib.pyplot")


def _rows(name):
    with open(SHIPPED / f"{name}.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_shipped_png_is_shown_in_the_docs():
    text = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md"))
    shown = set(re.findall(r"!\[[^\]]*\]\(_static/results/([^)]+\.png)\)", text))
    missing = sorted(p.name for p in SHIPPED.glob("*.png") if p.name not in shown)
    assert not missing, f"PNGs under docs/_static/results shown on no docs page: {missing}"


def _problems(fig):
    """What a reader could not read: raw column names as axis labels, a legend over a panel, a
    series whose points all sit under another's."""
    raw = {"mmd", "mean_error", "sym_kl", "clipped_fraction", "epsilon", "variance_error", "wall_seconds"}
    out = []
    n_series = [0]
    fig.canvas.draw()
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    for ax in axes:
        for lab in (ax.get_xlabel(), ax.get_ylabel()):
            if not lab or lab in raw:
                out.append(f"axis label {lab!r}")
        if ax.get_legend() is not None:
            out.append("legend inside a panel")
        series = [(line.get_label(), line) for line in ax.get_lines()]
        series += [(c.get_label(), c.lines[0]) for c in ax.containers if hasattr(c, "has_yerr")]  # errorbar
        pts = {}
        for label, line in series:
            if line is None or label.startswith("_") or "non-private floor" in label:
                continue
            pts[label] = {(round(float(x), 9), round(float(y), 9), line.get_marker(), str(line.get_color()))
                          for x, y in line.get_xydata()}
        n_series[0] += len(pts)
        labels = list(pts)
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                pa = {q[:2] for q in pts[a]}
                if pa and pa <= {q[:2] for q in pts[b]}:
                    out.append(f"{a!r} hidden under {b!r}")
    for leg in fig.legends:
        box = leg.get_window_extent()
        for ax in axes:
            if box.overlaps(ax.get_window_extent()):
                out.append("figure legend over a panel")
    if n_series[0] == 0:
        out.append("no series found")
    return out


def _draw(rows, tmp_path, monkeypatch):
    from experiments import grid

    captured = {}
    monkeypatch.setattr(plt, "close", lambda fig=None: captured.setdefault("fig", fig))
    grid.plot_metric_vs_epsilon(rows, "mmd", str(tmp_path / "f.png"), title="t", log=None)
    return captured["fig"]


def test_shared_plot_is_readable(tmp_path, monkeypatch):
    rows = [r for r in _rows("dphmc_fig1") if r["algorithm"] != "exact"]
    # two series with identical values: the second must not hide under the first
    twin = [dict(r, algorithm="dp_sgld_twin") for r in rows if r["algorithm"] == "dp_sgld"]
    fig = _draw(rows + twin, tmp_path, monkeypatch)
    assert _problems(fig) == []
    assert (tmp_path / "f.png").stat().st_size > 0


def test_the_readability_check_has_power(tmp_path):
    """Mutant: the old plot (raw label, legend in the panel, no dodge) fails the check."""
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], label="a", marker="o")
    ax.plot([1, 2], [1, 2], label="b", marker="o")
    ax.set(xlabel="epsilon", ylabel="mmd")
    ax.legend()
    found = _problems(fig)
    plt.close(fig)
    assert "axis label 'mmd'" in found and "legend inside a panel" in found and "'a' hidden under 'b'" in found


@pytest.mark.slow
def test_redraw_every_csv_figure(tmp_path):
    mod = load_benchmark("result_figures")
    done = set(mod.redraw(out=tmp_path, log=None))
    shipped = {p.name for p in SHIPPED.glob("*.png")}
    assert shipped - done == set(mod.NOT_FROM_CSV)


def test_scatters_option_reruns_the_three_chains_into_the_shipped_names(tmp_path, monkeypatch):
    """``--scatters`` (issue #60): the three scatters come from repeat 0's reruns, each copied to
    its shipped name. The chains are replaced by a stub that draws nothing but the PNG."""
    mod = load_benchmark("result_figures")
    calls = []

    def fake_run(out, repeats, log, **kw):
        calls.append((tuple(repeats), kw))
        name = "heikkila_fig23_sgld_check_scatter.png" if kw.get("setting") == "sgld_check" else "heikkila_fig23_scatter.png"
        with open(f"{out}/{name}", "wb") as fh:
            fh.write(repr(kw).encode())

    monkeypatch.setattr("experiments.heikkila.run_heikkila_fig23", fake_run)
    done = mod.redraw_scatters(tmp_path / "out", log=None)
    assert done == list(mod.NOT_FROM_CSV) and all((tmp_path / "out" / n).exists() for n in done)
    assert [c[0] for c in calls] == [(0,)] * 3
    assert calls[0][1] == {"algorithms": ("dp_barker",)} and calls[1][1] == {"setting": "sgld_check"}
    assert calls[2][1] == {"algorithms": ("dp_sgld", "dp_sgld_authors")}
