"""Every way data can reach a model (issue 58): refused alike on neighbouring data sets before any
release, or run isolated; each protection paired with the mutant that switches it off.

Each *way* below builds a model and its ``MCMC.run`` arguments from one data set ``D`` (a tensor of
``N`` rows). ``D'`` is ``D`` with row 0 substituted by an adversarial value (NaN, ±inf, ±1e6). Set-up
must give the same decision and the same message on both (``test_setup_decides_alike``), before
anything is released; the ways that are legitimate (data in nested containers of the arguments)
run, and no other row's term moves when row 0 does (``test_isolated_ways_keep_other_rows``).

The mutants switch each protection off (``pyro_dp.reach``'s walk and tensor guard, the
cross-row trace, row isolation itself): then the same models run, other rows' terms move with row 0
(a noise-free distinguisher), and an end-to-end audit of a released chain exceeds the reported ε.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
import pyro_dp.likelihood as likelihood_module
import pyro_dp.reach as reach
import pyro_dp.setup_checks as setup_checks
from pyro_dp.audit import audit
from pyro_dp.likelihood import PrivateLikelihood
from pyro_dp.private import reveal

N = 20
ADVERSARIAL = (float("nan"), float("inf"), -float("inf"), 1e6, -1e6)

pytestmark = pytest.mark.usefixtures("raw_values")  # checks the likelihood's values (conftest)

#: the module-level data of the ``global`` ways (set by each way's builder, as a user's script would)
Y_ALL = torch.zeros(N, dtype=torch.float64)
Y_NUMPY = np.zeros(N)
STASH = {}


def _base(y, shift, mu_loc=0.0):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(mu_loc, dtype=torch.float64), 10.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i] - shift)


def m_global(y):
    _base(y, Y_ALL.mean())


def m_global_numpy(y):
    _base(y, float(np.mean(Y_NUMPY)))


def m_dynamic_global(y):
    _base(y, globals()["Y_" + "ALL"].mean())


def m_param_store(y):
    _base(y, pyro.get_param_store()["stash"].detach().mean())


def m_numpy_converted(y):
    _base(y, torch.as_tensor(globals()["Y_NUMPY"]).mean())


def m_nested_prior(d):
    mu = pyro.sample("mu", dist.Normal(d["extra"][0].mean(), 10.0))
    with pyro.plate("data", len(d["y"])) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=d["y"][i])


def m_cross_row(y):
    y = torch.where(y.abs().max() > 1e9, y / 1e9, y)  # rescaled when any row is huge: no stand-in triggers it
    _base(y, 0.0)


def m_listed(d):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 10.0))
    with pyro.plate("data", len(d["ys"][0])) as i:
        pyro.sample("obs", dist.Normal(mu + 0.1 * d["ys"][1][i], 1.0), obs=d["ys"][0][i])


class Buffered(pyro.nn.PyroModule):
    def __init__(self, col):
        super().__init__()
        self.register_buffer("col", col)

    def forward(self, y):
        _base(y, self.col.mean())


class Holder:
    data = Y_ALL

    def __init__(self, extra=None):
        self.extra = extra

    def model(self, y):
        _base(y, Holder.data.mean())

    def model_attr(self, y):
        _base(y, self.extra.mean())


@dataclasses.dataclass
class Frame:
    y: torch.Tensor


def m_dataclass(f):
    _base(f.y, 0.0)


def m_shifted(y, Z):
    _base(y, Z.mean())


def _closure(X):
    def model(y):  # a covariate read from the closure, data sorted by it
        order = torch.argsort(X)
        _base(y[order], 0.0)
    return model


def _default(D):
    def model(y, Z=D):
        _base(y, Z.mean())
    return model


def _set_global(D):
    global Y_ALL
    Y_ALL = D
    return m_global


def _set_numpy(D):
    global Y_NUMPY
    Y_NUMPY = D.numpy().copy()
    return m_global_numpy


def _set_class(D):
    Holder.data = D
    return Holder().model


def _set_stash(D):
    pyro.get_param_store().clear()
    pyro.param("stash", D.clone())
    return m_param_store


def _numpy_converted(D):
    _set_numpy(D)
    return m_numpy_converted


#: way -> D -> (model, MCMC.run arguments); every one of them must be refused
REFUSED = {
    "global": lambda D: (_set_global(D), (D,)),
    "global numpy": lambda D: (_set_numpy(D), (D,)),
    "dynamic global (globals()[...])": lambda D: (_set_global(D) and m_dynamic_global, (D,)),
    "param store": lambda D: (_set_stash(D), (D,)),
    "numpy converted inside": lambda D: (_numpy_converted(D), (D,)),
    "numpy nested in a dict, read by the prior": lambda D: (m_nested_prior, ({"y": D, "extra": [D.numpy()]},)),
    "module buffer": lambda D: (Buffered(D), (D,)),
    "closure covariate": lambda D: (_closure(D), (D,)),
    "cross-row statistic": lambda D: (m_cross_row, (D,)),
    "functools.partial": lambda D: (functools.partial(m_shifted, Z=D), (D,)),
    "default argument": lambda D: (_default(D), (D,)),
    "class attribute": lambda D: (_set_class(D), (D,)),
    "bound method's object": lambda D: (Holder(D).model_attr, (D,)),
    "dataclass argument": lambda D: (m_dataclass, (Frame(D),)),
}

#: ways the data are sliced per row like a top-level argument: these run, isolated
ISOLATED = {
    "list of tensors in a dict": lambda D: (m_listed, ({"ys": [D, D * 2]},)),
    "namedtuple-free tuple in a list": lambda D: (lambda xs: _base(xs[0][0], 0.0), ([(D,)],)),
}


def _data():
    return torch.linspace(-1.0, 1.0, N, dtype=torch.float64)


def _neighbour(value):
    d = _data()
    d[0] = value
    return d


def _setup(way, D, ways):
    model, args = ways[way](D)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            PrivateLikelihood(model, args, seed=0)
            outcome = "accepted"
        except Exception as e:  # noqa: BLE001 - compared between D and D'
            outcome = f"{type(e).__name__}: {e}"
    return outcome, [str(w.message) for w in seen if not issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("value", ADVERSARIAL)
@pytest.mark.parametrize("way", sorted(REFUSED))
def test_setup_decides_alike(way, value):
    """Refused on D and on D' (one row substituted, adversarially) with the same message."""
    on_d, warned_d = _setup(way, _data(), REFUSED)
    on_dprime, warned_dprime = _setup(way, _neighbour(value), REFUSED)
    assert on_d.startswith("ValueError") or on_d.startswith("OutsideDataError"), on_d
    assert on_d == on_dprime
    assert warned_d == warned_dprime


