r"""On by default with ``jit_compile=True`` (``jit_options={"check": False}`` turns it off): a compiled
graph is first compiled and run in a checking subprocess (issue 59: never a crash).

Inductor turns a traced per-example graph into generated C++ (or Triton) code. Such code can
kill the process that runs it -- a segmentation fault is not a Python exception, so no
``try``/``except`` in :mod:`pyro_dp.compiled` can turn it into the eager fallback, and a user
who asked for ``jit_compile=True`` would lose the interpreter (issue 59 reported a SIGSEGV in
the compiled per-example gradient of a categorical regression during DPPenalty's and DPHMC's
private start). So before the likelihood compiles a graph with inductor, it hands the graph
to a **checker**: a separate Python process that compiles the same prepared graph with the
same options, thread count and inductor configuration and runs it once on a *stand-in* of its inputs -- zeros of each input's shape,
strides, dtype and device (never the data: the graph's data inputs are replaced by zeros
too). If the checker dies (killed by a signal, or no answer within :data:`CHECK_TIMEOUT`
seconds), the likelihood runs that function eagerly and warns
(:class:`~pyro_dp.compiled.CompileFallbackWarning`); a Python error in the checker, or its exit
with a status, is not a crash and is left to the likelihood's own compile, which handles it as before.

The decision is a set-up decision from the graph's code and the inputs' shapes and dtypes
only: it reads no data value. What it costs: the checker is one process per Python process,
started when the first likelihood that compiles with inductor is built and reused for every
later graph; each graph is compiled in it first, which fills inductor's on-disk caches, so the
likelihood's own compile of the same graph is mostly a cache hit, and what is added is the
checker's own inductor start-up and a second, cached compile (measured on the categorical
regression, DPPenalty, N = 10⁴, warm caches, a loaded 2-core machine: 5 graphs compiled in
16-23 s without the check, 40-70 s with it; ``docs/performance.md``). Why on by default anyway
(2026-12-08): a user who asks for ``jit_compile=True`` asks for a long run, and losing the
process to a segfault costs the whole run (and a crash cannot be turned into a message after
the fact), while the check costs tens of seconds once per process. The ``jit_compile=None``
path (:mod:`pyro_dp.kernels.auto_compile`) compiles only when its cost model, measured without
the check, predicts a gain: there the check is off unless ``jit_options={"check": True}``.
"""
from __future__ import annotations

import atexit
import faulthandler
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
from typing import Callable, NamedTuple, Optional

import torch

try:  # what a tracing context with a shape environment needs (inductor_compile: its FX graph cache)
    from torch._guards import TracingContext as _TracingContext, tracing as _tracing
    from torch._subclasses.fake_tensor import FakeTensorMode as _FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv as _ShapeEnv
except ImportError:  # pragma: no cover - a torch without them: compiled, not cached
    _TracingContext = _tracing = _FakeTensorMode = _ShapeEnv = None

__all__ = ["CHECK_TIMEOUT", "CHECK_DEFAULT", "CheckResult", "Checker", "SIMULATE_CRASH", "check_graph",
           "compile_and_run", "default_check", "inductor_compile", "stand_in", "warm_checker"]

#: The environment variable that makes :func:`inductor_compile` return a function that crashes
#: (SIGSEGV): a crashing compiled graph for tests, in the calling process and in the checker alike.
SIMULATE_CRASH = "PYRO_DP_SIMULATE_COMPILED_CRASH"

#: The environment variable that sets the check's default where ``jit_options`` does not say
#: (:func:`default_check`): ``0`` turns it off. The project's test suite sets it (tests/conftest.py):
#: its many inductor compiles would each be compiled twice, and under pytest-xdist a crash kills
#: only the worker running that test (reported as a failure; xdist starts a new worker), never the
#: pytest process; tests/test_compile_crash.py checks the default with the variable unset.
CHECK_DEFAULT = "PYRO_DP_COMPILE_CHECK"


def default_check() -> bool:
    """Whether ``jit_compile=True`` checks each inductor graph in a subprocess when
    ``jit_options`` does not say: yes, unless :data:`CHECK_DEFAULT` is ``0``.

    >>> import os; os.environ.get(CHECK_DEFAULT, "1") != "0" or not default_check()
    True
    """
    return os.environ.get(CHECK_DEFAULT, "1").strip() != "0"

