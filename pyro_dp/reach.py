r"""Every way data can reach a model other than as a sliced argument, closed **by construction**.

:mod:`pyro_dp.arguments` classifies the model's arguments and :mod:`pyro_dp.isolation` slices
every data argument to one row per evaluation. Data can reach the model's code by other roads:
a module-level global (``obs = y[i] - Y_ALL.median()``), a closure cell, a default argument, a
``functools.partial``, an attribute of an object passed in or of a bound method's object, a
class attribute, a ``PyroModule``/``nn.Module`` buffer or parameter, the param store. Such a
value is read whole by every row's evaluation and by the prior, and no clip bounds what one
person's row does through it. Two layers close those roads, both deciding from types, shapes
and code alone (never from a value, so a set-up decision is the same on neighbouring data
sets):

1. **Before any evaluation**, :func:`outside_data` walks what the model's code can reach —
   its closure cells, defaults, the globals its code names (and those of the user functions,
   classes and modules it names in turn), a partial's frozen arguments, a bound method's or a
   module's object (attributes, buffers, parameters), and the attributes of objects passed as
   arguments — and reports every array-like (tensor, numpy array, pandas object, list of
   numbers) with a dimension of ``N`` entries, ``N`` the data plate's size. The caller refuses
   the model, naming where each was found and how to pass it instead.
2. **At the tensor level**, :class:`CallGuard` (a :class:`torch.overrides.TorchFunctionMode`
   entered around every call of the model by :class:`~pyro_dp.likelihood.PrivateLikelihood`)
   sees every tensor that enters an operation. Inside a row's evaluation the row arrives as a
   ``vmap``-batched tensor, the latents and the public arguments are known objects, and every
   tensor the model computes is an operation's output; anything else came from outside the
   arguments (FACTS.md, "Row isolation with torch.func"). Such a tensor with a dimension of
   ``N`` entries is **never read**: the operation receives zeros of its shape and dtype
   instead, and the read is recorded; the caller refuses the model (at set-up) or raises
   :class:`OutsideDataError` (a later evaluation on a path set-up did not take). Metadata
   (``len``, ``.shape``, ``.dtype``) is not a read: ``N`` is public. A tensor created inside
   the model from non-tensor data (``torch.as_tensor(Y_NUMPY)``) with an ``N``-sized dimension
   counts as outside data too.

What stays the user's (``docs/privacy.md``, "The threat model"): statistics computed from the
data **before** the model is called (a mean baked into a constant), values without an
``N``-sized dimension derived from the data, and what the model prints or logs.

>>> import torch
>>> Y_ALL = torch.zeros(50)
>>> def model(y):
...     return y - Y_ALL.median()
>>> [label for label, _ in outside_data(model, (), {}, num_rows=50)]
["global 'Y_ALL' of module pyro_dp.reach (a tensor of shape (50,))"]
"""
from __future__ import annotations

import dataclasses
import dis
import functools
import inspect
import sys
import types
from typing import Iterable, Iterator, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

__all__ = ["OutsideDataError", "CallGuard", "outside_data", "describe_outside", "reachable_tensors"]

#: top-level packages whose code is not the user's: not walked for globals (their constants are
#: not the user's data). The user's own modules, ``__main__`` and notebooks are walked.
_LIBRARIES = frozenset({
    "torch", "pyro", "numpy", "scipy", "pandas", "pyro_dp", "opacus", "dp_accounting", "prv_accountant",
    "functorch", "sympy", "arviz", "matplotlib", "tqdm", "typing", "functools", "collections", "math",
})

#: how deep the walk follows objects (an attribute of an attribute of ...)
_MAX_DEPTH = 6


class OutsideDataError(ValueError):
    """The model read a tensor with an ``N``-sized dimension that is not one of its arguments
    (a global, a closure, a module buffer, ...): refused, never read (module docstring)."""


def _is_library(obj) -> bool:
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    if not isinstance(name, str):
        return True  # builtins and extension objects without a module: not user code
    top = name.split(".")[0]
    return top in _LIBRARIES or top in getattr(sys, "stdlib_module_names", ()) or top == "builtins"


def _shape_of(value) -> Optional[Tuple[int, ...]]:
    """The shape of an array-like (tensor, numpy, pandas, ``__array__``), the length of a list
    or tuple of numbers, else ``None``. Reads metadata only."""
    if torch.is_tensor(value):
        return tuple(value.shape)
    shape = getattr(value, "shape", None)
    if shape is not None and (hasattr(value, "__array__") or hasattr(value, "to_numpy")):
        try:
            return tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            return None
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float, bool)) for v in value[:64]):
        return (len(value),)
    return None


