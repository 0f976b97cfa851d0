r"""A test kit for kernels: :func:`check_kernel`, the contract every kernel — in the package
or your own (``docs/new_kernel.md``) — must pass, and **mutants** of a kernel that are less
private than their ledger says, with helpers to aim :func:`pyro_dp.audit.audit` at them.

**The kernel contract** (:func:`check_kernel`; each check is also a function of its own,
raising an ``AssertionError`` that names the kernel and what failed): set-up reads no data
(:func:`check_setup_is_data_free`), the budget stops the chain before it is exceeded
(:func:`check_budget_stops`), the releases recorded are exactly the planned ones
(:func:`check_planned_equals_recorded`), copies continue the chain but never the secret stream
(:func:`check_copies`), a NaN or out-of-support row maps to the per-row rule's term
(:func:`check_per_row_rule`), no decision reads the data without a release
(:func:`check_reads_only_through_releases`), the audit's hooks work (:func:`check_audit_hooks`), and the
compiled path gives the eager chain (:func:`check_eager_equals_compiled`).

An audit that passes proves nothing unless the same audit *fails* a kernel that breaks its
claim (the project rule: every statistical test is paired with a mutant that must fail it).
:func:`~pyro_dp.mutants.weak_noise` builds, for any :class:`~pyro_dp.kernels.base.DPKernel`, a copy whose
every privacy-noise draw is ``factor`` times the one its ledger accounts for — the ledger,
the events, the clipping, the batch selection and every public draw are unchanged. It is the
generic form of the bugs an audit must catch: a noise multiplier applied to the wrong
sensitivity, a ``std`` divided twice, a calibration that drops a factor.

The mutant is injected at the one place every release draws its noise: the kernel's
:class:`~pyro_dp.mechanisms.NoiseSource` (``standard_normal``, which ``normal`` and the
release specs of the kernels' step functions both draw through), wrapped by :class:`~pyro_dp.mutants.ScaledNoiseSource` after
each :meth:`~pyro_dp.kernels.base.DPKernel.setup`. So it covers the eager and the compiled
path, private initialisation and tuning releases alike.

>>> import torch, pyro, pyro.distributions as dist
>>> from pyro_dp import DPPenalty
>>> def model(y):
...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
...     with pyro.plate("data", len(y)) as i:
...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])
>>> k = DPPenalty(model, 0.5, llr_clip=1.0, noise_multiplier=3.0)
>>> m = weak_noise(k, 0.2)  # releases with noise multiplier 0.6, its ledger says 3
>>> type(m).__name__, m.noise_factor, m is k
('WeakNoise[DPPenalty]', 0.2, False)
>>> y = torch.zeros(20, dtype=torch.float64)
>>> m.setup(0, y); _ = m.sample(m.initial_params)
>>> m.ledger.aggregate() == {pyro_dp.mechanisms.GaussianEvent(3.0): 1}  # the honest kernel's ledger
True
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import pickle
import warnings
from collections import Counter
from typing import Callable, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

import pyro_dp  # noqa: F401  (the doctest's pyro_dp.mechanisms)

from .compiled import CompileFallbackWarning
from .private import PrivateReadError, reveal
from .kernels.base import DPKernel
from .kernels.plan import counts as _counts
from .kernels.privacy_engine import BudgetExhaustedWarning, PrivacyNotice
from .mechanisms import NoiseSource, NonPrivateEvent, ReproducibleNoiseWarning
# the audits' mutants (documented in pyro_dp.mutants); the kit's checks use them, and code written
# against pyro_dp.testing keeps importing them from here
from .mutants import ScaledNoiseSource, noise_free_scores, separating_seed, weak_noise  # noqa: F401

__all__ = ["KERNEL_CHECKS", "check_kernel",
           "check_setup_is_data_free", "check_budget_stops", "check_planned_equals_recorded", "check_copies",
           "check_per_row_rule", "check_reads_only_through_releases", "check_audit_hooks", "check_eager_equals_compiled"]


class _Case(NamedTuple):
    """What every check needs: the factory, the model's arguments, a name, the run length."""

    make: Callable
    args: tuple
    kwargs: dict
    name: str
    steps: int


