r"""A Pyro model seen as private per-example terms: **the only module that touches data**.

:class:`PrivateLikelihood` takes a Pyro model and its arguments and exposes

* the latent sites as one flat vector in Pyro's unconstrained space (transforms from
  :func:`torch.distributions.biject_to`, exactly as :func:`pyro.infer.mcmc.util.initialize_model`
  builds them),
* the data-free log prior density in that space (prior + log-Jacobian),
* the per-example log-likelihood vector :math:`\ell_i(\theta)` of the observed sites in the
  data :class:`pyro.plate`, for all rows or an index subset, and
* per-example gradients :math:`\nabla_\theta \ell_i(\theta)` through :mod:`torch.func`.

Nothing in this module adds noise or releases anything: kernels pass what it returns
through :func:`pyro_dp.mechanisms.clipped_sum_with_noise`.

Construction is **data-free**: the model is traced once with latent values drawn from the
prior (``init_strategy``) under a forked RNG, and no likelihood is evaluated. (This is why
we do not call :func:`~pyro.infer.mcmc.util.initialize_model`: it evaluates the log density
of its prototype trace, and may search for a starting point using the likelihood.)

Conventions
-----------
* The returned per-example terms are **untempered**. A kernel multiplies the *released*
  (clipped, noised) sum by ``temperature`` — post-processing — so clip bounds and
  sensitivities always refer to untempered terms (Räisä 2021 thesis, Alg. 3:
  :math:`g = T(\sum_i \mathrm{clip}(\nabla\ell_i) + \xi)`).
* The data plate's size :math:`N` is public.
* The prior must not depend on the data (it is evaluated without privacy cost). Construction
  checks it from the model's code, data-free (:meth:`PrivateLikelihood.prior_data_reads`), and
  refuses a prior that reads a data argument.
* Each row's log-likelihood reads that row alone (the clip bounds one row's own term).
  Construction looks for models that break this on stand-in data
  (:meth:`PrivateLikelihood.rows_read_across`) and refuses them.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(y):
...     mu = pyro.sample("mu", dist.Normal(0., 10.))
...     with pyro.plate("data", len(y)) as idx:
...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y[idx])
>>> y = torch.tensor([0.5, -0.2, 1.0])
>>> lik = PrivateLikelihood(model, (y,), seed=0)
>>> lik.num_rows, lik.dim, lik.latent_names, lik.data_plate
(3, 1, ('mu',), 'data')
>>> z = torch.zeros(1)
>>> lik.per_example_loglik(z).shape, lik.per_example_grad(z)[1].shape
(torch.Size([3]), torch.Size([3, 1]))
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import warnings
from typing import Callable, Dict, Optional, Sequence, Tuple

import pyro
import pyro.poutine as poutine
import torch
from pyro.infer.autoguide.initialization import InitMessenger, init_to_sample
from pyro.poutine.subsample_messenger import SubsampleMessenger, _Subsample
from torch.distributions import biject_to
from torch.func import grad_and_value, jacfwd, vmap
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .mechanisms import clip_and_sum

__all__ = ["PrivateLikelihood"]


@contextlib.contextmanager
def _forked_rng(seed: Optional[int]):
    """Run a block with torch's global RNG seeded and restored afterwards (no hidden
    global state leaks out, and the block is reproducible from ``seed``)."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        if seed is not None:
            torch.manual_seed(int(seed))
        yield


@contextlib.contextmanager
def _model_arguments(lik, args, kwargs):
    """Run a block with ``lik``'s model called on ``args``/``kwargs`` instead of its own
    arguments, restored afterwards (the compiled path's graph inputs; a data-free stand-in)."""
    saved = lik.model_args, lik.model_kwargs
    lik.model_args, lik.model_kwargs = args, kwargs
    try:
        yield
    finally:
        lik.model_args, lik.model_kwargs = saved


def _tensor_arguments(args, kwargs):
    """``(leaves, spec, positions)``: a model's arguments as pytree leaves, and where the tensors
    (the data, for the traces that replace them by graph inputs or fake tensors) sit among them."""
    leaves, spec = tree_flatten((args, kwargs))
    return leaves, spec, [i for i, x in enumerate(leaves) if torch.is_tensor(x)]


def _with_tensors(leaves, spec, positions, tensors):
    """``(args, kwargs)`` of :func:`_tensor_arguments`' leaves with the tensors at ``positions``
    replaced by ``tensors``."""
    vals = list(leaves)
    for i, t in zip(positions, tensors):
        vals[i] = t
    return tree_unflatten(vals, spec)


@contextlib.contextmanager
def _kernel_chooses_rows():
    """Evaluate plates declared with ``subsample_size`` (SVI's idiom,
    ``pyro.plate("data", N, subsample_size=b)``) on the rows pyro_dp gives them: all rows, or
    the indices a kernel conditions the data plate on.

    The kernel, not Pyro, chooses which rows a step reads (from the secret stream). Pyro's plate
    would draw its own random subsample, and refuses indices of another length than the
    declared ``subsample_size``; so for one model evaluation the declaration is dropped
    (``SubsampleMessenger._subsample`` sees ``subsample_size=None``) and remembered in
    ``_DECLARED`` (read once, when the prototype trace is parsed). Pyro's own ``N/b`` scaling
    does not enter: pyro_dp reads unscaled per-example terms.
    """
    original = SubsampleMessenger.__dict__["_subsample"]
    fn = original.__func__

    def chosen_by_kernel(name, size=None, subsample_size=None, subsample=None, use_cuda=None, device=None):
        declared = subsample_size
        out = fn(name, size, None if size is not None else subsample_size, subsample, use_cuda, device)
        _DECLARED[name] = declared
        return out

    SubsampleMessenger._subsample = staticmethod(chosen_by_kernel)
    try:
        yield
    finally:
        SubsampleMessenger._subsample = original


#: True while the model runs on stand-in data (zeros and ones in the data's shapes, never the
#: data) for the set-up checks :meth:`PrivateLikelihood.rows_read_across` and ``_prior_probe``
_ON_STAND_IN = contextvars.ContextVar("pyro_dp_on_stand_in", default=False)