def _kind(value) -> str:
    if torch.is_tensor(value):
        return "a tensor"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__}"
    return f"a {type(value).__module__.split('.')[0]} {type(value).__name__}"


def _code_names(code: types.CodeType) -> Tuple[set, set]:
    """``(globals, attributes)``: the global names a code object (and the functions nested in it)
    loads, and the attribute names it reads, from its bytecode (an attribute ``d.X`` does not
    name the global ``X``)."""
    glob, attrs = set(), set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            glob.add(ins.argval)
        elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR", "STORE_ATTR"):
            attrs.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            g, a = _code_names(const)
            glob |= g
            attrs |= a
    return glob, attrs


class _Walk:
    """What a model's code can reach, as ``(label, value)`` pairs (see :func:`outside_data`)."""

    def __init__(self):
        self.seen = set()
        self.found: List[Tuple[str, object]] = []

    def value(self, label: str, value, depth: int, names: Optional[set] = None) -> None:
        if depth > _MAX_DEPTH or value is None or isinstance(value, (str, bytes, int, float, bool, complex)):
            return
        if id(value) in self.seen:
            return
        self.seen.add(id(value))
        if _shape_of(value) is not None:
            self.found.append((label, value))
            if torch.is_tensor(value) or hasattr(value, "__array__"):
                return
        if isinstance(value, dict):
            for k, v in list(value.items())[:10_000]:
                self.value(f"{label}[{k!r}]", v, depth + 1)
            return
        if isinstance(value, (list, tuple, set, frozenset)):
            for j, v in enumerate(list(value)[:10_000]):
                self.value(f"{label}[{j}]", v, depth + 1)
            return
        if isinstance(value, functools.partial):
            self.function(f"{label}.func", value.func, depth + 1)
            for j, v in enumerate(value.args):
                self.value(f"{label} (partial argument {j})", v, depth + 1)
            for k, v in (value.keywords or {}).items():
                self.value(f"{label} (partial argument {k!r})", v, depth + 1)
            return
        if isinstance(value, (types.FunctionType, types.MethodType)):
            self.function(label, value, depth)
            return
        if isinstance(value, types.ModuleType):
            if not _is_library(value):
                for n in sorted(names or ()):
                    if n in vars(value):
                        self.value(f"{label}.{n}", vars(value)[n], depth + 1, names)
            return
        if inspect.isclass(value):
            if not _is_library(value):
                for cls in value.__mro__:
                    if _is_library(cls):
                        continue
                    for n, v in vars(cls).items():
                        if not n.startswith("__") and (names is None or n in names):
                            self.value(f"{label}.{n}", v, depth + 1, names)
            return
        self.obj(label, value, depth, names)

    def obj(self, label: str, value, depth: int, names: Optional[set]) -> None:
        """An object's state: a module's buffers and parameters, attributes, its class's attributes."""
        if isinstance(value, torch.nn.Module):
            for kind, named in (("buffer", value.named_buffers()), ("parameter", value.named_parameters())):
                for n, t in named:
                    self.value(f"{label} (module {kind} {n!r})", t, depth + 1)
        attrs = {}
        if dataclasses.is_dataclass(value) and not inspect.isclass(value):
            attrs.update({f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)})
        try:
            attrs.update(vars(value))
        except TypeError:
            pass
        for slot in getattr(type(value), "__slots__", ()) or ():
            if isinstance(slot, str) and hasattr(value, slot):
                attrs[slot] = getattr(value, slot)
        for n, v in attrs.items():
            if n in ("_parameters", "_buffers", "_pyro_params", "_pyro_samples", "_modules"):
                if n == "_modules":
                    for m, sub in v.items():
                        self.value(f"{label}.{m}", sub, depth + 1)
                continue
            if names is None or n in names or isinstance(value, torch.nn.Module):
                self.value(f"{label}.{n}", v, depth + 1, names)
        if not _is_library(type(value)):
            self.value(f"{label} (class {type(value).__name__})", type(value), depth + 1, names)
        call = getattr(type(value), "__call__", None)
        if isinstance(call, types.FunctionType) and not _is_library(call):
            self.function(f"{label}.__call__", call, depth + 1)
        forward = getattr(type(value), "forward", None)
        if isinstance(forward, types.FunctionType) and not _is_library(forward):
            self.function(f"{label}.forward", forward, depth + 1)

    def function(self, label: str, fn, depth: int) -> None:
        if isinstance(fn, types.MethodType):
            self.value(f"{label}.__self__", fn.__self__, depth + 1)
            fn = fn.__func__
        if not isinstance(fn, types.FunctionType) or (depth > 0 and _is_library(fn)):
            return  # the model itself is always walked; library code it reaches is not the user's
        key = ("fn", id(fn))
        if key in self.seen:
            return
        self.seen.add(key)
        code = fn.__code__
        global_names, attr_names = _code_names(code)
        names = global_names | attr_names  # what an object or module reached from here may be asked for
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            self.value(f"closure variable {name!r} of {fn.__qualname__}", contents, depth + 1, names)
        for j, v in enumerate(fn.__defaults__ or ()):
            self.value(f"default argument {j} of {fn.__qualname__}", v, depth + 1, names)
        for k, v in (fn.__kwdefaults__ or {}).items():
            self.value(f"default argument {k!r} of {fn.__qualname__}", v, depth + 1, names)
        glob = fn.__globals__
        for name in sorted(global_names):
            if name in glob:
                where = glob.get("__name__", "?")
                self.value(f"global {name!r}" + ("" if where == "__main__" else f" of module {where}"), glob[name],
                           depth + 1, names)