def _case(make_kernel, data, args, kwargs, name, steps) -> _Case:
    if not callable(make_kernel) or isinstance(make_kernel, MCMCKernel):  # a kernel is callable (Pyro's __call__)
        raise TypeError(f"make_kernel must be a callable returning a new kernel (lambda: MyKernel(model, ...)), "
                        f"got {type(make_kernel).__name__}")
    lead = () if data is None else ((data,) if torch.is_tensor(data) else tuple(data))
    case = _Case(make_kernel, lead + tuple(args), dict(kwargs or {}), name or "", int(steps))
    if case.steps < 2:
        raise ValueError(f"steps must be at least 2, got {steps!r}")
    return case if name else case._replace(name=type(_build(case)).__name__)


def _build(case: _Case, *, seed: int = 0, noise_seed: Optional[int] = 1, **attrs) -> DPKernel:
    """A fresh kernel from the factory with the public ``seed`` and the test stream ``noise_seed``
    set as :func:`pyro_dp.audit.audit` sets them (``attrs``: ``epsilon``, ``jit_compile``, ...)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        k = case.make()
    if not isinstance(k, DPKernel):
        raise TypeError(f"make_kernel must return a pyro_dp DPKernel, got {type(k).__name__}")
    if k.lik is not None or k.ledger:
        raise ValueError(f"{case.name or type(k).__name__}: make_kernel returned a kernel that was already set up "
                         "or run: return a new kernel object at every call")
    if k.randomness.secure_mode and noise_seed is not None:
        raise ValueError(f"{case.name or type(k).__name__}: the kit reruns chains on the reproducible test stream "
                         "(noise_seed): build the kernel without secure_mode=True")
    k.seed, k.noise_seed = seed, noise_seed
    for attr, value in attrs.items():
        setattr(k, attr, value)
    return k


def _run(k: DPKernel, case: _Case, steps: int, args: Optional[tuple] = None):
    """Set ``k`` up on the case's arguments (or ``args``) and take ``steps`` iterations: the flat
    chain ``[steps, D]`` and the last params."""
    k.setup(0, *(case.args if args is None else args), **case.kwargs)
    params, chain = k.initial_params, []
    for _ in range(steps):
        params = k.sample(params)
        chain.append(k.lik.flatten(params).detach().clone())
    return torch.stack(chain), params


def _require(ok, case: _Case, check: str, what: str) -> None:
    if not ok:
        raise AssertionError(f"{case.name}: {check}: {what}")


def _same(a, b) -> bool:
    """Equal tensors (NaN equal to NaN; dtype and shape too), sequences and dicts of them, or equal values."""
    if torch.is_tensor(a) and torch.is_tensor(b):
        if type(a) is not type(b):  # a private value against a public one (pyro_dp.private)
            return False
        a, b = reveal((a, b), reason="the kit compares kernel states (an audit)")
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.125), b.nan_to_num(0.125)))
        return bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    return type(a) is type(b) and (a is b or bool(a == b))


@contextlib.contextmanager
def _quiet():
    """Silence the warnings every check expects: the test stream's, the budget's, the default path's notices."""
    with warnings.catch_warnings():
        for category in (ReproducibleNoiseWarning, BudgetExhaustedWarning, PrivacyNotice):
            warnings.simplefilter("ignore", category)
        yield


