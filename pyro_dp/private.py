r"""Private values as a tainted tensor type: the kernel boundary by construction (issue 58).

Every value that :class:`~pyro_dp.likelihood.PrivateLikelihood` computes from the data leaves
its public methods as a :class:`Private` tensor. Any torch operation with a :class:`Private`
input returns :class:`Private` (elementwise arithmetic, reductions, indexing with public
indices, ``torch.where``, ``torch.stack``, arithmetic with public tensors, ``.detach()``,
``.data``, ``.clone()``, ``.to()``), and every way from such a value to Python or to a public
tensor raises :class:`PrivateReadError`, which names the cause and the fix: ``bool()``
(so ``if ll.sum() > t`` fails at the read), ``int()``, ``float()``, ``__index__``, ``.item()``,
``.tolist()``, ``.numpy()``/``numpy.asarray``, ``torch.equal``/``torch.allclose``/
``torch.is_nonzero``, ``.as_subclass`` to a public class, and writing a private value into a
public tensor (``public.add_(private)``, ``public[idx] = private``, ``out=public``).
Printing shows ``Private(shape=..., dtype=...)``, never the values.

The only ways back to public values:

* the **release functions** of :mod:`pyro_dp.mechanisms` (noise drawn and recorded: the value
  after noise is public): :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`,
  :func:`~pyro_dp.mechanisms.add_gaussian_noise`, :func:`~pyro_dp.mechanisms.gaussian_release`,
  :func:`~pyro_dp.mechanisms.noisy_histogram`, :func:`~pyro_dp.mechanisms.noisy_count` and the
  specs' ``release`` (:class:`~pyro_dp.mechanisms.GaussianReleaseSpec`,
  :class:`~pyro_dp.mechanisms.GaussianStdReleaseSpec`), whose standard normals were drawn and
  recorded by ``draw``/``draw_each``/``draw_tentative``;
* :func:`reveal`, the documented, greppable escape hatch, for the two legitimate raw reads: the
  opt-in non-private diagnostics (clipped fractions, shown only as such) and tests/audits. A
  test (``tests/test_private.py``) fails when a package module outside :data:`REVEAL_ALLOWED`
  calls it.

Decisions (and why)
-------------------
* **Wrap at the likelihood's public boundary, compute inside on plain tensors.**
  ``torch.func`` (``vmap``, ``grad``, ``jvp``) and the compiled layer's traced graphs run on
  plain tensors; a tensor subclass inside a ``vmap``/trace costs a Python call per operation and
  is not supported by every transform. So the likelihood unwraps its private inputs (``ll_old``
  handed back by a kernel) on entry and wraps its outputs on return: the per-row terms, the
  per-example gradients, the :class:`~pyro_dp.mechanisms.ClippedSum` total and count (private
  before noise), and the statistic of :meth:`~pyro_dp.likelihood.PrivateLikelihood.per_example_statistic`.
  The log prior reads no data (a stand-in row) and is public.
* **The mechanisms unwrap after the noise**; the clipped-row counts of a release
  (:attr:`~pyro_dp.mechanisms.SumRelease.num_clipped`, ``NoisyRelease.clipped_fraction``) are the
  documented non-private diagnostic of every release and are revealed there, with that reason
  (kept public so that the kernels' one-transfer flag vectors stay as they are). A kernel that
  *decides* from them is still caught only by the kit's ``reads_only_through_releases`` check:
  the one read that rests on convention, named here.
* **Kernel state caches** (``state.cache``: the per-row terms at the current point) stay
  private: they only ever go back into the likelihood or a release.
* **The output state is checked**: :meth:`pyro_dp.kernels.base.DPKernel.sample` refuses a
  :class:`Private` value among the returned parameters (:func:`check_public`), so a step whose
  accept decision is a private tensor (``torch.where(ll.sum() > t, z_new, z)``) fails.
* **Fused graphs** (a kernel's whole step traced into one graph,
  :meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph`) are not tainted inside (plain
  tensors, no Python call per operation), but their outputs are marked at the boundary, once per
  call, from the graph's traced code (:class:`~pyro_dp.graphs.OutputTaint`): an output computed
  from the data or from a private input is :class:`Private` (the state's per-row cache stays
  private after a compiled step), an output the kernel names released or diagnostic comes out
  public through :func:`pyro_dp.mechanisms.release.graph_release` (the mechanism's reason), and a
  released output computed from the data must come from the graph's noise inputs (checked at
  the trace).
* **The internals with public names** (the likelihood's ``eager_*`` methods, ``eager_rows``,
  ``per_row``, the data leaves of ``model_args``) are private to code outside the likelihood
  (:func:`boundary`) and plain inside it and under a trace (fake tensors: no value exists).
* **Not a sandbox.** The type catches every ordinary read; a determined author can still
  bypass it through torch internals (``torch._C.DisableTorchFunctionSubclass``, storages,
  ``_make_subclass``). ``tests/test_private.py`` greps the kernels for those names.
* **Cost** (``docs/performance.md``, "Private values"): with the wrapping at the boundary, a
  DPPenalty or DPHMC iteration makes 1 private operation eager and 0 compiled (about 14 µs each,
  against 3 µs plain); the rest is a few µs of wrapping (a fused step's cache: one wrap per
  call), revealing a graph's inputs and checking the returned state: within the noise of
  ``benchmarks/private_overhead.py`` for the eager steps and DP-HMC's compiled one, but 20–30 %
  of a cheap compiled step (DP penalty, DP Barker: about 0.25–0.3 ms an iteration) on an idle
  machine — the fused outputs' wrapping; not yet within issue 58's 10 %.
  A design that tainted inside the graphs would pay the Python call per operation of every
  per-row evaluation; it was not pursued.
* **Off switch** for measurement only: :func:`tainting` (``PYRO_DP_TAINT=0`` in the
  environment) turns the wrapping off; the default is on.

Example
-------
>>> import torch
>>> from pyro_dp.private import Private, private, reveal, PrivateReadError
>>> ll = private(torch.tensor([-1.0, -2.0]))
>>> s = (ll * 2).sum()          # taint propagates
>>> type(s).__name__, s         # printing shows no value
('Private', Private(shape=(), dtype=torch.float32))
>>> try:
...     bool(s > -10)
... except PrivateReadError as e:
...     print(str(e).splitlines()[0])
bool() of a private value (computed from the data): a kernel may not read it without a release.
>>> float(reveal(s, reason="doctest"))
-6.0
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from typing import Any

import torch

__all__ = ["Private", "PrivateReadError", "private", "private_sum", "reveal", "diagnostic", "is_private", "check_public",
           "tainting", "enabled", "boundary", "REVEAL_ALLOWED", "DIAGNOSTIC_READS"]

#: package modules allowed to call :func:`reveal` (paths relative to ``pyro_dp/``): the
#: likelihood (unwraps its own inputs to compute on plain tensors), the compiled layer (a graph's
#: inputs), the mechanisms (the release functions, the clipped fraction), the kit (compares
#: states), and this module. ``tests/test_private.py`` checks every other module.
REVEAL_ALLOWED = ("private.py", "likelihood.py", "compiled.py", "testing.py", "mechanisms/release.py",
                  "mechanisms/clipping.py")

#: kernel modules that read a non-private diagnostic through :func:`diagnostic` (the clipped-row
#: counts of a release, reported as ``clipped_fraction``; shown to the user only as a non-private
#: statistic). ``tests/test_private.py`` fails a package module outside this list that calls it.
DIAGNOSTIC_READS = ("kernels/barker.py", "kernels/minibatch_penalty.py", "kernels/fastmh.py", "kernels/expfam.py")

_FIX = ("Release it through pyro_dp.mechanisms (clipped_sum_with_noise, add_gaussian_noise, gaussian_release, "
        "noisy_count, noisy_histogram, or a release spec's draw + release): the value after noise is public and "
        "recorded in the ledger. A non-private diagnostic or a test may read it with "
        "pyro_dp.private.reveal(x, reason=...) (docs/privacy.md, 'The kernel boundary').")


class PrivateReadError(RuntimeError):
    """A private value (computed from the data, not yet released through a mechanism) was read
    into Python or written into a public tensor."""


def _error(what: str) -> PrivateReadError:
    return PrivateReadError(f"{what} of a private value (computed from the data): a kernel may not read it "
                            f"without a release.\n{_FIX}")


_state = threading.local()
_DEFAULT_ON = os.environ.get("PYRO_DP_TAINT", "1") not in ("0", "false", "False", "")  # read once, at import


def enabled() -> bool:
    """Whether the likelihood wraps its outputs as :class:`Private` (default: on; ``PYRO_DP_TAINT=0``
    or :func:`tainting` ``(False)`` turns it off, for measurement)."""
    on = getattr(_state, "on", None)
    return _DEFAULT_ON if on is None else on


@contextlib.contextmanager
def tainting(on: bool = True):
    """Turn the wrapping on or off in this thread for a block (measurement and tests)."""
    before = getattr(_state, "on", None)
    _state.on = bool(on)
    try:
        yield
    finally:
        _state.on = before


def _plain(t: torch.Tensor) -> torch.Tensor:
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor.as_subclass(t, torch.Tensor)


_Tensor = torch.Tensor
# reads into Python: raise
_READS = {
    _Tensor.__bool__: "bool()", _Tensor.__int__: "int()", _Tensor.__float__: "float()",
    _Tensor.__index__: "an index (__index__)", _Tensor.item: ".item()", _Tensor.tolist: ".tolist()",
    _Tensor.numpy: ".numpy()", _Tensor.__array__: "numpy.asarray()", _Tensor.__complex__: "complex()",
    torch.equal: "torch.equal", torch.allclose: "torch.allclose", torch.is_nonzero: "torch.is_nonzero",
    _Tensor.__format__: "format()",
}
for _name in ("__long__", "__array_wrap__", "data_ptr", "untyped_storage", "storage", "_typed_storage"):
    if hasattr(_Tensor, _name):
        _READS[getattr(_Tensor, _name)] = f".{_name}"
# results that are public by construction (no value of the data in them)
_SHAPE_ONLY = {_Tensor.size, _Tensor.dim, _Tensor.numel, _Tensor.__len__, _Tensor.element_size,
               _Tensor.stride, _Tensor.is_contiguous, _Tensor.nelement, _Tensor.ndimension, _Tensor.get_device,
               _Tensor.is_floating_point, _Tensor.is_complex, _Tensor.__repr__, _Tensor.__hash__}
_GETTERS_PUBLIC = {"shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "layout", "is_leaf",
                   "grad_fn", "names", "is_sparse", "is_quantized", "is_meta", "is_nested", "itemsize", "nbytes",
                   "_version", "output_nr"}


def _is_getter_public(func) -> bool:
    name = getattr(getattr(func, "__self__", None), "__name__", None)  # a property's __get__
    return name in _GETTERS_PUBLIC


def _has_private(obj) -> bool:
    if isinstance(obj, Private):
        return True
    if isinstance(obj, (list, tuple)):  # a loop, not any(generator): a graph's inputs are scanned every call
        for o in obj:
            if isinstance(o, Private) or isinstance(o, (list, tuple, dict)) and _has_private(o):
                return True
        return False
    if isinstance(obj, dict):
        return any(_has_private(o) for o in obj.values())
    return False


def _wrap_tree(out):
    if isinstance(out, torch.Tensor) and not isinstance(out, Private):
        return _plain(out).as_subclass(Private) if type(out) is not torch.Tensor else out.as_subclass(Private)
    if isinstance(out, tuple) and hasattr(out, "_fields"):  # namedtuples (torch.return_types)
        return type(out)(*(_wrap_tree(o) for o in out))
    if isinstance(out, (list, tuple)):
        return type(out)(_wrap_tree(o) for o in out)
    return out


def _in_place(func) -> bool:
    name = getattr(func, "__name__", "")
    return name.endswith("_") and not name.endswith("__") or name in ("__setitem__", "__iadd__", "__isub__",
                                                                        "__imul__", "__itruediv__", "__ior__",
                                                                        "__iand__", "set_", "copy_")


_PUBLIC_SEEN = set()  # the public getters and shape-only functions met so far: the fast path
_disabled = torch._C._disabled_torch_function_impl


class Private(torch.Tensor):
    """A tensor computed from the data and not released: every operation on it stays private,
    every read into Python raises :class:`PrivateReadError` (module docstring)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in _PUBLIC_SEEN:  # .dtype, .shape, .device, ...: public, no wrapping (a few µs less)
            return _disabled(func, types, args, kwargs or {})
        kwargs = kwargs or {}
        if func in _READS:
            raise _error(_READS[func])
        if func in _SHAPE_ONLY or _is_getter_public(func):
            if len(_PUBLIC_SEEN) < 256:
                _PUBLIC_SEEN.add(func)
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        out_arg = kwargs.get("out")
        if out_arg is not None and not _has_private(out_arg):
            raise _error(f"{getattr(func, '__name__', func)}(out=public tensor)")
        if _in_place(func) and args and not isinstance(args[0], Private):
            raise _error(f"writing (in place, {getattr(func, '__name__', func)}) into a public tensor")
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if out is None or isinstance(out, (bool, int, float)) and func not in _READS:
            return out
        return _wrap_tree(out)

    def __repr__(self, *, tensor_contents=None):
        return f"Private(shape={tuple(self.shape)}, dtype={self.dtype})"

    def as_subclass(self, cls):
        if not issubclass(cls, Private):
            raise _error(f".as_subclass({cls.__name__})")
        return super().as_subclass(cls)

    def __deepcopy__(self, memo):
        return _plain(self).clone().as_subclass(Private)

    def __reduce_ex__(self, protocol):  # pickled private, unpickled private (checkpoints, chain workers)
        return _unpickle, (_plain(self),)