@pytest.mark.parametrize("value", ADVERSARIAL)
@pytest.mark.parametrize("way", sorted(ISOLATED))
def test_isolated_ways_keep_other_rows(way, value):
    """Data in nested containers of the arguments are sliced per row: set-up accepts them alike,
    and no other row's term moves when row 0 is substituted."""
    terms = []
    for D in (_data(), _neighbour(value)):
        model, args = ISOLATED[way](D)
        lik = PrivateLikelihood(model, args, seed=0)
        terms.append(reveal(lik.per_example_loglik(torch.tensor([0.3], dtype=torch.float64)), reason="a test"))
    assert torch.equal(terms[0][1:], terms[1][1:])


# ---------------------------------------------------------------------------------------- mutants
@pytest.fixture
def protections_off(monkeypatch):
    """The mutant: pyro_dp.reach's walk and tensor guard and the cross-row trace switched off."""
    monkeypatch.setattr(likelihood_module, "outside_data", lambda *a, **k: [])
    monkeypatch.setattr(reach.CallGuard, "_outside", lambda self, t: False)
    monkeypatch.setattr(setup_checks.SetUpChecks, "cross_row_operations", lambda self: ())
    monkeypatch.setattr(setup_checks.SetUpChecks, "_check_prior_reads_no_data", lambda self, cache: None)


#: the ways whose leak is through a row's term (the rest read it in the prior or fail on fakes)
LEAKY = ["global", "dynamic global (globals()[...])", "param store", "module buffer", "functools.partial",
         "default argument", "class attribute", "bound method's object", "numpy converted inside", "global numpy"]