def check_setup_is_data_free(make_kernel, data=None, *, args=(), kwargs=None, name=None, steps=7) -> str:
    r"""Set-up reads no data: ``setup`` records nothing, may run twice (``MCMC._set_transforms``
    calls it again) at no cost, and gives the same start, the same chain state and the same
    public stream on a stand-in of the data — every floating-point argument that is not
    declared ``public`` replaced by NaN — so nothing in it depends on a value (FACTS.md: Pyro's
    own ``initialize_model`` evaluates the likelihood; a DP kernel must not).

    ``make_kernel()`` returns a new kernel that was not set up; ``data`` (a tensor, or a tuple
    of the model's positional arguments) and ``args``/``kwargs`` are what ``MCMC.run`` gets.
    """
    case, check = _case(make_kernel, data, args, kwargs, name, steps), "set-up is data-free"
    with _quiet():
        k = _build(case)
        k.setup(0, *case.args, **case.kwargs)
        _require(not k.ledger, case, check, f"setup() recorded releases: {k.ledger.entries}")
        _require(k.transforms is not None, case, check, "setup() left kernel.transforms unset (MCMC reads it)")
        start = k.initial_params
        k.setup(0, *case.args, **case.kwargs)
        _require(not k.ledger, case, check, "a second setup() (MCMC._set_transforms) recorded releases")
        _require(_same(tuple(start.values()), tuple(k.initial_params.values())), case, check,
                 "a second setup() moved the start")
        ref = k  # set up twice, never sampled: a chain at its start, as a fresh kernel's
        public = set(k.likelihood_settings.public)
        stand_in = tuple(_nan_like(a) if i not in public else a for i, a in enumerate(case.args))
        kw = {key: (_nan_like(v) if key not in public else v) for key, v in case.kwargs.items()}
        other = _build(case)
        try:
            other.setup(0, *stand_in, **kw)
        except PrivateReadError:  # a read of a private value: a defect of the kernel, whatever the data
            raise
        except Exception as e:  # noqa: BLE001 (any exception here depends on the values)
            raise AssertionError(f"{case.name}: {check}: setup() on NaN data of the same shapes raised "
                                 f"{type(e).__name__}: {e} (it reads the values)") from e
    _require(_same(tuple(ref.initial_params.values()), tuple(other.initial_params.values())), case, check,
             "the start depends on the data's values")
    saved, other_saved = ref.state_dict(), other.state_dict()  # the chain as a checkpoint holds it: all of it
    _require(_same(saved["chain"], other_saved["chain"]) and _same(saved["record"], other_saved["record"]), case,
             check, "the chain state after setup() depends on the data's values (a data cache outside the ledger?)")
    _require(torch.equal(saved["rng"], other_saved["rng"]), case, check,
             "setup() drew from the public stream a number of times that depends on the data")
    return "setup() released nothing, twice, and gave the same start and state on NaN data"


def _nan_like(x):
    return torch.full_like(x, float("nan")) if torch.is_tensor(x) and x.is_floating_point() else x


def check_budget_stops(make_kernel, data=None, *, args=(), kwargs=None, name=None, steps=7) -> str:
    r"""The budget stops the chain before it is exceeded: given the ε that ``n = steps // 2 + 1``
    iterations spent as its budget (at δ = 1e-5, with ``num_iterations = n``, so a kernel whose
    noise is calibrated to the budget calibrates it for ``n`` iterations), a kernel stops after at
    most ``n`` iterations with a :class:`~pyro_dp.kernels.privacy_engine.BudgetExhaustedWarning`, says so
    in ``diagnostics()``, keeps returning its last state, and has spent no more than the
    budget."""
    case, check = _case(make_kernel, data, args, kwargs, name, steps), "budget stop"
    n = steps // 2 + 1
    with _quiet():
        probe = _build(case)
        _run(probe, case, n)
        budget = probe.get_epsilon(1e-5)
        # as if given to __init__: a kernel whose noise is calibrated to the budget calibrates it for n iterations
        k = _build(case, epsilon=budget, delta=1e-5, num_iterations=n, run_length_source="given")
        k.setup(0, *case.args, **case.kwargs)
        params, chain = k.initial_params, []
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", BudgetExhaustedWarning)
            for _ in range(2 * steps):
                params = k.sample(params)
                chain.append(k.lik.flatten(params))
    _require(k.diagnostics()["budget exhausted"], case, check, f"{2 * steps} iterations did not exhaust the "
             f"budget of {n} iterations (epsilon={budget:.6g})")
    _require(any(issubclass(w.category, BudgetExhaustedWarning) for w in seen), case, check,
             "the stop did not warn (BudgetExhaustedWarning)")
    _require(k.get_epsilon(1e-5) <= budget * (1 + 1e-9), case, check,
             f"spent epsilon={k.get_epsilon(1e-5):.6g} over the budget {budget:.6g}")
    _require(torch.equal(chain[-1], chain[-2]) and k.diagnostics()["private iterations"] <= n, case, check,
             "a stopped chain moved")
    return f"stopped within the budget of {n} iterations, with the warning"


