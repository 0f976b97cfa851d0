r"""The compiled per-example path (``jit_compile=True``): trace once, compile, reuse.

Every kernel spends its time in :class:`~pyro_dp.likelihood.PrivateLikelihood`: per-example
log-likelihoods and gradients of a Pyro model, evaluated through Pyro's handlers on every
iteration. With ``jit_compile=True`` the likelihood instead

1. **traces** each function a kernel needs — the per-example log-likelihoods and log prior,
   the per-example gradients, the *clipped sum* of the per-example gradients (the per-row
   rule, the clip and the sum of :func:`pyro_dp.mechanisms.clip_and_sum`, the same function
   the eager path calls), the log prior and its gradient — once with
   :func:`torch.fx.experimental.proxy_tensor.make_fx` into an aten graph, Pyro's handlers and
   :mod:`torch.func` transforms included (FACTS: ``torch.compile`` applied to a Pyro trace
   directly gains nothing, Dynamo breaks the graph in Pyro's messengers);
2. **compiles** that graph with ``torch.compile(fullgraph=True, dynamic=False)`` (inductor
   fuses the per-example work; ``jit_options={"backend": "graph"}`` runs the traced graph
   without inductor: no compile time, about 2× faster than eager, bit-identical to eager);
3. **reuses** it for every iteration, and — through the kernel's cache — for every chain the
   kernel object runs in this process (worker processes compile their own copy; inductor's
   on-disk cache makes that faster).

Shapes. A graph is specialised to its input shapes. Row subsets (minibatches, Poisson
batches, Fast MH's growing batches) are padded to a *size bucket* (:func:`bucket_size`:
8, then :math:`2^k\cdot\{1, 1.25, 1.5, 1.75\}`) with row 0 and a 0/1 ``valid`` mask; padded rows
are sliced off the per-example outputs and masked out of the fused sums, so the result is
the same as for the unpadded batch, and a run compiles a handful of graphs, not one per
batch size (``PrivateLikelihood.compiled.num_compiled`` counts them). Full-data passes of the
fused clipped gradient sum run in chunks of at most :data:`CHUNK_ELEMENTS` per-example
gradient entries (``N × D``), so memory stays bounded for large ``N``.

What a graph cannot represent, and why checking it leaks nothing. A trace records one path
through the model's Python code: control flow on a latent value (``if mu > 0``), ``.item()``
on a latent, or shapes that depend on values would be baked in. The trace therefore runs in
``FakeTensor`` mode: the latent point, the row indices **and the data** enter as fake tensors
that carry only shapes, dtypes and devices, so any branch on a value raises during tracing.
The likelihood then falls back to the eager path for that function and warns
(:class:`CompileFallbackWarning`). Whether it falls back is a function of the model's code and
of the data's shapes (public: the number of rows is public), never of a data value; both
paths compute the same per-example terms and release them through the same mechanisms, so
the fallback changes speed only. (A model that reads a tensor it captured from its closure
rather than from its arguments has that tensor baked into the graph as a constant, as
``torch.jit.trace`` would; pass data as model arguments.)

Exactness. The ``"graph"`` backend replays the eager aten operations: chains are identical to
eager ones. Inductor may fuse sums in another order, so its per-example terms can differ from
eager in the last bits (tests compare chains to ``1e-10`` relative); the privacy analysis is
unaffected (clip bounds hold exactly: the clip is applied inside the graph to the values that
are summed). A float32 model stays float32 on both paths; with float32 the compiled chain
follows the eager one to float32 rounding (an accept decision within rounding of its
threshold may then differ; tests compare 30-step chains to ``1e-4``). A graph refuses inputs
of another dtype, shape or device than it was compiled for (an internal error, never a
silently reinterpreted value).
"""
from __future__ import annotations

import time
import warnings
from typing import Callable, Dict, Optional, Tuple

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from .arguments import model_arguments as _model_arguments, tensor_arguments as _tensor_arguments, with_tensors as _with_tensors
from .compile_check import check_graph, default_check, inductor_compile, warm_checker
from .graphs import OutputTaint, TraceFailed, bucket_size, hoist_broadcasts, in_fresh_thread, output_sources, strip_extra_outputs
from .mechanisms.clipping import ClippedSum, clip_and_sum, clip_and_sum_columns  # the pure clip rule only
from .private import reveal

#: why the compiled layer reveals (pyro_dp.private): the likelihood's public methods wrap what its graphs return
_GRAPH_INPUTS = "a graph's inputs: plain tensors inside the graph, its outputs wrapped by the likelihood"

__all__ = ["CompileFallbackWarning", "CompiledLikelihood", "bucket_size", "hoist_broadcasts", "CHUNK_ELEMENTS", "FORWARD_MAX_DIM",
           "COLUMNS_MAX_DIM",
           "BACKENDS"]