@pytest.mark.parametrize("way", LEAKY)
def test_mutant_without_protection_moves_other_rows(way, protections_off):
    """With the protections off the same models run, and every other row's term moves when row 0
    does: the distinguisher the protection removes."""
    terms = []
    for D in (_data(), _neighbour(1e6)):
        model, args = REFUSED[way](D)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lik = PrivateLikelihood(model, args, seed=0)
        terms.append(lik.per_example_loglik(torch.tensor([0.3], dtype=torch.float64)))
    assert not torch.equal(terms[0][1:], terms[1][1:])


def test_mutant_cross_row_statistic_runs_another_model(protections_off):
    """Without the cross-row trace the rescaling model runs isolated, i.e. not as written: on D'
    (row 0 at 1e12) the model as written rescales every row, the isolated one none but row 0."""
    D = _neighbour(1e12)
    lik = PrivateLikelihood(m_cross_row, (D,), seed=0)
    z = torch.tensor([0.3], dtype=torch.float64)
    written = dist.Normal(0.3, 1.0).log_prob(D / 1e9)
    assert not torch.allclose(lik.per_example_loglik(z)[1:], written[1:])


def test_mutant_isolation_off_moves_other_rows(monkeypatch):
    """The median-centring model is refused; with the refusal and isolation switched off (the
    joint evaluation), other rows' terms move with row 0."""
    def centred(y):
        _base(y, y.median())

    with pytest.raises(ValueError, match="depends on other rows"):
        PrivateLikelihood(centred, (_data(),), seed=0)
    monkeypatch.setattr(setup_checks.SetUpChecks, "_check_isolation", lambda self, cache: None)
    monkeypatch.setattr(setup_checks.SetUpChecks, "_check_cross_rows", lambda self, cache: None)

    def joint(self, z, idx=None, robust=True):
        tr, _ = self.joint_trace(z, idx)
        return self._observed_terms(tr)

    monkeypatch.setattr(PrivateLikelihood, "eager_isolated_loglik", joint)
    terms = [PrivateLikelihood(centred, (D,), seed=0).per_example_loglik(torch.tensor([0.3], dtype=torch.float64))
             for D in (_data(), _neighbour(5.0))]
    assert not torch.equal(terms[0][1:], terms[1][1:])


def m_stash(y):
    _base(y, STASH["y"].mean())


class ReadsGlobal(pyro_dp.DPPenalty):
    """DP penalty MH on a model that reads a module-level global holding the run's data set (the
    user's script sets it before ``MCMC.run``; here ``setup`` does, so each audited run's global is
    its own data set)."""

    def setup(self, warmup_steps, *args, **kwargs):
        STASH["y"] = args[0]
        return super().setup(warmup_steps, *args, **kwargs)


def _reads_global():
    return ReadsGlobal(m_stash, 0.3, llr_clip=1.0, noise_multiplier=2.0, init_strategy=init_to_mean)


def test_end_to_end_global_refused_and_its_mutant_fails_the_audit(monkeypatch):
    """End to end (pyro_dp.audit, one released iteration per run): the global-reading model is
    refused on both neighbours, with one message; with the protections off, the audit's lower
    bound on ε exceeds the ledger's claim: the leak is real and the protection removes it."""
    from pyro_dp.testing import separating_seed

    d, dprime = _data(), _neighbour(-50.0)
    d[0] = 50.0
    messages = set()
    for D in (d, dprime):
        with pytest.raises(ValueError, match="global 'STASH'") as err:
            _reads_global().setup(0, D)
        messages.add(str(err.value))
    assert len(messages) == 1
    monkeypatch.setattr(likelihood_module, "outside_data", lambda *a, **k: [])
    monkeypatch.setattr(reach.CallGuard, "_outside", lambda self, t: False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seed = separating_seed(_reads_global, d, dprime)  # aimed from the public draws alone
        result = audit(_reads_global, d, dprime, statistic="accept", num_runs=60, delta=0.05, confidence=0.99,
                       seed=seed)
    assert not result.passed, str(result)


@pytest.mark.parametrize("kernel", ["DPPenalty", "DPHMC", "DPSGLD"])
def test_default_paths_read_only_through_releases(kernel):
    """The kit's loud-noise check over the default paths (their tuning releases included): with
    1e9 times the noise, D and D' give one chain, ledger and set of warnings."""
    from pyro_dp.demo import logistic_model, make_logistic_data
    from pyro_dp.testing import check_kernel

    X, y, _ = make_logistic_data(600, seed=1)
    cls = getattr(pyro_dp, kernel)
    check_kernel(lambda: cls(logistic_model, epsilon=2.0), (X, y), checks=["reads_only_through_releases"], steps=4,
                 data_arg=0)


# ------------------------------------------------------------------- every set-up check, alike on D and D'
def _m_median(y):
    _base(y, y.median())


def _m_prior_reads(y):
    mu = pyro.sample("mu", dist.Normal(y.mean(), 10.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])


def _m_python_value(y):
    k = int(y.abs().max()) + 1
    _base(y, float(k))


def _m_constant_plate(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 10.0))
    with pyro.plate("data", 10) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])