def check_planned_equals_recorded(make_kernel, data=None, *, args=(), kwargs=None, name=None, steps=7,
                                  fewer_releases_ok: bool = False) -> str:
    r"""The releases recorded in ``steps`` iterations are exactly the planned ones
    (:meth:`~pyro_dp.kernels.base.DPKernel.planned_events`, read from the kernel's one declaration
    :meth:`~pyro_dp.kernels.base.DPKernel.releases`: once per chain plus ``steps`` times per
    iteration) — the plan is what the budget and the noise calibration trust. ``fewer_releases_ok``: a kernel that may skip a planned release (DP-HMC's data-free
    rejection of a trajectory that left the support) may record fewer, never others or more."""
    case, check = _case(make_kernel, data, args, kwargs, name, steps), "planned = recorded"
    with _quiet():
        k = _build(case)
        _run(k, case, steps)
    once, per = k.planned_events()
    planned = _counts(once)
    for ev, c in _counts(per).items():
        planned[ev] += c * steps
    recorded = Counter(k.ledger.aggregate())
    if fewer_releases_ok:
        ok = set(recorded) <= set(planned) and all(recorded[ev] <= c for ev, c in planned.items())
    else:
        ok = recorded == planned
    _require(ok, case, check, f"planned {dict(planned)} for {steps} iterations, recorded {dict(recorded)}")
    return f"{sum(recorded.values())} releases recorded, as planned"


def check_copies(make_kernel, data=None, *, args=(), kwargs=None, name=None, steps=7) -> str:
    r"""Copies: a kernel pickled or deep-copied mid-chain continues the chain exactly — the same
    draws and the same ledger — when its secret stream is the seeded test stream, as ``MCMC``'s
    worker processes and checkpoints need; and with the default OS-seeded stream a copy
    **never** continues the secret stream (it is reseeded: two copies run on neighbouring data
    would otherwise add the same noise, and the difference of their releases is one row's
    term; :class:`~pyro_dp.mechanisms.NoiseSource`)."""
    case, check = _case(make_kernel, data, args, kwargs, name, steps), "copies"
    with _quiet():
        k = _build(case)
        _, params = _run(k, case, 2)
        clones = {"pickle": pickle.loads(pickle.dumps(k)), "deepcopy": copy.deepcopy(k)}
        want = k.sample(params)
        for how, c in clones.items():
            got = c.sample(params)
            _require(_same(tuple(want.values()), tuple(got.values())), case, check,
                     f"a {how} copy made mid-chain took another step than the original")
            _require(c.ledger == k.ledger, case, check, f"a {how} copy's ledger differs from the original's")
        secret = _build(case, noise_seed=None)  # the production stream
        _, params = _run(secret, case, 2)
        copies = {"pickle": pickle.loads(pickle.dumps(secret)), "deepcopy": copy.deepcopy(secret)}
        draws = {}
        for how, c in {"original": secret, **copies}.items():  # one step each, its noise draws recorded
            c._noise = recorder = _CountingNoiseSource(c._noise)
            c.sample(params)
            draws[how] = recorder.normals
        if not draws["original"]:
            return "pickle and deepcopy continue the chain (no Gaussian draw to compare the secret streams)"
        for how in copies:
            _require(not _same(tuple(draws["original"]), tuple(draws[how])), case, check,
                     f"a {how} copy continues the secret noise stream")
    return "pickle and deepcopy continue the chain; their secret stream is reseeded"


