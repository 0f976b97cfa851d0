r"""Set-up errors that lead with the real cause.

When a model fails during pyro_dp's set-up (on fake tensors or stand-ins, never the data), the
user's mistake is usually an ordinary one — a hard-coded plate size, arguments of different
lengths, a float32 constant beside float64 data, labels as a Python list or as integers where
the distribution wants floats. :func:`explain_failure` words such a failure as plain Pyro would:
its first sentence names the cause (the model's own exception and the line of the model that
raised it, or the argument whose size or dtype disagrees); what pyro_dp needed comes after.

Every diagnosis reads the arguments' **types, shapes and dtypes** and the exception raised on
stand-in data: never a value of the data, so the message is the same on neighbouring data sets.

>>> import torch
>>> from pyro_dp.arguments import ModelArguments
>>> a = ModelArguments((torch.zeros(1000, 3), torch.zeros(990)))
>>> print(mismatched_rows(a, num_rows=1000))
the model's arguments have different numbers of rows: argument 0 has 1000 rows (shape (1000, 3)), argument 1 has 990 rows (shape (990,))
"""
from __future__ import annotations

import os
import traceback
from typing import Optional

import torch

__all__ = ["explain_failure", "model_line", "mismatched_rows", "plate_size_mismatch", "dtype_mismatch", "label_dtype",
           "list_arguments"]

_LIBRARY_DIRS = tuple(os.path.dirname(m.__file__) for m in (torch,) + tuple(
    __import__(n) for n in ("pyro",))) + (os.path.dirname(os.path.abspath(__file__)),)


def model_line(e: BaseException) -> Optional[str]:
    """``"file:line: code"`` of the innermost frame of ``e``'s traceback in the user's code
    (not in torch, Pyro or pyro_dp), or ``None``."""
    found = None
    for frame in traceback.extract_tb(e.__traceback__):
        path = os.path.abspath(frame.filename)
        if not path.startswith(_LIBRARY_DIRS) and "site-packages" not in path and not frame.filename.startswith("<"):
            found = frame
    if found is None:
        return None
    return f"{os.path.basename(found.filename)}, line {found.lineno}" + (f": `{found.line.strip()}`" if found.line else "")


def _first_line(e: BaseException) -> str:
    msg = str(e)
    return f"{type(e).__name__}: {msg.splitlines()[0][:300]}" if msg else type(e).__name__


def _tensor_args(arguments):
    return [(arguments.labels[i], x) for i, x in enumerate(arguments.leaves)
            if torch.is_tensor(x) and x.dim() >= 1 and not arguments.declared_public[i]]


def mismatched_rows(arguments, num_rows: int) -> Optional[str]:
    """The arguments' differing row counts when the tensor arguments do not all have the same
    first dimension and one of them has ``num_rows`` (shapes only)."""
    tensors = _tensor_args(arguments)
    firsts = {int(x.shape[0]) for _, x in tensors}
    if len(tensors) < 2 or len(firsts) < 2 or num_rows not in firsts:
        return None
    shown = [f"{label} has {x.shape[0]} rows (shape {tuple(x.shape)})" for label, x in tensors]
    return f"the model's arguments have different numbers of rows: {', '.join(shown)}"


def plate_size_mismatch(arguments, num_rows: int, plate: Optional[str] = None) -> Optional[str]:
    """A data plate whose size matches no argument's rows (``pyro.plate("data", 100)`` with 1 000
    rows): shapes only."""
    tensors = _tensor_args(arguments)
    if not tensors or any(int(x.shape[0]) == num_rows for _, x in tensors):
        return None
    rows = sorted({int(x.shape[0]) for _, x in tensors}, reverse=True)
    name = f"{plate!r} " if plate else ""
    return (f"the data plate {name}has {num_rows} entries, but no argument of the model has {num_rows} rows (the "
            f"arguments' first dimensions: {', '.join(f'{label} {tuple(x.shape)}' for label, x in tensors)}): the "
            f"plate's size must be the number of rows, e.g. pyro.plate(\"data\", len(y)) rather than a constant "
            f"({rows[0]} here)")


