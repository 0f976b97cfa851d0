r"""Row isolation: each row's term is computed from that row alone, **by construction**.

The kernels' privacy rests on one person's row moving one per-example term, which the clip
bounds. A model's code can break that in ordinary ways — ``y - y.median()``,
``torch.minimum(y, y.quantile(0.99))``, ``X / X.norm(dim=0)`` — and no check that looks for
such code can find every idiom. So :class:`~pyro_dp.likelihood.PrivateLikelihood` never runs
the model on more than one row when it computes a term: it evaluates the model on **a data set
of one row**, once per row, vectorised with :func:`torch.func.vmap` (as Opacus computes
per-sample gradients: each sample sees a batch of one). Every data argument
(:mod:`pyro_dp.arguments`) is sliced to ``[1, ...]``, a row-count argument is ``1``, and the
data plate has one entry: ``y.median()``, ``y.max()``, ``y.std()``, a sort or a rank inside
the model can only ever see the row itself. Gradients are ``vmap(grad)`` of the same
function; the compiled path traces the same function once.

What this module adds around that evaluation:

* :func:`support_rule` — an observed value outside its distribution's support (a label out of
  range, a negative count, NaN) is replaced by a valid placeholder before ``log_prob`` runs
  (so no gather can fail on it), and the row's term becomes NaN: the per-row rule of every
  release (:func:`pyro_dp.mechanisms.finite_scalars`, :func:`~pyro_dp.mechanisms.finite_rows`)
  then maps it, the same way on every path.
* :func:`robust_rows` — an exception raised by the model's own code on some rows (a group id
  used as an index out of range) must not surface or change what is released: the batch is
  bisected down to the failing rows, which get NaN terms (the per-row rule). Only the time
  taken depends on it (``docs/privacy.md``).
* :func:`vmap_safe_distributions` — distributions whose constructor writes in place into a
  fresh tensor (Pyro's ``OrderedLogistic``) are built out of place while rows are evaluated.
"""
from __future__ import annotations

import contextlib
from typing import Callable, List, Optional, Sequence

import pyro.distributions as dist
import torch
from torch._guards import detect_fake_mode
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from pyro.poutine.subsample_messenger import SubsampleMessenger
from torch.distributions import biject_to, constraints
from torch.utils._pytree import tree_map

from .reach import OutsideDataError

__all__ = ["kernel_chooses_rows", "placeholder", "robust_rows", "support_rule", "vmap_safe_distributions",
           "DECLARED_SUBSAMPLE"]

#: subsample_size declared by each plate in the last evaluation (read when the structure is parsed)
DECLARED_SUBSAMPLE: dict = {}


@contextlib.contextmanager
def kernel_chooses_rows():
    """Evaluate plates declared with ``subsample_size`` (SVI's idiom,
    ``pyro.plate("data", N, subsample_size=b)``) on the rows pyro_dp gives them.

    The kernel, not Pyro, chooses which rows a step reads (from the secret stream). Pyro's plate
    would draw its own random subsample, and refuses indices of another length than the
    declared ``subsample_size``; so for one model evaluation the declaration is dropped
    (``SubsampleMessenger._subsample`` sees ``subsample_size=None``) and remembered in
    :data:`DECLARED_SUBSAMPLE` (read once, when the structure is parsed). Pyro's own ``N/b``
    scaling does not enter: pyro_dp reads unscaled per-example terms.
    """
    original = SubsampleMessenger.__dict__["_subsample"]
    fn = original.__func__

    def chosen_by_kernel(name, size=None, subsample_size=None, subsample=None, use_cuda=None, device=None):
        out = fn(name, size, None if size is not None else subsample_size, subsample, use_cuda, device)
        DECLARED_SUBSAMPLE[name] = subsample_size
        return out

    SubsampleMessenger._subsample = staticmethod(chosen_by_kernel)
    try:
        yield
    finally:
        SubsampleMessenger._subsample = original