def check_per_row_rule(make_kernel, data=None, *, args=(), kwargs=None, name=None, steps=7, row: int = 0,
                       bad_rows: Sequence = (float("nan"), float("inf")), data_arg: Union[int, str, None] = None
                       ) -> str:
    r"""The per-row rule (``docs/privacy.md``, "One per-row rule"): one row that is NaN, ±∞ or
    outside the likelihood's support maps to the rule's term (a NaN ratio or statistic
    contributes 0, an infinite ratio ±clip, a non-finite gradient the zero row), so no
    exception, warning or branch depends on it. The kernel runs ``steps`` iterations on
    :math:`D` (row ``row`` of the data argument set to ``bad_rows[0]``) and on :math:`D'` (set
    to ``bad_rows[1]``) with the same seeds; both rows map to the same terms, so the chains,
    the ledgers and the warnings must be identical, and the chain finite.

    :param data_arg: which argument holds the rows (position or keyword; default: the first
        floating-point positional argument not declared ``public``).
    :param bad_rows: two values whose terms the rule maps alike for this model (default NaN
        and +∞: for most likelihoods both give a NaN or ∓∞ log-density and a non-finite gradient).
    """
    case, check = _case(make_kernel, data, args, kwargs, name, steps), "per-row rule"
    with _quiet():
        probe = _build(case)
    pos = _data_position(case, probe, data_arg)
    runs = []
    for value in bad_rows[:2]:
        a, kw = list(case.args), dict(case.kwargs)
        x = (kw if isinstance(pos, str) else a)[pos].clone()
        x[row] = value
        (kw if isinstance(pos, str) else a)[pos] = x
        with _quiet(), warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            k = _build(case)
            try:
                chain, _ = _run(k, case._replace(kwargs=kw), steps, tuple(a))
            except PrivateReadError:  # a read of a private value: a defect of the kernel, whatever the data
                raise
            except Exception as e:  # noqa: BLE001 (an exception that depends on one row reveals it)
                raise AssertionError(f"{case.name}: {check}: a row set to {value} raised "
                                     f"{type(e).__name__}: {e}") from e
        kept = [str(w.message) for w in seen if not issubclass(w.category, (ReproducibleNoiseWarning, PrivacyNotice,
                                                                              BudgetExhaustedWarning))]
        runs.append((chain, k.ledger, kept))
    (c0, l0, w0), (c1, l1, w1) = runs
    _require(bool(torch.isfinite(c0).all()), case, check, f"a row set to {bad_rows[0]} made the chain non-finite")
    _require(torch.equal(c0, c1), case, check, f"rows {bad_rows[0]} and {bad_rows[1]} gave different chains: "
             "one of them is not mapped to the rule's term")
    _require(l0 == l1, case, check, "the ledger depends on the bad row")
    _require(w0 == w1, case, check, f"the warnings depend on the bad row: {w0} against {w1}")
    return f"rows {bad_rows[0]} and {bad_rows[1]} gave one chain, one ledger, no exception"


class _CountingNoiseSource(ScaledNoiseSource):
    """The kernel's secret stream, unchanged (factor 1), counting its draws and keeping its normals."""

    def __init__(self, base: NoiseSource):  # noqa: D107
        super().__init__(base, 1.0)
        self.draws, self.normals = 0, []

    def standard_normal(self, shape=()) -> torch.Tensor:
        self.draws += 1
        self.normals.append(super().standard_normal(shape))
        return self.normals[-1]

    def _count(name):  # noqa: N805 (a decorator factory inside the class body)
        def draw(self, *a, **kw):
            self.draws += 1
            return getattr(NoiseSource, name)(self, *a, **kw)
        return draw

    poisson_subsample = _count("poisson_subsample")
    sample_without_replacement = _count("sample_without_replacement")
    sample_with_replacement = _count("sample_with_replacement")
    poisson = _count("poisson")
    uniform = _count("uniform")
    del _count


