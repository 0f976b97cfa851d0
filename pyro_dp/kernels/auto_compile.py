r"""``jit_compile=None`` (the default): eager or compiled, whichever the run's predicted cost favours.

The compiled path (:mod:`pyro_dp.compiled`) makes an iteration several times cheaper, after a
one-time compile of 10–30 s; a short run on small data is over before the compile would be.
With ``jit_compile`` left unset, the kernel predicts both wall times at its first set-up from
public quantities only — the number of rows :math:`N` (a shape), the iterations the run will
make (``warmup_steps + num_samples`` of the ``MCMC`` that runs it, else ``num_iterations``,
else :data:`~pyro_dp.kernels.runner.DEFAULT_ITERATIONS`), the kernel's kind and settings
(the rows and gradient passes one iteration reads: the ``cost`` of its :meth:`DPKernel.releases`) and
the private start's steps — and compiles when

.. math:: C + I\,(o_c + r_\ell a_c + r_g g_c) + S N g_c \;<\; I\,(o_e + r_\ell a_e + r_g g_e) + S N g_e,

with :math:`I` iterations, :math:`r_\ell` rows whose log-likelihood (ratio) and :math:`r_g`
rows whose gradient one iteration evaluates, :math:`S` the private start's full-data gradient
passes, :math:`o` a per-iteration overhead, :math:`a, g` seconds per row of a log-likelihood
and of a gradient (eager :math:`e`, compiled :math:`c`; functions of the number :math:`D` of
latent coordinates the likelihood reads, a shape: :func:`per_row_seconds`), and :math:`C` the
compile time (:data:`COSTS`). ``jit_compile=True`` / ``False`` are honoured as given. The decision reads no
data and changes no result: the eager and compiled chains are the same (``tests/test_compiled.py``).

The constants were measured on the project's CPU machine (2 shared cores, torch 2.13, one
thread, float64, logistic regression with 6, 21 and 51 latents, ``benchmarks/auto_compile.py
--calibrate --dim d``; ``docs/performance.md``). They are rough — the rule only has to be right where
the two times differ by more than about 20 % — and :attr:`DPKernel.compile_decision` says what
was predicted. Sequential chains of one kernel object share its compiled graphs, but chains
in worker processes compile their own, so the rule decides per chain (conservatively: it
never counts on a compile being shared).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from ..compiled import BACKENDS, CUDA_GRAPH_MODES, CompiledLikelihood
from .runner import DEFAULT_ITERATIONS
from .runner import mcmc_run_length

__all__ = ["auto_compile", "check_settings", "check_jit_options", "CompileCosts", "CompileDecision", "COSTS", "decide_compile",
           "predicted_seconds", "per_row_seconds", "RowCost", "CALIBRATION_DIM", "FIRST_COMPILE_SECONDS", "PER_ROW"]


class CompileCosts(NamedTuple):
    """Seconds of one kind of kernel on each path (module doc's formula).

    :ivar eager_overhead: :math:`o_e`, per iteration (Pyro's handlers, Python).
    :ivar compiled_overhead: :math:`o_c`, per iteration.
    :ivar compile_seconds: :math:`C`, the graphs of one kernel (in a process that has compiled before).
    """

    eager_overhead: float
    compiled_overhead: float
    compile_seconds: float


class RowCost(NamedTuple):
    r"""Seconds per row of one per-example pass on one path, as a function of the number :math:`D`
    of latent coordinates the likelihood reads (public: a shape): :math:`\max(\text{floor},
    \text{slope}\cdot D^{\text{power}})`."""

    floor: float
    slope: float
    power: int

    def at(self, dim: int) -> float:
        return max(self.floor, self.slope * float(dim) ** self.power)


#: Seconds per row of a per-example log-likelihood :math:`a(D)` and of a per-example gradient
#: :math:`g(D)`, ``(eager, compiled)``, measured by ``benchmarks/auto_compile.py --calibrate --dim d``
#: (2026-11-27, logistic regression with d = 5, 20, 50 features: D = 6, 21, 51; one thread,
#: float64; ``docs/performance.md`` has the table). A log-likelihood row costs 25-51 ns eager at
#: every D (bandwidth and elementwise passes), and compiled 7.5 ns at D = 6 but 40-42 ns at
#: D = 21 and 51 (inductor's dot products no faster than eager's there), so the compiled
#: :math:`a_c` grows with D and never exceeds :math:`a_e` (:func:`per_row_seconds`). A gradient
#: row grows about like :math:`D^2` (the per-example gradient's D tangent columns of D-long rows):
#: eager 0.21, 0.56 and 3.7 µs, compiled 0.06, 0.16 and 1.6 µs at D = 6, 21, 51 (N = 10^5).
PER_ROW = {"loglik": (RowCost(5.1e-8, 0.0, 1), RowCost(0.9e-8, 1.5e-9, 1)),
           "grad": (RowCost(2.1e-7, 1.4e-9, 2), RowCost(0.6e-7, 6e-10, 2))}

#: :math:`D` of the calibration the per-kind overheads were measured at (and the default of
#: :func:`predicted_seconds`)
CALIBRATION_DIM = 6


def per_row_seconds(what: str, dim: int, compiled: bool) -> float:
    """Seconds per row of a per-example ``"loglik"`` or ``"grad"`` pass with ``dim`` likelihood
    coordinates (:data:`PER_ROW`); the compiled path's is never counted above the eager one's.

    >>> round(per_row_seconds("grad", 51, False) / per_row_seconds("grad", 6, False), 1)
    17.3
    >>> per_row_seconds("loglik", 51, True) == per_row_seconds("loglik", 51, False)
    True
    """
    eager = PER_ROW[what][0].at(dim)
    return min(eager, PER_ROW[what][1].at(dim)) if compiled else eager


#: Per-kind constants (:class:`CompileCosts`), same measurement. DP-HMC compiles more graphs
#: (the trajectory's gradient sums besides the ratio), hence its larger :math:`C`.
COSTS = {
    "penalty": CompileCosts(eager_overhead=1.0e-3, compiled_overhead=0.15e-3, compile_seconds=8.0),
    "hmc": CompileCosts(eager_overhead=8.0e-3, compiled_overhead=0.5e-3, compile_seconds=18.0),
    # DPFastMH's minibatch iteration (a Poisson batch, the thinning, two tests): steady 1.66-1.84 ms
    # eager and 0.27-0.28 ms compiled at N = 1e3-1e5 (2026-11-27, logistic, 4 latents, one thread)
    "fastmh": CompileCosts(eager_overhead=1.7e-3, compiled_overhead=0.27e-3, compile_seconds=8.0),
}

#: Extra seconds of the first compile in a process (inductor's start-up, measured 10–18 s). The
#: decision always charges it, even in a process that has compiled before: so which path a run
#: takes does not depend on what ran earlier in the process (a script, a test suite), and a
#: borderline run stays eager.
FIRST_COMPILE_SECONDS = 12.0


def check_jit_options(options: dict) -> None:
    """Refuse, when the kernel is built, ``jit_options`` that :class:`~pyro_dp.compiled.CompiledLikelihood`
    would refuse (an unknown backend, CUDA graphs): with ``jit_compile=None`` the kernel may
    decide to stay eager, and a bad option must not pass unnoticed then.

    >>> check_jit_options({"backend": "nope"})
    Traceback (most recent call last):
    ...
    ValueError: jit_options['backend'] must be one of ('inductor', 'graph'), got 'nope'
    """
    backend = options.get("backend", "inductor")
    if backend not in BACKENDS:
        raise ValueError(f"jit_options['backend'] must be one of {BACKENDS}, got {backend!r}")
    if options.get("mode") in CUDA_GRAPH_MODES or (options.get("options") or {}).get("triton.cudagraphs"):
        raise ValueError(f"jit_options: CUDA graphs ({options.get('mode') or 'triton.cudagraphs'}) are not supported "
                         "(pyro_dp.compiled.CompiledLikelihood says why)")


class CompileDecision(NamedTuple):
    """What ``jit_compile=None`` decided, and why (public: from shapes and settings only).

    :ivar compiled: whether the kernel runs compiled.
    :ivar eager_seconds: predicted wall time of one chain on the eager path.
    :ivar compiled_seconds: predicted wall time of one chain compiled, compile included.
    :ivar iterations: the iterations per chain the prediction assumed.
    :ivar num_rows: :math:`N`.
    :ivar kind: the cost kind (``"penalty"``, ``"hmc"``, ``"fastmh"``).
    :ivar dim: the latent coordinates the likelihood reads (a row's cost grows with them).
    """

    compiled: bool
    eager_seconds: float
    compiled_seconds: float
    iterations: int
    num_rows: int
    kind: str
    dim: int = CALIBRATION_DIM


def predicted_seconds(kind: str, *, iterations: int, loglik_rows: float, grad_rows: float, start_rows: float = 0.0,
                      compiled: bool, first_compile: bool = True, dim: int = CALIBRATION_DIM) -> float:
    r"""Predicted wall time of one chain (module doc's formula): ``iterations`` iterations that each
    evaluate ``loglik_rows`` per-example log-likelihoods and ``grad_rows`` per-example gradients,
    plus ``start_rows`` per-example gradients of a private start, with ``dim`` latent coordinates
    in the likelihood (:func:`per_row_seconds`); compiled, with the compile time.

    >>> e = predicted_seconds("penalty", iterations=200, loglik_rows=1e4, grad_rows=0, compiled=False)
    >>> c = predicted_seconds("penalty", iterations=200, loglik_rows=1e4, grad_rows=0, compiled=True)
    >>> round(e, 2), round(c, 1)   # a short run on 10^4 rows: the compile does not pay
    (0.3, 20.0)
    """
    costs = COSTS[kind]
    a, g = per_row_seconds("loglik", dim, compiled), per_row_seconds("grad", dim, compiled)
    overhead = costs.compiled_overhead if compiled else costs.eager_overhead
    t = iterations * (overhead + loglik_rows * a + grad_rows * g) + start_rows * g
    if compiled:
        t += costs.compile_seconds + (FIRST_COMPILE_SECONDS if first_compile else 0.0)
    return t


def decide_compile(kind: Optional[str], *, iterations: int, num_rows: int, loglik_rows: float, grad_rows: float,
                   start_rows: float = 0.0, first_compile: bool = True, dim: int = CALIBRATION_DIM) -> CompileDecision:
    """Eager or compiled for one chain, from public quantities only (module doc). ``kind=None``:
    a kernel whose iterations read no rows (e.g. the cached sufficient statistic of
    :class:`~pyro_dp.kernels.expfam.DPExpFamPenalty`) — never compiled. ``dim``: the latent
    coordinates the likelihood reads (a row's cost grows with them, :func:`per_row_seconds`).

    >>> decide_compile("hmc", iterations=2000, num_rows=100_000, loglik_rows=1e5, grad_rows=5e5).compiled
    True
    >>> decide_compile("hmc", iterations=200, num_rows=10_000, loglik_rows=1e4, grad_rows=5e4).compiled
    False
    >>> decide_compile("hmc", iterations=1000, num_rows=10_000, loglik_rows=1e4, grad_rows=5e4, dim=51).compiled
    True
    """
    if kind is None:
        return CompileDecision(False, 0.0, float("inf"), int(iterations), int(num_rows), "none", int(dim))
    kw = dict(iterations=iterations, loglik_rows=loglik_rows, grad_rows=grad_rows, start_rows=start_rows, dim=dim)
    eager = predicted_seconds(kind, compiled=False, **kw)
    comp = predicted_seconds(kind, compiled=True, first_compile=bool(first_compile), **kw)
    return CompileDecision(comp < eager, eager, comp, int(iterations), int(num_rows), kind, int(dim))


def check_settings(jit_compile: Optional[bool], jit_options: Optional[dict]) -> Tuple[Optional[bool], dict]:
    """A kernel's ``jit_compile``/``jit_options`` arguments, checked when it is built (not only
    if it compiles): ``(jit_compile, jit_options)`` as the kernel keeps them.

    >>> check_settings(None, None)
    (None, {})
    """
    jit_compile = None if jit_compile is None else bool(jit_compile)
    options = dict(jit_options or {})
    if options and jit_compile is False:
        raise ValueError("jit_options needs jit_compile=True (or the default None, which uses them when it compiles)")
    check_jit_options(options)
    return jit_compile, options


def auto_compile(kernel, rows_per_iteration, jit_cache: dict) -> None:
    """``jit_compile=None``: decide once per kernel object, at its first set-up, whether the
    run is faster compiled (:func:`decide_compile`; ``kernel.compile_decision``), and if so give
    the likelihood its compiled path (graphs kept in ``jit_cache``). ``rows_per_iteration()``:
    ``(cost kind, log-likelihood rows, gradient rows)`` of one iteration. Data-free: :math:`N`
    is a shape; the run length and settings are public."""
    if kernel.jit_compile is not None:
        return
    lik = kernel.lik
    if kernel.compile_decision is None:
        iterations = kernel.num_iterations
        if iterations is None:
            run = mcmc_run_length()
            iterations = DEFAULT_ITERATIONS if run is None else max(1, run["warmup_steps"] + run["num_samples"])
        kind, loglik_rows, grad_rows = rows_per_iteration()
        start_steps = getattr(kernel.init, "num_steps", 0) if kernel.init is not None else 0
        kernel.compile_decision = decide_compile(kind, iterations=int(iterations), num_rows=lik.num_rows,
                                                 loglik_rows=loglik_rows, grad_rows=grad_rows,
                                                 start_rows=float(start_steps) * lik.num_rows,
                                                 dim=int(lik.likelihood_dim))
    if kernel.compile_decision.compiled and lik.compiled is None:
        # the checking subprocess only if asked: COSTS were measured without it, and it adds
        # 1.7-4x to the compile (pyro_dp.compile_check; jit_compile=True checks by default)
        options = {"check": False, **(kernel.likelihood_settings.jit_options or {})}
        lik.compiled = CompiledLikelihood(lik, options, jit_cache)