def reachable_tensors(model, args=(), kwargs=None) -> List[Tuple[str, object]]:
    """Every array-like the model's code can reach other than as a pytree leaf of its
    arguments, as ``(label, value)``: the walk of :func:`outside_data` without the size filter
    (used to name a tensor the tensor-level guard met). Reads no value."""
    walk = _Walk()
    walk.value("the model", model, 0)
    leaves, _ = tree_flatten((tuple(args), dict(kwargs or {})))
    for leaf in leaves:
        if not torch.is_tensor(leaf) and _shape_of(leaf) is None:
            walk.value(f"an object among the model's arguments ({type(leaf).__name__})", leaf, 1)
    return walk.found


def outside_data(model, args=(), kwargs=None, *, num_rows: int) -> List[Tuple[str, object]]:
    """``[(label, value)]``: the array-likes with a dimension of ``num_rows`` entries that the
    model's code can reach other than as (pytree leaves of) its arguments — closures,
    defaults, globals named by its code and by the user code it names, a partial's arguments,
    a bound method's or module's object, attributes of objects among the arguments (module
    docstring). Types, shapes and code only; no value is read. Empty for ``num_rows < 2``."""
    n = int(num_rows)
    if n < 2:
        return []
    out = []
    for label, value in reachable_tensors(model, args, kwargs):
        shape = _shape_of(value)
        if shape is not None and n in shape:
            out.append((f"{label} ({_kind(value)} of shape {shape})", value))
    return out


def describe_outside(found: Iterable[Tuple[str, object]], num_rows: int) -> str:
    """The refusal for :func:`outside_data`'s findings: where each was found, then the fix."""
    where = "; ".join(label for label, _ in found)
    return (f"the model can reach data that is not one of its arguments: {where}, with a dimension of N = {num_rows} "
            "entries (the data plate's size). pyro_dp computes each row's term from that row's slice of the model's "
            "arguments, so a value read from a global, a closure, a default argument, an object's attribute or a "
            "module buffer would be read whole by every row and by the prior, unprotected. Pass the data as model "
            "arguments (tensors, or dicts, lists, tuples or namedtuples of tensors, rows first: MCMC.run(X, y)); if "
            "the value is public (not about the people in the data), pass it as an argument and name it in public= "
            "(docs/privacy.md, 'Every way data can reach a model')")


# ---------------------------------------------------------------------------------- the tensor guard
_METADATA = frozenset({
    torch.Tensor.dim, torch.Tensor.size, torch.Tensor.numel, torch.Tensor.__len__, torch.Tensor.ndimension,
    torch.Tensor.nelement, torch.Tensor.is_floating_point, torch.Tensor.is_complex, torch.Tensor.element_size,
    torch.Tensor.shape.__get__, torch.Tensor.dtype.__get__, torch.Tensor.device.__get__,
    torch.Tensor.ndim.__get__, torch.Tensor.is_cuda.__get__, torch.Tensor.requires_grad.__get__,
    torch.Tensor.layout.__get__, torch.Tensor.get_device, torch.Tensor.is_contiguous, torch.Tensor.stride,
    torch.Tensor.storage_offset, torch.Tensor.data_ptr, torch.Tensor.__hash__, torch.Tensor.is_sparse.__get__,
    torch.Tensor.__repr__, torch.Tensor.__format__,
})
#: factories that turn non-tensor data (lists, numpy arrays) into a tensor
_FROM_DATA = frozenset({torch.tensor, torch.as_tensor, torch.asarray, torch.from_numpy, torch.Tensor.new_tensor})