def _unpickle(t: torch.Tensor) -> "Private":
    return t.as_subclass(Private)


# a checkpoint (torch.save) of a state holding private terms loads with torch.load(weights_only=True)
torch.serialization.add_safe_globals([_unpickle])


def private(x):
    """``x`` (a tensor, or a tuple/list/namedtuple of them; ``None`` and numbers pass through)
    as :class:`Private`; as it is where :func:`enabled` is off."""
    if not enabled():
        return x
    return _wrap_tree(x)


def private_sum(out):
    """A clipped sum (a ``ClippedSum``: ``total``, ``num_clipped``, ``num_rows``), or a tuple ending in
    one, with its per-row terms, clipped total and clipped count private; the row count stays public
    (the batch's size).

    >>> from collections import namedtuple
    >>> S = namedtuple("S", "total num_clipped num_rows")
    >>> out = private_sum((torch.ones(2), S(torch.tensor(2.0), torch.tensor(0), 2)))
    >>> is_private(out[0]), is_private(out[1].total), out[1].num_rows
    (True, True, 2)
    """
    if not hasattr(out, "_replace"):  # a plain tuple ending in a clipped sum
        return tuple(private(o) for o in out[:-1]) + (private_sum(out[-1]),)
    return out._replace(total=private(out.total), num_clipped=private(out.num_clipped))


