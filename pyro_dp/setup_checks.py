r"""Set-up checks of a model (mixed into :class:`~pyro_dp.likelihood.PrivateLikelihood`): what
row isolation would silently change is refused, before anything is released.

Privacy does not rest on these checks: every term is computed from its own row
(:mod:`pyro_dp.isolation`) and the prior on a stand-in row. They make sure the model pyro_dp
runs is the model the user wrote:

* :meth:`SetUpChecks.prior_data_reads` — a prior that reads a data argument (``Normal(y.mean(), 5)``)
  would be evaluated on a stand-in, i.e. a different prior: refused (traced on fake tensors,
  data-free).
* :meth:`SetUpChecks.rows_read_across` — a model whose joint terms differ from its isolated
  terms on stand-in data (``y - y.median()``, winsorising at a quantile, ``X / X.norm(dim=0)``,
  a time series) would be evaluated as another model: refused. A model that cannot be
  evaluated one row at a time at all (``int(y.max())``, an observed value that is not computed
  from the arguments, a plate whose size does not come from them) is refused too.

All of them run on fake tensors or on stand-in data (``on_stand_in()`` is true then), never on
the data, and their answers are cached per kernel object and argument signature.
"""
from __future__ import annotations

import contextlib
import contextvars
import warnings
from typing import Dict, Optional, Tuple

import pyro
import pyro.poutine as poutine
import torch
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake
from torch.fx.experimental.proxy_tensor import make_fx
from torch.distributions import biject_to
from torch.func import vmap
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .arguments import model_arguments, tensor_arguments, with_tensors
from .reach import OutsideDataError
from .graphs import ancestors
from .diagnose import dtype_mismatch, explain_failure, label_dtype, plate_size_mismatch
from .isolation import describe_row_failure, is_batched, is_value_dependent, kernel_chooses_rows, list_rows

__all__ = ["SetUpChecks", "on_stand_in", "stand_in", "STAND_IN_ROWS"]

#: True while the model runs on stand-in data (never the data) for a set-up check
_ON_STAND_IN = contextvars.ContextVar("pyro_dp_on_stand_in", default=False)

#: rows of the stand-in data the set-up checks evaluate the model on (16: a single outlier among
#: 16 rows lies more than 3 standard deviations out, so 3-sigma clipping inside a model shows)
STAND_IN_ROWS = 16


#: row counts of the fake data :meth:`SetUpChecks.cross_row_operations` traces on: primes, the
#: first that no dimension of the arguments (nor N) equals
_TRACE_PRIMES = (7919, 7927, 7933, 104729, 1299709)


class _CrossRows(TorchDispatchMode):
    """Records the operations that take a tensor with a dimension of ``rows`` entries and
    return none with a dimension that is a multiple of it (a reduction across rows)."""

    def __init__(self, rows: int):
        super().__init__()
        self.rows = rows
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        r = self.rows
        if any(torch.is_tensor(t) and r in t.shape for t in tree_flatten((args, kwargs))[0]):
            outs = [t for t in tree_flatten(out)[0] if torch.is_tensor(t)]
            if outs and not any(s > 0 and s % r == 0 for t in outs for s in t.shape):
                self.ops.append(func.overloadpacket.__name__)
        return out


def on_stand_in() -> bool:
    """Whether the model is being evaluated on stand-in data by a set-up check (no data value
    is read then); for tests that count data accesses."""
    return _ON_STAND_IN.get()


@contextlib.contextmanager
def stand_in():
    token = _ON_STAND_IN.set(True)
    try:
        yield
    finally:
        _ON_STAND_IN.reset(token)


