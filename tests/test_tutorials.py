"""Tutorials run end to end in quick mode (PYRO_DP_QUICK=1) so they never rot.

Each tutorial runs once per test session (tests/conftest.py's ``tutorial_run``, through
docs/_ext/tutorial_outputs.run): these tests check the runs, and the Sphinx build of
tests/test_docs.py renders the same runs rather than running every tutorial again (about 100 s
of CI time saved). Hence the xdist group of the build (one worker, one session cache)."""
import pathlib

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).parent.parent / "tutorials").glob("*.py"))

pytestmark = pytest.mark.xdist_group("sphinx_build")


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs_quick(path, tutorial_run):
    out = tutorial_run(path.stem)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "epsilon" in out.stdout
    if "savefig" in path.read_text():  # tutorials that draw must produce their figures
        pytest.importorskip("matplotlib")
        assert list((tutorial_run.generated / path.stem).glob("*.png")), f"{path.name} wrote no figure"