def _is_batched(t) -> bool:
    """Whether ``t`` is ``vmap``-batched at some level (under ``grad`` a batched row is wrapped
    in a gradient-tracking tensor: unwrapped level by level)."""
    f = torch._C._functorch
    for _ in range(16):
        if f.is_batchedtensor(t):
            return True
        if not (f.is_gradtrackingtensor(t) or f.is_functionaltensor(t)):
            return False
        t = f.get_unwrapped(t)
    return False


def _row_index(i) -> bool:
    """An integer index tensor computed from a row (``vmap``-batched)."""
    return torch.is_tensor(i) and not i.is_floating_point() and i.dtype != torch.bool and _is_batched(i)


def _safe(idx, size):
    """``(idx with out-of-range entries replaced by 0, in range)``, elementwise (Python's negative
    indices stay valid, as the model wrote them)."""
    ok = (idx >= -size) & (idx < size)
    return torch.where(ok, idx, torch.zeros_like(idx)), ok


def _poison(out, ok, lead: int):
    """``out`` with NaN where ``ok`` is False (``ok`` lies at dimensions ``lead..`` of ``out``):
    multiplied by 1 or NaN, so that the row's gradient is NaN too, as the per-row rule expects
    of a row whose term is NaN (the same terms and gradients as the bisection gave)."""
    ok = ok.reshape((1,) * lead + tuple(ok.shape) + (1,) * (out.dim() - lead - ok.dim()))
    one = torch.ones((), dtype=out.dtype, device=out.device)
    return out * torch.where(ok, one, torch.full_like(one, float("nan")))


def _guard_getitem(func, args, kwargs):
    src, index = args[0], args[1]
    if not torch.is_tensor(src) or not src.is_floating_point():
        return None
    parts = index if isinstance(index, tuple) else (index,)
    rows = [j for j, p in enumerate(parts) if _row_index(p)]
    if len(rows) != 1 or any(p is None or p is Ellipsis or torch.is_tensor(p) for j, p in enumerate(parts)
                             if j != rows[0]) or any(isinstance(p, int) for p in parts[:rows[0]]):
        return None  # one row index, after slices only: the other forms keep Python's semantics
    d = rows[0]
    safe, ok = _safe(parts[d], src.shape[d])
    new = parts[:d] + (safe,) + parts[d + 1:]
    out = func(src, new if isinstance(index, tuple) else safe)
    return _poison(out, ok, d)


def _guard_index_select(func, args, kwargs):
    a = list(args) + [kwargs.get(k) for k in ("dim", "index")[len(args) - 1:]]
    src, dim, index = a[0], a[1], a[2]
    if not torch.is_tensor(src) or not src.is_floating_point() or not _row_index(index) or index.dim() != 1:
        return None
    dim = dim % src.dim()
    safe, ok = _safe(index, src.shape[dim])
    return _poison(func(src, dim, safe), ok, dim)


def _guard_gather(func, args, kwargs):
    a = list(args) + [kwargs.get(k) for k in ("dim", "index")[len(args) - 1:]]
    src, dim, index = a[0], a[1], a[2]
    if not torch.is_tensor(src) or not src.is_floating_point() or not _row_index(index):
        return None
    safe, ok = _safe(index, src.shape[dim % src.dim()])
    return _poison(func(src, dim, safe), ok, 0)


_INDEXING = {torch.Tensor.__getitem__: _guard_getitem, torch.Tensor.index_select: _guard_index_select,
             torch.index_select: _guard_index_select, torch.Tensor.gather: _guard_gather, torch.gather: _guard_gather}


