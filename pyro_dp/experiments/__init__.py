r"""Paper reproductions, run with ``pyro-dp experiment NAME [--quick] [--out DIR]``.

:data:`EXPERIMENTS` maps a name to ``run(out_dir, quick=..., log=...) -> dict``; add new
reproductions there. Every experiment writes a tidy CSV into ``out_dir`` and is resumable
(cells already in the CSV are skipped).
"""
from __future__ import annotations

from typing import Callable, Dict

from .fig62 import run_fig62

__all__ = ["EXPERIMENTS", "run_fig62"]

#: name -> runner(out_dir, quick=False, log=print) -> dict
EXPERIMENTS: Dict[str, Callable[..., dict]] = {
    "fig62": run_fig62,
}
