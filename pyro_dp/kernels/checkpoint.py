r"""Checkpoints as plain values: what :meth:`~pyro_dp.kernels.base.DPKernel.state_dict` holds.

``torch.load`` refuses by default (``weights_only=True``, torch >= 2.6) to unpickle anything
but tensors and plain Python values, because unpickling an arbitrary object can run arbitrary
code. A kernel's chain in progress holds library objects: typed states (``NamedTuple``), the
privacy ledgers and their events, an adaptation object. :func:`to_plain` writes each of them
as a tagged ``dict`` of tensors, ``dict``/``list``/``tuple``/``str``/``int``/``float``/
``bool``/``None``, so that ``torch.save(kernel.state_dict(), path)`` then
``torch.load(path)`` with torch's default arguments works (issue #42); :func:`from_plain`
rebuilds them.

Rebuilding is limited to what a checkpoint can hold: privacy events and ledgers (rebuilt
through their validating constructors, so a tampered ``noise_multiplier=-1`` is refused),
``NamedTuple`` states and plain-attribute objects of ``pyro_dp``'s own modules, and the
dual-averaging step-size adapter of ``pyro.ops``. Any other type name in a checkpoint is
refused, so loading a checkpoint imports and builds nothing else.

>>> import torch
>>> from pyro_dp.mechanisms import GaussianEvent, PrivacyLedger
>>> led = PrivacyLedger(); led.record(GaussianEvent(3.0), 5, label="tune:clip")
>>> plain = to_plain({"ledger": led, "z": torch.zeros(2)})
>>> is_plain(plain), from_plain(plain)["ledger"] == led
(True, True)
"""
from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import torch

from ..mechanisms import PrivacyEvent, PrivacyLedger

__all__ = ["to_plain", "from_plain", "is_plain"]

_TAG = "__pyro_dp__"
#: objects outside pyro_dp that a kernel's chain may hold (rebuilt from their attributes)
_FOREIGN = {("pyro.ops.dual_averaging", "DualAveraging")}
_PLAIN = (type(None), bool, int, float, str)


def _name(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def to_plain(obj):
    """``obj`` as tensors and plain Python values only (module doc); tensors are detached
    copies. Raises ``TypeError`` for a value it cannot write."""
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj)
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, np.ndarray):
        return {_TAG: "ndarray", "data": torch.from_numpy(np.array(obj, copy=True))}
    if isinstance(obj, PrivacyLedger):
        out = {_TAG: "ledger", "type": type(obj).__name__, "relation": obj.relation,
               "entries": [[to_plain(e), int(c), str(lab)] for e, c, lab in obj.labelled_entries()]}
        if type(obj) is not PrivacyLedger:  # ChainLedger: its tags
            out["fields"] = {f: to_plain(getattr(obj, f)) for f in ("kernel_id", "chain_id", "worker_slot")}
        return out
    if isinstance(obj, PrivacyEvent):
        return {_TAG: "event", "type": type(obj).__name__,
                "fields": {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):  # a NamedTuple state
        return {_TAG: "namedtuple", "type": _name(type(obj)), "fields": [to_plain(v) for v in obj]}
    if type(obj) in (list, tuple):
        return type(obj)(to_plain(v) for v in obj)
    if type(obj) is dict:
        if all(type(k) in _PLAIN for k in obj) and _TAG not in obj:
            return {k: to_plain(v) for k, v in obj.items()}
        return {_TAG: "dict", "items": [[to_plain(k), to_plain(v)] for k, v in obj.items()]}
    cls = type(obj)
    if _allowed_object(cls.__module__, cls.__qualname__) and hasattr(obj, "__dict__") \
            and not hasattr(cls, "__slots__"):
        return {_TAG: "object", "type": _name(cls), "state": to_plain(dict(vars(obj)))}
    raise TypeError(f"a kernel checkpoint cannot hold a {cls.__module__}.{cls.__qualname__}: only tensors, plain "
                    "Python values and pyro_dp's own states and ledgers (please report)")


def _allowed_object(module: str, qualname: str) -> bool:
    return module == "pyro_dp" or module.startswith("pyro_dp.") or (module, qualname) in _FOREIGN


def _resolve(name: str):
    module, _, qualname = str(name).partition(":")
    if not _allowed_object(module, qualname) or "." in qualname or not qualname.isidentifier():
        raise ValueError(f"a kernel checkpoint names the type {name!r}, which it cannot hold")
    cls = getattr(importlib.import_module(module), qualname, None)
    if not isinstance(cls, type):
        raise ValueError(f"a kernel checkpoint names the type {name!r}, which is not a class here")
    return cls


def _event_class(name: str):
    from .. import mechanisms

    cls = getattr(mechanisms, str(name), None)
    if not (isinstance(cls, type) and issubclass(cls, PrivacyEvent) and dataclasses.is_dataclass(cls)):
        raise ValueError(f"a kernel checkpoint names the privacy event {name!r}, which does not exist")
    return cls


def from_plain(obj):
    """Rebuild what :func:`to_plain` wrote. Values that are not tagged plain structures pass
    through unchanged (a checkpoint of format 1, unpickled with ``weights_only=False``, holds
    the objects themselves)."""
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if type(obj) is list:
        return [from_plain(v) for v in obj]
    if type(obj) is tuple:
        return tuple(from_plain(v) for v in obj)
    if type(obj) is not dict:
        return obj
    kind = obj.get(_TAG)
    if kind is None:
        return {k: from_plain(v) for k, v in obj.items()}
    if kind == "dict":
        return {from_plain(k): from_plain(v) for k, v in obj["items"]}
    if kind == "ndarray":
        return obj["data"].numpy().copy()
    if kind == "event":
        return _event_class(obj["type"])(**{k: from_plain(v) for k, v in obj["fields"].items()})
    if kind == "ledger":
        if obj["type"] == "PrivacyLedger":
            led = PrivacyLedger(obj["relation"])
        elif obj["type"] == "ChainLedger":
            from .base import ChainLedger

            led = ChainLedger(obj["relation"], **{k: from_plain(v) for k, v in obj["fields"].items()})
        else:
            raise ValueError(f"a kernel checkpoint names the ledger type {obj['type']!r}, which does not exist")
        for event, count, label in obj["entries"]:
            led.record(from_plain(event), count, label=label)
        return led
    if kind == "namedtuple":
        cls = _resolve(obj["type"])
        if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise ValueError(f"a kernel checkpoint names {obj['type']!r} as a state, which is not a NamedTuple")
        return cls(*(from_plain(v) for v in obj["fields"]))
    if kind == "object":
        cls = _resolve(obj["type"])
        if issubclass(cls, (tuple, PrivacyEvent, PrivacyLedger)) or hasattr(cls, "__slots__"):
            raise ValueError(f"a kernel checkpoint names {obj['type']!r} as a plain-attribute object, which it is not")
        new = cls.__new__(cls)
        new.__dict__.update(from_plain(obj["state"]))
        return new
    raise ValueError(f"not a pyro_dp kernel checkpoint value (tag {kind!r})")


def is_plain(obj) -> bool:
    """Whether ``obj`` holds only tensors, ``dict``/``list``/``tuple``/``str``/``int``/
    ``float``/``bool``/``None`` (what ``torch.load(weights_only=True)`` reads)."""
    if isinstance(obj, torch.Tensor) or type(obj) in _PLAIN:
        return True
    if type(obj) in (list, tuple):
        return all(is_plain(v) for v in obj)
    if type(obj) is dict:
        return all(type(k) in _PLAIN and is_plain(v) for k, v in obj.items())
    return False
