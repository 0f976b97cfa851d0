r"""A model's arguments, split into **data** and **public** values: the one place that says
what counts as data.

:class:`ModelArguments` takes the ``args``/``kwargs`` a kernel's ``setup`` (``MCMC.run``)
receives and decides, from types and shapes alone (never a value of the data):

* **Data** are the tensors whose first dimension has ``N`` entries, ``N`` the size of the
  data plate (the rows, the covariates, per-row counts or exposures). Each row's term is
  computed from its own slice of every data argument (:mod:`pyro_dp.isolation`).
* A Python ``int`` argument equal to ``N`` is the row count: a row evaluated alone sees ``1``.
* Everything else is **public**: hyperparameters, tensors without an ``N``-sized first
  dimension, strings, flags. Public values are read as they are, without noise.
* ``public=`` names arguments (positions or keywords) that are public although they look like
  data (a public per-row offset, a public design matrix of ``N`` rows): they are passed whole to
  every row's evaluation.

Conversions and refusals (the same on neighbouring data sets, decided by type and shape):

* numpy arrays, pandas objects and anything with ``__array__`` of a numeric dtype become
  tensors (:func:`as_tensor_argument`), so that the rules above see them as data;
  object arrays are refused.
* A list or tuple of ``N`` entries is refused (pass one tensor): its entries would otherwise be
  ``N`` separate values, none of them recognisable as a row.
* A tensor with ``N`` entries in a later dimension but not the first (``X.T``) is refused:
  rows are the first dimension.
* Arrays anywhere in dicts, lists, tuples and namedtuples among the arguments are converted and
  classified like top-level ones (sliced per row when they are data).
* Data reaching the model any other way — a global, a closure, a default argument, an object's
  attribute, a module buffer, the param store — is refused before any evaluation, or never read
  (:mod:`pyro_dp.reach`); data given by ``pyro.condition`` is refused by the row-isolation
  set-up (:mod:`pyro_dp.isolation`).

>>> import numpy as np, torch
>>> a = ModelArguments((np.zeros((4, 2)), torch.ones(4), 3.0), {"n": 4, "prior": torch.ones(2)})
>>> a.classify(num_rows=4)
>>> a.describe()
{'data': ['argument 0', 'argument 1'], 'row count': ["argument 'n'"], 'public': ['argument 2', "argument 'prior'"]}
"""
from __future__ import annotations

import contextlib
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .private import private

__all__ = ["ModelArguments", "as_tensor_argument", "model_arguments", "tensor_arguments", "with_tensors"]


def as_tensor_argument(x):
    """``x`` as a tensor when it is array data (numpy, pandas, ``__array__``), else ``x``.

    >>> import numpy as np
    >>> as_tensor_argument(np.arange(3.0))
    tensor([0., 1., 2.], dtype=torch.float64)
    >>> as_tensor_argument("label")
    'label'
    """
    if torch.is_tensor(x) or isinstance(x, (str, bytes, int, float, complex, bool)) or x is None:
        return x
    if hasattr(x, "to_numpy") and callable(x.to_numpy):  # pandas Series / DataFrame
        x = x.to_numpy()
    if hasattr(x, "__array__") and not isinstance(x, (list, tuple, dict)):
        arr = np.asarray(x)
        if arr.dtype == object or arr.dtype.kind not in "biuf":
            raise TypeError(
                f"a model argument is an array of dtype {arr.dtype}: pyro_dp reads data only as numeric tensors. "
                "Convert it to a torch tensor of numbers before calling MCMC.run")
        # shares the array's memory (no copy of a large data set); a read-only array is copied
        return torch.as_tensor(arr if arr.flags.writeable else arr.copy())
    return x


def tensor_arguments(args, kwargs):
    """``(leaves, spec, positions)``: a model's arguments as pytree leaves, and where the
    tensors sit among them (the compiled path replaces them by graph inputs)."""
    leaves, spec = tree_flatten((args, kwargs))
    return leaves, spec, [i for i, x in enumerate(leaves) if torch.is_tensor(x)]


def with_tensors(leaves, spec, positions, tensors):
    """``(args, kwargs)`` of :func:`tensor_arguments`' leaves with the tensors at ``positions``
    replaced by ``tensors``."""
    vals = list(leaves)
    for i, t in zip(positions, tensors):
        vals[i] = t
    return tree_unflatten(vals, spec)


