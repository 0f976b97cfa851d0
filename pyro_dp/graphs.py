r"""Graph helpers of the compiled path (:mod:`pyro_dp.compiled`): the rewrites of a traced
per-example graph before inductor compiles it (:func:`hoist_broadcasts`, whose extra outputs
:func:`strip_extra_outputs` drops), the trace's own thread (:func:`in_fresh_thread`), and an fx
graph's walk back from its outputs (:func:`ancestors`, also the set-up checks' and
:mod:`pyro_dp.coordinates`'), and which inputs each output is computed from (:func:`output_sources`,
the fused graphs' taint, :mod:`pyro_dp.private`).

Split out of :mod:`pyro_dp.compiled` (issue 39: no file over 700 lines).
"""
from __future__ import annotations

import gc
import logging
import threading
from typing import Callable, Optional

import torch
from torch.utils._pytree import tree_flatten

from .private import Private, enabled, private

__all__ = ["hoist_broadcasts", "SMALL_NUMEL", "TraceFailed", "in_fresh_thread", "strip_extra_outputs", "ancestors",
           "output_sources", "OutputTaint"]

_aten = torch.ops.aten
#: element-wise operations of one tensor (optionally with Python scalars) that commute with
#: ``expand``: ``f(expand(x)) == expand(f(x))`` element for element (the same IEEE operation
#: on the same values), so :func:`hoist_broadcasts` may move them before the ``expand``.
_HOISTABLE = {
    _aten.log.default, _aten.log1p.default, _aten.log2.default, _aten.exp.default, _aten.expm1.default,
    _aten.sqrt.default, _aten.rsqrt.default, _aten.reciprocal.default, _aten.neg.default, _aten.abs.default,
    _aten.square.default, _aten.sigmoid.default, _aten.tanh.default, _aten.lgamma.default,
    _aten.digamma.default, _aten.sin.default, _aten.cos.default,
    _aten.pow.Tensor_Scalar, _aten.mul.Tensor, _aten.div.Tensor, _aten.add.Tensor, _aten.sub.Tensor,
    _aten.rsub.Scalar, _aten.mul.Scalar, _aten.div.Scalar, _aten.add.Scalar, _aten.sub.Scalar,
}


#: a tensor of at most this many elements that per-row work reads is "small" (a parameter,
#: not a row quantity) for :func:`hoist_broadcasts`
SMALL_NUMEL = 64
_VIEWS = {_aten.expand.default, _aten.select.int, _aten.slice.Tensor, _aten.view.default, _aten.unsqueeze.default,
          _aten.squeeze.dim, _aten.squeeze.default, _aten.permute.default, _aten.t.default,
          _aten.lift_fresh_copy.default, _aten.alias.default, _aten._unsafe_view.default}


def _numel(node) -> Optional[int]:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val.numel() if isinstance(val, torch.Tensor) else None


def _through_alias(node):
    """``node`` without the ``alias`` views around it (forward-mode AD wraps tangents in them)."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is _aten.alias.default:
        node = node.args[0]
    return node


def _small(node) -> bool:
    """A small tensor, or an ``expand`` of one (a broadcast parameter)."""
    node = _through_alias(node)
    if isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is _aten.expand.default:
        node = node.args[0]
    n = _numel(node)
    return n is not None and n <= SMALL_NUMEL


def _add_node(graph, target, args):
    """``graph.call_function(target, args)`` with its ``meta["val"]`` (shape and dtype,
    computed on the fake values of its inputs) for the later steps' size tests."""
    node = graph.call_function(target, args)
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in args]
    if all(not isinstance(a, torch.fx.Node) or isinstance(v, torch.Tensor) for a, v in zip(args, vals)):
        try:
            node.meta["val"] = target(*vals)
        except Exception:  # noqa: BLE001 - no shape: the size tests then skip this node
            pass
    return node