def _same_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise: equal, or both NaN (a NaN term on one stand-in and a NaN on the other are
    the same answer; ±inf compare as values, and no finite value stands in for a NaN).

    >>> nan, inf = float("nan"), float("inf")
    >>> _same_values(torch.tensor([nan, 0.5, inf, nan]), torch.tensor([nan, nan, inf, 1.5])).tolist()
    [True, False, True, False]
    """
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def _close(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise: equal to rounding (the joint and the per-row evaluation may sum in
    another order), or both NaN, or the same infinity."""
    tol = 1e-4 if a.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-8
    return _same_values(a, b) | ((a - b).abs() <= tol * (1 + a.abs().maximum(b.abs())))


class SetUpChecks:
    """The set-up checks of :class:`~pyro_dp.likelihood.PrivateLikelihood` (module docstring)."""

    # ------------------------------------------------------------------ the prior reads no data (data-free)
    def _data_arguments(self):
        """``(leaves, spec, positions, names)`` of the model's tensor arguments, with
        ``names[j]`` the label of tensor ``j`` when it is **data** (:mod:`pyro_dp.arguments`),
        ``None`` for the public ones."""
        a = self.arguments
        leaves, spec, pos = tensor_arguments(self.arguments.args, self.arguments.kwargs)
        data = set(a.data_pos)
        names = [f"model {a.labels[i]}" if i in data else None for i in pos]
        return leaves, spec, pos, names

    def _prior_terms_fn(self, leaves, spec, pos, check_observed: bool = False):
        """``f(*tensors, *units)``: for each latent site, its prior log-density at the
        unconstrained ``unit`` (``transforms[n].inv``) and ``biject_to(support)(unit)`` — the
        map to its support as the model builds it on these arguments — with the model's tensor
        arguments replaced by ``tensors``."""
        names = self.latent_names

        def terms(*inputs):
            args, kwargs = with_tensors(leaves, spec, pos, inputs[: len(pos)])
            units = inputs[len(pos):]
            values = {n: self.transforms[n].inv(u) for n, u in zip(names, units)}
            guard = self._guard(args, kwargs, values)
            with poutine.block(), pyro.validation_enabled(False), kernel_chooses_rows():
                with guard:
                    tr = poutine.trace(poutine.condition(self.model, data=values)).get_trace(*args, **kwargs)
                guard.refuse_reads(self.model, self.arguments.args, self.arguments.kwargs)
                if check_observed and not all(is_fake(tr.nodes[n]["value"]) for n in self.observed_names):
                    raise ValueError("an observed value is not a model argument")  # closure data: undetermined
                out = []
                for n, u in zip(names, units):
                    fn = tr.nodes[n]["fn"]
                    out += [fn.log_prob(tr.nodes[n]["value"]).sum(), biject_to(fn.support)(u)]
            return tuple(out)

        return terms

    def prior_data_reads(self) -> Optional[Dict[str, Tuple[str, ...]]]:
        r"""``{latent site: the data arguments its prior reads}`` for the sites whose prior
        density or support depends on the model's **data** (tensor arguments with a dimension
        of ``N`` entries, :meth:`_data_arguments`), or ``None`` when that cannot be determined.
        Data-free: the latents' prior terms are traced into a graph
        (:func:`torch.fx.experimental.proxy_tensor.make_fx`, the compiled path's tracer) with
        the model's tensor arguments as **fake tensors** (shapes, no values), and a site reads
        an argument when the argument's input is an ancestor of the site's terms. ``None`` when
        the trace fails (Python control flow on a value) or an observed value is not a model
        argument (data in the model's closure or given by ``pyro.condition``): the kernels then
        probe the prior with stand-in data (:meth:`_prior_probe`) or warn that it could not be
        checked.

        >>> import torch, pyro, pyro.distributions as dist
        >>> from pyro_dp.likelihood import PrivateLikelihood
        >>> def model(y):
        ...     mu = pyro.sample("mu", dist.Normal(y.mean(), 5.))  # a prior centred on the data
        ...     with pyro.plate("data", len(y)):
        ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y)
        >>> PrivateLikelihood(model, (torch.zeros(4),), seed=0)
        Traceback (most recent call last):
        ...
        ValueError: the prior of latent site 'mu' reads the data (model argument 0: ...
        """
        leaves, spec, pos, names = self._data_arguments()
        units = [self.prototype_params[n] for n in self.latent_names]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graph = make_fx(self._prior_terms_fn(leaves, spec, pos, check_observed=True), tracing_mode="fake",
                                _allow_non_fake_inputs=True)(*[leaves[i] for i in pos], *units)
        except OutsideDataError:
            raise
        except Exception:  # noqa: BLE001 - undetermined (the caller then probes with stand-in data)
            return None
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"][: len(pos)]
        data_of = {node: name for node, name in zip(placeholders, names) if name is not None}
        (output,) = [n for n in graph.graph.nodes if n.op == "output"]
        outs = list(output.args[0])
        reads = {}
        for j, site in enumerate(self.latent_names):
            seen = ancestors(outs[2 * j: 2 * j + 2])
            found = tuple(dict.fromkeys(data_of[node] for node in data_of if node in seen))
            if found:
                reads[site] = found
        return reads

    def _stand_in_leaves(self, fill: int = 0) -> list:
        """The model's argument leaves with every data tensor replaced by a **stand-in** (never
        the data) of :data:`STAND_IN_ROWS` rows (at most ``N``) filled with ``fill`` (0 or 1), and
        a row-count argument by that number."""
        a, k = self.arguments, min(STAND_IN_ROWS, self.num_rows)
        return a.leaves_with(a.stand_in(k, "ones" if fill else "zeros"), count=k)

    def _prior_probe(self) -> Optional[Dict[str, Tuple[str, ...]]]:
        """:meth:`prior_data_reads` for a model that cannot be traced: its prior terms on the
        stand-in data of :meth:`_stand_in_leaves` filled with zeros, then with ones (never the
        data), compared; a site whose terms differ reads the data. ``None`` when the model fails
        on the stand-ins. Not a proof (a prior could read the data in a way these two fills do
        not show); the caller warns that the check was partial."""
        leaves, spec, pos, names = self._data_arguments()
        if all(name is None for name in names):  # the data are not arguments (a closure): nothing to replace
            return None
        units = [self.prototype_params[n] for n in self.latent_names]
        outs = []
        for fill in (0, 1):
            vals = self._stand_in_leaves(fill)
            try:
                with stand_in(), torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    outs.append(self._prior_terms_fn(vals, spec, pos)(*[vals[i] for i in pos], *units))
            except OutsideDataError:
                raise
            except Exception:  # noqa: BLE001 - e.g. a shape that depends on the stand-in's values
                return None
        reads = {}
        every = tuple(dict.fromkeys(name for name in names if name is not None))
        for j, site in enumerate(self.latent_names):
            for a, b in zip(outs[0][2 * j: 2 * j + 2], outs[1][2 * j: 2 * j + 2]):
                if a.shape != b.shape or not bool(_same_values(a, b).all()):
                    reads[site] = every
        return reads

    def _check_key(self, what: str) -> tuple:
        """The cache key of a set-up check: the model, its latents, and its arguments — every
        tensor's shape, dtype and device, every other argument's ``repr`` (a flag such as
        ``centre=True`` changes the model's code path, so a cached answer must not cover it)."""
        leaves, spec, _ = tensor_arguments(self.arguments.args, self.arguments.kwargs)
        return (what, id(self.model), self.latent_names, repr(spec),
                tuple((tuple(x.shape), x.dtype, str(x.device)) if torch.is_tensor(x) else repr(x) for x in leaves))

    def _check_prior_reads_no_data(self, cache: Optional[dict]) -> None:
        """Refuse a model whose prior reads the data (:meth:`prior_data_reads`), at set-up,
        before anything is released: the kernels evaluate the prior's density and gradient
        without noise in every acceptance test and leapfrog step (and draw the start from it),
        so a prior centred on ``y.mean()`` would publish the mean through the chain. Cached per
        kernel object (``cache``, keyed by the model and the arguments' shapes)."""
        key = self._check_key("prior_data_reads")
        cache = cache if cache is not None else {}
        if key not in cache:
            reads, partial = self.prior_data_reads(), False
            if reads is None:
                reads, partial = self._prior_probe(), True
            cache[key] = (reads, partial)
        reads, partial = cache[key]
        if reads:
            site, args = next(iter(reads.items()))
            raise ValueError(
                f"the prior of latent site {site!r} reads the data ({', '.join(args)}: a tensor with a dimension of "
                f"N = {self.num_rows} entries)" + (f", and so do those of {sorted(reads)[1:]}" if len(reads) > 1 else "")
                + ". The kernels evaluate the prior without noise in every step, so the chain would publish what it "
                "reads (e.g. a prior centred on y.mean()). Compute such values from public information and pass them "
                "as numbers or as tensors without an N-sized dimension; every use of the rows must be in the data "
                "plate's observed sites (docs/privacy.md, 'The prior')")
        if reads is None:
            warnings.warn(
                "pyro_dp could not check that the model's prior reads no data: the model cannot be traced (Python "
                "control flow on a value) and fails when its data arguments are replaced by stand-ins, or its data are "
                "not among its arguments (pyro.condition, a closure). The kernels "
                "evaluate the prior without noise: make sure it reads no data argument (docs/privacy.md, 'The prior')",
                UserWarning, stacklevel=4)
        elif partial:
            warnings.warn(
                "pyro_dp checked that the model's prior reads no data only by evaluating it on two stand-in data sets "
                "(the model cannot be traced: Python control flow on a value), which is not a proof. The kernels "
                "evaluate the prior without noise: make sure it reads no data argument (docs/privacy.md, 'The prior')",
                UserWarning, stacklevel=4)

    # ------------------------------------------------------------------ one row, one term
    def rows_read_across(self) -> Optional[Tuple[int, ...]]:
        r"""The rows of a **stand-in** data set (:data:`STAND_IN_ROWS` rows drawn from a fixed
        generator, never the data: integers 0/1, floats in [0.5, 2] with one outlier at 50) whose
        term differs between the model evaluated on all stand-in rows together and on each row
        alone (what pyro_dp computes, :mod:`pyro_dp.isolation`); empty when they agree, ``None``
        when the joint evaluation fails. Such a model reads other rows inside (data centred on
        its mean or median, winsorised at a quantile, normalised by a column norm, a time series):
        isolation would run another model than the one written, so set-up refuses it.

        >>> import torch, pyro, pyro.distributions as dist
        >>> from pyro_dp.likelihood import PrivateLikelihood
        >>> def model(y):
        ...     mu = pyro.sample("mu", dist.Normal(0., 5.))
        ...     with pyro.plate("data", len(y)):
        ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y - y.median())
        >>> PrivateLikelihood(model, (torch.randn(10),), seed=0)
        Traceback (most recent call last):
        ...
        ValueError: the log-likelihood of a row depends on other rows' data: ...
        """
        return self._isolation_report()[2]

    def _isolation_report(self):
        """``(error, warning, rows)`` of the isolation check (:meth:`rows_read_across`)."""
        a = self.arguments
        mismatch = None if a.data_pos else plate_size_mismatch(a, self.num_rows, self.data_plate)
        if mismatch:
            return f"{mismatch} (docs/privacy.md, 'What counts as data')", None, None
        if not a.data_pos:
            return ("the model has no data argument (a tensor whose first dimension has N = "
                    f"{self.num_rows} entries): its observed data come from its closure, a global or pyro.condition, "
                    "or every such argument was named public. pyro_dp computes each row's term from that row's slice "
                    "of the model's arguments: pass the data as arguments (docs/privacy.md, 'What counts as data')",
                    None, None)
        k = min(STAND_IN_ROWS, self.num_rows)
        gen = torch.Generator().manual_seed(0)
        rows = a.stand_in(k, "random", gen)
        # a data-free point near the start, moved off it (a start at 0 can hide a dependence: X @ 0)
        z = self.flatten(self.prototype_params)
        z = z + 0.5 * torch.randn(z.shape, generator=gen, dtype=torch.float64).to(dtype=z.dtype, device=z.device)
        found = []

        def probe(*row):
            values, _ = self._latents(z)
            args, kwargs = a.build(list(row), count=1)
            tr = self._run(values, args, kwargs)
            for n in self.observed_names:
                site = tr.nodes[n]
                batch = torch.broadcast_shapes(site["value"].shape[: site["value"].dim() - site["fn"].event_dim],
                                               site["fn"].batch_shape)
                if len(batch) < -self._plate_dim or batch[self._plate_dim] != 1:
                    found.append(f"the data plate of observed site {n!r} has {batch[self._plate_dim]} entries when "
                                 "the model is given one row: its size does not come from the data arguments (a "
                                 "constant N, or data from a closure). Take N from the data (len(y)) or pass it as "
                                 "an int argument")
                elif not is_batched(site["value"]):
                    found.append(f"the observed value of site {n!r} is not computed from the model's data arguments "
                                 "(it comes from the model's closure, a global or pyro.condition). Pass the data as "
                                 "arguments whose first dimension indexes the rows")
            return self._observed_terms(tr).sum()

        with stand_in(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                isolated = vmap(probe)(*[r.unsqueeze(1) for r in rows])
            except OutsideDataError:
                raise
            except Exception as e:  # noqa: BLE001 - decided on stand-ins: data-free
                if not is_value_dependent(e) and (label_dtype(e, a) or dtype_mismatch(e, a)):
                    return (explain_failure(e, a, self.num_rows, "pyro_dp evaluates each row alone (torch.func.vmap), "
                                            "on stand-in data (docs/privacy.md, 'What is refused')"), None, None)
                return (f"the model cannot be evaluated one row at a time: {describe_row_failure(e)} "
                        "(docs/privacy.md, 'What is refused')", None, None)
            if found:
                return found[0] + " (docs/privacy.md, 'What counts as data')", None, None
            try:
                with model_arguments(self, *a.build(rows, count=k)):
                    tr, _ = self.joint_trace(z)
                    joint = self._observed_terms(tr)
            except OutsideDataError:
                raise
            except Exception as e:  # noqa: BLE001 - the joint model fails on the stand-in: not compared
                hint = label_dtype(e, a) or dtype_mismatch(e, a)
                return (None, (f"{hint[0].upper()}{hint[1:]}: " if hint else "") + "pyro_dp could not compare the model's terms evaluated on all rows with its terms "
                        "evaluated one row at a time (it fails on stand-in data). Each term is computed from its own "
                        "row, which is private whatever the model does; but if the model reads other rows (y - "
                        "y.median(), a quantile, a column norm), pyro_dp runs a different model than the one written "
                        "(docs/privacy.md, 'One row, one term')", None)
        if joint.shape != isolated.shape:
            return None, None, None
        return None, None, tuple(list_rows(~_close(joint, isolated)))

    def cross_row_operations(self) -> Optional[Tuple[str, ...]]:
        r"""The operations of the model's own code that reduce over its data's rows (``y.max()``,
        ``y.median()``, ``X.norm(dim=0)``, ``X.T @ y``, a sum over groups), or ``None`` when the
        model cannot be traced this way. **Structural, not a probe of values**: the model is run
        once on fake tensors (shapes, no values) whose rows number one of :data:`_TRACE_PRIMES`, a prime no
        other dimension of the arguments shares, and every operation that takes a tensor with a
        dimension of that size and returns tensors with no dimension that is a multiple of it has
        reduced across rows. A cross-row statistic that no stand-in value would trigger
        (``torch.where(y.max() > 100, y / 100, y)``) is found the same way as one that any value
        triggers. Evaluated one row at a time, such a model would be another model (the statistic
        of one row), so set-up refuses it.

        >>> import torch, pyro, pyro.distributions as dist
        >>> from pyro_dp.likelihood import PrivateLikelihood
        >>> def model(y):
        ...     mu = pyro.sample("mu", dist.Normal(0., 5.))
        ...     y = torch.where(y.max() > 100, y / 100, y)   # rescaled if any row is large
        ...     with pyro.plate("data", len(y)):
        ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y)
        >>> PrivateLikelihood(model, (torch.randn(10),), seed=0)
        Traceback (most recent call last):
        ...
        ValueError: the log-likelihood of a row depends on other rows' data: the model's code applies max ...
        """
        a = self.arguments
        if not a.data_pos:
            return None
        dims = {int(d) for x in a.leaves if torch.is_tensor(x) for d in x.shape} | {self.num_rows}
        r = next(p for p in _TRACE_PRIMES if p not in dims)
        z = self.flatten(self.prototype_params)
        values, _ = self._latents(z)
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        found = _CrossRows(r)
        try:
            with mode:
                rows = [torch.zeros((r,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device) for x in a.data]
            args, kwargs = a.build(rows, count=r)
            with stand_in(), mode, warnings.catch_warnings(), poutine.block(), pyro.validation_enabled(False), \
                    kernel_chooses_rows(), found:
                warnings.simplefilter("ignore")
                poutine.trace(poutine.condition(self.model, data=values)).get_trace(*args, **kwargs)
        except Exception:  # noqa: BLE001 - undetermined on fakes (e.g. a value-dependent shape): not decided here
            return None
        return tuple(dict.fromkeys(found.ops))

    def _check_isolation(self, cache: Optional[dict]) -> None:
        """Refuse, at set-up and before anything is released, a model that cannot be evaluated
        one row at a time or whose terms change when it is (:meth:`rows_read_across`). Cached
        per kernel object and argument signature."""
        key = self._check_key("isolation")
        cache = cache if cache is not None else {}
        if key not in cache:
            cache[key] = self._isolation_report()
        error, warning, rows = cache[key]
        if error:
            raise ValueError(error)
        if warning:
            warnings.warn(warning, UserWarning, stacklevel=4)
        if rows:
            raise ValueError(
                "the log-likelihood of a row depends on other rows' data: on stand-in data (never your data), the "
                f"terms of rows {list(rows)[:8]} differ between the model evaluated on all rows and on each row alone. "
                "Data centred, standardised or winsorised inside the model (y - y.median(), y / y.std(), "
                "torch.minimum(y, y.quantile(0.99))), covariates normalised by column, or a likelihood that chains "
                "rows (a time series) do this. pyro_dp computes each row's term from that row alone, so it would run "
                "another model. Standardise with public constants (or privately released ones) before calling the "
                "model, and keep each row's term a function of that row (docs/privacy.md, 'One row, one term')")

    def _check_cross_rows(self, cache: Optional[dict]) -> None:
        """Refuse, at set-up, a model whose code reduces across its data's rows
        (:meth:`cross_row_operations`); run after the prior's check, whose refusal names the
        site when the reduction feeds a prior. Cached per kernel object and argument signature."""
        key = self._check_key("cross_rows")
        cache = cache if cache is not None else {}
        if key not in cache:
            cache[key] = self.cross_row_operations()
        ops = cache[key]
        if ops:
            raise ValueError(
                f"the log-likelihood of a row depends on other rows' data: the model's code applies {', '.join(ops[:4])} "
                "across the rows of its data (found from shapes alone: the model traced on fake data, no value read). "
                "pyro_dp computes each row's term from that row alone, so the statistic would be of one row and "
                "pyro_dp would run another model than the one written. Compute such statistics from public constants "
                "(or privately released ones) before calling the model, and keep each row's term a function of that "
                "row (docs/privacy.md, 'One row, one term')")
