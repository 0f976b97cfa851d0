r"""Redraw every figure of ``docs/_static/results/`` from the shipped CSVs (issue #41).

``python benchmarks/result_figures.py`` (about 20 s, no sampling) rewrites each PNG that the
experiments draw, with the experiments' own plotting functions, so a rerun of an experiment
draws the same figure. Figures need labelled axes with units, no hidden series (every series
differs in colour, marker and line style and is dodged sideways), a legend below the panels,
and the non-private reference where the paper has one (exact draws; for Fig. 6.3, the
non-private chains themselves).

Three PNGs are not redrawn here: ``heikkila_fig23_scatter.png``,
``heikkila_fig23_sgld_check_scatter.png`` and ``heikkila_fig23_sgld_scatter.png`` are scatters of
repeat 0's draws, which the CSVs do not hold. They are redrawn by rerunning that chain (single
thread: 100 s, 45 s and ~7 min on the 2026-11-27 machine; the first two reruns' CSV rows equalled
the shipped ones in every compared column; the third's DP-SGLD chains, run alone, differ from the
20-chain run's by rounding)::

    run_heikkila_fig23(DIR, algorithms=("dp_barker",), repeats=[0])   # -> DIR/heikkila_fig23_scatter.png
    run_heikkila_fig23(DIR, setting="sgld_check", repeats=[0])         # -> ..._sgld_check_scatter.png
    run_heikkila_fig23(DIR, algorithms=("dp_sgld", "dp_sgld_authors"), repeats=[0])
    # -> DIR/heikkila_fig23_scatter.png, shipped as heikkila_fig23_sgld_scatter.png

``--scatters`` does these three runs too (``redraw_scatters``), so
``python benchmarks/result_figures.py --scatters`` redraws every figure of ``docs/results.md``
(the Yıldırım figure and the p² check's curve are drawn from their CSVs either way).

``--out DIR`` writes elsewhere (the tests draw into a temporary folder).
"""
from __future__ import annotations

import argparse
import csv
import os
import pathlib
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHIPPED = ROOT / "docs" / "_static" / "results"

#: PNGs drawn from CSVs; the two scatters need chain draws (module docstring).
NOT_FROM_CSV = ("heikkila_fig23_scatter.png", "heikkila_fig23_sgld_check_scatter.png",
                "heikkila_fig23_sgld_scatter.png")