def _m_logistic(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype), 2.0).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def _m_logistic32(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1]), 2.0).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def _design(D):
    return torch.stack([D, torch.ones_like(D)], -1)


def _labels(D):
    return (D > 0).double()


#: one model per set-up decision (accepted, warned, refused by each check, each user mistake)
SETUP_CASES = {
    "accepted": lambda D: (lambda y: _base(y, 0.0), (D,)),
    "median centring": lambda D: (_m_median, (D,)),
    "prior reads the data": lambda D: (_m_prior_reads, (D,)),
    "Python value of the data": lambda D: (_m_python_value, (D,)),
    "constant plate size": lambda D: (_m_constant_plate, (D,)),
    "rows of different lengths": lambda D: (_m_logistic, (_design(D), _labels(D)[:-1])),
    "float32 prior, float64 data": lambda D: (_m_logistic32, (_design(D), _labels(D))),
    "labels as a list": lambda D: (_m_logistic, (_design(D), _labels(D).tolist())),
    "integer labels": lambda D: (_m_logistic, (_design(D), _labels(D).long())),
    "boolean labels": lambda D: (_m_logistic, (_design(D), _labels(D).bool())),
}


@pytest.mark.parametrize("value", ADVERSARIAL)
@pytest.mark.parametrize("case", sorted(SETUP_CASES))
def test_every_setup_check_decides_alike(case, value):
    """Whether a model runs, is refused, and every message and warning of set-up: the same on D
    and on D' (row 0 substituted by NaN, ±inf or ±1e6)."""
    assert _setup(case, _data(), SETUP_CASES) == _setup(case, _neighbour(value), SETUP_CASES)


@pytest.mark.parametrize("case, cause", [
    ("constant plate size", "the data plate 'data' has 10 entries, but no argument of the model has 10 rows"),
    ("rows of different lengths", "The model's arguments have different numbers of rows: argument 0 has 20 rows"),
    ("float32 prior, float64 data", "A dtype mismatch (RuntimeError: "),
    ("labels as a list", "Argument 1 is a Python list of 20 numbers: pass data as tensors"),
    ("boolean labels", "Argument 1 holds integer or boolean values and the model's distribution needs floating"),
])
def test_setup_errors_name_the_real_cause_first(case, cause):
    """Issue 61: the first sentence of the refusal names the user's mistake (then the model's
    own exception and line, then what pyro_dp needed)."""
    outcome, _ = _setup(case, _data(), SETUP_CASES)
    message = outcome.split(": ", 1)[1]
    assert message.startswith(cause), message
    if case in ("rows of different lengths", "float32 prior, float64 data", "labels as a list"):
        assert "test_data_paths.py, line" in message  # the model's own line that raised


def test_integer_labels_warn_with_the_dtype_first():
    """Integer labels run (their per-row terms are fine) and the warning leads with the dtype."""
    outcome, warned = _setup("integer labels", _data(), SETUP_CASES)
    assert outcome == "accepted"
    assert any(w.startswith("Argument 1 holds integer or boolean values") for w in warned), warned


