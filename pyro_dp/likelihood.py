r"""A Pyro model seen as private per-example terms: **the only module that touches data**.

:class:`PrivateLikelihood` takes a Pyro model and its arguments and exposes

* the latent sites as one flat vector in Pyro's unconstrained space (transforms from
  :func:`torch.distributions.biject_to`, exactly as :func:`pyro.infer.mcmc.util.initialize_model`
  builds them),
* the data-free log prior density in that space (prior + log-Jacobian),
* the per-example log-likelihood vector :math:`\ell_i(\theta)` of the observed sites in the
  data :class:`pyro.plate`, for all rows or an index subset, and
* per-example gradients :math:`\nabla_\theta \ell_i(\theta)` through :mod:`torch.func`.

Nothing here adds noise or releases: what it returns is private (:mod:`pyro_dp.private`) until a mechanism releases it.

The guarantees, by construction (``docs/privacy.md``, "What the construction guarantees"):

* **One row, one term.** Row :math:`i`'s term is the model evaluated on a data set of that
  row alone (:mod:`pyro_dp.isolation`): every data argument (:mod:`pyro_dp.arguments`) is
  sliced to its row, so no code in the model can make one row's data reach another row's term.
* **The prior and the structure read no data.** The model's structure (sites, plates, shapes)
  comes from a trace on fake tensors (shapes only); the start is drawn, and the prior evaluated
  in every step, on a stand-in row of zeros. A model that needs a Python value of its data
  (``int(y.max())``) is refused at set-up.
* **No exception or branch depends on a row.** Observed values outside their support get a
  placeholder and a NaN term (the per-row rule of every release maps it); a model that raises
  on some rows is bisected to them (:func:`~pyro_dp.isolation.robust_rows`).

The set-up checks (:mod:`pyro_dp.setup_checks`: correctness, not privacy) refuse what isolation would change.

Conventions
-----------
* The returned per-example terms are **untempered**. A kernel multiplies the *released*
  (clipped, noised) sum by ``temperature`` — post-processing — so clip bounds and
  sensitivities always refer to untempered terms (Räisä 2021 thesis, Alg. 3:
  :math:`g = T(\sum_i \mathrm{clip}(\nabla\ell_i) + \xi)`).
* The data plate's size :math:`N` is public (the substitution relation).

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
import math
import warnings
from types import MappingProxyType
from typing import Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple

import pyro
import pyro.poutine as poutine
import torch
from pyro.infer.autoguide.initialization import InitMessenger, init_to_sample
from torch.distributions import biject_to
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import grad_and_value, vmap
from torch.utils._pytree import tree_flatten, tree_unflatten

from .arguments import ModelArguments
from .compiled import CompiledLikelihood
from .isolation import (describe_row_failure, is_value_dependent, kernel_chooses_rows,
                        nan_like_rows, robust_rows, support_rule, vmap_safe_distributions)
from .mechanisms.clipping import ClippedSum, clip_and_sum  # the pure clip rule only (docs/architecture.md)
from .coordinates import LikelihoodCoordinates
from .preconditioning import Preconditioned
from .private import boundary, private, private_sum, reveal
from .diagnose import explain_failure
from .reach import CallGuard, describe_outside, outside_data
from .structure import batch_shape, find_data_plate as _find_data_plate, parse_trace
from .setup_checks import SetUpChecks, on_stand_in, stand_in  # noqa: F401 - on_stand_in re-exported for tests

__all__ = ["PrivateLikelihood"]

#: why the likelihood reveals its own private terms a kernel hands back: computed on plain, returned private
_OWN_INPUT = "the likelihood's own private terms, computed on inside it and returned private"


@contextlib.contextmanager
def forked_rng(seed: Optional[int]):
    """Run a block with torch's global RNG seeded and restored afterwards (no hidden
    global state leaks out, and the block is reproducible from ``seed``)."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        if seed is not None:
            torch.manual_seed(int(seed))
        yield