#: Seconds the checker may take to compile and run one graph before it counts as hung (killed;
#: the function then runs eagerly). Generous: a first inductor compile on a loaded 2-core
#: machine takes 10-30 s.
CHECK_TIMEOUT = 600.0


class CheckResult(NamedTuple):
    """What the checker said: ``status`` is ``"ok"``, ``"error"`` (a Python exception in the
    checker, or the checker exited with a status: ``detail`` names it) or ``"died"`` (the
    checker was killed by a signal, or hung: ``detail`` says how)."""

    status: str
    detail: str = ""


def stand_in(signatures) -> list:
    """Zeros of each ``(shape, stride, dtype, device)``: a graph's inputs without their values.

    >>> import torch
    >>> [(tuple(t.shape), t.stride(), t.sum().item()) for t in stand_in([((2, 3), (1, 2), torch.float64, "cpu")])]
    [((2, 3), (1, 2), 0.0)]
    """
    out = []
    for shape, stride, dtype, device in signatures:
        size = 0 if 0 in shape else 1 + sum((n - 1) * st for n, st in zip(shape, stride))
        out.append(torch.zeros(size, dtype=dtype, device=device).as_strided(shape, stride))
    return out


def inductor_compile(graph, example_inputs, options: dict):
    """Compile a traced aten graph with inductor. ``compile_fx`` takes the graph as it is;
    ``torch.compile`` would re-trace it with Dynamo, which refuses the ``prims`` operations that
    forward-mode AD leaves in a graph (and adds guard checks to every call). The call runs in a
    tracing context with a shape environment, as Dynamo's would: inductor's FX graph cache
    (``torch._inductor.config.fx_graph_cache``, on disk) then serves an identical graph compiled
    before, in this process or another, instead of generating and compiling its code again.

    For tests only: with the environment variable :data:`SIMULATE_CRASH` set to ``"1"`` (read at
    each call, so the checker inherits it) nothing is compiled and the returned function kills
    its process with SIGSEGV when called, as the compiled code of issue 59 did
    (``tests/test_compile_crash.py``)."""
    if os.environ.get(SIMULATE_CRASH) == "1":
        return lambda *inputs: faulthandler._sigsegv()
    try:
        from torch._inductor.compile_fx import compile_fx
    except ImportError:  # pragma: no cover - a torch without the internal entry point
        return torch.compile(graph, fullgraph=True, dynamic=False, **options)
    if options:
        return torch.compile(graph, fullgraph=True, dynamic=False, **options)
    if _ShapeEnv is None:  # pragma: no cover - a torch without them: compiled, not cached
        return compile_fx(graph, list(example_inputs))
    # inductor's FX graph cache needs a shape environment; without one every compile bypasses it
    with _tracing(_TracingContext(_FakeTensorMode(shape_env=_ShapeEnv()))):
        return compile_fx(graph, list(example_inputs))


def compile_and_run(graph: bytes, signatures, options, settings: Optional[dict] = None) -> None:
    """In the checker: compile the pickled ``graph`` as :mod:`pyro_dp.compiled` does
    (:func:`inductor_compile`) and run it once on zeros (:func:`stand_in`), with the caller's
    ``settings`` (its thread count, which inductor bakes into the generated loops, and its
    inductor configuration)."""
    # what an unpickled graph module's code and inductor refer to (a fresh process has not imported them)
    import torch._higher_order_ops.triton_kernel_wrap  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch._inductor.config

    settings = settings or {}
    if settings.get("threads"):
        torch.set_num_threads(settings["threads"])
    if settings.get("inductor") is not None:
        torch._inductor.config.load_config(settings["inductor"])
    graph = pickle.loads(graph)
    inputs = stand_in(signatures)
    inductor_compile(graph, inputs, options)(*inputs)


def _signal_name(rc: int) -> str:
    try:
        return f"killed by {signal.Signals(-rc).name}"
    except ValueError:
        return f"exit status {rc}"