def dtype_mismatch(e: BaseException, arguments) -> Optional[str]:
    """The floating dtypes among the arguments, when the exception is about dtypes."""
    msg = str(e)
    if "dtype" not in msg and "Double" not in msg and "Float" not in msg and "scalar type" not in msg:
        return None
    kinds = {}
    for label, x in _tensor_args(arguments):
        kinds.setdefault(str(x.dtype).replace("torch.", ""), []).append(label)
    args = "; ".join(f"{d}: {', '.join(labels)}" for d, labels in kinds.items())
    return (f"a dtype mismatch ({_first_line(e)}): the model's arguments are {args or 'not tensors'}, so a constant or "
            "prior built with torch's default dtype (float32) meets float64 data, or the reverse. Build the model's "
            "constants with the data's dtype (torch.zeros(d, dtype=X.dtype, device=X.device)) or convert the data "
            "(X.float())")


def list_arguments(arguments) -> Optional[str]:
    """Python lists (or tuples) of numbers among the arguments: the model indexes them as data."""
    found = []
    for i, a in enumerate(arguments.args):
        if isinstance(a, (list, tuple)) and len(a) > 1 and all(isinstance(v, (int, float, bool)) for v in a[:64]):
            found.append(f"argument {i} is a Python {type(a).__name__} of {len(a)} numbers")
    for k, a in arguments.kwargs.items():
        if isinstance(a, (list, tuple)) and len(a) > 1 and all(isinstance(v, (int, float, bool)) for v in a[:64]):
            found.append(f"argument {k!r} is a Python {type(a).__name__} of {len(a)} numbers")
    if not found:
        return None
    return (f"{'; '.join(found)}: pass data as tensors (torch.as_tensor(y, dtype=X.dtype)), whose first dimension "
            "indexes the rows")


def label_dtype(e: BaseException, arguments) -> Optional[str]:
    """Integer or boolean observations where the distribution's code needs floating ones."""
    ints = [label for label, x in _tensor_args(arguments) if not x.is_floating_point() and not x.is_complex()]
    if not ints:
        return None
    msg = str(e)
    if not any(s in msg for s in ("bool", "Long", "Int", "integer", "result type", "scalar type", "dtype")):
        return None
    return (f"{', '.join(ints)} {'holds' if len(ints) == 1 else 'hold'} integer or boolean values and the model's "
            f"distribution needs floating ones ({_first_line(e)}): pass the labels as floats (y.float(), or "
            "y.to(X.dtype)) for Bernoulli, Binomial, Poisson and other distributions of real-valued tensors; "
            "Categorical labels stay integers")


def explain_failure(e: BaseException, arguments, num_rows: Optional[int] = None, what: str = "") -> str:
    """The message for a model that failed in set-up: a first sentence with the real cause —
    a mismatch among the arguments (:func:`plate_size_mismatch`, :func:`mismatched_rows`,
    :func:`list_arguments`, :func:`dtype_mismatch`, :func:`label_dtype`) or else the model's
    own exception — with the line of the model that raised, then ``what`` pyro_dp needed."""
    where = model_line(e)
    at = f" (at {where})" if where else ""
    cause = None
    if num_rows is not None:
        cause = plate_size_mismatch(arguments, num_rows) or mismatched_rows(arguments, num_rows)
    cause = cause or list_arguments(arguments) or dtype_mismatch(e, arguments) or label_dtype(e, arguments)
    if cause and _first_line(e) in cause:
        first = f"{cause[0].upper()}{cause[1:]}." + (f" It was raised at {where}." if where else "")
    elif cause:
        first = f"{cause[0].upper()}{cause[1:]}. The model raised {_first_line(e)}{at}."
    else:
        first = f"The model raised {_first_line(e)}{at}."
    return f"{first} {what}".strip()
