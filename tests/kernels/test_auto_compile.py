"""Issue 40: jit_compile=None (the default) picks eager or compiled from the run's predicted cost,
data-free; True/False are honoured (pyro_dp/kernels/auto_compile.py)."""
import warnings

import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.kernels.auto_compile import COSTS, FIRST_COMPILE_SECONDS, decide_compile, predicted_seconds
from pyro_dp.models.default_suite import logistic_model, make_logistic_data



def _cost(k):
    """What a set-up kernel's declaration gives auto_compile: ``(cost kind, rows, gradient rows)``."""
    return k.releases().cost_of(k.lik.num_rows)

def _setup(kernel, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel.setup(0, X, y)
    return kernel


def test_the_default_is_auto_and_a_short_run_on_small_data_stays_eager():
    X, y = make_logistic_data(500)
    k = pyro_dp.DPPenalty(logistic_model, epsilon=2.0, seed=0, inference="iterative")
    assert k.jit_compile is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MCMC(k, num_samples=10, warmup_steps=10, disable_progbar=True).run(X, y)
    d = k.compile_decision
    assert not d.compiled and k.lik.compiled is None
    assert d.iterations == 20 and d.num_rows == 500 and d.kind == "penalty"  # read from the MCMC, and N


def test_a_long_run_on_large_data_is_compiled_and_gives_the_eager_chain():
    X, y = make_logistic_data(20_000)
    init = {"b0": torch.tensor(-0.5, dtype=torch.float64), "beta": torch.tensor([2.0, -1.5, 1.0], dtype=torch.float64)}

    def kernel(jit):  # backend "graph": the traced graph without inductor's compile time (same values)
        return pyro_dp.DPHMC(logistic_model, 0.002, 3, 2.0, 2.0, 20.0, 20.0, num_iterations=100_000, seed=0,
                             noise_seed=1, jit_compile=jit, jit_options={"backend": "graph"} if jit is not False else None)

    auto = _setup(kernel(None), X, y)
    assert auto.compile_decision.compiled and auto.compile_decision.kind == "hmc"
    assert auto.lik.compiled is not None
    eager = kernel(False)
    chains = []
    for k in (auto, eager):
        k.initial_params = dict(init)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = MCMC(k, num_samples=3, warmup_steps=0, initial_params=dict(init), disable_progbar=True)
            m.run(X, y)
        chains.append(m.get_samples()["beta"])
    assert eager.compile_decision is None and eager.lik.compiled is None  # False: honoured, nothing decided
    assert torch.allclose(chains[0], chains[1], rtol=1e-10, atol=0)


def test_explicit_settings_are_honoured():
    X, y = make_logistic_data(300)
    off = _setup(pyro_dp.DPPenalty(logistic_model, epsilon=2.0, num_iterations=10**9, jit_compile=False, inference="iterative"), X, y)
    assert off.lik.compiled is None and off.compile_decision is None
    on = _setup(pyro_dp.DPPenalty(logistic_model, epsilon=2.0, num_iterations=10, jit_compile=True,
                                  jit_options={"backend": "graph"}, inference="iterative"), X, y)
    assert on.lik.compiled is not None and on.compile_decision is None
    with pytest.raises(ValueError, match="jit_options needs jit_compile=True"):
        pyro_dp.DPPenalty(logistic_model, epsilon=2.0, jit_compile=False, jit_options={"backend": "graph"}, inference="iterative")
    pyro_dp.DPPenalty(logistic_model, epsilon=2.0, jit_options={"backend": "graph"}, inference="iterative")  # auto: used if it compiles


def test_the_decision_reads_no_data():
    """Only N (a shape), the run length and the settings enter: data of the same shape with other
    values (here: NaN everywhere) get the same decision."""
    X, y = make_logistic_data(20_000)
    a = _setup(pyro_dp.DPPenalty(logistic_model, epsilon=2.0, num_iterations=10**6, seed=0,
                                 jit_options={"backend": "graph"}, inference="iterative"), X, y).compile_decision
    b = _setup(pyro_dp.DPPenalty(logistic_model, epsilon=2.0, num_iterations=10**6, seed=0,
                                 jit_options={"backend": "graph"}, inference="iterative"), torch.full_like(X, float("nan")),
               torch.full_like(y, float("nan"))).compile_decision
    assert a == b and a.compiled


def test_cost_model():
    kw = dict(loglik_rows=1e5, grad_rows=0.0, start_rows=60 * 1e5)
    # the compile pays from some run length on, and never for a kernel whose iterations read no rows
    short, long = (decide_compile("penalty", iterations=i, num_rows=100_000, first_compile=True, **kw)
                   for i in (100, 100_000))
    assert not short.compiled and long.compiled
    assert not decide_compile(None, iterations=10**9, num_rows=10**9, loglik_rows=0, grad_rows=0).compiled
    # a process that has compiled before does not pay inductor's start-up again
    first = predicted_seconds("hmc", iterations=10, loglik_rows=1, grad_rows=1, compiled=True, first_compile=True)
    later = predicted_seconds("hmc", iterations=10, loglik_rows=1, grad_rows=1, compiled=True, first_compile=False)
    assert first - later == pytest.approx(FIRST_COMPILE_SECONDS)
    assert COSTS["hmc"].compile_seconds > COSTS["penalty"].compile_seconds


@pytest.mark.parametrize("name, expected", [
    ("DPMinibatchPenalty", ("penalty", 50.0, 0.0)),
    ("DPSGLD", ("penalty", 0.0, 50.0)),
    ("DPBarker", ("penalty", 50.0, 0.0)),
])
def test_minibatch_kernels_are_costed_by_their_batch(name, expected):
    X, y = make_logistic_data(1000)
    make = {
        "DPMinibatchPenalty": lambda: pyro_dp.DPMinibatchPenalty(logistic_model, 50, 0.1, 1.0, noise_multiplier=1.0),
        "DPSGLD": lambda: pyro_dp.DPSGLD(logistic_model, 50, 1e-3, 1.0, noise_multiplier=1.0),
        "DPBarker": lambda: pyro_dp.DPBarker(logistic_model, 50, 0.1, temperature=0.1),
    }[name]
    k = _setup(make(), X, y)
    assert _cost(k) == expected and not k.compile_decision.compiled


def test_dp_fast_mh_is_costed_by_the_rows_it_is_expected_to_read():
    """DPFastMH's minibatch iteration reads B ~ Poisson(λ + C·M) rows when B < K and all N
    otherwise (Zhang & Zhang 2023, Alg. 2). The cost rule's expected rows (public: N, the
    settings, the proposal's law) match a run's mean rows read within 5 Monte Carlo s.e.
    where about half of the iterations fall back to the full batch; a K far above the batch
    gives the batch's mean, a K far below it all N. Mutant: the old count, min(N, K), is off by
    more than 10 s.e. there (about 20)."""
    import math

    X, y = make_logistic_data(2000)

    def make(k, scale=2e-3):
        return pyro_dp.DPFastMH(logistic_model, proposal_scale=scale, lipschitz=1.0, lam=10.0, max_batch_size=k,
                                non_private=True, seed=0, jit_compile=False)

    above = _setup(make(2000), X, y)
    d = above.lik.dim  # every latent enters the likelihood
    mean_b = 10.0 + 2000 * 2e-3 * math.sqrt(d - 0.5)  # E||xi|| ~ sqrt(d - 1/2)
    far_above = _cost(above)[1]
    assert far_above == pytest.approx(mean_b, rel=0.02)
    assert _cost(_setup(make(2, scale=0.5), X, y))[1] == 2000.0
    per_coordinate = _setup(make(2000, scale=torch.full((d,), 2e-3, dtype=torch.float64)), X, y)
    assert _cost(per_coordinate)[1] == pytest.approx(far_above, rel=1e-12)  # scalar or per coordinate
    k = _setup(make(int(mean_b)), X, y)
    predicted = _cost(k)[1]
    state = k.initial_params
    for _ in range(400):
        state = k.sample(state)
    s = k._stats
    mean = s["rows"] / s["n"]
    full = s["full"] / s["n"]
    se = 2000 * math.sqrt(full * (1 - full) / s["n"]) + 1.0
    assert 0.2 < full < 0.8  # the regime where the count matters
    assert abs(mean - predicted) < 5 * se, (mean, predicted, se)
    assert abs(mean - min(2000, int(mean_b))) > 10 * se  # mutant: the old count
    assert _cost(k)[0] == "fastmh"  # its own per-iteration overheads (auto_compile.COSTS)
    assert COSTS["fastmh"].eager_overhead > COSTS["penalty"].eager_overhead


def test_a_rows_cost_grows_with_the_models_dimension():
    """A per-example row costs more with more latent coordinates in the likelihood (measured: a
    DP-HMC iteration on 10^4 rows took 65 ms eager and 11 ms compiled with 51 latents, against
    8 and 0.6 ms with 6), so a 1 000-iteration DP-HMC run on 10^4 rows compiles with 51 latents and
    stays eager with 6; the kernel passes its likelihood's dimension (a shape). Mutant: the
    dimension ignored (the calibration's 6 for every model) keeps the 51-latent run eager."""
    from pyro_dp.kernels.auto_compile import CALIBRATION_DIM, per_row_seconds

    for what in ("loglik", "grad"):
        costs = [(per_row_seconds(what, d, False), per_row_seconds(what, d, True)) for d in (1, 6, 21, 51, 200)]
        assert all(c <= e for e, c in costs)
        assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(costs, costs[1:]))
    kw = dict(iterations=1000, num_rows=10_000, loglik_rows=1e4, grad_rows=5e4)
    assert decide_compile("hmc", dim=51, **kw).compiled
    assert not decide_compile("hmc", dim=6, **kw).compiled
    assert not decide_compile("hmc", dim=CALIBRATION_DIM, **kw).compiled  # the mutant: dimension ignored
    X, y = make_logistic_data(300)
    k = _setup(pyro_dp.DPPenalty(logistic_model, epsilon=2.0, num_iterations=10, seed=0, inference="iterative"), X, y)
    assert k.compile_decision.dim == k.lik.likelihood_dim == 4  # b0 and three coefficients