class Checker:
    """One checking subprocess: :meth:`call` runs a picklable ``fn(*args)`` in it and says whether
    it returned, raised, or killed the process; a dead checker is replaced at the next call."""

    def __init__(self, timeout: float = CHECK_TIMEOUT):
        self.timeout = timeout
        self._proc: Optional[subprocess.Popen] = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", _SERVE, os.path.abspath(__file__)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()

    def _running(self) -> subprocess.Popen:
        if os.getpid() != self._pid:  # a forked copy: the parent's pipes are not ours
            self._proc, self._pid = None, os.getpid()
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start()
        return self._proc

    def warm(self) -> None:
        """Start the checker now (its imports then overlap the caller's tracing)."""
        with self._lock:
            self._running()

    def call(self, fn: Callable, *args) -> CheckResult:
        with self._lock:
            proc = self._running()
            try:
                payload = pickle.dumps((fn, args))
            except Exception as e:  # noqa: BLE001 - cannot be sent: unchecked, as an error
                return CheckResult("error", f"cannot be sent to the checker ({type(e).__name__}: {e})")
            try:
                proc.stdin.write(struct.pack("<Q", len(payload)) + payload)
                proc.stdin.flush()
                ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
                if not ready:
                    self._kill()
                    return CheckResult("died", f"no answer within {self.timeout:.0f} s")
                head = proc.stdout.read(8)
                if len(head) < 8:
                    raise EOFError
                answer = pickle.loads(proc.stdout.read(struct.unpack("<Q", head)[0]))
            except (OSError, EOFError, pickle.UnpicklingError, struct.error):
                rc = proc.wait()
                self._proc = None
                if rc > 0:  # the checker itself failed (it could not start, or exited): not a crash
                    return CheckResult("error", f"the checker exited with status {rc}")
                return CheckResult("died", _signal_name(rc))
            return CheckResult(*answer)

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and os.getpid() == self._pid:
                try:
                    self._proc.stdin.close()
                    self._proc.wait(timeout=5)
                except Exception:  # noqa: BLE001 - closing at exit
                    pass
                self._kill()


#: The checker's program (``python -c``): read ``(fn, args)``, answer ``("ok", "")`` or ``("error",
#: message)``. It loads this file alone (standard-library imports only, not the ``pyro_dp``
#: package); ``fn`` is a picklable callable or the name of a function of this file.
_SERVE = r"""
import importlib.util, os, pickle, struct, sys
spec = importlib.util.spec_from_file_location("pyro_dp_compile_check", sys.argv[1])
here = importlib.util.module_from_spec(spec)
spec.loader.exec_module(here)  # this file alone, without the pyro_dp package (and its imports)
out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)  # what compiled code or torch prints must not mix into the answers
while True:
    head = sys.stdin.buffer.read(8)
    if len(head) < 8:
        break
    payload = sys.stdin.buffer.read(struct.unpack("<Q", head)[0])
    try:
        fn, args = pickle.loads(payload)
        (getattr(here, fn) if isinstance(fn, str) else fn)(*args)
        answer = ("ok", "")
    except BaseException as e:
        answer = ("error", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    data = pickle.dumps(answer)
    out.write(struct.pack("<Q", len(data)) + data)
    out.flush()
"""


_CHECKER: Optional[Checker] = None


def _checker() -> Checker:
    global _CHECKER
    if _CHECKER is None:
        _CHECKER = Checker()
        atexit.register(_CHECKER.close)
    return _CHECKER


def warm_checker() -> None:
    """Start the process's checker in the background (a likelihood that will compile with inductor)."""
    _checker().warm()


def check_graph(graph, example_inputs, options: dict) -> CheckResult:
    """Compile the prepared ``graph`` with inductor and run it once on zeros of
    ``example_inputs``' shapes, strides, dtypes and devices, in the checker (module doc)."""
    signatures = [(tuple(t.shape), tuple(t.stride()), t.dtype, t.device) for t in example_inputs]
    import torch._inductor.config

    try:
        payload = pickle.dumps(graph)
        inductor = torch._inductor.config.save_config_portable()
        pickle.dumps(inductor)
    except Exception as e:  # noqa: BLE001 - cannot be sent: unchecked, as an error
        return CheckResult("error", f"cannot be sent to the checker ({type(e).__name__}: {e})")
    settings = {"threads": torch.get_num_threads(), "inductor": inductor}
    return _checker().call("compile_and_run", payload, signatures, dict(options), settings)