def _divisions_to_products(graph) -> None:
    """``a / b`` -> ``a * reciprocal(b)`` for a per-row ``a`` and a small ``b`` (:func:`hoist_broadcasts`, 1)."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not _aten.div.Tensor or node.kwargs or len(node.args) != 2:
            continue
        a, b = node.args
        na = _numel(a)
        if not (isinstance(b, torch.fx.Node) and _small(b) and na is not None and na > SMALL_NUMEL):
            continue
        with graph.inserting_before(node):
            inv = _add_node(graph, _aten.reciprocal.default, (b,))
            mul = _add_node(graph, _aten.mul.Tensor, (a, inv))
        node.replace_all_uses_with(mul)
        graph.erase_node(node)


def _hoist_through_expand(graph) -> None:
    """``f(expand(x))`` -> ``expand(f(x))``, repeated to a fixed point (:func:`hoist_broadcasts`, 2)."""
    changed = True
    while changed:
        changed = False
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in _HOISTABLE or node.kwargs or not node.args:
                continue
            src, rest = _through_alias(node.args[0]), node.args[1:]
            if not (isinstance(src, torch.fx.Node) and src.op == "call_function"
                    and src.target is _aten.expand.default and len(src.args) == 2 and not src.kwargs):
                continue
            if not all(isinstance(a, (int, float, bool)) for a in rest):
                continue
            with graph.inserting_before(node):
                small = _add_node(graph, node.target, (src.args[0], *rest))
                big = _add_node(graph, _aten.expand.default, (small, src.args[1]))
            node.replace_all_uses_with(big)
            graph.erase_node(node)
            changed = True
    graph.eliminate_dead_code()


def _unit_contractions(graph) -> None:
    """``bmm``/``mm`` over a contraction of length one -> the broadcast product (:func:`hoist_broadcasts`, 4)."""
    for node in list(graph.nodes):
        if (node.op != "call_function" or node.target not in (_aten.bmm.default, _aten.mm.default)
                or node.kwargs or len(node.args) != 2):
            continue
        a, b = node.args
        va = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        vb = b.meta.get("val") if isinstance(b, torch.fx.Node) else None
        if not (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)
                and va.shape[-1] == 1 and vb.shape[-2] == 1 and va.dtype == vb.dtype):
            continue
        with graph.inserting_before(node):
            prod = _add_node(graph, _aten.mul.Tensor, (a, b))  # [.., M, 1] * [.., 1, P] = [.., M, P]
        node.replace_all_uses_with(prod)
        graph.erase_node(node)


def _read_per_row(node, size: int) -> bool:
    """Whether a node of at least ``size`` elements reads ``node``, directly or through views of
    it. Under the per-row ``vmap`` a small parameter reaches the rows through a view (a
    ``[1, D]`` ``view`` of a ``[D]`` mean) that the batched binary operation then broadcasts
    (``#38``: the row-isolated banana graph recomputed its means and variances inside the loop
    over the rows until views were looked through: DP penalty's fused pass 1.5x slower)."""
    for u in node.users:
        if (_numel(u) or 0) >= size:
            return True
        if u.op == "call_function" and u.target in _VIEWS and _read_per_row(u, size):
            return True
    return False


def hoist_broadcasts(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    r"""Prepare a traced per-example graph for inductor (changed in place and returned): the
    parameter arithmetic that Pyro's distributions broadcast to every row is computed once
    per call instead of once per vector of rows.

    A Pyro distribution broadcasts its parameters to the batch shape before computing with
    them: ``Normal(loc, scale).log_prob`` takes ``scale.log()`` of an ``[N, D]`` ``expand`` of
    a ``[D]`` scale and divides every row by the expanded variance. Inductor then evaluates
    ``log``, ``sqrt`` and divisions of the same few numbers inside the per-example loop (the
    scalar library calls cannot be moved out by the C++ compiler: inductor compiles with
    ``-fmath-errno``), and a vector division costs several multiplications. Four rewrites:

    1. ``a / b`` with ``b`` small (a parameter, or an ``expand`` of one) and ``a`` per-row
       becomes ``a * (1 / b)``;
    2. ``f(expand(x))`` becomes ``expand(f(x))`` for the element-wise ``f`` of
       :data:`_HOISTABLE` whose other arguments are Python scalars (the same IEEE operation
       on the same numbers);
    3. every small computed tensor that per-row work reads is also returned by the graph (a
       graph output is stored once, where inductor would otherwise inline its computation
       into the loop); the caller drops these extra outputs (:func:`strip_extra_outputs`);
    4. a matrix product over a contraction of length one (``bmm`` of ``[B, M, 1]`` and
       ``[B, 1, P]``, ``mm`` of ``[M, 1]`` and ``[1, P]``), which reverse mode under ``vmap``
       makes of a per-example gradient such as :math:`r_i x_i`, becomes the broadcast product
       it is: inductor lowers such a ``bmm`` as a reduction whose ``[B, M, P]`` result it writes
       to memory, where a product fuses into the per-row loop that clips and sums it
       (logistic regression, d = 10, N = 1e5, one thread: the fused clipped-gradient pass
       about 2x faster).

    Exactness: rewrites 2, 3 and 4 change no value (a sum of one product is that product).
    Rewrite 1 can change a per-example term in its last bit (:math:`a\cdot\mathrm{fl}(1/b)` instead of :math:`\mathrm{fl}(a/b)`), which is
    within the compiled path's documented contract (module docstring: inductor's terms may
    differ from eager in the last bits; chains are compared to ``1e-10`` relative); for a
    parameter below about :math:`10^{-308}`, where :math:`1/b` overflows, a term that eager
    computes as finite can become infinite, and the per-row rule then zeroes that row. Privacy
    is unaffected either way: the per-row rule and the clip are applied inside the graph to
    the values that are summed, and the rewrite depends only on the graph's shapes.
    Measured (#17, thesis banana, 10^5 rows, one thread): the fused DP penalty pass
    0.45 ms before, 0.28 ms after.

    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> f = lambda x, s: (x / torch.log(s.expand(1000, 2))).sum(0)
    >>> gm = hoist_broadcasts(make_fx(f)(torch.ones(1000, 2), torch.full((2,), 2.0)))
    >>> [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
    ['log.default', 'reciprocal.default', 'expand.default', 'mul.Tensor', 'sum.dim_IntList']
    >>> gm(torch.ones(1000, 2), torch.full((2,), 2.0))  # the output, then the extra 1 / log(s)
    (tensor([1442.6949, 1442.6949]), tensor([1.4427, 1.4427]))
    >>> gm.num_own_outputs is None  # the traced function returned one tensor
    True
    """
    graph = gm.graph
    _unit_contractions(graph)  # 4
    _hoist_through_expand(graph)  # 2 (first: a divisor may be f(expand(x)))
    _divisions_to_products(graph)  # 1
    _hoist_through_expand(graph)  # 2 again: reciprocal(expand(x))
    graph.eliminate_dead_code()
    # 3. small computed tensors read by per-row work: extra graph outputs (stored once)
    extras = []
    for node in graph.nodes:
        n = _numel(node)
        if node.op != "call_function" or node.target in _VIEWS or n is None or n > SMALL_NUMEL:
            continue
        if _read_per_row(node, 8 * max(n, 1)):
            extras.append(node)
    output = next(n for n in graph.nodes if n.op == "output")
    own = output.args[0]
    leaves, _ = tree_flatten(own)
    output.args = (tuple(leaves) + tuple(extras),)  # flat, as inductor returns its outputs
    # None: the graph returned one tensor (returned alone again by strip_extra_outputs)
    gm.num_own_outputs = None if isinstance(own, torch.fx.Node) else len(leaves)
    gm.recompile()
    return gm


class TraceFailed(RuntimeError):
    """A trace failed (:func:`in_fresh_thread`); the message names the original exception."""


def in_fresh_thread(fn: Callable):
    """``fn()`` run in a new thread, its exception re-raised here. A trace that fails inside
    nested ``torch.func`` transforms can leave the thread's dispatcher state (functorch's
    interpreter stack, dispatch-key guards) half unwound, and every later trace or eager call in
    that thread then fails (torch 2.13: ``no_dispatch`` assertions, NaN results). That state is
    thread-local: a failed trace in a thread of its own leaves the caller's thread as it was."""
    out = {}
    grad = torch.is_grad_enabled()  # thread-local state the trace should see as the caller has it
    cuda = torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def run():
        failed = None
        try:
            if cuda is not None:
                torch.cuda.set_device(cuda)
            with torch.set_grad_enabled(grad):
                out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller, without its traceback
            failed = TraceFailed(f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        if failed is not None:
            # What the failed trace left (its frames' fake and functorch-wrapped tensors) is freed
            # here, in the thread whose dispatcher state made it: collected later from another
            # thread, it once crashed the process (a segfault in the garbage collector during the
            # next trace, in the full suite). (Clearing the fake-tensor cache here as well broke
            # the next trace: not done.)
            gc.collect()
            out["error"] = failed

    # torch logs a failed meta kernel at ERROR before raising; the failure is ours to handle
    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        t = threading.Thread(target=run, name="pyro_dp-trace")
        t.start()
        t.join()
    finally:
        log.setLevel(level)
    if "error" in out:
        raise out["error"]
    return out["value"]


def strip_extra_outputs(compiled: Callable, num_own_outputs: Optional[int]) -> Callable:
    """The graph's own (flat) outputs, without the extra ones :func:`hoist_broadcasts` added
    (``None``: the graph's one tensor)."""
    if num_own_outputs is None:
        return lambda *xs: compiled(*xs)[0]
    return lambda *xs: compiled(*xs)[:num_own_outputs]


def ancestors(nodes) -> set:
    """Every node of an fx graph that ``nodes`` depend on, themselves included."""
    seen, stack = set(), [x for x in nodes if isinstance(x, torch.fx.Node)]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    return seen


#: operations whose result depends on their tensor inputs' shapes, dtypes and devices only
_SHAPE_ONLY = {_aten.zeros_like.default, _aten.ones_like.default, _aten.empty_like.default, _aten.full_like.default,
               _aten.new_zeros.default, _aten.new_ones.default, _aten.new_empty.default, _aten.new_full.default,
               _aten.sym_size.int, _aten.sym_numel.default, _aten.sym_stride.int}


def output_sources(gm: torch.fx.GraphModule) -> tuple:
    r"""For each flat output of a traced (``make_fx``) graph, the bit mask of the placeholders
    (inputs, in order: bit ``j`` for input ``j``) its value is computed from: a walk of the graph
    in order, each node's sources the union of its inputs' (an operation of
    :data:`_SHAPE_ONLY`, which reads shapes alone, has none). Writes are followed: an in-place
    operation adds its sources to the tensor it writes into and to every view of it (views and
    the tensors they view share one set of sources, both ways), so a value read after the write
    carries them. Conservative (a source too many, never one too few, for the operations of an
    ATen graph); decided from the graph's code alone (its inputs are fake tensors: no value).

    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def f(data, z, xi):
    ...     v = z.view(-1); v.add_(data.sum())   # writes the data into z through a view
    ...     return z * 2, torch.zeros_like(data) + xi, xi
    >>> output_sources(make_fx(f)(torch.ones(3), torch.ones(1), torch.ones(())))
    (3, 4, 4)
    """
    root, sources = {}, {}

    def find(n):
        while root.get(n, n) is not n:
            n = root[n]
        return n

    def union(a, b):
        a, b = find(a), find(b)
        if a is not b:
            root[b] = a
            sources[a] = sources.get(a, 0) | sources.get(b, 0)

    placeholders = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            sources[node] = 1 << placeholders
            placeholders += 1
            continue
        if node.op != "call_function":
            sources[node] = 0  # constants (get_attr), the output
            continue
        inputs = node.all_input_nodes
        src = 0
        if node.target not in _SHAPE_ONLY:
            for a in inputs:
                src |= sources.get(find(a), 0)
        sources[node] = src
        schema = getattr(node.target, "_schema", None)
        if schema is None:  # operator.getitem and other Python functions: may alias their input
            for a in inputs:
                union(a, node)
            continue
        aliased = [a for a, arg in zip(_schema_args(node, schema), schema.arguments) if arg.alias_info is not None]
        for a in aliased:  # a view of, or a write into, an input: one set of sources for both
            if isinstance(a, torch.fx.Node):
                union(a, node)
        if any(arg.alias_info is not None and arg.alias_info.is_write for arg in schema.arguments):
            sources[find(node)] |= src
    output = next(n for n in gm.graph.nodes if n.op == "output")
    leaves, _ = tree_flatten(output.args[0])
    return tuple(sources.get(find(n), 0) if isinstance(n, torch.fx.Node) else 0 for n in leaves)


def _schema_args(node, schema) -> list:
    """``node``'s arguments in the order of ``schema``'s (keywords placed), ``None`` where absent."""
    out = list(node.args) + [None] * max(0, len(schema.arguments) - len(node.args))
    for j, arg in enumerate(schema.arguments):
        if arg.name in node.kwargs:
            out[j] = node.kwargs[arg.name]
    return out[:len(schema.arguments)]


class OutputTaint:
    r"""What each output of one fused graph is (:meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph`,
    issue 58), from its :func:`output_sources` and the caller's word, applied to every call's outputs:

    * an output the caller names **released** (a release's value after its noise, or what is
      computed from released values) or **diagnostic** (a release's clipped-row count) comes out
      public, through the caller's ``release(x, diagnostic)`` (the mechanisms'
      :func:`pyro_dp.mechanisms.release.graph_release`, which reveals it with the mechanism's reason). Where the caller names the graph's ``noise``
      inputs (the standard normals its release specs drew), a released output computed from the
      data must be computed from one of them too: checked here, at the trace, else a
      ``RuntimeError`` (a contributor's error: raw terms named released);
    * every other output computed from the data (the graph's first ``n_data`` inputs), or from an
      input that is :class:`~pyro_dp.private.Private` at the call, comes out
      :class:`~pyro_dp.private.Private` (one wrap per call, as the eager path wraps), whatever the
      caller says: the default is private;
    * the rest (computed from public inputs alone: the log prior, a batch's row count) as it is.

    >>> t = OutputTaint("g", (0b001, 0b110, 0b1010, 0b100), n_data=1, n_front=1, released=(2,), noise=(2,),
    ...                 release=lambda x, diagnostic: x)
    >>> out = t.apply((torch.ones(1), torch.ones(1), torch.ones(1), torch.ones(1)), (private(torch.ones(1)), 0, 0))
    >>> [type(o).__name__ for o in out]  # data; the private input 0; released (noise input 2); public input 1
    ['Private', 'Private', 'Tensor', 'Tensor']
    >>> OutputTaint("g", (0b011,), n_data=1, n_front=1, released=(0,), noise=(1,), release=lambda x, d: x)
    Traceback (most recent call last):
    ...
    RuntimeError: internal error: output 0 of fused graph g is named released but is computed from the data and none of its noise inputs (1,) (please report)
    """

    __slots__ = ("kinds", "any_via", "release")

    def __init__(self, name: str, sources: tuple, n_data: int, n_front: int, released=(), diagnostic=(), noise=(),
                 release: Optional[Callable] = None):
        if (released or diagnostic) and release is None:
            raise ValueError(f"fused graph {name}: outputs named released or diagnostic need the mechanisms' release "
                             "(release=pyro_dp.mechanisms.release.graph_release)")
        self.release = release
        data, noise_mask = (1 << n_data) - 1, sum(1 << (n_front + k) for k in noise)
        self.kinds = []
        for j, src in enumerate(sources):
            if j in released and noise_mask and src & data and not src & noise_mask:
                raise RuntimeError(f"internal error: output {j} of fused graph {name} is named released but is computed "
                                   f"from the data and none of its noise inputs {tuple(noise)} (please report)")
            if j in released or j in diagnostic:
                self.kinds.append((j in diagnostic, None, 0))
            else:  # (diagnostic, always private, the inputs that make it private when they are)
                self.kinds.append((False, bool(src & data), src >> n_front))
        self.any_via = any(k[2] for k in self.kinds)

    def apply(self, out, xs: tuple):
        if not enabled():
            return out
        single = torch.is_tensor(out)
        via = sum(1 << k for k, x in enumerate(xs) if isinstance(x, Private)) if self.any_via else 0
        res = tuple(self.release(o, diagnostic) if always is None else private(o) if always or mask & via else o
                    for o, (diagnostic, always, mask) in zip((out,) if single else out, self.kinds))
        return res[0] if single else res


def bucket_size(n: int) -> int:  # documented (and exported) as pyro_dp.compiled.bucket_size
    r"""Padded length of a batch of ``n`` rows: the smallest of 8 and :math:`2^k\cdot\{1, 1.25,
    1.5, 1.75\}` that is at least ``n`` (at most 25% padding, four buckets per doubling).

    >>> [bucket_size(n) for n in (1, 9, 100, 1000, 1024, 1025)]
    [8, 10, 112, 1024, 1024, 1280]
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n <= 8:
        return 8
    k = 1 << (n.bit_length() - 1)  # 2^floor(log2 n)
    for m in (4, 5, 6, 7, 8):
        if k * m // 4 >= n:
            return k * m // 4
    return 2 * k  # unreachable