def _ordered_logistic_init(self, predictor, cutpoints, validate_args=None):
    # Pyro's OrderedLogistic.__init__ fills a fresh zeros tensor in place, which vmap refuses
    # when the predictor is per row; the same probabilities, out of place.
    q = torch.sigmoid(cutpoints - predictor.unsqueeze(-1))
    self.predictor = predictor.expand(q.shape[:-1])
    self.cutpoints = cutpoints.expand(q.shape)
    p = torch.cat([q[..., :1], q[..., 1:] - q[..., :-1], 1 - q[..., -1:]], dim=-1)
    dist.Categorical.__init__(self, p, validate_args=validate_args)


_OUT_OF_PLACE = {dist.OrderedLogistic: _ordered_logistic_init}


@contextlib.contextmanager
def vmap_safe_distributions():
    """Within the block, distributions whose constructors are not ``vmap``-safe build their
    parameters out of place (:data:`_OUT_OF_PLACE`: ``OrderedLogistic``); same values."""
    saved = {cls: cls.__dict__["__init__"] for cls in _OUT_OF_PLACE}
    for cls, init in _OUT_OF_PLACE.items():
        cls.__init__ = init
    try:
        yield
    finally:
        for cls, init in saved.items():
            cls.__init__ = init


def placeholder(fn, value: torch.Tensor) -> torch.Tensor:
    """A value in ``fn``'s support with ``value``'s shape, chosen from the support alone (never
    from the data): the lower bound of an integer support (0 for counts, labels and booleans),
    else the image of 0 under :func:`torch.distributions.biject_to` (0 on the real line, 1 for
    positive values, the midpoint of an interval, the uniform point of a simplex).

    >>> import pyro.distributions as dist, torch
    >>> placeholder(dist.Categorical(logits=torch.zeros(3)), torch.tensor(7))
    tensor(0)
    >>> placeholder(dist.Gamma(2.0, 1.0), torch.tensor([-1.0, 3.0]))
    tensor([1., 1.])
    """
    support = fn.support
    base = support
    while isinstance(base, constraints.independent):
        base = base.base_constraint
    if base.is_discrete:
        lower = getattr(base, "lower_bound", 0)
        return (torch.zeros_like(value) + torch.as_tensor(lower, device=value.device)).to(value.dtype)
    t = biject_to(support)
    u = torch.zeros(t.inverse_shape(value.shape), dtype=value.dtype, device=value.device)
    return t(u).to(value.dtype).expand(value.shape)


def support_rule(fn, value: torch.Tensor):
    """``(safe value, ok)``: ``value`` with every entry outside ``fn``'s support (NaN included)
    replaced by :func:`placeholder`, and ``ok`` — over the value's batch shape — telling which
    entries were in the support. Elementwise tensor code (no branch, no exception on a value).

    >>> import pyro.distributions as dist, torch
    >>> v, ok = support_rule(dist.Categorical(logits=torch.zeros(3)), torch.tensor([0., 2., 3., -1.]))
    >>> v.tolist(), ok.tolist()
    ([0.0, 2.0, 0.0, 0.0], [True, True, False, False])
    >>> support_rule(dist.Normal(0.0, 1.0), torch.tensor([float("nan")]))  # real line: NaN's density is NaN
    (tensor([nan]), None)
    """
    base = fn.support
    while isinstance(base, constraints.independent):
        base = base.base_constraint
    if base is constraints.real:
        # the real line's only outside value is NaN, whose log-density is NaN: the per-row rule of
        # the release maps it already (skipping the check keeps the compiled graphs lean)
        return value, None
    try:
        ok = fn.support.check(value)
    except Exception:  # noqa: BLE001 - a support that cannot check this value's shape: no rule
        return value, None
    ok_v = ok.reshape(ok.shape + (1,) * (value.dim() - ok.dim())) if ok.dim() < value.dim() else ok
    try:
        safe = torch.where(ok_v, value, placeholder(fn, value))
    except Exception:  # noqa: BLE001 - no placeholder for this support: keep the value, flag the row
        safe = value
    return safe, ok


