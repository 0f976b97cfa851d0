r"""Checkpoints: what ``state_dict``/``load_state_dict`` of every kernel write and read
(:func:`save`, :func:`load`, :func:`restore`), and how a checkpoint is written as plain values.

``torch.load`` refuses by default (``weights_only=True``, torch >= 2.6) to unpickle anything
but tensors and plain Python values, because unpickling an arbitrary object can run arbitrary
code. A kernel's chain in progress holds library objects: typed states (``NamedTuple``), the
privacy ledgers and their events, an adaptation object. :func:`to_plain` writes each of them
as a tagged ``dict`` of tensors, ``dict``/``list``/``tuple``/``str``/``int``/``float``/
``bool``/``None``, so that ``torch.save(kernel.state_dict(), path)`` then
``torch.load(path)`` with torch's default arguments works (issue #42); :func:`from_plain`
rebuilds them.

:class:`ChainCheckpoints` is the part of a :class:`~pyro_dp.kernels.base.DPKernel` that keeps
its checkpoints (``kernel.checkpoints``): one loaded before ``setup()``, which the next set-up
continues, and the last chain's, kept when ``cleanup()`` ended it. ``kernel.state_dict()`` and
``kernel.load_state_dict()`` (Pyro's names) go through it.

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

import copy
import dataclasses
import importlib
import multiprocessing
from typing import Optional

import numpy as np
import torch

from .. import mechanisms
from ..mechanisms import PrivacyEvent, PrivacyLedger
from .privacy_engine import ChainLedger
from .runner import mcmc_run_length

__all__ = ["ChainCheckpoints", "save", "load", "restore", "FORMAT", "to_plain", "from_plain", "is_plain"]

#: the checkpoint format (3: the chain's record, the privacy engine's stop flags and the chain
#: state by name; 1 and 2, the attributes of the kernel before issue 63, are refused)
FORMAT = 3

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
        if type(obj) is not PrivacyLedger:  # ChainLedger: its tags, and where its iterations end (public counts)
            out["fields"] = {f: to_plain(getattr(obj, f)) for f in ("kernel_id", "chain_id", "worker_slot")}
            out["iteration_marks"] = [[int(r), int(n)] for r, n in obj.__dict__.get("iteration_marks", ())]
            out["pending"] = int(obj.__dict__.get("_pending", 0))
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
        state = obj.checkpoint_state() if hasattr(obj, "checkpoint_state") else dict(vars(obj))  # a part may keep less
        return {_TAG: "object", "type": _name(cls), "state": to_plain(state)}
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
            led = ChainLedger(obj["relation"], **{k: from_plain(v) for k, v in obj["fields"].items()})
        else:
            raise ValueError(f"a kernel checkpoint names the ledger type {obj['type']!r}, which does not exist")
        for event, count, label in obj["entries"]:
            led.record(from_plain(event), count, label=label)
        if "iteration_marks" in obj:  # a ChainLedger's marks (without them: every release unmarked, pessimistic)
            marks = [[int(r), int(n)] for r, n in obj["iteration_marks"]]
            pending = int(obj.get("pending", 0))
            if any(r < 0 or n < 0 for r, n in marks) or pending < 0 \
                    or sum(r * max(n, 1) for r, n in marks) + pending > led.num_releases:
                raise ValueError("a kernel checkpoint's ledger marks more releases than it holds: not a checkpoint "
                                 "that state_dict() wrote")
            led.iteration_marks, led._pending = marks, pending
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


#: checkpoints (their ``"token"``) this process has resumed: each may continue one chain once
_RESUMED_CHECKPOINTS: set = set()


def _refuse_resumed(state: dict) -> None:
    """A checkpoint continues its chain once: refuse one this process has resumed already."""
    if state.get("token") in _RESUMED_CHECKPOINTS:
        raise ValueError("this checkpoint was already resumed in this process: a checkpoint continues its chain "
                         "once (a second continuation would spend its budget again)")


def save(kernel, values: dict) -> dict:
    r"""The checkpoint of ``kernel``'s chain in progress (``kernel.state_dict()``): its state and
    the kernel's chain attributes (``values``, by name), the chain's
    :class:`~pyro_dp.kernels.chain_record.ChainRecord`, the state of its data-free generator
    (``kernel.randomness``), the stop flags and the ledgers of its privacy engine.

    **A checkpoint is private data**: the chain state caches per-example log-likelihoods.
    Store it like the raw data; never publish it. It holds no rows of data (the data are
    given to ``setup`` again), but the number of rows and the data plate's name, which are
    checked on load. It does not hold the secret noise stream (only under the test option
    ``noise_seed``): a resumed chain draws fresh noise, so it continues the chain's state,
    data-free randomness and ledger, not its noise. Resume it once, into a new kernel object
    and one chain (a second resume in the same process is refused; across processes it
    cannot be detected, and each continuation would spend up to the budget).

    It holds only tensors and plain Python values (``dict``, ``list``, ``tuple``, ``str``,
    ``int``, ``float``, ``bool``, ``None``; states and ledgers as tagged dicts): ``torch.save(
    kernel.state_dict(), path)`` and ``kernel.load_state_dict(torch.load(path))`` with torch's
    default ``weights_only=True``, which unpickles no arbitrary object."""
    engine, lik, noise = kernel.privacy, kernel.lik, kernel.randomness.noise
    return {  # tensors and plain values only: torch.load's default weights_only=True reads it (#42)
        "format": FORMAT,
        "kernel": type(kernel).__name__,
        "relation": engine.relation,
        "num_rows": lik.num_rows,
        "data_plate": lik.data_plate,
        "chain": {a: to_plain(v) for a, v in values.items()},
        "record": to_plain(kernel.chain.saved()),
        "stop": to_plain({"stopped": engine.stopped, "cause": engine.stop_cause, "incomplete": engine.incomplete}),
        "rng": kernel.randomness.rng.get_state(),
        # the secret stream's state only under the test option noise_seed: anyone holding it could
        # replay the noise of every later release of this chain (and a resumed chain draws fresh noise)
        "noise": noise.get_state() if kernel.noise_seed is not None else None,
        "ledger": to_plain(engine.live),
        "chains": {cid: to_plain(led) for cid, led in engine.chains.items()},
        # which point of which chain this is (the chain id is random): resumed once per process
        "token": f"{engine.live.chain_id}:{kernel.chain.iteration}:{engine.live.num_releases}",
        # the run length a budget was planned for when the kernel chose it itself (from the
        # MCMC that ran it, or assumed): a resumed run must keep that plan, not re-plan the
        # budget for the iterations that remain (data-free)
        "run_length": None if kernel.run_length_source in (None, "given") else {
            "num_iterations": kernel.num_iterations, "source": kernel.run_length_source,
            "num_chains": engine.num_chains, "burn_in": kernel.burn_in},
    }


def load(kernel, state: dict) -> None:
    """Check that ``kernel`` (a new kernel object built with the same arguments) may continue the
    chain of checkpoint ``state`` — refused on a kernel that has released anything, for a
    checkpoint already resumed in this process, of another kernel or relation — and take the
    run length its budget was planned for. The caller then restores the chain (:func:`restore`)
    now, after ``setup()``, or at the next ``setup()``.
    The ledger, and with it the budget, counts every release made before the checkpoint."""
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        old = isinstance(state, dict) and state.get("format") in (1, 2)
        raise ValueError("not a pyro_dp kernel checkpoint (state_dict() of a DPKernel)" + (
            f": format {state['format']} was written by an earlier pyro_dp, whose kernels kept their chain in "
            f"other attributes; this version reads format {FORMAT}" if old else ""))
    if kernel.ledger:
        raise ValueError(
            f"this kernel object has already released {kernel.ledger.num_releases} values: load a checkpoint into a "
            "new kernel object (built with the same arguments), so that no release is forgotten")
    _refuse_resumed(state)
    if state["kernel"] != type(kernel).__name__ or state["relation"] != kernel.relation:
        raise ValueError(
            f"checkpoint of a {state['kernel']} under relation {state['relation']!r}; this is a "
            f"{type(kernel).__name__} under {kernel.relation!r}"
        )
    planned = state.get("run_length")
    if planned is not None and kernel.run_length_source is None and kernel.epsilon is not None:
        if kernel.lik is not None:
            raise ValueError(
                "this checkpoint's budget was planned for the run length of the MCMC that ran it "
                f"({planned['num_iterations']} iterations per chain): call load_state_dict() before setup() "
                "(before mcmc.run), or pass that num_iterations= to the kernel")
        kernel.num_iterations, kernel.run_length_source = planned["num_iterations"], planned["source"]
        kernel.burn_in = planned.get("burn_in")
        if not kernel.num_chains_given:
            kernel.num_chains = planned["num_chains"]


def restore(kernel, state: dict) -> dict:
    """Continue checkpoint ``state`` on ``kernel`` after its ``setup()``: the rows are checked,
    the chain's record, its coordinates, the data-free stream (``kernel.randomness.rng``), the
    engine's stop flags and ledgers restored; returns the kernel's chain attributes by name (the
    kernel sets them). The secret stream (``kernel.randomness.noise``) stays the fresh one
    ``setup()`` drew from the OS, except under the test option ``noise_seed``: restoring its
    state would replay the checkpoint's noise on whatever data this run reads (the difference of
    two resumed runs on neighbouring data would be one row's noise-free term)."""
    lik, engine, rng, noise = kernel.lik, kernel.privacy, kernel.randomness.rng, kernel.randomness.noise
    if (state["num_rows"], state["data_plate"]) != (lik.num_rows, lik.data_plate):
        raise ValueError(
            f"checkpoint of a run on {state['num_rows']} rows of plate {state['data_plate']!r}; "
            f"this set-up has {lik.num_rows} rows of plate {lik.data_plate!r}"
        )
    _refuse_resumed(state)
    if state.get("token") is not None:
        _RESUMED_CHECKPOINTS.add(state["token"])
    for name, value in from_plain(state["record"]).items():
        setattr(kernel.chain, name, copy.deepcopy(value))
    precond = kernel.chain.preconditioner  # the chain's coordinates (pyro_dp.preconditioning), or None
    lik.set_preconditioner(*(precond if precond is not None else (None,)))
    rng.set_state(state["rng"])  # the data-free stream continues
    if kernel.noise_seed is not None:  # the test option: the same noise as an uninterrupted run
        noise.set_state(state["noise"])
        noise.shards = kernel.ranks.shards
    stop = from_plain(state["stop"])
    engine.restore([from_plain(led) for led in state["chains"].values()], from_plain(state["ledger"]))
    engine.stopped, engine.stop_cause, engine.incomplete = stop["stopped"], stop["cause"], stop["incomplete"]
    return {a: copy.deepcopy(from_plain(v)) for a, v in state["chain"].items()}