#: Per-example gradient entries (rows × latent dimension) a full-data fused pass handles at
#: once; larger passes run in chunks (2**22 float64 entries = 32 MiB per chunk).
CHUNK_ELEMENTS = 2**22

#: Latent dimensions up to which per-example gradients are computed in forward mode, one
#: column per coordinate (:meth:`CompiledLikelihood._grads`); above it, reverse mode per row.
FORWARD_MAX_DIM = 8

#: Latent dimensions up to which the reverse-mode ``[B, D]`` per-example gradients are clipped
#: and summed column by column (:func:`~pyro_dp.mechanisms.clip_and_sum_columns` of their
#: ``D`` columns) rather than as rows (:func:`~pyro_dp.mechanisms.clip_and_sum`). Column
#: operations are all ``[B]``-shaped, so inductor fuses the gradient, the per-row rule, the
#: norm, the clip and the ``D`` sums into one loop over the rows, without writing the ``[B, D]``
#: gradients to memory; as rows it made several passes over them and summed over the rows in
#: a ``D``-outer loop. Measured (#17, logistic regression, N = 1e5, one thread, together with
#: :func:`hoist_broadcasts`' rewrite 4, without which the gradients are not fused): the fused
#: pass at d = 10 10.0 ms instead of 20.2 ms (the compiled closed-form pass: 11.1 ms); at d = 32
#: 24 ms instead of 30 ms (compile 14 s instead of 8.5 s); at d = 64 columns were slower (137
#: ms against 104 ms): the generated loop grows with ``D``.
COLUMNS_MAX_DIM = 32

#: ``jit_options["backend"]`` values: ``"inductor"`` (default: ``torch.compile`` of the traced
#: graph) and ``"graph"`` (the traced graph run as is: exact, no compile time).
BACKENDS = ("inductor", "graph")

#: ``torch.compile`` modes that capture CUDA graphs: refused in ``jit_options`` (see
#: :class:`CompiledLikelihood`).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


class CompileFallbackWarning(UserWarning):
    """A function of the model could not be traced into a graph; the eager path is used for it."""


_MISSING = object()
_ARANGES: Dict[tuple, torch.Tensor] = {}


def _arange(size: int, device) -> torch.Tensor:
    """``torch.arange(size)`` on ``device``, cached (one per bucket size and device)."""
    key = (size, str(device))
    out = _ARANGES.get(key)
    if out is None:
        out = _ARANGES[key] = torch.arange(size, device=device)
    return out


_ZEROS: Dict[tuple, torch.Tensor] = {}


def cached_zeros(shape, dtype, device) -> torch.Tensor:
    """A zero tensor of ``shape``, cached: the shape-only example inputs of a graph lookup
    (:meth:`CompiledLikelihood.fused_graph`), which must never be written to."""
    key = (tuple(shape), dtype, str(device))
    out = _ZEROS.get(key)
    if out is None:
        if len(_ZEROS) > 1024:
            _ZEROS.clear()
        out = _ZEROS[key] = torch.zeros(tuple(shape), dtype=dtype, device=device)
    return out


_VALID: Dict[tuple, torch.Tensor] = {}


def _valid_mask(b: int, size: int, dtype, device) -> torch.Tensor:
    """The 0/1 mask of the first ``b`` of ``size`` rows (cached: a fixed batch size reuses one;
    graphs only read it)."""
    key = (b, size, dtype, str(device))
    out = _VALID.get(key)
    if out is None:
        if len(_VALID) > 4096:  # Poisson batch sizes: bounded
            _VALID.clear()
        out = _VALID[key] = (_arange(size, device) < b).to(dtype)
    return out


def _distinct(data: tuple, inputs: tuple) -> tuple:
    """``inputs`` with a copy of every tensor already passed before it (or among ``data``): the
    tracer maps one tensor object passed twice to one graph input, so a graph traced on a call
    like ``f(z, z)`` would ignore its second input at every later call."""
    seen = {id(t) for t in data}
    out = []
    for t in inputs:
        if torch.is_tensor(t) and id(t) in seen:
            t = t.clone()
        seen.add(id(t))
        out.append(t)
    return tuple(out)


def _signature(t: torch.Tensor) -> tuple:
    return (t.shape, t.dtype, t.device)  # torch.Size and torch.device compare and hash by value