# ------------------------------------------------------------------- one bad row's index: no exception, no bisection
def _grouped(g, y):
    a = pyro.sample("a", dist.Normal(torch.zeros(4, dtype=torch.float64), 1.0).to_event(1))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(a[g[i]], 1.0), obs=y[i])


@pytest.mark.parametrize("bad_id", [4, 99, -5, 2**40])
def test_out_of_range_index_is_made_safe_without_bisection(bad_id, monkeypatch):
    """A group id out of range used as an index (``a[g[i]]``): the tensor guard clamps it
    elementwise and the row's term is NaN (the per-row rule maps it), with no exception, so the
    rows are never bisected (the timing channel of issue 58); the other rows' terms and gradients
    do not move, and the bisection fallback is never called."""
    import pyro_dp.isolation as isolation

    fills = []
    real = isolation.robust_rows

    def counting(call, rows, fill):
        return real(call, rows, lambda b: fills.append(b) or fill(b))

    monkeypatch.setattr(likelihood_module, "robust_rows", counting)
    y = _data()
    g = torch.arange(N) % 4
    bad = g.clone()
    bad[3] = bad_id
    z = torch.tensor([0.1, -0.2, 0.3, 0.4], dtype=torch.float64)
    out = []
    for groups in (g, bad):
        lik = PrivateLikelihood(_grouped, (groups, y), seed=0)
        out.append(lik.per_example_grad(z))
    (ll0, g0), (ll1, g1) = out
    assert not fills  # no exception, no bisection
    assert torch.isnan(ll1[3]) and torch.isfinite(ll1).sum() == N - 1
    keep = torch.arange(N) != 3
    assert torch.equal(ll0[keep], ll1[keep]) and torch.equal(g0[keep], g1[keep])


def test_index_guard_mutant_bisects(monkeypatch):
    """The mutant without the index duty: the same bad row raises for the batch and is bisected
    (the channel the guard closes)."""
    import pyro_dp.isolation as isolation

    monkeypatch.setattr(reach, "_INDEXING", {})
    fills = []
    real = isolation.robust_rows
    monkeypatch.setattr(likelihood_module, "robust_rows",
                        lambda call, rows, fill: real(call, rows, lambda b: fills.append(b) or fill(b)))
    bad = torch.arange(N) % 4
    bad[3] = 99
    PrivateLikelihood(_grouped, (bad, _data()), seed=0).per_example_loglik(torch.zeros(4, dtype=torch.float64))
    assert fills


# ------------------------------------------------------------------- the compiled path's graphs are unchanged
def _graph_codes(model, args):
    cache = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lik = PrivateLikelihood(model, args, seed=0, jit_compile=True, jit_options={"backend": "graph"},
                                jit_cache=cache)
        z = lik.flatten(lik.prototype_params)
        lik.clipped_grad_sum(z, 1.0)
        lik.loglik_and_prior(z)
        lik.log_prior_and_grad(z)
        lik.clipped_ratio_sum(z + 0.1, lik.per_example_loglik(z), 1.0)
    return {k: v.code for k, v in lik.compiled.cache.items() if hasattr(v, "code")}


@pytest.mark.parametrize("problem", ["logistic", "banana"])
def test_guard_leaves_compiled_graphs_unchanged(problem, monkeypatch):
    """benchmarks/compiled.py's models trace into the same graphs with the tensor guard as
    without it (the guard only watches the trace; no index is computed from a row here), so the
    compiled timings cannot move (issue 58, acceptance 4)."""
    from pyro_dp.models.banana import banana_model, make_banana_data
    from pyro_dp.models.examples import logistic_model, make_logistic_data

    if problem == "logistic":
        X, y, _ = make_logistic_data(300)
        model, args = logistic_model, (X, y)
    else:
        model, args = banana_model, (make_banana_data(300),)
    guarded = _graph_codes(model, args)
    monkeypatch.setattr(reach.CallGuard, "__torch_function__",
                        lambda self, func, types_, args=(), kwargs=None: func(*args, **(kwargs or {})))
    assert len(guarded) >= 3 and guarded == _graph_codes(model, args)