class ChainCheckpoints:
    """The part of a kernel that keeps its checkpoints (``kernel.checkpoints``, module doc): a
    checkpoint loaded before ``setup()``, which the next set-up continues (:attr:`pending`), and
    the last chain's, kept when ``cleanup()`` ended it (:attr:`last`), which ``state_dict()``
    returns between runs. A new worker process gets neither (private data stays where it is).

    >>> c = ChainCheckpoints(); c.pending is None and c.last is None
    True
    >>> c.save(None, None)
    Traceback (most recent call last):
    ...
    RuntimeError: call setup() before state_dict(): there is no chain to save
    """

    def __init__(self):
        #: a checkpoint :meth:`load` took before ``setup()``, continued by the next set-up
        self.pending: Optional[dict] = None
        #: the checkpoint of the last chain ``cleanup()`` ended (to resume it after ``mcmc.run``)
        self.last: Optional[dict] = None

    def save(self, kernel, values: Optional[dict]) -> dict:
        """``kernel.state_dict()``: the chain in progress (:func:`save`; ``values``: the kernel's
        chain attributes by name, ``None`` when no chain is in progress), else the last chain's."""
        if values is None and self.last is not None:
            return self.last  # the chain MCMC just finished (cleanup() ended it)
        if values is None or kernel.lik is None:
            raise RuntimeError("call setup() before state_dict(): there is no chain to save")
        return save(kernel, values)

    def load(self, kernel, state: dict) -> bool:
        """``kernel.load_state_dict(state)``: checked (:func:`load`), then pending until the next
        ``setup()``; ``True`` when the kernel is set up already and restores it at once."""
        load(kernel, state)
        if kernel.lik is not None:
            return True
        self.pending = state
        return False

    def take_pending(self, kernel) -> Optional[dict]:
        """At the end of ``setup()``: the checkpoint a :meth:`load` before it left pending, to be
        restored now (one chain only: more would each continue it and spend its budget again),
        or ``None``."""
        state, self.pending = self.pending, None
        if state is not None:
            chains = (mcmc_run_length() or {}).get("num_chains", 1)
            if kernel.processes.chain_id() is not None or chains > 1:
                raise ValueError(f"a checkpoint continues one chain: resume it with num_chains=1 (this run has "
                                 f"{chains}); more chains would each continue it and spend its budget again")
        return state

    @staticmethod
    def restore(kernel, state: dict) -> dict:
        """:func:`restore`: the kernel's chain attributes by name, to set."""
        return restore(kernel, state)

    def __getstate__(self):
        state = self.__dict__.copy()
        if multiprocessing.context.get_spawning_popen() is not None:  # into a new worker: the chain stays here
            state["last"] = None
        return state