def _checked(name: str, signatures: tuple, inputs: tuple) -> tuple:
    """``inputs`` if each has the shape, dtype and device of the example its graph was compiled
    from (:meth:`CompiledLikelihood.fused_graph`), else a ``RuntimeError``. A compiled graph
    checks its inputs' sizes and strides, not their dtypes: a float64 input where a float32
    one was traced would be read as float32 bits, a silently wrong value. Shapes, dtypes and
    devices are not data, so the check reads nothing private.

    >>> x = torch.zeros(2)
    >>> _checked("f", (_signature(x),), (torch.ones(2),))[0].tolist()
    [1.0, 1.0]
    >>> _checked("f", (_signature(x),), (torch.ones(2, dtype=torch.float64),))
    Traceback (most recent call last):
    ...
    RuntimeError: internal error: graph f was compiled for input 0 of (torch.Size([2]), torch.float32, device(type='cpu')), called with (torch.Size([2]), torch.float64, device(type='cpu')) (please report)
    """
    if len(inputs) != len(signatures):
        raise RuntimeError(f"internal error: graph {name} takes {len(signatures)} inputs, called with {len(inputs)} "
                           "(please report)")
    for j, (x, sig) in enumerate(zip(inputs, signatures)):
        if x.dtype != sig[1] or x.shape != sig[0] or x.device != sig[2]:
            raise RuntimeError(f"internal error: graph {name} was compiled for input {j} of {sig}, called with "
                               f"{_signature(x)} (please report)")
    return inputs


def _jvp_columns(f: Callable, zz: torch.Tensor) -> Tuple[torch.Tensor, list]:
    """``(f(zz), [∂f/∂zz_j for each coordinate j])``: forward mode, one ``jvp`` per coordinate,
    each column in the latent's dtype, as reverse mode gives it (forward mode can promote a float32
    tangent to float64 -- torch 2.13: the ``jvp`` of ``AffineTransform(0., 1)``, Pyro's transform
    to a positive 0-d site, at a 0-d float32 point is float64 -- and a float64 gradient would turn
    the chain's state float64: ``tests/test_compiled.py``)."""
    value, cols = None, []
    for j in range(zz.shape[-1]):
        basis = torch.zeros_like(zz)
        basis[j] = 1
        value, col = torch.func.jvp(f, (zz,), (basis,))
        cols.append(col.to(zz.dtype))
    return value, cols