def on_stand_in() -> bool:
    """Whether the model is being evaluated on stand-in data by a set-up check (no data value
    is read then); for tests that count data accesses."""
    return _ON_STAND_IN.get()


@contextlib.contextmanager
def _stand_in():
    token = _ON_STAND_IN.set(True)
    try:
        yield
    finally:
        _ON_STAND_IN.reset(token)


#: rows of the stand-in data the set-up checks evaluate the model on
STAND_IN_ROWS = 6


def _ancestors(nodes) -> set:
    """Every node of an fx graph that ``nodes`` depend on, themselves included."""
    seen, stack = set(), [x for x in nodes if isinstance(x, torch.fx.Node)]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    return seen


def _same_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise: equal, or both NaN (a NaN term on one stand-in and a NaN on the other are
    the same answer; ±inf compare as values, and no finite value stands in for a NaN).

    >>> nan, inf = float("nan"), float("inf")
    >>> _same_values(torch.tensor([nan, 0.5, inf, nan]), torch.tensor([nan, nan, inf, 1.5])).tolist()
    [True, False, True, False]
    """
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


#: subsample_size declared by each plate in the last evaluation (read by _parse_trace)
_DECLARED: dict = {}


def _iter_tensors(obj):
    if torch.is_tensor(obj):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _iter_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _iter_tensors(v)


def _batch_shape(site) -> torch.Size:
    """Batch shape of an observed site's value (its shape without the event dims)."""
    value = site["value"]
    return value.shape[: value.dim() - site["fn"].event_dim]


