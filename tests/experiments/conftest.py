"""Fixtures shared by the experiments' tests."""
import pytest

from experiments import EXPERIMENTS


@pytest.fixture(scope="session")
def quick_experiment(tmp_path_factory):
    """``quick_experiment(name)``: ``(out, result)`` of ``EXPERIMENTS[name]`` run in quick mode
    (no log) into a fresh folder ``out``, once per session (per pytest-xdist worker): a later call
    returns the same run. A test that reruns it into ``out`` checks the resume."""
    runs = {}

    def run(name):
        if name not in runs:
            out = tmp_path_factory.mktemp(name)
            runs[name] = out, EXPERIMENTS[name](str(out), quick=True, log=None)
        return runs[name]

    return run