def check_audit_hooks(make_kernel, data=None, *, args=(), kwargs=None, name=None, steps=7) -> str:
    r"""What :func:`pyro_dp.audit.audit` and :func:`~pyro_dp.mutants.weak_noise` rely on: the kernel's public
    ``seed`` and ``noise_seed`` reproduce a run (chain and ledger); after ``setup`` its secret
    stream is the :class:`~pyro_dp.mechanisms.NoiseSource` ``kernel._noise`` and every private
    release draws from it (a kernel that releases without a draw there, e.g. from torch's global
    generator, is one whose noise :func:`~pyro_dp.mutants.weak_noise` cannot reach); ``sample`` leaves torch's
    and numpy's global generators untouched; and ``weak_noise(kernel, 1)`` — the mutant's hook
    with the honest noise — gives the honest chain and ledger."""
    case, check = _case(make_kernel, data, args, kwargs, name, steps), "audit hooks"
    with _quiet():
        k = _build(case)
        k.setup(0, *case.args, **case.kwargs)
        _require(isinstance(getattr(k, "_noise", None), NoiseSource), case, check,
                 "after setup() kernel._noise is not a NoiseSource (the secret stream weak_noise wraps)")
        k._noise = counter = _CountingNoiseSource(k._noise)
        torch_state, np_state = torch.get_rng_state(), np.random.get_state()[1].copy()
        params, chain = k.initial_params, []
        for _ in range(steps):
            params = k.sample(params)
            chain.append(k.lik.flatten(params).detach().clone())
        _require(torch.equal(torch_state, torch.get_rng_state()) and np.array_equal(np_state, np.random.get_state()[1]),
                 case, check, "sample() drew from torch's or numpy's global generator")
        private = [e for e in k.ledger.aggregate() if not isinstance(e, NonPrivateEvent)]
        _require(not private or counter.draws > 0, case, check,
                 f"released {private} without drawing from the secret stream kernel._noise")
        mutant = weak_noise(_build(case), 1.0)  # the honest noise, through the mutant's hook
        again, _ = _run(mutant, case, steps)
        _require(torch.equal(torch.stack(chain), again), case, check,
                 "the same seed and noise_seed gave another chain (under weak_noise(kernel, 1))")
        _require(mutant.ledger == k.ledger, case, check, "the weak_noise mutant recorded another ledger")
    return f"{counter.draws} draws from the secret stream, none from the global generators; weak_noise runs"


def check_eager_equals_compiled(make_kernel, data=None, *, args=(), kwargs=None, name=None, steps=7,
                                jit_options: Optional[dict] = None, rtol: Optional[float] = None) -> str:
    r"""``jit_compile=True`` gives the eager chain and ledger: the ledger exactly, the chain to
    ``rtol`` (default 1e-12 for the ``"graph"`` backend, which replays the eager operations, as
    ``tests/test_compiled.py`` does; 1e-10 for inductor, whose fused sums may be reordered).
    ``jit_options`` default ``{"backend": "graph"}`` (no compile time). A model the trace cannot
    represent runs eagerly with a :class:`~pyro_dp.compiled.CompileFallbackWarning`: then there
    is nothing to compare, and the check says so in its return value."""
    case, check = _case(make_kernel, data, args, kwargs, name, steps), "eager = compiled"
    options = {"backend": "graph"} if jit_options is None else dict(jit_options)
    if rtol is None:
        rtol = 1e-12 if options.get("backend") == "graph" else 1e-10
    with _quiet():
        eager = _build(case)
        want, _ = _run(eager, case, steps)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", CompileFallbackWarning)
            compiled = _build(case, jit_compile=True, jit_options=options)
            got, _ = _run(compiled, case, steps)
    if compiled.lik.compiled is None or any(issubclass(w.category, CompileFallbackWarning) for w in seen):
        return "skipped: the model fell back to eager (CompileFallbackWarning)"
    _require(compiled.ledger == eager.ledger, case, check, "the compiled path recorded another ledger")
    close = torch.allclose(got, want, rtol=rtol, atol=1e-15)
    _require(close, case, check, f"the compiled chain differs from the eager one by up to "
             f"{float((got - want).abs().max()):.3g} (rtol {rtol})")
    return f"the compiled ({options.get('backend', 'inductor')}) chain and ledger are the eager ones"


#: how much louder than its ledger's the noise is in :func:`check_reads_only_through_releases`
LOUD_NOISE = 1e9