def _rows(name, results):
    with open(pathlib.Path(results) / f"{name}.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def redraw(results=SHIPPED, out=SHIPPED, log=print) -> list:
    """Draw every CSV-backed figure from ``results`` into ``out``; returns the PNG names."""
    from experiments import dphmc_fig1, fastmh, fig62, fig63, heikkila, mmd_vs_epsilon
    from experiments.grid import pyplot_or_none

    plt = pyplot_or_none(log)
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    done = []
    fig62._plot(_rows("fig62", results), str(out / "fig62.png"), log)
    done.append("fig62.png")
    fig63._plot(_rows("fig63", results), str(out / "fig63.png"), log)
    fig63._plot(_rows("fig63_n1e4", results), str(out / "fig63_n1e4.png"), log)
    done += ["fig63.png", "fig63_n1e4.png"]
    for name in ("fig64", "fig65"):
        mmd_vs_epsilon._plots(name, str(out), _rows(name, results), log)
        done += [f"{name}{s}.png" for s in ("", "_clipping", "_mean_error", "_grad_clipping")]
        with tempfile.TemporaryDirectory() as tmp:  # the superseded n = 10^4 runs: same figures, renamed
            mmd_vs_epsilon._plots(name, tmp, _rows(f"{name}_n1e4", results), log,
                                  note=" (superseded run at n = 10⁴)")
            for s in ("", "_clipping", "_mean_error"):
                target = f"{name}{s}_n1e4.png" if s else f"{name}_n1e4.png"
                if (SHIPPED / target).exists() or out != SHIPPED:
                    shutil.copy(os.path.join(tmp, f"{name}{s}.png"), out / target)
                    done.append(target)
    dphmc_fig1._plots(_rows("dphmc_fig1", results), str(out), log)
    done += ["dphmc_fig1.png", "dphmc_fig1_mean_error.png"]
    heikkila._fig3(_rows("heikkila_fig23", results), str(out / "heikkila_fig23.png"), plt)
    heikkila._fig3(_rows("heikkila_fig23_sgld_check", results), str(out / "heikkila_fig23_sgld_check.png"), plt)
    done += ["heikkila_fig23.png", "heikkila_fig23_sgld_check.png"]
    nonprivate = _rows("fastmh_fig1_nonprivate", results)  # §6.1's MH and TunaMH references
    fastmh._plot(_rows("fastmh_fig1", results), str(out / "fastmh_fig1.png"), plt, final=10000, curve_eps=0.05,
                 n=50000, nonprivate=nonprivate)
    done.append("fastmh_fig1.png")
    fastmh.plot_fig4(_rows("fastmh_fig1", results), str(out / "fastmh_fig4.png"), plt, eps=0.05, n=50000,
                     nonprivate=nonprivate)
    done.append("fastmh_fig4.png")
    from experiments import heikkila_clipping, heikkila_privacy

    heikkila_clipping.plot_fig1c(_rows("heikkila_fig1c", results), str(out / "heikkila_fig1c.png"), plt)
    done.append("heikkila_fig1c.png")
    heikkila_privacy.plot_fig1(_rows("heikkila_fig1", results), str(out / "heikkila_fig1.png"), plt)
    heikkila_privacy.plot_fig3_substitution(_rows("heikkila_fig23", results), _rows("heikkila_fig23_relations", results),
                                            str(out / "heikkila_fig23_substitution.png"), plt)
    done += ["heikkila_fig1.png", "heikkila_fig23_substitution.png"]
    fastmh._plot_fig2(_rows("fastmh_fig2", results), _rows("fastmh_fig2_density", results),
                      str(out / "fastmh_fig2.png"), plt, n=50000, iters=10000)
    done.append("fastmh_fig2.png")
    from experiments import fastmh_mnist

    fig3 = _rows("fastmh_fig3", results)
    fastmh_mnist.plot_fig3(fig3, str(out / "fastmh_fig3.png"), plt, n=int(fig3[0]["num_train"]))
    done.append("fastmh_fig3.png")
    fig3m = _rows("fastmh_fig3_mnist", results)
    fastmh_mnist.plot_fig3(fig3m, str(out / "fastmh_fig3_mnist.png"), plt, n=int(fig3m[0]["num_train"]), subset=False)
    done.append("fastmh_fig3_mnist.png")
    import importlib.util

    spec = importlib.util.spec_from_file_location("yildirim_thm1", ROOT / "benchmarks" / "yildirim_thm1.py")
    yil = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(yil)
    yil.plot(_rows("yildirim_thm1", results), str(out / "yildirim_thm1.png"))
    done.append("yildirim_thm1.png")
    return done


def redraw_scatters(out=SHIPPED, log=print) -> list:
    """The three scatters of :data:`NOT_FROM_CSV`, by rerunning repeat 0's chains (module
    docstring: about 100 s, 45 s and 7 min at one thread) in temporary folders; returns the PNG
    names written into ``out``."""
    from experiments.heikkila import run_heikkila_fig23

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    done = []
    for kw, src, target in ((dict(algorithms=("dp_barker",)), "heikkila_fig23_scatter.png", NOT_FROM_CSV[0]),
                            (dict(setting="sgld_check"), "heikkila_fig23_sgld_check_scatter.png", NOT_FROM_CSV[1]),
                            (dict(algorithms=("dp_sgld", "dp_sgld_authors")), "heikkila_fig23_scatter.png",
                             NOT_FROM_CSV[2])):
        with tempfile.TemporaryDirectory() as tmp:
            run_heikkila_fig23(tmp, repeats=[0], log=log or (lambda *a, **k: None), **kw)
            shutil.copy(os.path.join(tmp, src), out / target)
        done.append(target)
    return done


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=str(SHIPPED), help="folder of the CSVs")
    ap.add_argument("--out", default=str(SHIPPED), help="folder to draw into (default: the shipped figures)")
    ap.add_argument("--scatters", action="store_true",
                    help="also redraw the three Heikkilä scatters by rerunning repeat 0's chains (~10 min, one thread)")
    a = ap.parse_args(argv)
    for name in redraw(a.results, a.out):
        print(name)
    if a.scatters:
        for name in redraw_scatters(a.out):
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