class CompiledLikelihood:
    r"""The traced and compiled functions of one :class:`~pyro_dp.likelihood.PrivateLikelihood`
    (built by it when ``jit_compile=True``; kernels never call this class directly).

    :param lik: the likelihood whose eager functions are traced.
    :param dict options: ``{"backend": "inductor" | "graph", "check": True | False,
        **torch_compile_kwargs}`` (``check``, default ``True`` unless ``PYRO_DP_COMPILE_CHECK=0``: :mod:`pyro_dp.compile_check`).
    :param dict cache: graphs shared across likelihoods of one kernel object (one per chain):
        keyed by the function, the bucket and the shapes and dtypes of every input, so a new
        chain on data of the same shape reuses the compiled graph.

    >>> import torch
    >>> from pyro_dp.likelihood import PrivateLikelihood
    >>> from pyro_dp.models.examples import normal_mean_model as model
    >>> y = torch.tensor([0.0, 2.0])
    >>> lik = PrivateLikelihood(model, (y,), seed=0, jit_compile=True, jit_options={"backend": "graph"})
    >>> from pyro_dp.private import reveal
    >>> ll = lik.per_example_loglik(torch.tensor([1.0]))  # private: no kernel reads it without a release
    >>> reveal(ll, reason="a doctest")  # the traced graph: same values as eager
    tensor([-1.4189, -1.4189])
    >>> lik.compiled.num_compiled
    1
    """

    def __init__(self, lik, options: Optional[dict] = None, cache: Optional[dict] = None):
        options = dict(options or {})
        backend = options.pop("backend", "inductor")
        if backend not in BACKENDS:
            raise ValueError(f"jit_options['backend'] must be one of {BACKENDS}, got {backend!r}")
        if options.get("mode") in CUDA_GRAPH_MODES or (options.get("options") or {}).get("triton.cudagraphs"):
            # measured on an H200 (benchmarks/cuda_graphs.py): torch refuses DP penalty's second
            # iteration ("accessing tensor output of CUDAGraphs that has been overwritten") and
            # cannot re-trace DP-HMC's or DP Barker's graphs ("Attempt to trace generator")
            raise ValueError(
                f"jit_options: CUDA graphs ({options.get('mode') or 'triton.cudagraphs'}) are not supported: a CUDA "
                "graph's outputs are overwritten by its next replay, while a kernel keeps the previous iteration's "
                "per-example log-likelihoods in its state. Use the default mode or 'max-autotune-no-cudagraphs'.")
        self.backend = backend
        #: compile and run each inductor graph in a checking subprocess first (pyro_dp.compile_check):
        #: on by default where a user asks for ``jit_compile=True`` (a segfault must not take the process;
        #: issue 59), off on the ``jit_compile=None`` path unless asked (pyro_dp.kernels.auto_compile)
        self.check = bool(options.pop("check", default_check()))
        if self.check and backend == "inductor":
            warm_checker()
        self.compile_kwargs = options
        self.lik = lik
        #: compiled graphs (``None``: fell back to eager), shared by the kernel object's likelihoods
        self.cache: Dict[tuple, Optional[Callable]] = cache if cache is not None else {}
        self._flatten_args()
        static = tuple(None if torch.is_tensor(x) else x for x in self._leaves)
        self._key_base = (
            repr(self._spec), repr(static), tuple(_signature(t) for t in self._data), lik.data_plate,
            lik.latent_names, tuple(tuple(lik.site_shapes[n]) for n in lik.latent_names), backend,
            repr(sorted(options.items())),
        )
        #: number of graphs this likelihood traced and compiled (shared cache hits excluded)
        self.num_compiled = 0
        #: seconds spent tracing and compiling (first calls included)
        self.compile_seconds = 0.0

    def _flatten_args(self):
        """The model's arguments as pytree leaves: the tensors become the graphs' data inputs."""
        leaves, self._spec, self._tensor_pos = _tensor_arguments(self.lik.arguments.args, self.lik.arguments.kwargs)
        self._leaves = leaves
        self._data = tuple(leaves[i] for i in self._tensor_pos)
        # the graphs bound to THIS likelihood's data (the shared cache holds graphs only: a graph
        # bound to the data of the likelihood that compiled it would read those rows in a later
        # run on other data of the same shape, s10 audit F3)
        self._runs: Dict[tuple, Optional[Callable]] = {}

    def __getstate__(self):
        # compiled graphs cannot be pickled: a copy (a worker process) rebuilds them lazily
        state = self.__dict__.copy()
        state["cache"], state["_first_call_pending"], state["_raises"] = {}, set(), None
        for key in ("_spec", "_leaves", "_data", "_tensor_pos", "_runs"):
            state[key] = None  # rebuilt from the likelihood's arguments on first use
        return state

    def _get(self, name: str, fn: Callable, inputs: tuple, bucket=None, key=None) -> Optional[Callable]:
        if self._spec is None:
            self._flatten_args()
        if self._a_row_raises():
            return None
        return self._get_graph(name, fn, inputs, bucket, key)

    def _a_row_raises(self) -> bool:
        """Whether the model's own code raises on some row of this likelihood's data (a group id
        used as an index out of range), at the start. The eager path bisects such rows to the
        per-row rule (:func:`~pyro_dp.isolation.robust_rows`); a compiled graph would raise for
        the whole batch, so such data run eagerly: the same values and releases, only slower.
        Asked once per likelihood (one eager pass over the rows); what it changes is timing
        alone, which is outside the threat model (``docs/privacy.md``). A row that raises only at
        other points of the chain is not foreseen (documented)."""
        if getattr(self, "_raises", None) is None:
            lik = self.lik
            z = lik.flatten(lik.prototype_params)
            try:
                with torch.no_grad():
                    lik.eager_isolated_loglik(z, robust=False)
                self._raises = False
            except Exception:  # noqa: BLE001 - some row raises: eager for this data (timing only)
                self._raises = True
        return self._raises

    def _key(self, name: str, inputs: tuple, bucket=None) -> tuple:
        """The cache key of ``name`` on ``inputs``: the function, the bucket, every input's
        shape, dtype and device, and the likelihood's own signature (``_key_base``)."""
        signatures = tuple(_signature(t) for t in inputs) + (("preconditioned", len(self._public())),)
        return (name, bucket, signatures) + self._key_base

    def _public(self) -> tuple:
        """The public tensors every graph takes as inputs after the data: the likelihood's
        preconditioner (:mod:`pyro_dp.preconditioning`), or nothing. Inputs, not constants, so
        that a chain's own preconditioner is what its graphs read."""
        precond = getattr(self.lik, "_precond", None)
        return () if precond is None else tuple(precond)

    def rebind(self) -> None:
        """Forget the graphs bound to this likelihood's inputs (its public inputs changed); the
        compiled graphs stay in the shared cache."""
        if self._spec is not None:
            self._runs = {}

    # ------------------------------------------------------------------ tracing
    def _with_data(self, fn: Callable) -> Callable:
        """``fn(*inputs)`` run with the model's tensor arguments replaced by the graph's data
        inputs (so the graph has the data as inputs, not baked-in constants)."""
        lik, n, p = self.lik, len(self._data), len(self._public())

        def wrapped(*inputs):
            data, public, rest = inputs[:n], inputs[n:n + p], inputs[n + p:]
            saved = lik._precond
            lik._precond = tuple(public) if p else None  # the graph's own inputs, not the current values
            try:
                with _model_arguments(lik, *_with_tensors(self._leaves, self._spec, self._tensor_pos, data)):
                    return fn(*rest)
            finally:
                lik._precond = saved

        return wrapped

    def _get_graph(self, name: str, fn: Callable, inputs: tuple, bucket=None, key=None) -> Optional[Callable]:
        """``fn`` as a callable on ``inputs`` bound to this likelihood's data (``None``: eager),
        compiled once per kernel object and process (the shared :attr:`cache`)."""
        key = self._key(name, inputs, bucket) if key is None else key
        run = self._runs.get(key, _MISSING)
        if run is not _MISSING:
            return run
        compiled = self.cache.get(key, _MISSING)
        if compiled is _MISSING:
            compiled = self._compile(name, fn, inputs, key)
        data = self._data + self._public()

        def bound(*xs):
            return compiled(*data, *xs)

        self._runs[key] = run = None if compiled is None else bound
        return run

    def _compile(self, name: str, fn: Callable, inputs: tuple, key: tuple) -> Optional[Callable]:
        """Trace ``fn`` (data inputs first) and compile it into :attr:`cache` (``None``: it
        cannot be traced, eager then)."""
        inputs = reveal(inputs, reason=_GRAPH_INPUTS)  # example inputs: only their shapes are traced
        t0 = time.perf_counter()
        front = self._data + self._public()  # the data, then the public inputs (_with_data)
        inputs = _distinct(front, inputs)
        self.lik.likelihood_mask  # a graph may read it (jump_norm, project): determined outside this trace
        def trace():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # FakeTensor mode: every input (latent point, indices, data) is shapes only, so a
                # branch on a value raises here instead of being baked in (module docstring).
                return make_fx(self._with_data(fn), tracing_mode="fake", _allow_non_fake_inputs=True)(
                    *front, *inputs)

        try:
            self._traced_row_columns = False
            try:
                graph = in_fresh_thread(trace)
            except Exception:  # noqa: BLE001 - the per-row forward columns may not trace: the older form
                if not self._traced_row_columns:
                    raise
                self._row_columns = False  # this likelihood's graphs take jvp outside the rows' vmap
                graph = in_fresh_thread(trace)
        except Exception as e:  # noqa: BLE001 - any failure to trace means: use eager
            warnings.warn(
                f"jit_compile: {name} of this model cannot be traced into a graph ("
                f"{'' if isinstance(e, TraceFailed) else type(e).__name__ + ': '}"
                f"{str(e).splitlines()[0][:200] if str(e) else ''}); it runs eagerly (same values, slower). "
                "Usual causes: Python control flow on a latent value, .item(), or shapes that depend on "
                "values. The check sees only shapes (pyro_dp.compiled).",
                CompileFallbackWarning,
                stacklevel=4,
            )
            self.cache[key] = None
            return None
        compiled = graph
        self.cache[("output sources", key)] = output_sources(graph)  # before the rewrites: fused_graph's taint
        if self.backend == "inductor":
            crashed = False
            try:  # compile_fx compiles here, from shapes and dtypes only (no value is read)
                prepared = hoist_broadcasts(graph)
                crashed = self.check and not self._survives_check(name, prepared, (*front, *inputs))
                if not crashed:
                    compiled = strip_extra_outputs(inductor_compile(prepared, (*front, *inputs), self.compile_kwargs),
                                                    prepared.num_own_outputs)
            except Exception as e:  # noqa: BLE001 - e.g. no C++ toolchain: run the traced graph
                warnings.warn(
                    f"jit_compile: inductor could not compile {name} ({type(e).__name__}: "
                    f"{str(e).splitlines()[0][:200] if str(e) else ''}); running the traced graph uncompiled "
                    "(same values, slower)",
                    CompileFallbackWarning,
                    stacklevel=4,
                )
            if crashed:  # issue 59: the eager path, not the traced graph
                self.cache[key] = None
                return None
        # the first call compiles (inductor): count its time as compile time
        self.cache[key] = compiled
        self.num_compiled += 1
        self.compile_seconds += time.perf_counter() - t0
        self._first_call_pending = getattr(self, "_first_call_pending", set()) | {key}
        return compiled

    def _survives_check(self, name: str, prepared, example_inputs: tuple) -> bool:
        """Whether ``prepared`` compiles and runs on a stand-in of its inputs in the checking
        subprocess (:mod:`pyro_dp.compile_check`, issue 59); if the checker died, a warning."""
        result = check_graph(prepared, example_inputs, self.compile_kwargs)
        if result.status == "died":
            warnings.warn(f"jit_compile: inductor's compiled {name} crashed a checking subprocess on zeros of its "
                          f"inputs' shapes ({result.detail}); it runs eagerly (same values, slower). "
                          "pyro_dp.compile_check says why", CompileFallbackWarning, stacklevel=5)
            return False
        return True  # "error": the compile below fails the same way and handles it

    def _call(self, name, fn, inputs, bucket=None):
        """Run the compiled ``fn`` on ``inputs``, or ``None`` if it fell back to eager."""
        key = self._key(name, inputs, bucket)  # computed once per call (#17: Python per iteration)
        run = self._get(name, fn, inputs, bucket, key)
        if run is None:
            return None
        return self._run(key, run, inputs)

    def _run(self, key: tuple, run: Callable, inputs: tuple):
        """``run(*inputs)``; the first call of a freshly compiled graph counts as compile time."""
        inputs = reveal(inputs, reason=_GRAPH_INPUTS)
        pending = getattr(self, "_first_call_pending", None)
        if pending and key in pending:
            t0 = time.perf_counter()
            out = run(*inputs)
            pending.discard(key)
            self.compile_seconds += time.perf_counter() - t0
            return out
        return run(*inputs)

    def bucket_for(self, name: str, b: int) -> int:
        """The padded size for a batch of ``b`` rows of ``name``: its bucket
        (:func:`bucket_size`), or, when that bucket's graph is not compiled yet, the smallest
        already compiled bucket of ``name`` that holds ``b`` rows at most twice over. A run of
        random batch sizes (Poisson) then compiles the buckets of its common sizes and pads a
        rare small batch into one of them, instead of stopping mid-run for seconds to compile a
        graph for it (#17). The choice depends on the batch size only through timing, like the
        time of the batch's own work (``docs/privacy.md``); padded rows are masked out, so the
        values are the same."""
        own, best = bucket_size(b), None
        for key, run in self.cache.items():
            if key[0] != name or run is None or key[3:] != self._key_base:
                continue
            if key[1] == own:
                return own
            if b <= key[1] <= 2 * b and (best is None or key[1] < best):
                best = key[1]
        return own if best is None else best

    def _padded(self, idx: torch.Tensor, dtype, size: Optional[int] = None, with_valid: bool = True,
                name: Optional[str] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor], int]:
        """``idx`` padded with row 0 to ``size`` (default: :meth:`bucket_for` the graph
        ``name``), and the 0/1 mask of its real rows (``None`` without ``with_valid``: for
        outputs that are sliced, not summed)."""
        b = int(idx.numel())
        size = (bucket_size(b) if name is None else self.bucket_for(name, b)) if size is None else size
        padded = torch.nn.functional.pad(idx, (0, size - b))  # pads with 0: row 0
        valid = _valid_mask(b, size, dtype, idx.device) if with_valid else None
        return padded, valid, size

    # ------------------------------------------------------------------ functions
    def loglik_and_prior(self, z, idx=None):
        lik = self.lik
        if idx is None:
            out = self._call("loglik_and_prior", lambda zz: lik.eager_loglik_and_prior(zz, None), (z,))
            return out if out is None else tuple(out)
        b = int(idx.numel())
        padded, _, size = self._padded(idx, z.dtype, with_valid=False, name="loglik_and_prior[idx]")
        out = self._call("loglik_and_prior[idx]", lambda zz, i: lik.eager_loglik_and_prior(zz, i), (z, padded), size)
        return out if out is None else (out[0][:b], out[1])

    def log_ratios(self, z, z_new, idx=None):
        lik = self.lik

        def ratios(zz, zn, i=None):
            ll_old, _ = lik.eager_loglik_and_prior(zz, i)
            ll_new, lp_new = lik.eager_loglik_and_prior(zn, i)
            return ll_new - ll_old, lp_new

        if idx is None:
            out = self._call("log_ratios", ratios, (z, z_new))
            return out if out is None else tuple(out)
        b = int(idx.numel())
        padded, _, size = self._padded(idx, z.dtype, with_valid=False, name="log_ratios[idx]")
        out = self._call("log_ratios[idx]", ratios, (z, z_new, padded), size)
        return out if out is None else (out[0][:b], out[1])

    def _grads(self, zz, i):
        """Inside a graph: ``(ℓ [B], gradients)``, the gradients as ``D`` columns ``[B]``
        (forward mode, one ``jvp`` per coordinate) when ``D <= FORWARD_MAX_DIM``, else the
        ``[B, D]`` rows of the eager path (``vmap`` of reverse mode over rows, or ``jacfwd``, i.e.
        forward mode batched over the ``D`` directions, for a model that does not index its
        data). Forward-mode columns keep every operation ``[B]``-shaped, which the compiler
        vectorises over rows; for large ``D`` the batched forms share one matrix product."""
        lik = self.lik
        if lik.dim > FORWARD_MAX_DIM:
            return lik.eager_per_example_grad(zz, i)  # vmap(grad) over rows, or jacfwd
        if not getattr(self, "_row_columns", True):
            return self._outer_columns(zz, i)
        self._traced_row_columns = True

        def row_columns(*row):
            ll, cols = _jvp_columns(lambda v: lik.eager_row_term(v, *row), zz)
            return ll, tuple(cols)

        fn = torch.func.vmap(row_columns, in_dims=(0,) * len(lik.arguments.data_pos), chunk_size=lik.vmap_chunk_size)
        ll, cols = fn(*lik.eager_rows(i))
        return ll, list(cols)

    def _outer_columns(self, zz, i):
        """:meth:`_grads`' forward-mode columns with ``jvp`` taken of the whole ``vmap`` over rows
        (one ``jvp`` per coordinate): the form for models whose per-row ``jvp`` cannot be traced
        (``torch.quantile`` inside ``vmap(jvp)`` fails in torch 2.13's fake mode). The same values;
        measured 3.7 ms against 0.21 ms per clipped gradient pass (banana, n = 1e5)."""
        # A model the trace cannot represent fails the trace here (and the caller falls back):
        # the rows' bisection (isolation.robust_rows) re-raises under a trace instead of turning
        # the failure into NaN terms (tests/test_row_isolation.py, tests/test_compiled.py)
        return _jvp_columns(lambda v: self.lik.eager_terms(v, i)[0], zz)

    def per_example_grad(self, z, idx=None):
        def grads(zz, i=None):
            ll, g = self._grads(zz, i)
            return ll, (torch.stack(g, -1) if isinstance(g, list) else g)

        if idx is None:
            out = self._call("per_example_grad", grads, (z,))
            return out if out is None else tuple(out)
        b = int(idx.numel())
        padded, _, size = self._padded(idx, z.dtype, with_valid=False, name="per_example_grad[idx]")
        out = self._call("per_example_grad[idx]", grads, (z, padded), size)
        return out if out is None else (out[0][:b], out[1][:b])

    def clipped_grad_terms(self, zz, c, i=None, valid=None, count=True, minus=None) -> Tuple[torch.Tensor, ClippedSum]:
        """Inside a graph: ``(ℓ [B], ClippedSum)`` of the per-example gradients at ``zz``
        (:meth:`_grads`, then the per-row rule, the clip to L2 norm ``c`` and the sum of
        :func:`~pyro_dp.mechanisms.clip_and_sum`, column by column for forward-mode columns;
        ``count=False``: the clipped rows are not counted). ``minus`` (``[B, D]``): rows subtracted
        from the gradients before the rule and the clip (a control variate's reference gradients,
        :func:`~pyro_dp.kernels.control_variate.cv_gradient_release_fn`)."""
        ll, g = self._grads(zz, i)
        if minus is not None:
            g = [col - minus[..., j] for j, col in enumerate(g)] if isinstance(g, list) else g - minus
        if not isinstance(g, list) and g.shape[-1] <= COLUMNS_MAX_DIM:
            g = list(g.unbind(-1))  # one fused loop over the rows (COLUMNS_MAX_DIM)
        if isinstance(g, list):
            return ll, clip_and_sum_columns(g, c, valid, count=count)
        return ll, clip_and_sum(g, c, valid, count=count)

    def log_prior_terms(self, zz) -> Tuple[torch.Tensor, torch.Tensor]:
        """Inside a graph: ``(log prior, its gradient)`` at ``zz`` (data-free)."""
        g, v = torch.func.grad_and_value(self.lik.eager_log_prior)(zz)
        return v, g

    def _chunk_rows(self) -> int:
        """Rows per chunk of a full-data gradient pass (:data:`CHUNK_ELEMENTS` entries)."""
        return max(8, CHUNK_ELEMENTS // max(self.lik.dim, 1))

    def _one_chunk(self) -> bool:
        """Whether a full-data gradient pass runs as one graph (else in chunks of
        :meth:`_chunk_rows` rows)."""
        return self.lik.num_rows <= self._chunk_rows()

    def fused_graph(self, name: str, fn: Callable, inputs: tuple, full_data: bool = True, bucket: Optional[int] = None,
                    released=(), diagnostic=(), noise=(), release: Optional[Callable] = None) -> Optional[Callable]:
        r"""``fn`` — a pure tensor function of full-data passes written with
        :meth:`clipped_grad_terms`, :meth:`log_prior_terms` and :mod:`pyro_dp.mechanisms`'
        clip-and-sum functions — traced into **one** graph and compiled (once, from the shapes
        of ``inputs``: no value is read), returned as a callable on inputs of those shapes; or
        ``None`` when it cannot be (the trace fell back to eager, or a full-data pass needs
        chunks: the caller then uses the unfused functions, which give the same values).
        ``name`` must identify ``fn`` with every Python constant it closes over (it is part of
        the cache key). A kernel fuses what happens *between* releases with the release's
        clipped sum (DP-HMC's whole iteration, :func:`~pyro_dp.kernels.hmc.dphmc_step_fn`), so an iteration
        costs a few graph calls instead of many small operations; it asks for the graph
        before it draws any noise, so it never falls back half-way through a step. With
        ``full_data=False`` ``fn`` reads only rows it indexes itself (a batch step, DP Barker's
        :func:`~pyro_dp.kernels.barker.barker_step_fn`): no chunking applies;
        ``bucket`` then names the padded batch size the graph was built for (chosen with
        :meth:`bucket_for`). **Outputs** (:class:`~pyro_dp.graphs.OutputTaint`): those at the
        positions ``released`` and ``diagnostic`` come out public through ``release`` (the mechanisms'
        :func:`~pyro_dp.mechanisms.release.graph_release`; a released one computed from the data must be
        computed from one of the ``noise`` inputs, checked at the trace); every other output computed from
        the data or a private input comes out :class:`~pyro_dp.private.Private` (the per-row cache)."""
        if full_data and not self._one_chunk():
            return None
        key = self._key(name, reveal(inputs, reason=_GRAPH_INPUTS), bucket)  # shapes: one reveal, not 3 getters
        run = self._get(name, fn, inputs, bucket, key)
        if run is None:
            return None
        taint = getattr(run, "taint", None)  # bound to this likelihood's data, once per graph
        if taint is None:  # the graph's sources (its trace) and the caller's word
            taint = run.taint = OutputTaint(name, self.cache[("output sources", key)], len(self._data),
                                            len(self._data) + len(self._public()), released, diagnostic, noise, release)
        return lambda *xs: taint.apply(self._run(key, run, _checked(name, key[2][:-1], reveal(xs, reason=_GRAPH_INPUTS))), xs)

    def clipped_grad_sum(self, z, clip, idx=None):
        lik = self.lik
        clip_t = torch.as_tensor(clip, dtype=z.dtype, device=z.device)

        def fused(zz, c, i=None, valid=None):
            ll, cs = self.clipped_grad_terms(zz, c, i, valid)
            return ll, cs.total, cs.num_clipped, cs.num_rows

        if idx is None:
            n, chunk = lik.num_rows, self._chunk_rows()
            if self._one_chunk():
                out = self._call("clipped_grad_sum", fused, (z, clip_t))
                return out if out is None else (out[0], ClippedSum(*out[1:]))
            idx = torch.arange(n, device=z.device)
            lls, total, nc, nr = [], None, 0, 0
            for start in range(0, n, chunk):  # bounded memory: chunks of the same bucket
                part = self._clipped_idx(fused, z, clip_t, idx[start:start + chunk], bucket=bucket_size(chunk))
                if part is None:
                    return None
                lls.append(part[0])
                total = part[1].total if total is None else total + part[1].total
                nc, nr = nc + part[1].num_clipped, nr + part[1].num_rows
            return torch.cat(lls), ClippedSum(total, nc, nr)
        return self._clipped_idx(fused, z, clip_t, idx)

    def clipped_ratio_sum(self, z_new, ll_old, clip, idx=None):
        lik = self.lik
        clip_t = torch.as_tensor(clip, dtype=z_new.dtype, device=z_new.device)

        def fused(zz, old, c, i=None, valid=None):
            ll, lp = lik.eager_loglik_and_prior(zz, i)
            cs = clip_and_sum(ll - old, c, valid)
            return ll, lp, cs.total, cs.num_clipped, cs.num_rows

        if idx is None:
            out = self._call("clipped_ratio_sum", fused, (z_new, ll_old, clip_t))
            return out if out is None else (out[0], out[1], ClippedSum(*out[2:]))
        b = int(idx.numel())
        padded, valid, size = self._padded(idx, z_new.dtype, name="clipped_ratio_sum[idx]")
        old = torch.nn.functional.pad(ll_old, (0, size - b))
        out = self._call("clipped_ratio_sum[idx]", fused, (z_new, old, clip_t, padded, valid), size)
        return out if out is None else (out[0][:b], out[1], ClippedSum(*out[2:]))

    def clipped_difference_sum(self, ll_new, ll_old, clip):
        """:func:`~pyro_dp.mechanisms.clip_and_sum` of ``ll_new - ll_old`` in one graph (DP-HMC's
        ratio release, whose new log-likelihoods come from the trajectory's last gradient pass)."""
        clip_t = torch.as_tensor(clip, dtype=ll_new.dtype, device=ll_new.device)

        def fused(new, old, c):
            cs = clip_and_sum(new - old, c)
            return cs.total, cs.num_clipped, cs.num_rows

        out = self._call("clipped_difference_sum", fused, (ll_new, ll_old, clip_t))
        return out if out is None else ClippedSum(*out)

    def _clipped_idx(self, fused, z, clip_t, idx, bucket=None):
        b = int(idx.numel())
        padded, valid, size = self._padded(idx, z.dtype, bucket, name="clipped_grad_sum[idx]")
        out = self._call("clipped_grad_sum[idx]", fused, (z, clip_t, padded, valid), size)
        return out if out is None else (out[0][:b], ClippedSum(*out[1:]))

    def log_prior(self, z):
        out = self._call("log_prior", self.lik.eager_log_prior, (z,))
        return out

    def log_prior_and_grad(self, z):
        out = self._call("log_prior_and_grad", self.log_prior_terms, (z,))
        return out if out is None else tuple(out)