def _data_position(case: _Case, probe: DPKernel, data_arg):
    """``data_arg``, or the first floating-point positional argument not declared ``public``."""
    if data_arg is not None:
        return data_arg
    public = set(probe.likelihood_settings.public)
    pos = next((i for i, a in enumerate(case.args) if i not in public and torch.is_tensor(a)
                and a.is_floating_point()), None)
    if pos is None:
        raise ValueError(f"{case.name}: no floating-point data argument: pass data_arg=")
    return pos


def _substituted(case: _Case, probe: DPKernel, row: int, data_arg, scale: float):
    """The case's arguments with row ``row`` of the data argument substituted by an adversarial
    row: the row times ``-scale`` plus ``scale`` (far from every other row, finite)."""
    pos = _data_position(case, probe, data_arg)
    a, kw = list(case.args), dict(case.kwargs)
    x = (kw if isinstance(pos, str) else a)[pos].clone()
    x[row] = x[row] * -scale + scale
    (kw if isinstance(pos, str) else a)[pos] = x
    return tuple(a), kw


def check_reads_only_through_releases(make_kernel, data=None, *, args=(), kwargs=None, name=None, steps=7,
                                      row: int = 0, data_arg: Union[int, str, None] = None,
                                      scale: float = 1e3) -> str:
    r"""The kernel reads the data only through its releases: with every release's noise
    :data:`LOUD_NOISE` times its ledger's (:func:`~pyro_dp.mutants.weak_noise` with a factor above 1, the same
    secret stream), a release carries no usable information about any row, so the chains,
    ledgers and warnings on :math:`D` and on :math:`D'` — row ``row`` of the data argument
    substituted by an adversarial row (``-scale`` times it plus ``scale``) — must be
    identical (to a relative 1e-6 where released values enter the state), run with the same
    seeds. A kernel that decides anything from the data without
    a release — ``if self.lik.per_example_loglik(z).sum() > t: reject`` in its step, a
    batch size or a step size computed from the rows, a branch on a raw gradient — gives two
    chains. A difference from the releases' signal alone would need a decision within
    :math:`10^{-9}` noise standard deviations of its threshold: not seen at the kit's few steps.
    (Black-box and complementary to the audits: it needs no statistics, and fails a silent read
    however small its effect on the noise-free chain is, as long as it changes a decision.)

    :param row: the row substituted; ``data_arg``: which argument holds it (as in
        :func:`check_per_row_rule`); ``scale``: how far the substituted row goes.
    """
    case, check = _case(make_kernel, data, args, kwargs, name, steps), "reads only through releases"
    with _quiet():
        probe = _build(case)
    runs = []
    for a, kw in ((case.args, case.kwargs), _substituted(case, probe, row, data_arg, scale)):
        with _quiet(), warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            k = weak_noise(_build(case), LOUD_NOISE)
            try:
                chain, _ = _run(k, case._replace(kwargs=kw), steps, tuple(a))
                outcome = chain
            except PrivateReadError:  # a read of a private value: a defect of the kernel, whatever the data
                raise
            except Exception as e:  # noqa: BLE001 (compared: an exception on one side only is a read)
                outcome = f"{type(e).__name__}: {e}"
        # library deprecations are said once per process, whichever run comes first: not compared
        kept = [str(w.message) for w in seen if not issubclass(w.category, (
            ReproducibleNoiseWarning, PrivacyNotice, BudgetExhaustedWarning, DeprecationWarning, FutureWarning))]
        runs.append((outcome, k.ledger, kept))
    (c0, l0, w0), (c1, l1, w1) = runs
    # released values enter the state continuously (a private start, a leapfrog on released
    # gradients): there D and D' differ by the signal, 1e-9 of the noise; a read decides by O(1)
    close = (_same(c0, c1) or (torch.is_tensor(c0) and torch.is_tensor(c1) and c0.shape == c1.shape
                                and bool(torch.isclose(c0, c1, rtol=1e-6, atol=1e-6, equal_nan=True).all())))
    _require(close, case, check, "with the releases' noise 1e9 times louder than the ledger's, the chain "
             "on D and on D' (one row substituted) differ: the kernel reads the data other than through a release "
             "(a decision, a size or a step computed from raw per-row values)")
    _require(l0 == l1, case, check, "the ledger depends on the substituted row")
    _require(w0 == w1, case, check, f"the warnings depend on the substituted row: {w0} against {w1}")
    return "with 1e9 times the noise, D and D' gave one chain, one ledger, the same warnings"