def is_private(x) -> bool:
    """Whether ``x`` (or a tensor inside a tuple/list/dict ``x``) is :class:`Private`."""
    return _has_private(x)


def reveal(x, *, reason: str):
    """``x`` with every :class:`Private` tensor in it (a tensor, tuple, list, namedtuple) as a plain
    tensor. **The escape hatch**: only the release functions (after noise), the likelihood (its own
    inputs), the non-private diagnostics and tests/audits may call it (:data:`REVEAL_ALLOWED`);
    ``reason`` says which, for the reader and for grep."""
    if not reason:
        raise ValueError("reveal needs a reason (which legitimate raw read this is)")
    if isinstance(x, Private):
        return _plain(x)
    if isinstance(x, (list, tuple)) and not _has_private(x):  # the common case of a graph's inputs: as they are
        return x
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(reveal(o, reason=reason) for o in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(o) if isinstance(o, Private) else reveal(o, reason=reason) if isinstance(o, (list, tuple))
                       else o for o in x)
    return x


def diagnostic(x):
    """``x`` revealed as a **non-private diagnostic** (the clipped-row count of a release): a kernel
    reports it (``clipped_fraction``; shown as a non-private statistic), never decides from it (the
    kit's ``reads_only_through_releases`` check catches a decision that does). Only the modules of
    :data:`DIAGNOSTIC_READS` call it."""
    return reveal(x, reason="non-private diagnostic: a release's clipped-row count, reported, never fed back")