class CallGuard(TorchFunctionMode):
    """A tensor-level guard around one call of the model, with two duties.

    1. **Outside reads** (module docstring, layer 2): a tensor with an ``N``-sized dimension
       that is not an argument, a latent or computed inside the call is never read (zeros go
       to the operation instead) and the read is recorded.
    2. **Indices from the rows, in constant time**: indexing a floating-point tensor with an
       integer index computed from a row (``a[g]``, ``index_select``, ``gather`` with a
       ``vmap``-batched index) clamps an out-of-range index to 0 and makes that row's entries
       NaN, elementwise, instead of raising for the whole batch: the row's term is then NaN and
       the per-row rule maps it (``docs/privacy.md``, "One per-row rule"). Without it a group
       id out of range raised, and the rows were bisected to find it, an iteration several
       times slower when one row raises (the timing channel of issue 58).

    :param int num_rows: ``N``, the data plate's size (``None``: every outside tensor of one or
        more dimensions is replaced, for a structure trace that does not know ``N`` yet).
    :param allowed: the tensors the call may read whole (the public arguments, the latents,
        the stand-ins of a set-up check).

    After the call, :attr:`reads` lists ``(operation, shape, id of the tensor)`` of each refused
    read; the operation received zeros instead of the tensor. :meth:`refusal` words them.

    >>> import torch
    >>> G = torch.arange(6.0)
    >>> with CallGuard(num_rows=6, allowed=()) as guard:
    ...     out = G.sum() + torch.ones(6).sum()   # G comes from outside; ones(6) is made inside
    >>> out.item(), [r[:2] for r in guard.reads]
    (6.0, [('sum', (6,))])
    """

    def __init__(self, num_rows: Optional[int], allowed: Iterable = ()):
        super().__init__()
        self.num_rows = None if num_rows is None else int(num_rows)
        # ids: the allowed tensors and the outside ones are alive for the whole call, so no tensor made
        # inside can share an id with them (an id is reused only after its object is freed)
        self.allowed = {id(t) for t in allowed if torch.is_tensor(t)}
        self.inside = set()
        self.reads: List[Tuple[str, Tuple[int, ...]]] = []

    def _outside(self, t) -> bool:
        if id(t) in self.inside or id(t) in self.allowed or _is_batched(t):
            return False
        if self.num_rows is None:
            return t.dim() >= 1
        return self.num_rows >= 2 and self.num_rows in tuple(t.shape)

    def _swap(self, a, func):
        if torch.is_tensor(a) and self._outside(a):
            self.reads.append((getattr(func, "__name__", str(func)), tuple(a.shape), id(a)))
            return torch.zeros(a.shape, dtype=a.dtype, device=a.device)
        if isinstance(a, (list, tuple)) and any(torch.is_tensor(x) for x in a):
            return type(a)(self._swap(x, func) for x in a) if not hasattr(a, "_fields") else a
        return a

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _METADATA:
            args = tuple(self._swap(a, func) for a in args)
            kwargs = {k: self._swap(v, func) for k, v in kwargs.items()}
        guarded = _INDEXING.get(func)
        out = guarded(func, args, kwargs) if guarded is not None else None
        if out is None:
            out = func(*args, **kwargs)
        if func in _FROM_DATA and torch.is_tensor(out) and self._outside(out):
            self.reads.append((getattr(func, "__name__", str(func)), tuple(out.shape), None))
            out = torch.zeros(out.shape, dtype=out.dtype, device=out.device)
        for o in (out if isinstance(out, (list, tuple)) else (out,)):
            if torch.is_tensor(o) and not _is_batched(o):
                self.inside.add(id(o))
        return out

    def refuse_reads(self, model, args=(), kwargs=None) -> None:
        """Raise :class:`OutsideDataError` (worded by :meth:`refusal`) if the call read a tensor
        from outside its arguments; nothing otherwise."""
        if self.reads:
            raise OutsideDataError(self.refusal(model, args, kwargs))

    def refusal(self, model, args=(), kwargs=None) -> str:
        """The message for :attr:`reads`: what was read, where it was found (by identity among
        :func:`reachable_tensors`, when it is there), then the fix."""
        named = {id(v): label for label, v in reachable_tensors(model, args, kwargs)}
        parts = []
        for op, shape, key in self.reads[:3]:
            where = named.get(key) if key is not None else "made inside the model from non-tensor data (a list or array)"
            parts.append(f"{op} on a tensor of shape {shape}" + (f" ({where})" if where else
                                                                 " (from a global, a closure, a module or the param store)"))
        n = self.num_rows
        return (f"the model reads a tensor with a dimension of N = {n} entries that is not one of its arguments: "
                f"{'; '.join(parts)}. pyro_dp never reads it (the operation received zeros) and refuses the model: each "
                "row's term must come from that row's slice of the model's arguments, and the prior from no data. "
                "Pass the data as model arguments (tensors, or dicts, lists, tuples or namedtuples of tensors, rows "
                "first); if the value is public, pass it as an argument named in public= (docs/privacy.md, 'Every way "
                "data can reach a model')")