#: The checks of :func:`check_kernel`, in the order it runs them.
KERNEL_CHECKS = {
    "setup_is_data_free": check_setup_is_data_free,
    "budget_stops": check_budget_stops,
    "planned_equals_recorded": check_planned_equals_recorded,
    "copies": check_copies,
    "per_row_rule": check_per_row_rule,
    "reads_only_through_releases": check_reads_only_through_releases,
    "audit_hooks": check_audit_hooks,
    "eager_equals_compiled": check_eager_equals_compiled,
}


def check_kernel(make_kernel: Callable[[], DPKernel], data=None, *, args=(), kwargs=None,
                 checks: Optional[Sequence[str]] = None, name: Optional[str] = None, steps: int = 7,
                 **options) -> dict:
    r"""Run the kernel contract (:data:`KERNEL_CHECKS`, module docstring) on a kernel: any
    :class:`~pyro_dp.kernels.base.DPKernel` subclass, the package's or your own. Each check
    builds new kernels with ``make_kernel()``, sets their public ``seed`` and the test stream
    ``noise_seed`` (and, where the check needs them, ``epsilon``/``delta`` or
    ``jit_compile``/``jit_options``) as attributes, as :func:`pyro_dp.audit.audit` does, and runs
    a few iterations on ``data``.

    :param make_kernel: returns a new kernel, not set up, at every call (``lambda: MyKernel(model, ...)``).
    :param data: the model's data (a tensor, or a tuple of its positional arguments); ``args`` and
        ``kwargs``: further arguments, as passed to ``MCMC.run``.
    :param checks: names from :data:`KERNEL_CHECKS` (default: all, in that order).
    :param str name: how failures name the kernel (default: its class name).
    :param int steps: iterations per run (each check runs one to four short runs).
    :param options: passed to the checks that take them (``fewer_releases_ok`` to
        :func:`check_planned_equals_recorded`; ``row``, ``bad_rows``, ``data_arg`` to
        :func:`check_per_row_rule`; ``jit_options``, ``rtol`` to :func:`check_eager_equals_compiled`).
    :returns: ``{check: what it verified}``.
    :raises AssertionError: at the first check that fails, naming the kernel and what failed.

    >>> import torch
    >>> from pyro_dp import DPPenalty
    >>> from pyro_dp.models.examples import normal_mean_model as model
    >>> y = torch.randn(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> report = check_kernel(lambda: DPPenalty(model, 0.1, llr_clip=3.0, noise_multiplier=2.0), y,
    ...                       checks=["planned_equals_recorded", "copies"])
    >>> report["planned_equals_recorded"]
    '7 releases recorded, as planned'
    """
    names = list(KERNEL_CHECKS) if checks is None else list(checks)
    unknown = [c for c in names if c not in KERNEL_CHECKS]
    if unknown:
        raise ValueError(f"unknown checks {unknown}; choose from {list(KERNEL_CHECKS)}")
    own = {c: set(inspect.signature(fn).parameters) - _COMMON for c, fn in KERNEL_CHECKS.items()}
    extra = set(options) - set().union(*own.values())
    if extra:
        raise TypeError(f"check_kernel got unknown options {sorted(extra)}")
    case = _case(make_kernel, data, args, kwargs, name, steps)
    return {c: KERNEL_CHECKS[c](case.make, None, args=case.args, kwargs=case.kwargs, name=case.name, steps=case.steps,
                                **{o: v for o, v in options.items() if o in own[c]}) for c in names}


_COMMON = {"make_kernel", "data", "args", "kwargs", "name", "steps"}