@contextlib.contextmanager
def model_arguments(lik, args, kwargs):
    """Run a block with ``lik``'s model called on ``args``/``kwargs`` instead of its own
    arguments, restored afterwards (the compiled path's graph inputs; a data-free stand-in)."""
    saved = lik.arguments
    lik.arguments = saved.replaced(args, kwargs)
    try:
        yield
    finally:
        lik.arguments = saved


def _labels(args, kwargs) -> List[str]:
    labels = []
    for i, a in enumerate(args):
        labels += [f"argument {i}"] * len(tree_flatten(a)[0])
    for k, a in kwargs.items():
        labels += [f"argument {k!r}"] * len(tree_flatten(a)[0])
    return labels


class ModelArguments:
    r"""A model's positional and keyword arguments with each pytree leaf classified as data,
    row count or public (module docstring).

    :param args: positional arguments (numpy/pandas arrays are converted to tensors).
    :param dict kwargs: keyword arguments.
    :param public: positions (``int``) and keywords (``str``) of arguments that are public
        however they look.
    """

    def __init__(self, args: Sequence = (), kwargs: Optional[dict] = None, public: Iterable = ()):
        # every array among the arguments, at any depth of dicts, lists, tuples and namedtuples, is
        # converted, so that a numpy array nested in a dict is data like a top-level one
        self.args = tuple(tree_map(as_tensor_argument, a) for a in args)
        self.kwargs = {k: tree_map(as_tensor_argument, v) for k, v in dict(kwargs or {}).items()}
        self.public = frozenset(public or ())
        for p in self.public:
            if not ((isinstance(p, int) and 0 <= p < len(self.args)) or (isinstance(p, str) and p in self.kwargs)):
                raise ValueError(f"public={p!r} names no argument of this call (positions 0..{len(self.args) - 1}, "
                                 f"keywords {sorted(self.kwargs)})")
        self.leaves, self.spec = tree_flatten((self.args, self.kwargs))
        self.labels = _labels(self.args, self.kwargs)
        owners = [("pos", i) for i, a in enumerate(self.args) for _ in tree_flatten(a)[0]]
        owners += [("kw", k) for k, a in self.kwargs.items() for _ in tree_flatten(a)[0]]
        #: per leaf: whether its argument was declared public (``public=``), never data
        self.declared_public = [o[1] in self.public for o in owners]
        self.tensor_pos = [i for i, x in enumerate(self.leaves) if torch.is_tensor(x)]
        #: leaf positions of the data tensors, the row-count ints (set by :meth:`classify`)
        self.data_pos: List[int] = []
        self.count_pos: List[int] = []
        self.num_rows: Optional[int] = None

    def replaced(self, args, kwargs) -> "ModelArguments":
        """A copy holding ``args``/``kwargs`` (same structure) with this classification."""
        new = object.__new__(ModelArguments)
        new.__dict__.update(self.__dict__)
        new.args, new.kwargs = tuple(args), dict(kwargs)
        new.leaves, _ = tree_flatten((new.args, new.kwargs))
        return new

    # ------------------------------------------------------------------ classification
    def classify(self, num_rows: int) -> None:
        """Decide data / row count / public for ``N = num_rows`` (module docstring); refuse
        what cannot be isolated. Types and shapes only."""
        n = int(num_rows)
        self.num_rows = n
        self.data_pos, self.count_pos = [], []
        self._refuse_row_lists(n)
        for i, x in enumerate(self.leaves):
            if self.declared_public[i]:
                continue
            if torch.is_tensor(x):
                if x.dim() >= 1 and x.shape[0] == n:
                    self.data_pos.append(i)
                elif n > 1 and n in tuple(x.shape):
                    raise ValueError(
                        f"model {self.labels[i]} has shape {tuple(x.shape)}: N = {n} entries in a later dimension "
                        "but not the first. pyro_dp takes the rows of every data argument from its first dimension "
                        "(each row's term is computed from its own slice): pass it with the rows first (e.g. X, "
                        "not X.T), or name it in public= if it is public information")
            elif type(x) is int and x == n and n > 1:
                self.count_pos.append(i)

    def _refuse_row_lists(self, n: int) -> None:
        def walk(obj, label):
            if isinstance(obj, (list, tuple)):
                if len(obj) == n and n > 1:
                    raise ValueError(
                        f"model {label} is a {type(obj).__name__} of N = {n} entries: pass the data as one tensor "
                        "whose first dimension indexes the rows (torch.as_tensor / torch.stack), so that each row's "
                        "term can be computed from that row alone; or name it in public= if it is public")
                for v in obj:
                    walk(v, label)
            elif isinstance(obj, dict):
                for v in obj.values():
                    walk(v, label)

        for i, a in enumerate(self.args):
            if i not in self.public:
                walk(a, f"argument {i}")
        for k, a in self.kwargs.items():
            if k not in self.public:
                walk(a, f"argument {k!r}")

    def describe(self) -> dict:
        """``{'data': [...], 'row count': [...], 'public': [...]}``: the arguments by class."""
        data = [self.labels[i] for i in self.data_pos]
        count = [self.labels[i] for i in self.count_pos]
        public = [lab for lab in dict.fromkeys(self.labels) if lab not in data and lab not in count]
        return {"data": list(dict.fromkeys(data)), "row count": list(dict.fromkeys(count)), "public": public}

    def private_view(self) -> Tuple[tuple, dict]:
        """``(args, kwargs)`` with every data leaf :class:`~pyro_dp.private.Private` and the
        public ones as they are: what :attr:`PrivateLikelihood.model_args
        <pyro_dp.likelihood.PrivateLikelihood.model_args>` shows to code outside the likelihood."""
        data = set(self.data_pos)
        return tree_unflatten([private(x) if i in data else x for i, x in enumerate(self.leaves)], self.spec)

    @property
    def data(self) -> List[torch.Tensor]:
        """The data tensors (first dimension ``N``)."""
        return [self.leaves[i] for i in self.data_pos]

    # ------------------------------------------------------------------ building calls
    def leaves_with(self, data: Sequence[torch.Tensor], count: Optional[int] = None) -> list:
        """The pytree leaves with the data tensors replaced by ``data`` (in :attr:`data_pos`
        order) and the row-count ints by ``count`` (unchanged when ``None``)."""
        vals = list(self.leaves)
        for i, t in zip(self.data_pos, data):
            vals[i] = t
        if count is not None:
            for i in self.count_pos:
                vals[i] = count
        return vals

    def build(self, data: Sequence[torch.Tensor], count: Optional[int] = None) -> Tuple[tuple, dict]:
        """``(args, kwargs)`` of :meth:`leaves_with`."""
        return tree_unflatten(self.leaves_with(data, count), self.spec)

    def rows(self, idx: Optional[torch.Tensor]) -> List[torch.Tensor]:
        """The data tensors as ``[B, 1, ...]`` batches of one-row data sets: all rows
        (``idx=None``) or rows ``idx`` (kernel-chosen indices, always in range)."""
        out = []
        for x in self.data:
            r = x if idx is None else x.index_select(0, idx)
            out.append(r.unsqueeze(1))
        return out

    def stand_in(self, k: int, values: str = "zeros", generator: Optional[torch.Generator] = None) -> List[torch.Tensor]:
        """Stand-ins for the data tensors with ``k`` rows (**never the data**): ``"zeros"`` or
        ``"ones"`` (a broadcast constant, no memory), or ``"random"`` (a fixed pattern drawn from
        ``generator``: integers and booleans 0/1, floats uniform on [0.5, 2] with row 0 at 50 —
        an outlier, so that a model's clipping, winsorising or ranking across rows shows)."""
        out = []
        for x in self.data:
            shape = (k,) + tuple(x.shape[1:])
            if values in ("zeros", "ones"):
                out.append(torch.full((), values == "ones", dtype=x.dtype, device=x.device).expand(shape))
            elif x.dtype == torch.bool:
                out.append(torch.randint(0, 2, shape, generator=generator).to(x.device).bool())
            elif not x.is_floating_point():
                out.append(torch.randint(0, 2, shape, generator=generator).to(dtype=x.dtype, device=x.device))
            else:
                r = 0.5 + 1.5 * torch.rand(shape, generator=generator, dtype=torch.float64)
                r[0] = 50.0
                out.append(r.to(dtype=x.dtype, device=x.device))
        return out