class PrivateLikelihood:
    r"""Private per-example terms of a Pyro model.

    :param model: a Pyro model whose observed sites all lie in one vectorised
        :class:`pyro.plate` over the rows (the *data plate*). To allow minibatches and
        the fast per-example gradient path, index the data with the plate's indices:
        ``with pyro.plate("data", N) as idx: pyro.sample("y", ..., obs=y[idx])``.
    :param tuple model_args: positional arguments of ``model`` (the data).
    :param dict model_kwargs: keyword arguments of ``model``.
    :param str data_plate: name of the data plate; by default the single plate that
        encloses every observed site.
    :param float temperature: :math:`T > 0`, stored for kernels (see module doc).
    :param dict transforms: optional ``{site: transform}`` to unconstrained space
        (defaults to ``biject_to(support).inv`` as in Pyro's HMC).
    :param init_strategy: Pyro init strategy used to draw the prototype (and default
        initial) latent values; it must be data-free (default
        :func:`~pyro.infer.autoguide.initialization.init_to_sample`, a prior draw).
    :param int seed: seed of the prototype draw (the global RNG is forked and restored).
    :param int vmap_chunk_size: optional chunk size for the per-example ``vmap``.
    :param bool jit_compile: trace the per-example functions once into graphs and compile
        them (:mod:`pyro_dp.compiled`); the same values, much faster after a one-time compile.
    :param dict jit_options: ``{"backend": "inductor" | "graph", **torch.compile kwargs}``;
        the CUDA-graph modes (``mode="reduce-overhead"``, ``"max-autotune"``) are refused.
    :param dict jit_cache: graphs shared with other likelihoods of the same kernel object.
    
    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(0., 10.))
    ...     with pyro.plate("data", len(y)) as idx:
    ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y[idx])
    >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 2.0]),), seed=0)
    >>> lik.per_example_loglik(torch.tensor([1.0]))  # log N(y_i; mu=1, 1), one per row
    tensor([-1.4189, -1.4189])
    """

    def __init__(
        self,
        model: Callable,
        model_args: Sequence = (),
        model_kwargs: Optional[dict] = None,
        *,
        data_plate: Optional[str] = None,
        temperature: float = 1.0,
        transforms: Optional[dict] = None,
        init_strategy: Callable = init_to_sample,
        seed: Optional[int] = None,
        vmap_chunk_size: Optional[int] = None,
        jit_compile: bool = False,
        jit_options: Optional[dict] = None,
        jit_cache: Optional[dict] = None,
    ):
        if not callable(model):
            raise TypeError(f"model must be callable, got {type(model).__name__}")
        t = float(temperature)
        if not (t > 0 and math.isfinite(t)):
            raise ValueError(f"temperature must be positive and finite, got {temperature!r}")
        self.model = model
        self.model_args = tuple(model_args)
        self.model_kwargs = dict(model_kwargs or {})
        self.temperature = t
        self.vmap_chunk_size = vmap_chunk_size
        self._init_strategy = init_strategy
        # No finiteness check of the data: a row may be NaN or infinite (the adversary's
        # choice), and an exception raised because of one row would reveal it. Such a row
        # passes the per-row rule of every release (pyro_dp.mechanisms.clip_scalars /
        # clip_rows) like any other. The trace runs with Pyro's validation off, so that a
        # parameter computed from such a row (e.g. logits = X @ w) raises nothing either.
        with _forked_rng(seed), poutine.block(), _kernel_chooses_rows(), pyro.validation_enabled(False):
            trace = poutine.trace(InitMessenger(init_strategy)(model)).get_trace(
                *self.model_args, **self.model_kwargs
            )
        self._parse_trace(trace, data_plate, transforms)
        self._check_prior_reads_no_data(jit_cache)
        self._check_rows_independent(jit_cache)
        #: how a row subset is evaluated: "index" (the model indexes its data by the plate's
        #: indices), "slice" (the usual idiom: the model's row-aligned arguments are sliced) or None
        self.row_access = self._probe_row_access()
        self._indexable = self.row_access is not None
        #: rows over all ranks of a sharded kernel (:mod:`pyro_dp.distributed`); ``num_rows`` otherwise
        self.global_num_rows = self.num_rows
        #: the compiled path (:class:`~pyro_dp.compiled.CompiledLikelihood`), or ``None`` (eager)
        self.compiled = None
        self._jit_cache = jit_cache  # also holds the likelihood's sites (likelihood_mask), per kernel object
        if jit_compile:
            from .compiled import CompiledLikelihood

            self.compiled = CompiledLikelihood(self, jit_options, jit_cache)
        if not self._indexable:
            warnings.warn(
                f"The model does not index its data with the indices of plate "
                f"{self.data_plate!r}, and slicing its arguments along their first dimension does not "
                "give a model of fewer rows; per-example gradients fall back to a slower "
                "forward-mode Jacobian and minibatch kernels are unavailable. Write "
                f"`with pyro.plate({self.data_plate!r}, N) as idx: ... obs=y[idx]` to enable them.",
                stacklevel=2,
            )

    # ------------------------------------------------------------------ set-up (data-free)
    def _parse_trace(self, trace, data_plate, transforms):
        latents, observed, plates = [], [], {}
        for name, site in trace.nodes.items():
            if site["type"] == "param":
                raise ValueError(
                    f"the model has a pyro.param site {name!r}: a parameter fitted on the private data would "
                    "be released without accounting. Pass public values as constants (or model arguments), "
                    "or make it a latent with pyro.sample and a prior"
                )
            if site["type"] != "sample":
                continue
            fn = site["fn"]
            if isinstance(fn, _Subsample):
                plates[name] = fn
                continue
            if site["infer"].get("_deterministic"):
                continue  # pyro.deterministic: a function of the latents, not data
            if site["is_observed"]:
                observed.append(name)
            else:
                latents.append(name)
        if not observed:
            raise ValueError("the model has no observed sample site (pass the data with obs=...)")
        if not latents:
            raise ValueError("the model has no latent sample site to infer")

        # ---- the data plate
        def frames(name):
            return {f.name: f for f in trace.nodes[name]["cond_indep_stack"]}

        common = None
        for name in observed:
            fr = set(frames(name))
            common = fr if common is None else common & fr
        if data_plate is not None:
            if data_plate not in plates:
                raise ValueError(f"data_plate={data_plate!r} is not a plate of the model (plates: {sorted(plates)})")
            for name in observed:
                if data_plate not in frames(name):
                    raise ValueError(f"observed site {name!r} is outside the data plate {data_plate!r}")
        else:
            for name in observed:
                if not frames(name):
                    raise ValueError(
                        f"observed site {name!r} is not inside any pyro.plate; put every observed "
                        "site inside one plate over the data rows"
                    )
            if not common:
                raise ValueError(
                    f"no single plate encloses every observed site ({observed}); "
                    "put them in one plate over the rows or pass data_plate="
                )
            if len(common) > 1:
                raise ValueError(
                    f"more than one plate encloses every observed site ({sorted(common)}); "
                    "choose one with data_plate="
                )
            data_plate = next(iter(common))
        frame = frames(observed[0])[data_plate]
        if not frame.vectorized:
            raise ValueError(f"plate {data_plate!r} is sequential; use a vectorised pyro.plate")
        #: the data plate's declared ``subsample_size`` (SVI's idiom), or ``None``: ignored when the
        #: model is evaluated (:func:`_kernel_chooses_rows`), available as a batch-size hint
        self.declared_subsample_size = _DECLARED.get(data_plate)
        self.data_plate = data_plate
        self.num_rows = int(frame.size)
        self._plate_dim = frame.dim
        # The privacy unit with nested plates: one index of the data plate, across every other
        # plate an observed site sits in (docs/privacy.md, "The privacy unit").
        others = sorted({f for name in observed for f in frames(name)} - {data_plate})
        if others:
            warnings.warn(
                f"the observed sites sit in plates {others} besides the data plate {data_plate!r}: the privacy "
                f"unit (one 'row') is one index of plate {data_plate!r} across all of {others}, i.e. everything "
                f"observed at that index. If one person's data are one cell, not one {data_plate!r} slice, the "
                "guarantee does not protect them as stated: choose the data plate that indexes people",
                UserWarning,
                stacklevel=4,
            )

        for name in latents:
            site = trace.nodes[name]
            if data_plate in frames(name):
                if name.endswith("_unobserved"):
                    raise ValueError(
                        f"latent site {name!r} is inside the data plate {data_plate!r}: it looks like pyro.sample(..., "
                        "obs_mask=...), which makes the missing values per-row latents, not supported by DP MCMC. "
                        "Drop the missing observations from the likelihood instead: wrap the site in "
                        "poutine.mask(mask=observed_mask) and pass obs= with any finite fill value"
                    )
                raise ValueError(
                    f"latent site {name!r} is inside the data plate {data_plate!r}: per-row "
                    "(local) latents are not supported by DP MCMC (for missing observations use poutine.mask)"
                )
            fn = site["fn"]
            if fn.has_enumerate_support or getattr(fn.support, "is_discrete", False):
                raise TypeError(f"latent site {name!r} is discrete; pyro_dp kernels need continuous latents")
        for name in observed:
            site = trace.nodes[name]
            if site["scale"] != 1.0:
                raise ValueError(
                    f"observed site {name!r} is scaled (poutine.scale); use the kernel's "
                    "temperature= instead so that sensitivities stay correct"
                )
            batch = _batch_shape(site)
            d = self._plate_dim
            if len(batch) < -d or batch[d] != self.num_rows:
                raise ValueError(
                    f"observed site {name!r} has batch shape {tuple(batch)}, which does not match "
                    f"plate {data_plate!r} of size {self.num_rows} at dim {d}"
                )

        # ---- latents, transforms and the flat layout
        transforms = dict(transforms or {})
        self.latent_names: Tuple[str, ...] = tuple(latents)
        self.observed_names: Tuple[str, ...] = tuple(observed)
        self.transforms: Dict[str, object] = {}
        self._shapes, self._sizes, unconstrained = {}, {}, {}
        for name in latents:
            site = trace.nodes[name]
            tf = transforms.get(name, biject_to(site["fn"].support).inv)
            self.transforms[name] = tf
            u = tf(site["value"].detach())
            unconstrained[name] = u
            self._shapes[name] = u.shape
            self._sizes[name] = u.numel()
        self.dim = sum(self._sizes.values())
        # dtype: the latents' promoted with the data's (float64 data => float64 chain);
        # device: the latents'.
        dtype = unconstrained[latents[0]].dtype
        for t in list(unconstrained.values()) + list(_iter_tensors((self.model_args, self.model_kwargs))):
            if t.is_floating_point():
                dtype = torch.promote_types(dtype, t.dtype)
        self.dtype, self.device = dtype, unconstrained[latents[0]].device
        # data-free prior draw, unconstrained
        self.prototype_params = {k: v.to(dtype) for k, v in unconstrained.items()}

    # ------------------------------------------------------------------ the prior reads no data (data-free)
    def _data_arguments(self):
        """``(leaves, spec, positions, names)`` of the model's tensor arguments
        (:func:`_tensor_arguments`), with ``names[j]`` describing tensor ``j`` when it is **data**:
        a tensor with a dimension of ``N`` entries (the rows, the covariates, per-row counts);
        ``None`` for the others (a tensor of hyperparameters)."""
        leaves, spec, pos = _tensor_arguments(self.model_args, self.model_kwargs)
        labels = []
        for i, a in enumerate(self.model_args):
            labels += [f"model argument {i}"] * len(tree_flatten(a)[0])
        for k, a in self.model_kwargs.items():
            labels += [f"model argument {k!r}"] * len(tree_flatten(a)[0])
        names = [labels[i] if self.num_rows in tuple(leaves[i].shape) else None for i in pos]
        return leaves, spec, pos, names

    def _prior_terms_fn(self, leaves, spec, pos, check_observed: bool = False):
        """``f(*tensors, *units)``: for each latent site, its prior log-density at the
        unconstrained ``unit`` (``transforms[n].inv``) and ``biject_to(support)(unit)`` — the
        map to its support as the model builds it on these arguments — with the model's tensor
        arguments replaced by ``tensors``."""
        names = self.latent_names

        def terms(*inputs):
            from torch._subclasses.fake_tensor import is_fake

            args, kwargs = _with_tensors(leaves, spec, pos, inputs[: len(pos)])
            units = inputs[len(pos):]
            values = {n: self.transforms[n].inv(u) for n, u in zip(names, units)}
            with poutine.block(), pyro.validation_enabled(False), _kernel_chooses_rows():
                tr = poutine.trace(poutine.condition(self.model, data=values)).get_trace(*args, **kwargs)
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
        >>> def model(y):
        ...     mu = pyro.sample("mu", dist.Normal(y.mean(), 5.))  # a prior centred on the data
        ...     with pyro.plate("data", len(y)):
        ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y)
        >>> PrivateLikelihood(model, (torch.zeros(4),), seed=0)
        Traceback (most recent call last):
        ...
        ValueError: the prior of latent site 'mu' reads the data (model argument 0: ...
        """
        from torch.fx.experimental.proxy_tensor import make_fx

        leaves, spec, pos, names = self._data_arguments()
        units = [self.prototype_params[n] for n in self.latent_names]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graph = make_fx(self._prior_terms_fn(leaves, spec, pos, check_observed=True), tracing_mode="fake",
                                _allow_non_fake_inputs=True)(*[leaves[i] for i in pos], *units)
        except Exception:  # noqa: BLE001 - undetermined (the caller then probes with stand-in data)
            return None
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"][: len(pos)]
        data_of = {node: name for node, name in zip(placeholders, names) if name is not None}
        (output,) = [n for n in graph.graph.nodes if n.op == "output"]
        outs = list(output.args[0])
        reads = {}
        for j, site in enumerate(self.latent_names):
            seen = _ancestors(outs[2 * j: 2 * j + 2])
            found = tuple(dict.fromkeys(data_of[node] for node in data_of if node in seen))
            if found:
                reads[site] = found
        return reads

    def _stand_in_leaves(self, leaves, pos, names, fill: int = 0, row: Optional[int] = None) -> list:
        """The model's argument leaves (:meth:`_data_arguments`) with every data tensor replaced by
        a **stand-in** (never the data): ``fill`` with :data:`STAND_IN_ROWS` entries (at most
        ``N``) in its ``N``-sized dimension, entry ``row`` of that dimension set to ones; and a
        Python ``int`` argument equal to ``N`` replaced by the stand-in's row count."""
        n, k = self.num_rows, min(STAND_IN_ROWS, self.num_rows)
        data = {i for i, name in zip(pos, names) if name is not None}
        vals = list(leaves)
        for i, x in enumerate(leaves):
            if i in data:
                dim = tuple(x.shape).index(n)
                shape = list(x.shape)
                shape[dim] = k
                stand_in = torch.full(shape, fill, dtype=x.dtype, device=x.device)
                if row is not None:
                    stand_in.select(dim, row).fill_(1)
                vals[i] = stand_in
            elif i not in pos and type(x) is int and x == n:
                vals[i] = k
        return vals

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
            vals = self._stand_in_leaves(leaves, pos, names, fill)
            try:
                with _stand_in(), torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    outs.append(self._prior_terms_fn(vals, spec, pos)(*[vals[i] for i in pos], *units))
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
        leaves, spec, _ = _tensor_arguments(self.model_args, self.model_kwargs)
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

    # ------------------------------------------------------------------ one row, one term (data-free)
    def rows_read_across(self) -> Optional[Dict[int, Tuple[int, ...]]]:
        r"""``{row changed: the other rows whose log-likelihood changed with it}`` on **stand-in
        data** of ``k`` rows (never the data), empty when each row's term depends on that row
        alone, ``None`` when it cannot be told. The stand-in replaces every data argument (a
        tensor with a dimension of ``N`` entries, :meth:`_data_arguments`) by zeros with ``k``
        entries in that dimension, and a Python ``int`` argument equal to ``N`` by ``k``; then
        the first row, and then the last, is set to ones, and the per-example log-likelihoods
        at the prior draw are compared. This catches data centred or standardised inside the
        model (``y - y.mean()``) and likelihoods that chain rows (a time series); it is not a
        proof, and a model that fails on the stand-in (``None``) is not checked (set-up warns).

        >>> import torch, pyro, pyro.distributions as dist
        >>> def model(y):
        ...     mu = pyro.sample("mu", dist.Normal(0., 5.))
        ...     with pyro.plate("data", len(y)):
        ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=(y - y.mean()) / y.std())
        >>> PrivateLikelihood(model, (torch.randn(10),), seed=0)
        Traceback (most recent call last):
        ...
        ValueError: the log-likelihood of one row depends on other rows' data: ...
        """
        n = self.num_rows
        if n < 2:
            return None
        k = min(STAND_IN_ROWS, n)
        leaves, spec, pos, names = self._data_arguments()
        if all(name is None for name in names):
            return None
        z = self.flatten(self.prototype_params)

        def evaluate(changed_row: Optional[int]):
            args, kwargs = tree_unflatten(self._stand_in_leaves(leaves, pos, names, 0, changed_row), spec)
            with _model_arguments(self, args, kwargs), _stand_in(), torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return self._terms(z, None)[0]

        try:
            base = evaluate(None)
            changed = {row: evaluate(row) for row in (0, k - 1)}
        except Exception:  # noqa: BLE001 - the model does not run on the stand-in: not checked
            return None
        if not (torch.is_tensor(base) and base.shape == (k,)):
            return None
        found = {}
        for row, ll in changed.items():
            if ll.shape != base.shape:
                return None
            same = _same_values(ll, base)
            others = [j for j in range(k) if j != row and not bool(same[j])]
            if others:
                found[row] = tuple(others)
        return found

    def _check_rows_independent(self, cache: Optional[dict]) -> None:
        """Refuse a model in which a row's log-likelihood reads other rows' data
        (:meth:`rows_read_across`), at set-up, before anything is released: every mechanism
        clips each row's own term, which bounds one person's effect only when no other term
        moves with that person's data. Cached per kernel object."""
        key = self._check_key("rows_read_across")
        cache = cache if cache is not None else {}
        if key not in cache:
            cache[key] = self.rows_read_across()
        found = cache[key]
        if found is None and self.num_rows >= 2:
            warnings.warn(
                "pyro_dp could not check that each row's log-likelihood reads that row alone: the model fails on "
                "stand-in data of its arguments' shapes (e.g. it takes N from a constant outside its arguments), or "
                "its data are not among its arguments (pyro.condition, a closure). Every release clips each row's own "
                "term: make sure no row's term depends on other rows (docs/privacy.md, 'One row, one term')",
                UserWarning, stacklevel=4)
        if found:
            row, others = next(iter(found.items()))
            raise ValueError(
                "the log-likelihood of one row depends on other rows' data: on stand-in data (zeros, never your "
                f"data), changing row {row} changed the terms of rows {list(others)}. Data centred or standardised "
                "inside the model (y - y.mean(), y / y.std()) or a likelihood that chains rows (a time series) does "
                "this. Every release clips each row's own term, which bounds one person's effect only when no "
                "other row's term moves with that person's data: standardise with public constants before calling "
                "the model, and keep each row's term a function of that row (docs/privacy.md, 'One row, one term')")

    def _probe_row_access(self) -> Optional[str]:
        """How the model can be evaluated on a subset of rows (shapes only): ``"index"`` if
        conditioning the data plate on indices makes every observed site that many rows (the
        model indexes its data, ``obs=y[idx]``); else ``"slice"`` if slicing the model's tensor
        arguments whose first dimension has ``N`` entries does (the usual idiom,
        ``pyro.plate("data", len(y))`` with ``obs=y``); else ``None``."""
        if self.num_rows < 2:
            return None
        idx = torch.tensor([0, 1], device=self.device)
        modes = ["index"] + (["slice"] if self._row_aligned_count() else [])
        for mode in modes:
            self.row_access = mode
            try:
                with poutine.block(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    tr, _ = self._trace(self.flatten(self.prototype_params), idx)
                # the value's and the distribution's batch shapes must both be 2 rows at the plate dim
                shapes = [torch.broadcast_shapes(_batch_shape(tr.nodes[n]), tr.nodes[n]["fn"].batch_shape)
                          for n in self.observed_names]
                ok = all(len(b) >= -self._plate_dim and b[self._plate_dim] == 2 for b in shapes)
            except Exception:
                ok = False
            if ok:
                return mode
        self.row_access = None
        return None

    def _row_aligned(self, t) -> bool:
        return torch.is_tensor(t) and t.dim() >= 1 and t.shape[0] == self.num_rows

    def _row_aligned_count(self) -> int:
        return sum(self._row_aligned(t) for t in _iter_tensors((self.model_args, self.model_kwargs)))

    def _sliced_args(self, idx):
        """The model's arguments with every row-aligned tensor (first dimension of size ``N``)
        restricted to rows ``idx`` (the ``"slice"`` row access)."""
        def cut(t):
            return t[idx] if self._row_aligned(t) else t

        return tree_map(cut, self.model_args), tree_map(cut, self.model_kwargs)

    # ------------------------------------------------------------------ flat <-> sites
    def flatten(self, params: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Unconstrained ``{site: tensor}`` → flat vector of length :attr:`dim`."""
        try:
            return torch.cat([params[n].reshape(-1) for n in self.latent_names])
        except KeyError as e:
            raise KeyError(f"missing latent site {e.args[0]!r} in params") from None

    def coordinate_names(self) -> Tuple[str, ...]:
        """A name per coordinate of the flat unconstrained vector: ``"site"`` for a scalar latent,
        ``"site[j]"`` (flat index ``j`` within the site) otherwise. Data-free.

        >>> import torch
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0).coordinate_names()
        ('mu',)
        """
        out = []
        for n in self.latent_names:
            k = self._sizes[n]
            out.extend([n] if k == 1 and len(self._shapes[n]) == 0 else [f"{n}[{j}]" for j in range(k)])
        return tuple(out)

    def unravel(self, z: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Flat unconstrained vector → ``{site: unconstrained tensor}``."""
        out, pos = {}, 0
        for n in self.latent_names:
            k = self._sizes[n]
            out[n] = z[pos : pos + k].reshape(self._shapes[n])
            pos += k
        return out

    def constrain(self, z: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Flat unconstrained vector → ``{site: constrained value}``."""
        return {n: self.transforms[n].inv(u) for n, u in self.unravel(z).items()}

    # ------------------------------------------------------------------ evaluation
    def _trace(self, z, idx=None):
        values, logdet = {}, 0.0
        for n, u in self.unravel(z).items():
            tf = self.transforms[n]
            x = tf.inv(u)
            values[n] = x
            # log |d x / d u| = -log |d u / d x|
            logdet = logdet - tf.log_abs_det_jacobian(x, u).sum()
        args, kwargs = self.model_args, self.model_kwargs
        if idx is not None:
            if getattr(self, "row_access", "index") == "slice":
                args, kwargs = self._sliced_args(idx)
            else:
                values[self.data_plate] = idx
        # Pyro's validation off (as inside MCMC.run): a row outside the likelihood's support gives
        # a -inf term, handled by the per-row rule of the release, instead of an exception that
        # would depend on that one row.
        with pyro.validation_enabled(False), _kernel_chooses_rows():
            tr = poutine.trace(poutine.condition(self.model, data=values)).get_trace(*args, **kwargs)
        return tr, logdet

    def _terms(self, z, idx=None, loglik: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
        tr, lp = self._trace(z, idx)
        with pyro.validation_enabled(False):
            return self._sum_terms(tr, lp, loglik)

    def _sum_terms(self, tr, lp, loglik: bool):
        for n in self.latent_names:
            site = tr.nodes[n]
            lp = lp + site["fn"].log_prob(site["value"]).sum()
        if not loglik:  # the prior alone: no observed site's density is evaluated
            return None, lp
        ll = 0.0
        d = self._plate_dim
        for n in self.observed_names:
            site = tr.nodes[n]
            term = site["fn"].log_prob(site["value"])
            if site["mask"] is not None:
                term = torch.where(site["mask"], term, torch.zeros_like(term))
            batch = _batch_shape(site)
            size = batch[d]
            # broadcast to the value's batch shape so the plate dim is materialised
            term = term.expand(torch.broadcast_shapes(term.shape, batch))
            term = torch.movedim(term, d, 0).reshape(size, -1).sum(-1)
            ll = ll + term
        return ll, lp

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_jit_cache"] = None  # the kernel object's shared cache (compiled graphs) stays in its process
        return state

    # ------------------------------------------------------------------ the likelihood's coordinates (data-free)
    @property
    def likelihood_mask(self) -> Optional[torch.Tensor]:
        r"""``[D]`` 0/1 in the chain's dtype: the coordinates of the latent sites the per-example
        log-likelihood depends on; ``None`` when it depends on every site (or when that cannot
        be determined): a site that enters only the prior, such as a hierarchical model's
        population mean and scale, is not one of them. **Data-free** (:meth:`likelihood_sites`).

        The kernels use it in two places, both safe whatever the mask says: the norm of a
        move in the ratio clip, :meth:`jump_norm` (the clip is applied to the released ratios,
        so their sensitivity is what the noise assumes), and the released gradients,
        :meth:`project` (post-processing of a release).

        >>> import torch, pyro, pyro.distributions as dist
        >>> def model(y):
        ...     mu = pyro.sample("mu", dist.Normal(0., 5.))
        ...     theta = pyro.sample("theta", dist.Normal(mu, 1.))  # mu enters only theta's prior
        ...     with pyro.plate("data", len(y)) as i:
        ...         pyro.sample("obs", dist.Normal(theta, 1.), obs=y[i])
        >>> PrivateLikelihood(model, (torch.zeros(4),), seed=0).likelihood_mask
        tensor([0., 1.])
        """
        if not hasattr(self, "_likelihood_mask"):
            sites = self.likelihood_sites()
            mask = None
            if sites is not None and set(sites) != set(self.latent_names):
                mask = torch.cat([torch.full((self._sizes[n],), float(n in sites), dtype=self.dtype,
                                             device=self.device) for n in self.latent_names])
            self._likelihood_mask = mask
        return self._likelihood_mask

    def likelihood_sites(self) -> Optional[Tuple[str, ...]]:
        r"""The latent sites the per-example log-likelihood depends on, from the model's code and
        the shapes of its arguments only, or ``None`` if that cannot be determined.

        The log-likelihood of the observed sites in the data plate is traced into a graph
        (:func:`torch.fx.experimental.proxy_tensor.make_fx`) with every latent site a separate
        input and the model's tensor arguments as **fake tensors** (a shape, a dtype and a
        device, no values, as the compiled path traces them: ``docs/performance.md``); a site
        belongs to the likelihood when its input is an ancestor of the output. No value of the
        data exists during the trace, so the answer cannot depend on one. ``None`` (every site
        counts, as before) when the trace fails (a branch on a value), or when an observed
        value is not a fake tensor (data read from the model's closure, whose values the
        trace would see)."""
        cache = self._jit_cache if self._jit_cache is not None else {}
        key = ("likelihood_sites", self.latent_names, tuple(tuple(self._shapes[n]) for n in self.latent_names),
               tuple((tuple(t.shape), t.dtype, str(t.device)) for t in _iter_tensors((self.model_args,
                                                                                       self.model_kwargs))))
        if key not in cache:
            cache[key] = self._trace_likelihood_sites()
        return cache[key]

    def _trace_likelihood_sites(self) -> Optional[Tuple[str, ...]]:
        from torch._subclasses.fake_tensor import is_fake
        from torch.fx.experimental.proxy_tensor import make_fx

        leaves, spec, pos = _tensor_arguments(self.model_args, self.model_kwargs)
        data, names = [leaves[i] for i in pos], self.latent_names

        def loglik(*inputs):
            args, kwargs = _with_tensors(leaves, spec, pos, inputs[: len(data)])
            values = {n: self.transforms[n].inv(u) for n, u in zip(names, inputs[len(data):])}
            with poutine.block(), pyro.validation_enabled(False), _kernel_chooses_rows():
                tr = poutine.trace(poutine.condition(self.model, data=values)).get_trace(*args, **kwargs)
                if not all(is_fake(tr.nodes[n]["value"]) for n in self.observed_names):
                    raise ValueError("an observed value is not a model argument")  # closure data: see docstring
                return self._sum_terms(tr, torch.zeros((), dtype=self.dtype, device=self.device), True)[0]

        units = [self.prototype_params[n] for n in names]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graph = make_fx(loglik, tracing_mode="fake", _allow_non_fake_inputs=True)(*data, *units)
        except Exception:  # noqa: BLE001 - undetermined: every site counts (no change)
            return None
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        site_of = {node: name for node, name in zip(placeholders[len(data):], names)}
        seen = _ancestors(n for n in graph.graph.nodes if n.op == "output")
        return tuple(n for node, n in site_of.items() if node in seen)

    def jump_norm(self, z_new: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        r""":math:`\|m\odot(\theta'-\theta)\|` with :math:`m` = :attr:`likelihood_mask` (all ones when
        ``None``): the length of a move as the per-example log-likelihood sees it, which scales
        the ratio clip :math:`b\|\theta'-\theta\|` of the penalty kernels (Räisä 2021 thesis
        §3.1, Thm 11). A move in sites that enter only the prior changes no row's likelihood:
        its ratios are exactly zero, and so is its clip and noise. Privacy does not rest on the
        mask being right: the ratios are clipped to this bound, whatever they are.

        >>> import torch
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0)
        >>> float(lik.jump_norm(torch.tensor([3.0]), torch.tensor([-1.0])))
        4.0
        """
        mask = self.likelihood_mask
        return torch.linalg.vector_norm(z_new - z if mask is None else (z_new - z) * mask)

    def project(self, released: torch.Tensor) -> torch.Tensor:
        r"""A released sum of per-example gradients (noise added) restricted to
        :attr:`likelihood_mask`'s coordinates: in the others the clipped sum is exactly zero
        (no row's likelihood depends on them) and what was released there is noise alone.
        Post-processing of the release, so private whatever the mask; unchanged when ``None``.

        >>> import torch
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0).project(torch.tensor([0.7]))
        tensor([0.7000])
        """
        mask = self.likelihood_mask
        return released if mask is None else released * mask

    def _check_idx(self, idx):
        if idx is None:
            return None
        idx = torch.as_tensor(idx, device=self.device)
        if idx.dim() != 1 or idx.dtype in (torch.float16, torch.float32, torch.float64, torch.bool):
            raise ValueError("idx must be a 1-d integer tensor of row indices")
        if not self._indexable:
            raise ValueError(
                f"subset evaluation needs a model that indexes its data by the indices of plate {self.data_plate!r}"
            )
        return idx

    @property
    def indexable(self) -> bool:
        """Whether a subset of rows can be evaluated (:attr:`row_access` is ``"index"`` or
        ``"slice"``): enables row subsets, minibatches and the fast per-example gradient path."""
        return self._indexable

    def per_example_statistic(self, statistic: Callable, idx=None) -> torch.Tensor:
        r"""``[B, d]``: ``statistic`` applied to the observed rows of the (single) observed
        site, for kernels that release sufficient statistics (Yıldırım & Ermiş 2019 §3.3).
        **Reads the data**: pass the result through a mechanism."""
        if len(self.observed_names) != 1:
            raise ValueError(f"needs exactly one observed site, got {list(self.observed_names)}")
        idx = self._check_idx(idx)
        with torch.no_grad():
            tr, _ = self._trace(self.flatten(self.prototype_params), idx)
            site = tr.nodes[self.observed_names[0]]
            rows = torch.movedim(site["value"], self._plate_dim - site["fn"].event_dim, 0)
            out = statistic(rows)
        return out.reshape(rows.shape[0], -1) if out.dim() == 1 else out

    def log_prior(self, z: torch.Tensor) -> torch.Tensor:
        r"""Data-free :math:`\log p(\theta) + \log|\det J|` at unconstrained ``z``."""
        if self.compiled is not None:
            out = self.compiled.log_prior(z)
            if out is not None:
                return out
        return self._eager_log_prior(z)

    def _eager_log_prior(self, z):
        idx = torch.zeros(1, dtype=torch.long, device=self.device) if self._indexable else None
        return self._terms(z, idx, loglik=False)[1]

    def grad_log_prior(self, z: torch.Tensor) -> torch.Tensor:
        """Gradient of :meth:`log_prior` (data-free)."""
        if self.compiled is not None:
            out = self.compiled.log_prior_and_grad(z)
            if out is not None:
                return out[1]
        return torch.func.grad(self._eager_log_prior)(z)

    def log_prior_and_grad(self, z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(log_prior(z), its gradient)``, data-free (reverse-mode autograd; a flat prior
        has gradient zero)."""
        if self.compiled is not None:
            out = self.compiled.log_prior_and_grad(z)
            if out is not None:
                return out
        with torch.enable_grad():
            zz = z.detach().requires_grad_(True)
            lp = torch.as_tensor(self._eager_log_prior(zz), dtype=zz.dtype, device=zz.device)
            if not lp.requires_grad:  # a flat (improper) prior: constant, no autograd graph
                return lp.detach(), torch.zeros_like(zz)
            (g,) = torch.autograd.grad(lp, zz, allow_unused=True)
        return lp.detach(), (torch.zeros_like(zz) if g is None else g)

    def per_example_loglik(self, z: torch.Tensor, idx=None) -> torch.Tensor:
        r"""Untempered :math:`\ell_i(\theta)` for every row (``idx=None``) or rows ``idx``."""
        return self.loglik_and_prior(z, idx)[0]

    def loglik_and_prior(self, z: torch.Tensor, idx=None) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(per-example log-likelihoods, log prior)`` from one model evaluation."""
        idx = self._check_idx(idx)
        if self.compiled is not None:
            out = self.compiled.loglik_and_prior(z, idx)
            if out is not None:
                return out
        return self._eager_loglik_and_prior(z, idx)

    def log_ratios(self, z: torch.Tensor, z_new: torch.Tensor, idx=None) -> Tuple[torch.Tensor, torch.Tensor]:
        r"""``(r, log prior at z_new)`` with :math:`r_i = \ell_i(z') - \ell_i(z)` (untempered) for
        every row or rows ``idx``: the minibatch kernels' per-row ratios. One graph (and one
        padding of ``idx``) on the compiled path instead of two model evaluations.
        **Reads the data**: release only through a mechanism.

        >>> import torch
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0)
        >>> r, lp = lik.log_ratios(torch.tensor([0.0]), torch.tensor([1.0]))
        >>> r
        tensor([-0.5000,  2.5000])
        """
        idx = self._check_idx(idx)
        if self.compiled is not None:
            out = self.compiled.log_ratios(z, z_new, idx)
            if out is not None:
                return out
        ll_old, _ = self._eager_loglik_and_prior(z, idx)
        ll_new, lp_new = self._eager_loglik_and_prior(z_new, idx)
        return ll_new - ll_old, lp_new

    def _eager_loglik_and_prior(self, z, idx):
        with torch.no_grad():
            return self._terms(z, idx)

    def per_example_grad(self, z: torch.Tensor, idx=None) -> Tuple[torch.Tensor, torch.Tensor]:
        r"""``(ℓ_i(θ) [B], ∇_θ ℓ_i(θ) [B, D])`` for every row or rows ``idx``.

        Uses ``vmap(grad_and_value)`` over injected row indices when the model indexes its
        data by the plate (FACTS: ~0.05 s for N=1e4, D=11), else a forward-mode Jacobian
        of the full vector (``jacfwd``; slower, documented fallback).
        """
        idx = self._check_idx(idx)
        if self.compiled is not None:
            out = self.compiled.per_example_grad(z, idx)
            if out is not None:
                return out
        return self._eager_per_example_grad(z, idx)

    def clipped_grad_sum(self, z: torch.Tensor, clip, idx=None):
        r"""``(ℓ_i(θ) [B], ClippedSum)``: the per-example gradients passed through
        :func:`~pyro_dp.mechanisms.clip_and_sum` (the per-row rule, the clip to L2 norm ``clip``
        and the sum), for :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`. The compiled path
        fuses the three into one graph and never materialises more than
        :data:`~pyro_dp.compiled.CHUNK_ELEMENTS` per-example gradient entries at once.
        **Reads the data**: release the sum only through the mechanism.

        >>> import torch
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0)
        >>> ll, cs = lik.clipped_grad_sum(torch.tensor([1.0]), clip=1.0)
        >>> cs.total, int(cs.num_clipped)  # gradients -1 and 2, the second clipped to 1
        (tensor([0.]), 1)
        """
        idx = self._check_idx(idx)
        if self.compiled is not None:
            out = self.compiled.clipped_grad_sum(z, clip, idx)
            if out is not None:
                return out
        ll, g = self._eager_per_example_grad(z, idx)
        return ll, clip_and_sum(g, clip)

    def clipped_ratio_sum(self, z_new: torch.Tensor, ll_old: torch.Tensor, clip, idx=None):
        r"""``(ℓ_i(θ') [B], log prior at θ', ClippedSum)``: the per-example log-likelihood ratios
        :math:`\ell_i(\theta') - \ell_i(\theta)` (``ll_old`` holds :math:`\ell_i(\theta)` for the same
        rows) passed through :func:`~pyro_dp.mechanisms.clip_and_sum` (the per-row rule, the clip
        to ``[-clip, clip]`` and the sum), for :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`.
        Fused into one graph on the compiled path. **Reads the data**.

        >>> import torch
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0)
        >>> old = lik.per_example_loglik(torch.tensor([0.0]))
        >>> ll, lp, cs = lik.clipped_ratio_sum(torch.tensor([1.0]), old, clip=2.0)
        >>> cs.total, int(cs.num_clipped)  # ratios -0.5 and 2.5, the second clipped to 2
        (tensor(1.5000), 1)
        """
        idx = self._check_idx(idx)
        if self.compiled is not None:
            out = self.compiled.clipped_ratio_sum(z_new, ll_old, clip, idx)
            if out is not None:
                return out
        ll_new, lp_new = self._eager_loglik_and_prior(z_new, idx)
        return ll_new, lp_new, clip_and_sum(ll_new - ll_old, clip)

    def clipped_difference_sum(self, ll_new: torch.Tensor, ll_old: torch.Tensor, clip) -> "ClippedSum":
        r"""The per-example log-likelihood ratios ``ll_new - ll_old`` (both computed by this
        likelihood for the same rows) passed through :func:`~pyro_dp.mechanisms.clip_and_sum`
        (the per-row rule, the clip to ``[-clip, clip]`` and the sum), for
        :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`: DP-HMC's ratio release, whose
        :math:`\ell_i(\theta')` come from the trajectory's last gradient pass. One graph on
        the compiled path. **Reads the data** (through its arguments).

        >>> import torch
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0)
        >>> cs = lik.clipped_difference_sum(torch.tensor([-0.5, 2.5]), torch.zeros(2), clip=2.0)
        >>> cs.total, int(cs.num_clipped)  # ratios -0.5 and 2.5, the second clipped to 2
        (tensor(1.5000), 1)
        """
        if self.compiled is not None:
            out = self.compiled.clipped_difference_sum(ll_new, ll_old, clip)
            if out is not None:
                return out
        return clip_and_sum(ll_new - ll_old, clip)

    def _eager_per_example_grad(self, z, idx):
        if self._indexable:
            rows = idx if idx is not None else torch.arange(self.num_rows, device=self.device)

            def one(zz, i):
                return self._terms(zz, i)[0].sum()

            g, v = vmap(grad_and_value(one), in_dims=(None, 0), chunk_size=self.vmap_chunk_size)(
                z, rows.unsqueeze(-1)
            )
            return v.detach(), g.detach()

        def full(zz):
            ll = self._terms(zz, None)[0]
            return ll, ll

        jac, ll = jacfwd(full, has_aux=True)(z)
        # in the latent's dtype, as reverse mode gives it: forward mode can promote a float32
        # derivative to float64 (the jvp of Pyro's AffineTransform(0., 1) at a 0-d float32
        # point, torch 2.13), which would turn a float32 chain's state float64
        return ll.detach(), jac.detach().to(z.dtype)
