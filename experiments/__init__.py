r"""Paper reproductions, run from the repository root with ``python3 -m experiments NAME [--quick] [--out DIR]``.

This package is part of the repository, not of the installed library (issue #63): it sits next to
``benchmarks/``, ``setup.cfg`` does not install it, and nothing in :mod:`pyro_dp` imports it (it imports
pyro_dp by absolute imports, as a user's script does).

:data:`EXPERIMENTS` maps a name to ``run(out_dir, quick=..., log=..., device=...) -> dict``; add new
reproductions there. Every experiment writes a tidy CSV into ``out_dir`` and is resumable
(cells already in the CSV are skipped).
"""
from __future__ import annotations

from typing import Callable, Dict

from . import grid as _grid
from .dphmc_fig1 import run_dphmc_fig1
from .fastmh import run_fastmh_fig1, run_fastmh_fig1_nonprivate, run_fastmh_fig2
from .fastmh_mnist import run_fastmh_fig3, run_fastmh_fig3_mnist
from .fig62 import run_fig62
from .fig63 import run_fig63
from .grid import plot_metric_vs_epsilon, run_grid, run_kernel, summarise
from .heikkila import run_heikkila_fig23
from .heikkila_clipping import run_heikkila_fig1c
from .heikkila_privacy import run_heikkila_privacy
from .mmd_vs_epsilon import run_fig64, run_fig65

__all__ = ["EXPERIMENTS", "run_fig62", "run_fig63", "run_fig64", "run_fig65", "run_dphmc_fig1",
           "run_heikkila_fig23", "run_heikkila_fig1c", "run_heikkila_privacy", "run_fastmh_fig1", "run_fastmh_fig1_nonprivate", "run_fastmh_fig2", "run_fastmh_fig3", "run_fastmh_fig3_mnist", "KEY_COLUMNS", "run_grid",
           "run_kernel", "summarise", "plot_metric_vs_epsilon"]

#: Key columns every sampling experiment's CSV starts with; a cell is identified by them
#: (re-bound from :mod:`experiments.grid` so that autodoc lists it here).
KEY_COLUMNS = _grid.KEY_COLUMNS

#: name -> runner(out_dir, quick=False, log=print, device=None) -> dict
EXPERIMENTS: Dict[str, Callable[..., dict]] = {
    "fig62": run_fig62,
    "fig63": run_fig63,
    "fig64": run_fig64,
    "fig65": run_fig65,
    "dphmc_fig1": run_dphmc_fig1,
    "heikkila_fig23": run_heikkila_fig23,
    "heikkila_privacy": run_heikkila_privacy,
    "heikkila_fig1c": run_heikkila_fig1c,
    "fastmh_fig1": run_fastmh_fig1,
    "fastmh_fig1_nonprivate": run_fastmh_fig1_nonprivate,
    "fastmh_fig2": run_fastmh_fig2,
    "fastmh_fig3": run_fastmh_fig3,
    "fastmh_fig3_mnist": run_fastmh_fig3_mnist,
}