def robust_rows(call: Callable, rows: Sequence[torch.Tensor], fill: Callable[[int], object]):
    """``call(rows)`` for a batch of rows (tensors with the rows first); when it raises, the
    batch is bisected and the rows on which the model's code raises alone get ``fill(b)``
    (NaN terms, which the per-row rule maps). What is released does not depend on whether a
    row raised; only the time taken does. ``fill(b)`` must give ``call``'s output structure for
    ``b`` rows.

    Under a trace (fake tensors, ``make_fx``, Dynamo) the exception is re-raised instead: a
    trace sees shapes only, so its failure is the trace's, never a row's, and turning it into
    NaN terms would compile a graph whose every term is NaN; raised, it makes the caller fall
    back to the eager path, where the bisection applies (``tests/test_isolation.py``)."""
    try:
        return call(rows)
    except Exception as e:  # noqa: BLE001 - one row's value must not reach the user as an exception
        # a read of outside data is refused from shapes (pyro_dp.reach), never a row's doing: raised
        if tracing() or isinstance(e, OutsideDataError):
            raise
        b = int(rows[0].shape[0]) if rows else 0
        if b <= 1:
            return fill(b)
        h = b // 2
        first = robust_rows(call, [r[:h] for r in rows], fill)
        second = robust_rows(call, [r[h:] for r in rows], fill)
        return tree_map(lambda a, c: torch.cat([a, c]), first, second)


def tracing() -> bool:
    """Whether the code runs under a trace that sees shapes, not values: an active fake-tensor
    mode (``make_fx(tracing_mode="fake")``, AOT), a ``make_fx`` proxy mode, or Dynamo."""
    return detect_fake_mode() is not None or get_proxy_mode() is not None or torch.compiler.is_compiling()


def nan_like_rows(b: int, dim: Optional[int], dtype, device):
    """NaN per-example output for ``b`` rows: ``[b]`` values and, with ``dim``, ``[b, dim]``
    gradients (the fill of :func:`robust_rows`)."""
    v = torch.full((b,), float("nan"), dtype=dtype, device=device)
    if dim is None:
        return v
    return torch.full((b, dim), float("nan"), dtype=dtype, device=device), v


def is_batched(t) -> bool:
    """Whether ``t`` is a tensor being ``vmap``-ped over (it was computed from the rows)."""
    return torch.is_tensor(t) and bool(torch._C._functorch.is_batchedtensor(t))


def first_distribution_in(tb) -> Optional[str]:
    """The class name of the innermost distribution whose code raised (from a traceback)."""
    name = None
    while tb is not None:
        obj = tb.tb_frame.f_locals.get("self")
        if isinstance(obj, torch.distributions.Distribution):
            name = type(obj).__name__
        tb = tb.tb_next
    return name


def is_value_dependent(e: BaseException) -> bool:
    """Whether ``e`` says the code needed a Python value of a tensor (``.item()``, ``int(y.max())``,
    a Python ``if`` on a value) that a trace or ``vmap`` does not have."""
    msg = str(e)
    return "item()" in msg or "data-dependent" in msg.lower() or "Data dependent" in msg or "_local_scalar_dense" in msg


def describe_row_failure(e: BaseException) -> str:
    """Why a model cannot be evaluated one row at a time, for a set-up refusal."""
    msg = str(e)
    if is_value_dependent(e):
        return ("the model needs a Python value of its data (int(y.max()), .item(), float(), or a Python `if` on a "
                "data value). Shapes and control flow must come from shapes and public values: pass such numbers "
                "(e.g. the number of classes) as public arguments")
    name = first_distribution_in(e.__traceback__)
    if "vmap" in msg or name:
        where = f"distribution {name}" if name else "the model's code"
        return (f"{where} cannot be evaluated one row at a time with torch.func.vmap ({msg.splitlines()[0][:200]}). "
                "pyro_dp computes each row's term from that row alone this way; rewrite the operation out of place "
                "or use another distribution")
    return f"{type(e).__name__}: {msg.splitlines()[0][:300] if msg else ''}"


def list_rows(x: torch.Tensor) -> List[int]:
    """The indices of the ``True`` entries of a 1-d boolean tensor, as ints (for messages)."""
    return [int(i) for i in torch.nonzero(x).flatten().tolist()]
