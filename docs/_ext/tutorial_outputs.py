"""Sphinx extension: run every tutorial in quick mode at build time and render its output.

For each ``tutorials/NAME.py`` the build runs ``python tutorials/NAME.py`` with
``PYRO_DP_QUICK=1`` (a smoke run of seconds), ``MPLBACKEND=Agg`` and ``PYRO_DP_FIGURES``
pointing at ``docs/_generated/NAME/``, and writes ``docs/_generated/NAME.md``: the printed
output and every figure the run saved. ``docs/tutorials.md`` includes that file under each
tutorial's code, so a reader sees what the tutorial prints and draws without running it. A
tutorial that fails fails the build (the docs test runs it with ``-W``), so the rendered pages
cannot drift from the code.

The quick mode shortens the runs (fewer iterations, smaller data): the pages say so, and the
full-length figures are what ``python tutorials/NAME.py`` produces.

The test suite runs each tutorial once (tests/test_tutorials.py, through :func:`run`) and then
builds the docs with ``-D tutorial_outputs_reuse=1``: the build renders those runs (the
``stdout.txt`` and figures :func:`run` left in ``docs/_generated/NAME/``) instead of running every
tutorial a second time. A tutorial without a successful run there is run by the build as usual.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "tutorials"
GENERATED = ROOT / "docs" / "_generated"


def run(name: str) -> subprocess.CompletedProcess:
    """Run one tutorial in quick mode into ``docs/_generated/NAME/`` (its figures, and its printed
    output as ``stdout.txt`` when it succeeds); return the finished process."""
    out_dir = GENERATED / name
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    env = dict(os.environ, PYRO_DP_QUICK="1", PYRO_DP_FIGURES=str(out_dir), MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, str(TUTORIALS / f"{name}.py")], capture_output=True, text=True,
                          timeout=900, env=env, cwd=str(out_dir))
    if proc.returncode == 0:
        (out_dir / "stdout.txt").write_text(proc.stdout, encoding="utf-8")
    return proc


def render(name: str, reuse: bool = False) -> str:
    """Run one tutorial in quick mode (or, with ``reuse``, take :func:`run`'s output of this test
    session); return the markdown of its output and figures."""
    out_dir = GENERATED / name
    if reuse and (out_dir / "stdout.txt").exists():
        stdout = (out_dir / "stdout.txt").read_text(encoding="utf-8")
    else:
        proc = run(name)
        if proc.returncode != 0:
            raise RuntimeError(f"tutorials/{name}.py failed in quick mode:\n{proc.stderr[-3000:]}")
        stdout = proc.stdout
    text = stdout.rstrip() or "(no output)"
    lines = [
        f"Output of `PYRO_DP_QUICK=1 python tutorials/{name}.py` (quick mode: shortened runs; "
        "the full run prints and draws the same with more iterations), executed when these docs "
        "were built:",
        "",
        "```text",
        text,
        "```",
        "",
    ]
    for fig in sorted(out_dir.glob("*.png")):
        lines += [f"```{{image}} _generated/{name}/{fig.name}", f":alt: {fig.stem}", ":width: 90%", "```", ""]
    return "\n".join(lines)


def run_tutorials(app) -> None:
    GENERATED.mkdir(exist_ok=True)
    for path in sorted(TUTORIALS.glob("*.py")):
        (GENERATED / f"{path.stem}.md").write_text(render(path.stem, bool(app.config.tutorial_outputs_reuse)))


def setup(app):
    app.add_config_value("tutorial_outputs_reuse", False, "env")
    app.connect("builder-inited", run_tutorials)
    return {"version": "1.0", "parallel_read_safe": True}
