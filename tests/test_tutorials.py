"""Tutorials run end to end in quick mode (PYRO_DP_QUICK=1) so they never rot."""
import os
import pathlib
import subprocess
import sys

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).parent.parent / "tutorials").glob("*.py"))


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs_quick(path, tmp_path):
    env = dict(os.environ, PYRO_DP_QUICK="1", PYRO_DP_FIGURES=str(tmp_path))
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "epsilon" in out.stdout
    if "savefig" in path.read_text():  # tutorials that draw must produce their figures
        pytest.importorskip("matplotlib")
        assert list(tmp_path.glob("*.png")), f"{path.name} wrote no figure"
