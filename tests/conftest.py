"""Test-wide fixtures.

Privacy noise and batch selection are seeded from OS entropy by default, whatever ``seed`` a
kernel gets (issue #14, finding 4). Statistical tests must be reproducible (fixed seeds,
tolerances from the Monte Carlo standard error), so in the test suite a kernel built with
``seed=s`` and no ``noise_seed`` gets ``noise_seed=s`` — the documented testing option — unless
the test is marked ``fresh_noise`` (tests of the default behaviour itself) or uses
``secure_mode``.
"""
import os

import pytest
import torch

from pyro_dp.kernels.base import DPKernel

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one torch thread per pytest-xdist worker: the suite runs one worker per core (pyproject's
    # addopts), and two workers with two threads each would oversubscribe a 2-core machine
    torch.set_num_threads(1)

# jit_compile=True checks each inductor graph in a subprocess by default (issue 59,
# pyro_dp.compile_check); the suite turns the default off: its many compiles would each run twice
# (measured 1.7-4x a compile), and under pytest-xdist a crash kills only that test's worker (the
# test fails and xdist starts a new worker), never pytest. tests/test_compile_crash.py checks the
# default with the variable unset, and every check path explicitly.
os.environ.setdefault("PYRO_DP_COMPILE_CHECK", "0")


@pytest.fixture(autouse=True)
def _reproducible_noise(request, monkeypatch):
    if request.node.get_closest_marker("fresh_noise") is not None:
        yield
        return
    real_init = DPKernel.__init__

    def init(self, *args, **kwargs):
        if kwargs.get("seed") is not None and kwargs.get("noise_seed") is None and not kwargs.get("secure_mode"):
            kwargs["noise_seed"] = kwargs["seed"]
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(DPKernel, "__init__", init)
    yield


@pytest.fixture
def one_thread():
    """One torch thread for the test (benchmark-sized runs beside xdist's other worker)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def release_recorder():
    """An open release recorder (:func:`pyro_dp.mechanisms.recording`) for a test that calls the
    mechanisms' release functions (or a kernel's release, step or tuning function) directly,
    outside a kernel's ``sample``, which opens its own: with none open a release raises (issue 58).
    Yields the :class:`~pyro_dp.mechanisms.Recorder`."""
    from pyro_dp.mechanisms import recording

    with recording() as rec:
        yield rec


@pytest.fixture
def raw_values():
    """The likelihood's outputs as plain tensors (pyro_dp.private's wrapping off) for a test module
    that checks the likelihood's *values* (plate idioms, row isolation, models): the private type
    itself, and every kernel's path through it, are tested with it on (tests/test_private.py, the
    kernel tests). Use as ``pytestmark = pytest.mark.usefixtures("raw_values")``."""
    from pyro_dp.private import tainting

    with tainting(False):
        yield


# ------------------------------------------------------------------ tutorials and the Sphinx build
# The tutorials run once per test session: tests/test_tutorials.py checks each run and the Sphinx
# build (tests/test_docs.py) renders the same runs (``-D tutorial_outputs_reuse=1``) instead of
# running them again. Both modules are in the xdist group "sphinx_build" (one worker): the runs
# and the build write docs/_generated in the source tree, and the session cache is per worker.
_DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


@pytest.fixture(scope="session")
def tutorial_run():
    """``tutorial_run(name)``: tutorials/NAME.py run in quick mode, once per session, through
    docs/_ext/tutorial_outputs.run (figures and ``stdout.txt`` in docs/_generated/NAME/);
    returns the finished process."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tutorial_outputs", os.path.join(_DOCS, "_ext", "tutorial_outputs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    done = {}

    def run(name):
        if name not in done:
            done[name] = module.run(name)
        return done[name]

    run.generated = module.GENERATED
    run.names = sorted(p.stem for p in module.TUTORIALS.glob("*.py"))
    return run


@pytest.fixture(scope="session")
def built_docs(tmp_path_factory, tutorial_run):
    """The Sphinx site built once (-W: warnings are errors; -E: fresh environment) from this
    session's tutorial runs; returns the HTML folder."""
    import warnings

    sphinx_cmd = pytest.importorskip("sphinx.cmd.build", reason='sphinx is not installed (pip install -e ".[docs]")')
    for name in tutorial_run.names:
        tutorial_run(name)
    out = tmp_path_factory.mktemp("html")
    doctrees = tmp_path_factory.mktemp("doctrees")
    with warnings.catch_warnings():  # Python deprecation warnings of sphinx/myst internals, not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        status = sphinx_cmd.build_main(["-W", "-E", "-q", "-b", "html", "-d", str(doctrees),
                                        "-D", "tutorial_outputs_reuse=1", _DOCS, str(out)])
    assert status == 0, "sphinx-build -W failed: run `sphinx-build -W -b html docs docs/_build/html` to see why"
    return out