def check_public(params, where: str = "a kernel's output state") -> None:
    """Raise :class:`PrivateReadError` if ``params`` (a tensor or a dict/tuple of them) holds a
    :class:`Private` value: ``where`` must be public (e.g. the parameters a kernel returns, which
    Pyro's runner records as samples)."""
    if _has_private(params):
        names = [k for k, v in params.items() if _has_private(v)] if isinstance(params, dict) else []
        raise PrivateReadError(
            f"{where} holds a private value{' (' + ', '.join(map(str, names)) + ')' if names else ''}: it was "
            f"computed from the data without a release (e.g. an accept decision torch.where(ll.sum() > t, z_new, z) "
            f"on raw per-row terms).\n{_FIX}")


_inside = threading.local()


def _traced(out) -> bool:
    """Whether ``out`` was computed under a trace or a ``torch.func`` transform (fake, proxied or
    functorch-wrapped tensors: no value of the data exists there; the graph's outputs are what
    leave, and the compiled layer wraps those)."""
    from torch._subclasses.fake_tensor import is_fake
    from torch.fx.experimental.proxy_tensor import get_proxy_mode
    t = next((o for o in (out if isinstance(out, (tuple, list)) else (out,)) if torch.is_tensor(o)), None)
    return t is None or get_proxy_mode() is not None or is_fake(t) or torch._C._functorch.is_functorch_wrapped_tensor(t)


def boundary(wrap=None):
    """Decorator of :class:`~pyro_dp.likelihood.PrivateLikelihood`'s methods (issue 58): called
    from outside the likelihood (not from one of its own decorated methods) and not under a trace,
    the method's result goes through ``wrap`` (e.g. :func:`private`: the raw rows and the terms of
    its ``eager_*`` methods come out :class:`Private` to kernel code); called from inside, it is
    returned as computed (plain tensors, so the likelihood's own evaluation pays no private
    operation). ``wrap=None``: only marks the method as inside (the public methods, which wrap
    their results themselves)."""
    def deco(method):
        @functools.wraps(method)
        def inside(*args, **kwargs):
            depth = getattr(_inside, "depth", 0)
            _inside.depth = depth + 1
            try:
                out = method(*args, **kwargs)
            finally:
                _inside.depth = depth
            return out if wrap is None or depth or not enabled() or _traced(out) else wrap(out)
        return inside
    return deco