class PrivateLikelihood(SetUpChecks, LikelihoodCoordinates, Preconditioned):
    r"""Private per-example terms of a Pyro model.

    :param model: a Pyro model whose observed sites all lie in one vectorised
        :class:`pyro.plate` over the rows (the *data plate*); its data are arguments whose
        first dimension indexes the rows (``obs=y`` or ``obs=y[idx]`` alike).
    :param tuple model_args: positional arguments of ``model`` (the data).
    :param dict model_kwargs: keyword arguments of ``model``.
    :param public: positions and keywords of arguments that are public although they look like
        data (a tensor whose first dimension has ``N`` entries); see :mod:`pyro_dp.arguments`.
    :param str data_plate: name of the data plate; by default the single plate that
        encloses every observed site.
    :param float temperature: :math:`T > 0`, stored for kernels (see module doc).
    :param dict transforms: optional ``{site: transform}`` to unconstrained space
        (defaults to ``biject_to(support).inv`` as in Pyro's HMC).
    :param init_strategy: Pyro init strategy used to draw the prototype (and default
        initial) latent values; it must be data-free (default
        :func:`~pyro.infer.autoguide.initialization.init_to_sample`, a prior draw).
    :param int seed: seed of the prototype draw (the global RNG is forked and restored).
    :param int vmap_chunk_size: optional chunk size for the per-row ``vmap``.
    :param bool jit_compile: trace the per-example functions once into graphs and compile
        them (:mod:`pyro_dp.compiled`); the same values, much faster after a one-time compile.
    :param dict jit_options: ``{"backend": "inductor" | "graph", "check": True (default: :mod:`pyro_dp.compile_check`)
        | False, **torch.compile kwargs}``; the CUDA-graph modes (``mode="reduce-overhead"``, ``"max-autotune"``) are refused.
    :param dict jit_cache: graphs shared with other likelihoods of the same kernel object.

    **Internals with public names.** The ``eager_*`` methods and :meth:`joint_trace` are this
    class's own evaluation (no compiled path, no check of ``idx``), named publicly so that the
    compiled layer and the kernels' fused graphs can trace them. Every method returns what it
    computes from the data as :class:`~pyro_dp.private.Private` (issue 58: no kernel code reads it
    into Python; the mechanisms' releases return public values): the ``eager_*`` methods and
    :attr:`model_args`/:attr:`model_kwargs` too (their data leaves), except under a trace (fake
    tensors: no value exists; the compiled layer wraps a graph's outputs) and inside the class
    (:func:`~pyro_dp.private.boundary`: its own evaluation runs on plain tensors).
    
    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(0., 10.))
    ...     with pyro.plate("data", len(y)) as idx:
    ...         pyro.sample("obs", dist.Normal(mu, 1.), obs=y[idx])
    >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 2.0]),), seed=0)
    >>> ll = lik.per_example_loglik(torch.tensor([1.0]))  # log N(y_i; mu=1, 1), one per row
    >>> ll  # private (pyro_dp.private): no kernel can read it without a release
    Private(shape=(2,), dtype=torch.float32)
    >>> from pyro_dp.private import reveal
    >>> reveal(ll, reason="a doctest")
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
        public: Iterable = (),
    ):
        if not callable(model):
            raise TypeError(f"model must be callable, got {type(model).__name__}")
        t = float(temperature)
        if not (t > 0 and math.isfinite(t)):
            raise ValueError(f"temperature must be positive and finite, got {temperature!r}")
        self.model = model
        #: the model's arguments, classified into data, row count and public (:mod:`pyro_dp.arguments`)
        self.arguments = ModelArguments(model_args, model_kwargs, public)
        self.temperature = t
        self.vmap_chunk_size = vmap_chunk_size
        self._init_strategy = init_strategy
        self._jit_cache = jit_cache  # also holds the set-up checks' answers, per kernel object
        # 1. Shapes from shapes: the data plate and N from a trace on fake tensors (no value exists)
        num_rows = self._structure_num_rows(data_plate)
        self.arguments.classify(num_rows)
        # 1b. Every other road to the data (closures, globals, defaults, objects, module buffers):
        # refused before any evaluation, from types, shapes and code (pyro_dp.reach)
        found = outside_data(model, self.arguments.args, self.arguments.kwargs, num_rows=num_rows)
        if found:
            raise ValueError(describe_outside(found, num_rows))
        self.num_rows = num_rows  # the tensor guard of every model call (_run) reads it
        # 2. The prototype (the default start, the sites, their supports and transforms) from a
        # trace on stand-in data (zeros in the data's shapes): a prior draw that reads no data.
        # No finiteness check of the data: a row may be NaN or infinite (the adversary's
        # choice); every term goes through the per-row rule (pyro_dp.isolation).
        with forked_rng(seed), poutine.block(), kernel_chooses_rows(), pyro.validation_enabled(False), stand_in():
            args, kwargs = self.arguments.build(self.arguments.stand_in(num_rows))
            guard = self._guard(args, kwargs, {})
            try:
                with guard:
                    trace = poutine.trace(InitMessenger(init_strategy)(model)).get_trace(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - decided on zeros in the data's shapes: data-free
                guard.refuse_reads(model, self.arguments.args, self.arguments.kwargs)  # the real cause, if any
                raise ValueError(explain_failure(
                    e, self.arguments, num_rows,
                    "The model fails on stand-in data (its data arguments replaced by zeros of the same shapes, never "
                    "your data): pyro_dp draws the start and evaluates the prior without reading the data, so the "
                    "model's code must run on any values of the right shapes (docs/privacy.md, 'What is refused')")) from e
            guard.refuse_reads(model, self.arguments.args, self.arguments.kwargs)
        s = parse_trace(trace, data_plate, transforms, self.arguments.leaves)
        #: the data plate's declared ``subsample_size`` (SVI's idiom), or ``None``: ignored when the
        #: model is evaluated (:func:`~pyro_dp.isolation.kernel_chooses_rows`), available as a batch-size hint
        self.declared_subsample_size = s.declared_subsample_size
        self.data_plate, self.num_rows, self._plate_dim = s.data_plate, s.num_rows, s.plate_dim
        #: latent sites inside a plate other than the data plate (group effects: the advice names one)
        self.plated_latents = s.plated_latents
        self.latent_names: Tuple[str, ...] = s.latent_names
        self.observed_names: Tuple[str, ...] = s.observed_names
        self.transforms: Dict[str, object] = s.transforms
        self._shapes, self._sizes, self.dim = s.shapes, s.sizes, s.dim
        self.dtype, self.device = s.dtype, s.device
        self.prototype_params = s.prototype_params  # data-free prior draw, unconstrained
        # 3. The set-up checks (data-free): a model that cannot be evaluated one row at a time (a
        # Python value of its data: under vmap the data are batched, latents are not), or whose
        # terms or prior would change under isolation, is refused before anything is released
        self._check_isolation(jit_cache)
        self._check_prior_reads_no_data(jit_cache)
        self._check_cross_rows(jit_cache)
        #: how a row subset is evaluated: every row is evaluated alone (:mod:`pyro_dp.isolation`)
        self.row_access = "isolated"
        #: rows over all ranks of a sharded kernel (:mod:`pyro_dp.distributed`); ``num_rows`` otherwise
        self.global_num_rows = self.num_rows
        #: the compiled path (:class:`~pyro_dp.compiled.CompiledLikelihood`), or ``None`` (eager)
        self.compiled = None
        if jit_compile:
            self.compiled = CompiledLikelihood(self, jit_options, jit_cache)

    # the model's arguments, their data leaves private (the likelihood layer reads self.arguments)
    @property
    def model_args(self) -> tuple:
        return self.arguments.private_view()[0]

    @property
    def model_kwargs(self) -> dict:
        return self.arguments.private_view()[1]

    # the model's structure (data-free: from the prototype trace on stand-ins), read-only
    @property
    def site_shapes(self) -> Mapping[str, torch.Size]:
        """``{latent site: shape of its unconstrained value}`` (data-free, read-only)."""
        return MappingProxyType(self._shapes)

    @property
    def site_sizes(self) -> Mapping[str, int]:
        """``{latent site: number of its unconstrained coordinates}`` (data-free, read-only); they
        sum to :attr:`dim`."""
        return MappingProxyType(self._sizes)

    @property
    def plate_dim(self) -> int:
        """The data plate's (negative) batch dimension in the model's trace (data-free)."""
        return self._plate_dim

    # ------------------------------------------------------------------ set-up (data-free)
    def _structure_num_rows(self, data_plate: Optional[str]) -> int:
        """``N``, the data plate's size, from the model's code and its arguments' shapes only: a
        trace with every tensor argument of one or more dimensions a fake tensor (shapes, no
        values); if the model cannot run on fakes, on zeros of the same shapes. Either way no
        value of the data is read, so no data value can decide a shape."""
        a = self.arguments
        errors = []
        for how in ("fake", "zeros"):
            # fakes: a tensor from outside the arguments becomes a fake too (never read); zeros: it is
            # replaced by zeros inside every operation (pyro_dp.reach.CallGuard without N)
            mode = FakeTensorMode(allow_non_fake_inputs=True) if how == "fake" else CallGuard(None, a.leaves)
            leaves = []
            for i, x in enumerate(a.leaves):
                if torch.is_tensor(x) and x.dim() >= 1 and not a.declared_public[i]:
                    x = mode.from_tensor(x) if how == "fake" else torch.zeros((), dtype=x.dtype,
                                                                                 device=x.device).expand(x.shape)
                leaves.append(x)
            args, kwargs = tree_unflatten(leaves, a.spec)
            try:
                with forked_rng(0), mode, poutine.block(), kernel_chooses_rows(), pyro.validation_enabled(False), \
                        stand_in(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    trace = poutine.trace(InitMessenger(self._init_strategy)(self.model)).get_trace(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - decided on fakes / zeros: data-free
                errors.append(e)
                continue
            _, frame, _, _ = _find_data_plate(trace, data_plate)
            return int(frame.size)
        e = errors[0]
        if is_value_dependent(e):
            raise ValueError(f"pyro_dp cannot determine the model's structure from its arguments' shapes: "
                             f"{describe_row_failure(e)} (docs/privacy.md, 'What is refused')") from e
        raise ValueError(explain_failure(
            errors[-1], a, None,
            "pyro_dp cannot determine the model's structure (its plates and sites) from its arguments' shapes: it "
            "traces the model on fake tensors and on zeros of the data's shapes, never your data. Name public tensor "
            "arguments whose values the model needs in public= (docs/privacy.md, 'What is refused')")) from e

    # ------------------------------------------------------------------ flat <-> sites
    def flatten(self, params: Dict[str, torch.Tensor], coordinates: bool = True) -> torch.Tensor:
        """Unconstrained ``{site: tensor}`` → flat vector of length :attr:`dim`, in the kernels'
        coordinates (:mod:`pyro_dp.preconditioning`; ``coordinates=False``: the flat unconstrained
        latents themselves)."""
        try:
            z = torch.cat([params[n].reshape(-1) for n in self.latent_names])
            return self._to_coordinates(z) if coordinates else z
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
        """Flat vector in the kernels' coordinates (:mod:`pyro_dp.preconditioning`) → ``{site:
        unconstrained tensor}``."""
        z = self._from_coordinates(z)
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
    def _latents(self, z):
        """``({site: constrained value}, log |det J|)`` at the flat unconstrained ``z``."""
        values, logdet = {}, 0.0
        for n, u in self.unravel(z).items():
            tf = self.transforms[n]
            x = tf.inv(u)
            values[n] = x
            # log |d x / d u| = -log |d u / d x|
            logdet = logdet - tf.log_abs_det_jacobian(x, u).sum()
        return values, logdet

    def _run(self, values, args, kwargs):
        """The model's trace on ``args``/``kwargs`` with the latents conditioned on ``values``.
        Pyro's validation is off (as inside ``MCMC.run``): a row outside the likelihood's support
        goes through the support rule, not an exception that would depend on that one row."""
        guard = self._guard(args, kwargs, values)
        with pyro.validation_enabled(False), kernel_chooses_rows(), vmap_safe_distributions():
            try:
                with guard:
                    tr = poutine.trace(poutine.condition(self.model, data=values)).get_trace(*args, **kwargs)
            finally:
                guard.refuse_reads(self.model, self.arguments.args, self.arguments.kwargs)
        return tr

    def _guard(self, args, kwargs, values) -> CallGuard:
        """The tensor guard of one model call (:class:`~pyro_dp.reach.CallGuard`): the call may
        read its arguments (rows, stand-ins, public values) and the latents; any other tensor with
        an ``N``-sized dimension is replaced by zeros and the call refused."""
        allowed = [x for x in tree_flatten((args, kwargs))[0] if torch.is_tensor(x)]
        return CallGuard(self.num_rows, allowed + [v for v in values.values() if torch.is_tensor(v)])

    def joint_trace(self, z, idx=None):
        """The model traced **jointly** on the current arguments (all rows, or rows ``idx``
        gathered, with a row-count argument of their number): for the set-up checks, which run
        it on stand-ins only. Terms are never computed from it (:meth:`eager_terms` is per row)."""
        values, logdet = self._latents(z)
        args, kwargs = self.arguments.args, self.arguments.kwargs
        if idx is not None:
            rows = [x.index_select(0, idx) for x in self.arguments.data]
            args, kwargs = self.arguments.build(rows, count=int(idx.numel()))
        return self._run(values, args, kwargs), logdet

    def _observed_terms(self, tr) -> torch.Tensor:
        r"""Per-row log-likelihoods ``[B]`` (``B`` the plate's size in ``tr``) of the observed sites,
        through the support rule (:func:`~pyro_dp.isolation.support_rule`): a row with a value
        outside its distribution's support gets a NaN term, which the per-row rule of the release
        maps; its ``log_prob`` sees a valid placeholder instead (no gather fails on a bad label)."""
        with pyro.validation_enabled(False):
            return self._observed_terms_unvalidated(tr)

    def _observed_terms_unvalidated(self, tr) -> torch.Tensor:
        ll, bad = 0.0, None
        d = self._plate_dim
        for n in self.observed_names:
            site = tr.nodes[n]
            fn = site["fn"]
            value, ok = support_rule(fn, site["value"])
            term = fn.log_prob(value)
            if site["mask"] is not None:
                term = torch.where(site["mask"], term, torch.zeros_like(term))
            batch = batch_shape(site)
            size = batch[d]
            # broadcast to the value's batch shape so the plate dim is materialised
            term = term.expand(torch.broadcast_shapes(term.shape, batch))
            term = torch.movedim(term, d, 0).reshape(size, -1).sum(-1)
            ll = ll + term
            if ok is not None:
                if site["mask"] is not None:
                    ok = ok | ~site["mask"]
                ok = ok.expand(torch.broadcast_shapes(ok.shape, batch))
                row_ok = torch.movedim(ok, d, 0).reshape(size, -1).all(-1)
                bad = ~row_ok if bad is None else bad | ~row_ok
        if bad is not None:
            ll = torch.where(bad, torch.full_like(ll, float("nan")), ll)
        return ll

    def _prior_terms(self, tr, logdet) -> torch.Tensor:
        lp = logdet
        with pyro.validation_enabled(False):
            for n in self.latent_names:
                site = tr.nodes[n]
                lp = lp + site["fn"].log_prob(site["value"]).sum()
        return lp

    def eager_row_term(self, z, *row):
        """Row ``i``'s log-likelihood: the model evaluated on the data set of row ``i`` alone
        (each data argument ``[1, ...]``, a row-count argument ``1``): called under ``vmap``."""
        values, _ = self._latents(z)
        args, kwargs = self.arguments.build(list(row), count=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tr = self._run(values, args, kwargs)
        return self._observed_terms(tr).sum()

    @boundary(private)
    def eager_rows(self, idx):
        """The rows to evaluate, each data argument as ``[B, 1, ...]``: **the data** (private;
        plain inside the likelihood and in the compiled layer's traces)."""
        return self.arguments.rows(idx)

    @boundary(private)
    def per_row(self, fn: Callable, z, idx=None, fill: Optional[Callable] = None):
        """``fn(z, *rows)`` (a ``vmap`` over the rows of a function of :meth:`eager_row_term`,
        e.g. its Hessian) on every row or rows ``idx``, each from that row alone; rows whose code
        raises bisected to ``fill(b)`` (``None``: the exception raised). **Private**."""
        if fill is None:
            return fn(z, *self.eager_rows(idx))
        return robust_rows(lambda r: fn(z, *r), self.eager_rows(idx), fill)

    @boundary(private)
    def eager_isolated_loglik(self, z, idx=None, robust: bool = True) -> torch.Tensor:
        """``[B]``: every row's (or rows ``idx``') term, each from that row alone (rows whose
        code raises bisected to NaN terms, or, with ``robust=False``, the exception raised)."""
        fn = vmap(self.eager_row_term, in_dims=(None,) + (0,) * len(self.arguments.data_pos), chunk_size=self.vmap_chunk_size)
        return self.per_row(fn, z, idx, (lambda b: nan_like_rows(b, None, z.dtype, z.device)) if robust else None)

    @boundary(lambda out: (private(out[0]), out[1]))
    def eager_terms(self, z, idx=None, loglik: bool = True) -> Tuple[Optional[torch.Tensor], torch.Tensor]:
        """``(per-row terms [B] from isolated rows, or None; the log prior from a stand-in row)``."""
        return (self.eager_isolated_loglik(z, idx) if loglik else None), self.eager_log_prior(z)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_jit_cache"] = None  # the kernel object's shared cache (compiled graphs) stays in its process
        return state

    def _check_idx(self, idx):
        idx = idx if idx is None else torch.as_tensor(idx, device=self.device)
        if idx is not None and (idx.dim() != 1 or idx.dtype in (torch.float16, torch.float32, torch.float64, torch.bool)):
            raise ValueError("idx must be a 1-d integer tensor of row indices")
        return idx

    @property
    def indexable(self) -> bool:
        """Whether a subset of rows can be evaluated: always (every row is evaluated alone,
        :mod:`pyro_dp.isolation`); kept for the kernels that ask."""
        return True

    @boundary()
    def per_example_statistic(self, statistic: Callable, idx=None) -> torch.Tensor:
        r"""``[B, d]``: ``statistic`` applied to each observed row of the (single) observed site,
        for kernels that release sufficient statistics (Yıldırım & Ermiş 2019 §3.3). Each row's
        value comes from the model evaluated on that row alone and the statistic is applied to
        that row alone (``vmap``), like every other per-example term. **Reads the data**: pass
        the result through a mechanism."""
        if len(self.observed_names) != 1:
            raise ValueError(f"needs exactly one observed site, got {list(self.observed_names)}")
        idx = self._check_idx(idx)
        z = self.flatten(self.prototype_params)
        name = self.observed_names[0]

        def one(*row):
            values, _ = self._latents(z)
            args, kwargs = self.arguments.build(list(row), count=1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                site = self._run(values, args, kwargs).nodes[name]
            rows = torch.movedim(site["value"], self._plate_dim - site["fn"].event_dim, 0)
            out = statistic(rows)
            return out.reshape(1, -1)[0]

        with torch.no_grad():
            out = vmap(one, chunk_size=self.vmap_chunk_size)(*self.eager_rows(idx))
        return private(out)

    def _stand_in_row(self):
        """``(args, kwargs)`` of a one-row stand-in (zeros in the data's row shapes, a row count
        of 1): what the prior is evaluated on (it reads no data, by construction)."""
        return self.arguments.build(self.arguments.stand_in(1), count=1)

    def log_prior(self, z: torch.Tensor) -> torch.Tensor:
        r"""Data-free :math:`\log p(\theta) + \log|\det J|` at unconstrained ``z``: the model's
        latent sites evaluated on a stand-in row of zeros, never the data."""
        if self.compiled is not None:
            out = self.compiled.log_prior(z)
            if out is not None:
                return out
        return self.eager_log_prior(z)

    def eager_log_prior(self, z):
        """:meth:`log_prior` without the compiled path (internal: what the compiled layer traces)."""
        values, logdet = self._latents(z)
        args, kwargs = self._stand_in_row()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tr = self._run(values, args, kwargs)
        return self._prior_terms(tr, logdet)

    def grad_log_prior(self, z: torch.Tensor) -> torch.Tensor:
        """Gradient of :meth:`log_prior` (data-free)."""
        if self.compiled is not None:
            out = self.compiled.log_prior_and_grad(z)
            if out is not None:
                return out[1]
        return torch.func.grad(self.eager_log_prior)(z)

    def log_prior_and_grad(self, z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(log_prior(z), its gradient)``, data-free (reverse-mode autograd; a flat prior
        has gradient zero)."""
        if self.compiled is not None:
            out = self.compiled.log_prior_and_grad(z)
            if out is not None:
                return out
        with torch.enable_grad():
            zz = z.detach().requires_grad_(True)
            lp = torch.as_tensor(self.eager_log_prior(zz), dtype=zz.dtype, device=zz.device)
            if not lp.requires_grad:  # a flat (improper) prior: constant, no autograd graph
                return lp.detach(), torch.zeros_like(zz)
            (g,) = torch.autograd.grad(lp, zz, allow_unused=True)
        return lp.detach(), (torch.zeros_like(zz) if g is None else g)

    def per_example_loglik(self, z: torch.Tensor, idx=None) -> torch.Tensor:
        r"""Untempered :math:`\ell_i(\theta)` for every row (``idx=None``) or rows ``idx``."""
        return self.loglik_and_prior(z, idx)[0]

    @boundary()
    def loglik_and_prior(self, z: torch.Tensor, idx=None) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(per-example log-likelihoods, log prior)`` from one model evaluation."""
        idx = self._check_idx(idx)
        if self.compiled is not None:
            out = self.compiled.loglik_and_prior(z, idx)
            if out is not None:
                return private(out[0]), out[1]
        ll, lp = self.eager_loglik_and_prior(z, idx)
        return private(ll), lp  # the log prior reads no data (a stand-in row): public

    @boundary()
    def log_ratios(self, z: torch.Tensor, z_new: torch.Tensor, idx=None) -> Tuple[torch.Tensor, torch.Tensor]:
        r"""``(r, log prior at z_new)`` with :math:`r_i = \ell_i(z') - \ell_i(z)` (untempered) for
        every row or rows ``idx``: the minibatch kernels' per-row ratios. One graph (and one
        padding of ``idx``) on the compiled path instead of two model evaluations.
        **Reads the data**: release only through a mechanism.

        >>> import torch
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0)
        >>> from pyro_dp.private import reveal
        >>> r, lp = lik.log_ratios(torch.tensor([0.0]), torch.tensor([1.0]))
        >>> reveal(r, reason="a doctest")
        tensor([-0.5000,  2.5000])
        """
        idx = self._check_idx(idx)
        if self.compiled is not None:
            out = self.compiled.log_ratios(z, z_new, idx)
            if out is not None:
                return private(out[0]), out[1]
        ll_old, _ = self.eager_loglik_and_prior(z, idx)
        ll_new, lp_new = self.eager_loglik_and_prior(z_new, idx)
        return private(ll_new - ll_old), lp_new

    @boundary(lambda out: (private(out[0]), out[1]))
    def eager_loglik_and_prior(self, z, idx):
        """:meth:`loglik_and_prior` without the compiled path or the check of ``idx`` (internal:
        what the compiled layer and the kernels' fused graphs trace). **Reads the data**."""
        with torch.no_grad():
            return self.eager_terms(z, idx)

    @boundary()
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
                return private(out)
        return private(self.eager_per_example_grad(z, idx))

    @boundary()
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
        >>> from pyro_dp.private import reveal
        >>> ll, cs = lik.clipped_grad_sum(torch.tensor([1.0]), clip=1.0)
        >>> total, num_clipped = reveal((cs.total, cs.num_clipped), reason="a doctest")
        >>> total, int(num_clipped)  # gradients -1 and 2, the second clipped to 1
        (tensor([0.]), 1)
        """
        idx = self._check_idx(idx)
        if self.compiled is not None:
            out = self.compiled.clipped_grad_sum(z, clip, idx)
            if out is not None:
                return private_sum(out)
        ll, g = self.eager_per_example_grad(z, idx)
        return private_sum((ll, clip_and_sum(g, clip)))

    @boundary()
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
        >>> from pyro_dp.private import reveal
        >>> total, num_clipped = reveal((cs.total, cs.num_clipped), reason="a doctest")
        >>> total, int(num_clipped)  # ratios -0.5 and 2.5, the second clipped to 2
        (tensor(1.5000), 1)
        """
        idx = self._check_idx(idx)
        ll_old = reveal(ll_old, reason=_OWN_INPUT)
        if self.compiled is not None:
            out = self.compiled.clipped_ratio_sum(z_new, ll_old, clip, idx)
            if out is not None:
                return private(out[0]), out[1], private_sum(out[2])
        ll_new, lp_new = self.eager_loglik_and_prior(z_new, idx)
        return private(ll_new), lp_new, private_sum(clip_and_sum(ll_new - ll_old, clip))

    def clipped_difference_sum(self, ll_new: torch.Tensor, ll_old: torch.Tensor, clip) -> ClippedSum:
        r"""The per-example log-likelihood ratios ``ll_new - ll_old`` (both computed by this
        likelihood for the same rows) passed through :func:`~pyro_dp.mechanisms.clip_and_sum`
        (the per-row rule, the clip to ``[-clip, clip]`` and the sum), for
        :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`: DP-HMC's ratio release, whose
        :math:`\ell_i(\theta')` come from the trajectory's last gradient pass. One graph on
        the compiled path. **Reads the data** (through its arguments).

        >>> import torch
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0)
        >>> from pyro_dp.private import reveal
        >>> cs = lik.clipped_difference_sum(torch.tensor([-0.5, 2.5]), torch.zeros(2), clip=2.0)
        >>> total, num_clipped = reveal((cs.total, cs.num_clipped), reason="a doctest")
        >>> total, int(num_clipped)  # ratios -0.5 and 2.5, the second clipped to 2
        (tensor(1.5000), 1)
        """
        ll_new, ll_old = reveal((ll_new, ll_old), reason=_OWN_INPUT)
        if self.compiled is not None:
            out = self.compiled.clipped_difference_sum(ll_new, ll_old, clip)
            if out is not None:
                return private_sum(out)
        return private_sum(clip_and_sum(ll_new - ll_old, clip))

    @boundary(private)
    def eager_per_example_grad(self, z, idx):
        """``(ℓ_i [B], ∇ℓ_i [B, D])``: ``vmap(grad)`` of each row's term (:meth:`eager_row_term`);
        :meth:`per_example_grad` without the compiled path (internal). **Reads the data**."""
        fn = vmap(grad_and_value(self.eager_row_term), in_dims=(None,) + (0,) * len(self.arguments.data_pos),
                  chunk_size=self.vmap_chunk_size)
        g, v = self.per_row(fn, z, idx, lambda b: nan_like_rows(b, self.dim, z.dtype, z.device))
        return v.detach(), g.detach()
