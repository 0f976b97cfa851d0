"""#17: the compiled per-example path (``jit_compile=True``, pyro_dp/compiled.py).

* Every kernel gives the same chain and the same ledger on the traced path as recorded for the
  eager path (``tests/kernels/golden``): the ``"graph"`` backend replays the eager aten
  operations, so chains match to the golden tolerance (1e-12 relative) and ledgers exactly.
* Inductor (the default backend) on every kernel: ledgers exact, chains to 1e-10 relative
  (fused sums may be reordered: last-bit differences; an O(1) difference would be a flipped
  accept decision).
* A model the trace cannot represent falls back to eager with a warning and the same values.
* Batch sizes are bucketed: a Poisson-batch run compiles a handful of graphs, not one per size.
* The full-data fused pass runs in chunks with the same result.
"""
import json
import math
import pickle
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
import pyro_dp.compiled as compiled_mod
import pyro_dp.graphs as graphs_mod
from pyro_dp.compiled import CompileFallbackWarning, bucket_size
from pyro_dp.likelihood import PrivateLikelihood

from pyro_dp.private import reveal
from .kernels.golden_cases import GOLDEN, GOLDEN_KW, cases, run


def raw(x):
    return reveal(x, reason="a test compares values")


def assert_close(a, b, **kw):
    """``torch.testing.assert_close`` of the likelihood's values, private ones included (pyro_dp.private)."""
    torch.testing.assert_close(reveal(a, reason="a test compares values"), reveal(b, reason="a test compares values"),
                               **kw)
from .kernels.helpers import gauss_model, make_data

RECORDED = json.loads(GOLDEN.read_text())
GRAPH = dict(jit_compile=True, jit_options={"backend": "graph"})


def _close(chain, want, rtol):
    got = torch.tensor(chain, dtype=torch.float64)
    assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=rtol, atol=1e-15)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_traced_path_gives_the_recorded_chain_and_ledger(name):
    chain, ledger = run(*cases(**GRAPH)[name])
    assert ledger == RECORDED[name]["ledger"]
    _close(chain, RECORDED[name]["chain"], rtol=1e-12)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_inductor_path_gives_the_recorded_chain_and_ledger(name):
    chain, ledger = run(*cases(jit_compile=True)[name])
    assert ledger == RECORDED[name]["ledger"]
    _close(chain, RECORDED[name]["chain"], rtol=1e-10)


def test_traced_functions_match_eager_at_other_points_and_subsets():
    y = make_data(50, seed=1)
    eager = PrivateLikelihood(gauss_model, (y,), seed=0)
    lik = PrivateLikelihood(gauss_model, (y,), seed=0, jit_compile=True, jit_options={"backend": "graph"})
    idx = torch.tensor([3, 1, 40])
    for z in (torch.tensor([0.3], dtype=torch.float64), torch.tensor([-2.0], dtype=torch.float64)):
        for a, b in ((lik.loglik_and_prior(z), eager.loglik_and_prior(z)),
                     (lik.loglik_and_prior(z, idx), eager.loglik_and_prior(z, idx)),
                     (lik.per_example_grad(z, idx), eager.per_example_grad(z, idx)),
                     (lik.log_prior_and_grad(z), eager.log_prior_and_grad(z))):
            for u, v in zip(a, b):
                assert_close(u, v, rtol=1e-12, atol=1e-14)
        ll, cs = lik.clipped_grad_sum(z, 0.5, idx)
        ll_e, cs_e = eager.clipped_grad_sum(z, 0.5, idx)
        assert_close(cs.total, cs_e.total, rtol=1e-12, atol=1e-14)
        assert int(raw(cs.num_clipped)) == int(raw(cs_e.num_clipped)) and int(cs.num_rows) == 3
        assert_close(lik.log_prior(z), eager.log_prior(z))
    # one graph per function and bucket, reused at every point
    assert lik.compiled.num_compiled == 6


def test_bucket_sizes():
    assert [bucket_size(n) for n in (1, 8, 9, 100, 1000, 1024, 1025)] == [8, 8, 10, 112, 1024, 1024, 1280]
    for n in range(1, 3000):
        b = bucket_size(n)
        assert n <= b <= max(8, 1.25 * n)
    with pytest.raises(ValueError):
        bucket_size(0)


def test_poisson_batches_compile_a_few_graphs_not_one_per_size(monkeypatch):
    """#17: 'no recompilation per iteration' — Poisson batch sizes vary (here about 50 ± 7) but
    fall into a few size buckets (at most 25% apart)."""
    import pyro_dp.kernels.sg_gradient as sg_gradient

    sizes, draw = [], sg_gradient.poisson_batch

    def recording(*a, **kw):  # the step's Poisson batch (drawn before it, on both paths)
        idx = draw(*a, **kw)
        sizes.append(int(idx.numel()))
        return idx

    monkeypatch.setattr(sg_gradient, "poisson_batch", recording)
    y = make_data(500, seed=2)
    k = pyro_dp.DPSGLD(gauss_model, 50, 1e-3, 2.0, seed=0, **GRAPH)
    MCMC(k, num_samples=80, warmup_steps=0, disable_progbar=True).run(y)
    buckets = {bucket_size(b) for b in sizes if b}
    assert len(set(sizes)) >= 15  # the batch sizes vary ...
    compiled = []  # ... one graph per bucket, except where a compiled larger bucket holds the batch
    for b in (b for b in sizes if b):
        if bucket_size(b) not in compiled and not any(b <= c <= 2 * b for c in compiled):
            compiled.append(bucket_size(b))
    # the batch's selection, clipped gradient sum and noise and the prior's gradient: one graph
    assert k.lik.compiled.num_compiled == len(compiled) <= len(buckets) <= 6


def test_a_rare_small_batch_is_padded_into_a_compiled_bucket():
    """#17: a batch whose own bucket has no graph yet uses the smallest compiled bucket that
    holds it at most twice over (no mid-run compile for a rare size), with the same values;
    a batch more than twice smaller gets its own bucket."""
    y = make_data(3000, seed=2)
    jit = PrivateLikelihood(gauss_model, (y,), seed=0, jit_compile=True, jit_options={"backend": "graph"})
    eager = PrivateLikelihood(gauss_model, (y,), seed=0)
    z = torch.tensor([0.3], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    # own buckets 1024, 1024, 1280, 768 (padded to the compiled 1024), 448 (1024 > 2 x 400: compiled)
    for b, graphs in ((1000, 1), (900, 1), (1100, 2), (700, 2), (400, 3)):
        idx = torch.randperm(3000, generator=g)[:b]
        (_, cs), (_, cs_e) = jit.clipped_grad_sum(z, 0.5, idx), eager.clipped_grad_sum(z, 0.5, idx)
        assert_close(cs.total, cs_e.total, rtol=1e-12, atol=1e-12)
        assert int(cs.num_rows) == b and int(raw(cs.num_clipped)) == int(raw(cs_e.num_clipped))
        assert jit.compiled.num_compiled == graphs, b


def _second_run_on_other_data(make, y):
    """A chain of ``make()``'s kernel object run on ``y`` after a first (one-iteration) run on
    other data of the same shape (``y + 3``)."""
    k = make()
    k.setup(0, y + 3.0)
    k.sample(k.initial_params)
    return run(lambda: k, y)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_second_run_on_other_data_reads_the_new_data(name):
    """s10 audit F3: the graphs cached per kernel object closed over the data of the likelihood
    that compiled them, so a second ``mcmc.run`` on other data of the same shape silently
    sampled the first data set's posterior. The compiled chain of the second run must be the
    eager one."""
    eager = _second_run_on_other_data(cases()[name][0], cases()[name][1])
    traced = _second_run_on_other_data(*cases(**GRAPH)[name])
    _close(traced[0], eager[0], 1e-12)
    assert traced[1] == eager[1]


def test_sequential_chains_reuse_the_compiled_graphs():
    y = make_data(100, seed=3)
    k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=3.0, seed=0, **GRAPH)
    mcmc = MCMC(k, num_samples=5, warmup_steps=2, num_chains=2, disable_progbar=True)
    mcmc.run(y)
    assert k.lik.compiled.num_compiled == 0  # the second chain's likelihood found every graph cached
    assert len(k._jit_cache) >= 2
    pickle.loads(pickle.dumps(k))  # a compiled kernel can still be pickled (graphs are dropped)


def branching_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 3.0))
    scale = 1.0 if mu > 0 else 2.0  # Python control flow on a latent value: not traceable
    with pyro.plate("data", y.shape[0]) as idx:
        pyro.sample("obs", dist.Normal(mu, scale), obs=y[idx])


def test_untraceable_model_falls_back_to_eager_with_a_warning():
    y = make_data(30, seed=4)
    eager = PrivateLikelihood(branching_model, (y,), seed=0)
    lik = PrivateLikelihood(branching_model, (y,), seed=0, jit_compile=True, jit_options={"backend": "graph"})
    z = torch.tensor([-0.5], dtype=torch.float64)
    with pytest.warns(CompileFallbackWarning, match="cannot be traced"):
        out = lik.loglik_and_prior(z)
    assert_close(out[0], eager.loglik_and_prior(z)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)  # decided once per function
        lik.loglik_and_prior(torch.tensor([0.5], dtype=torch.float64))
    assert lik.compiled.num_compiled == 0


def test_full_data_fused_pass_runs_in_chunks(monkeypatch):
    y = make_data(203, seed=5)
    z = torch.tensor([0.4], dtype=torch.float64)
    eager = PrivateLikelihood(gauss_model, (y,), seed=0)
    monkeypatch.setattr(compiled_mod, "CHUNK_ELEMENTS", 64)  # 64 rows per chunk, 4 chunks
    lik = PrivateLikelihood(gauss_model, (y,), seed=0, jit_compile=True, jit_options={"backend": "graph"})
    ll, cs = lik.clipped_grad_sum(z, 0.3)
    ll_e, cs_e = eager.clipped_grad_sum(z, 0.3)
    assert_close(ll, ll_e)
    assert_close(cs.total, cs_e.total, rtol=1e-12, atol=1e-12)
    assert int(raw(cs.num_clipped)) == int(raw(cs_e.num_clipped)) and int(cs.num_rows) == 203
    assert lik.compiled.num_compiled == 1  # every chunk, the padded last one too, uses one graph


def test_bad_jit_options():
    with pytest.raises(ValueError, match="backend"):
        PrivateLikelihood(gauss_model, (make_data(5),), jit_compile=True, jit_options={"backend": "nope"})
    for bad in ({"mode": "reduce-overhead"}, {"mode": "max-autotune"}, {"options": {"triton.cudagraphs": True}}):
        with pytest.raises(ValueError, match="CUDA graphs"):
            PrivateLikelihood(gauss_model, (make_data(5),), jit_compile=True, jit_options=bad)
    with pytest.raises(ValueError, match="jit_compile=True"):
        pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=1.0, jit_compile=False,
                          jit_options={"backend": "graph"})
    for bad in ({"backend": "nope"}, {"mode": "reduce-overhead"}):  # jit_compile=None (auto): refused when built
        with pytest.raises(ValueError, match="backend|CUDA graphs"):
            pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=1.0, jit_options=bad)


def _compiled(fn, *inputs):
    """``fn`` traced with make_fx and compiled by inductor, as the compiled path does."""
    from torch._inductor.compile_fx import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx

    return compile_fx(make_fx(fn)(*inputs), list(inputs))


def test_compiled_per_row_rule_matches_eager_on_non_finite_rows():
    """The per-row rule is written as arithmetic (``x - x == 0``) so that inductor vectorises it;
    a compiler that folded ``x - x`` (or ``0 * x``, which inductor does fold) to 0 would let a NaN
    or ±inf row into the released sum. Compiled and eager must agree on rows with NaN, ±inf,
    overflowing norms and ordinary rows, for the column, row and scalar forms."""
    from pyro_dp.mechanisms import clip_and_sum, clip_and_sum_columns

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1000, generator=g, dtype=torch.float64), torch.randn(1000, generator=g, dtype=torch.float64)
    a[3], b[7], a[11], b[11], a[20], b[20] = float("nan"), float("inf"), -float("inf"), float("nan"), 1e308, 1e308
    c = torch.tensor(1.0, dtype=torch.float64)
    def forms_for(count):
        return {
            ("columns", count): lambda x, y, c: tuple(clip_and_sum_columns([x, y], c, count=count)),
            ("rows", count): lambda x, y, c: tuple(clip_and_sum(torch.stack([x, y], -1), c, count=count)),
            ("scalars", count): lambda x, y, c: tuple(clip_and_sum(x, c, count=count)),
        }

    # with the count, and without it (the graphs of kernels without nonprivate_diagnostics)
    forms = {**forms_for(True), **forms_for(False)}
    for name, fn in forms.items():
        want, got = fn(a, b, c), _compiled(fn, a, b, c)(a, b, c)
        assert bool(torch.isfinite(got[0]).all()), name
        assert_close(got[0], want[0], rtol=1e-12, atol=1e-12, msg=str(name))
        assert int(got[1]) == int(want[1]), name  # non-finite rows are counted as clipped (or not counted)
    # the rule is not vacuous: without it, the NaN row reaches the sum
    assert not bool(torch.isfinite((a * torch.clamp(c / a.abs(), max=1.0)).sum()))


def test_clipped_difference_sum_compiled_equals_eager():
    """DP-HMC's ratio release: the fused graph gives eager's clipped sum and count."""
    y = make_data(200, seed=3)
    eager = PrivateLikelihood(gauss_model, (y,), seed=0)
    jit = PrivateLikelihood(gauss_model, (y,), seed=0, jit_compile=True)
    old = eager.per_example_loglik(torch.tensor([0.1], dtype=torch.float64))
    new = eager.per_example_loglik(torch.tensor([0.9], dtype=torch.float64))
    new[5] = float("nan")  # the per-row rule: counted as clipped, contributes 0
    want, got = eager.clipped_difference_sum(new, old, 0.3), jit.clipped_difference_sum(new, old, 0.3)
    assert_close(got.total, want.total, rtol=1e-12, atol=1e-12)
    assert int(raw(got.num_clipped)) == int(raw(want.num_clipped)) and int(got.num_rows) == 200
    assert jit.compiled.num_compiled == 1


def _banana_like(x, s):
    """A Pyro model whose Normal broadcasts a [2] scale to every row (as the thesis banana)."""
    theta = pyro.sample("theta", dist.Normal(torch.zeros(2, dtype=x.dtype), 10.0).to_event(1))
    with pyro.plate("data", x.shape[0]) as idx:
        pyro.sample("obs", dist.Normal(theta, s).to_event(1), obs=x[idx])


def test_hoist_broadcasts_keeps_values_and_moves_parameter_work_out_of_the_rows():
    """#17: ``hoist_broadcasts`` computes log(scale), the variance and its reciprocal once per
    call. The prepared graph gives eager's per-example log-likelihoods, gradients and clipped
    sums to 1e-12 relative (the reciprocal can change a term in its last bit), and no
    ``log`` or division by a broadcast parameter is left on a per-row tensor."""
    from torch.fx.experimental.proxy_tensor import make_fx

    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 2, generator=g, dtype=torch.float64)
    x[7] = torch.tensor([1e200, -1e300], dtype=torch.float64)  # extreme row: its terms overflow; the per-row rule applies
    s = torch.tensor([0.5, 2.0], dtype=torch.float64)
    eager = PrivateLikelihood(_banana_like, (x, s), seed=0)
    jit = PrivateLikelihood(_banana_like, (x, s), seed=0, jit_compile=True)
    for z in (torch.tensor([0.3, -1.0], dtype=torch.float64), torch.tensor([2.0, 0.5], dtype=torch.float64)):
        for a, b in ((jit.loglik_and_prior(z), eager.loglik_and_prior(z)),
                     (jit.per_example_grad(z), eager.per_example_grad(z))):
            for u, v in zip(a, b):
                assert_close(u, v, rtol=1e-12, atol=1e-12, equal_nan=True)
        _, cs, = jit.clipped_grad_sum(z, 0.7)
        _, cs_e = eager.clipped_grad_sum(z, 0.7)
        assert_close(cs.total, cs_e.total, rtol=1e-12, atol=1e-12)
        assert int(raw(cs.num_clipped)) == int(raw(cs_e.num_clipped))
    # the rewrite itself, on the traced log-likelihood graph
    lik = jit.compiled
    fn = lik._with_data(lambda zz: lik.lik.eager_loglik_and_prior(zz, None))
    z = torch.tensor([0.3, -1.0], dtype=torch.float64)
    gm = make_fx(fn, tracing_mode="fake", _allow_non_fake_inputs=True)(*lik._data, z)
    before = gm(*lik._data, z)
    big = lambda n: isinstance(n, torch.fx.Node) and n.meta.get("val") is not None and n.meta["val"].numel() > 64
    # (each row is evaluated alone under vmap: Pyro's log(scale) is no longer broadcast over the rows before the
    # rewrite either; the rewrite must still keep values and leave no such work on a per-row tensor)
    prepared = graphs_mod.hoist_broadcasts(gm)
    after = prepared(*lik._data, z)
    for u, v in zip(before, after[: prepared.num_own_outputs]):
        assert_close(u, v, rtol=1e-12, atol=1e-12, equal_nan=True)
    for n in prepared.graph.nodes:
        assert not (n.target is torch.ops.aten.log.default and big(n)), n.format_node()
        assert not (n.target is torch.ops.aten.div.Tensor and big(n) and graphs_mod._small(n.args[1])), n.format_node()


def test_hoist_broadcasts_stores_a_parameter_that_reaches_the_rows_through_a_view(monkeypatch):
    """#38: under the per-row ``vmap`` a parameter reaches the rows through a view (``[D]`` ->
    ``[1, D]``) that the batched operation broadcasts; rewrite 3 must look through the view and
    store the parameter once (an extra output). The mutant that looks only at direct users
    leaves it to be recomputed inside the loop over the rows (measured: DP penalty's fused pass
    1.5x slower on the banana)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    f = lambda x, m: (x - torch.sqrt(m).view(1, 2)).sum()  # noqa: E731
    x, m = torch.ones(100, 1, 2), torch.full((2,), 4.0)
    out = graphs_mod.hoist_broadcasts(make_fx(f)(x, m))(x, m)
    assert len(out) == 2 and torch.equal(out[1], torch.full((2,), 2.0))  # sqrt(m) stored once
    monkeypatch.setattr(graphs_mod, "_read_per_row",
                        lambda node, size: any((graphs_mod._numel(u) or 0) >= size for u in node.users))
    assert len(graphs_mod.hoist_broadcasts(make_fx(f)(x, m))(x, m)) == 1  # mutant: the sum alone, sqrt(m) not stored


def test_a_model_whose_per_row_forward_mode_cannot_be_traced_compiles_in_the_outer_form(monkeypatch):
    """``vmap`` over rows of per-coordinate ``jvp`` (the fast forward-mode columns) fails to trace
    for some models (``torch.quantile`` in torch 2.13's fake mode); the graph is then traced with
    ``jvp`` outside the rows' ``vmap``, with the same values, and the failed trace (run in a
    thread of its own) leaves later traces and eager calls in this thread working. (Winsorising
    reads other rows, which the set-up refuses; switched off here to reach the trace.)"""
    monkeypatch.setattr(PrivateLikelihood, "_check_isolation", lambda self, cache: None)
    monkeypatch.setattr(PrivateLikelihood, "_check_cross_rows", lambda self, cache: None)

    def winsor(y):
        mu = pyro.sample("mu", dist.Normal(torch.zeros(2, dtype=y.dtype), 1.0).to_event(1))
        with pyro.plate("data", y.shape[0]):
            pyro.sample("obs", dist.Normal(mu, 1.0).to_event(1), obs=torch.minimum(y, y.quantile(0.9)))

    y = torch.randn(30, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = torch.tensor([0.2, -0.1], dtype=torch.float64)
    eager = PrivateLikelihood(winsor, (y,), seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        jit = PrivateLikelihood(winsor, (y,), seed=0, jit_compile=True, jit_options={"backend": "graph"})
        g, ge = jit.per_example_grad(z), eager.per_example_grad(z)
        assert jit.compiled._row_columns is False and jit.compiled.num_compiled == 1
        assert_close(g, ge, rtol=1e-12, atol=1e-12)
        assert_close(jit.loglik_and_prior(z), eager.loglik_and_prior(z), rtol=1e-12, atol=1e-12)
        assert jit.compiled.num_compiled == 2


def test_log_ratios_one_graph_matches_eager():
    """#17: the minibatch kernels' per-row ratios on a batch come from one graph (one padding
    of the batch) instead of two model evaluations; same values as eager, on all rows and on
    a subset, with the log prior at the new point."""
    y = make_data(60, seed=2)
    eager = PrivateLikelihood(gauss_model, (y,), seed=0)
    jit = PrivateLikelihood(gauss_model, (y,), seed=0, jit_compile=True)
    z, z_new = torch.tensor([0.2], dtype=torch.float64), torch.tensor([-0.4], dtype=torch.float64)
    for idx in (None, torch.tensor([5, 0, 59, 17])):
        for u, v in zip(jit.log_ratios(z, z_new, idx), eager.log_ratios(z, z_new, idx)):
            assert_close(u, v, rtol=1e-12, atol=1e-12)
    want = eager.loglik_and_prior(z_new)[0] - eager.loglik_and_prior(z)[0]
    assert_close(eager.log_ratios(z, z_new)[0], want, rtol=0, atol=0)
    assert jit.compiled.num_compiled == 2  # one graph per shape: all rows, and the batch's bucket


@pytest.mark.parametrize("backend", ["graph", "inductor"])
def test_a_graph_traced_on_one_tensor_passed_twice_keeps_both_inputs(backend):
    """The tracer maps one tensor object passed twice to one graph input: a graph first traced
    on ``log_ratios(z, z)`` ignored its second input at every later call (found in #17). The
    compiled likelihood traces on distinct copies."""
    y = make_data(20, seed=1)
    jit = PrivateLikelihood(gauss_model, (y,), seed=0, jit_compile=True, jit_options={"backend": backend})
    eager = PrivateLikelihood(gauss_model, (y,), seed=0)
    z, z_new = torch.tensor([0.3], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
    assert_close(jit.log_ratios(z, z)[0], torch.zeros(20, dtype=torch.float64))
    assert_close(jit.log_ratios(z, z_new)[0], eager.log_ratios(z, z_new)[0], rtol=1e-12, atol=1e-12)


def _hmc_chain(model, y, num_steps, **extra):
    factory = lambda: pyro_dp.DPHMC(model, 0.02, num_steps, 2.0, 2.0, 5.0, 3.0, adapt_step_size=True,  # noqa: E731
                                    **dict(GOLDEN_KW, **extra))
    return run(factory, y)


@pytest.mark.parametrize("num_steps", [1, 2, 4])
def test_dphmc_fused_leapfrog_steps_give_the_eager_chain_and_ledger(num_steps):
    """#17, #39: on the compiled path a DP-HMC iteration is one graph, the step written once
    (:func:`~pyro_dp.kernels.hmc.dphmc_step_fn`: the whole trajectory of L leapfrog steps with
    their gradient releases from pre-drawn normals, the ratio release and the penalty test),
    and the chain's first gradient G_{1,0} another: the same chain as eager (1e-12 relative
    with the replayed graph, 1e-10 with inductor) and exactly the same ledger."""
    y = make_data(300, seed=3)
    chain, ledger = _hmc_chain(gauss_model, y, num_steps)
    for extra, rtol in ((GRAPH, 1e-12), (dict(jit_compile=True), 1e-10)):
        got, got_ledger = _hmc_chain(gauss_model, y, num_steps, **extra)
        assert got_ledger == ledger
        _close(got, chain, rtol)
    k = pyro_dp.DPHMC(gauss_model, 0.02, num_steps, 2.0, 2.0, 5.0, 3.0, seed=0, **GRAPH)
    MCMC(k, num_samples=3, warmup_steps=0, disable_progbar=True).run(y)
    names = sorted({key[0] for key, fn in k._jit_cache.items() if fn is not None})
    # the step's graph and G_{1,0}'s (and the initial log prior), not the unfused release functions;
    # without nonprivate_diagnostics their clipped sums do not count the clipped rows
    assert [n for n in names if n.startswith("dphmc_")] == [
        "dphmc_gradient[T=1.0,nm_g=5.0][uncounted]", f"dphmc_step[L={num_steps},T=1.0,nm_g=5.0,nm_l=3.0][uncounted]"]
    assert "clipped_grad_sum" not in names and "clipped_difference_sum" not in names
    # the non-private gradient clipped fraction (read from the graphs' counts in one transfer)
    # is the eager one; a clip of 0.3 binds on about two thirds of the rows; the chain and the
    # ledger are those of the uncounted graphs
    fracs = []
    for extra in ({}, GRAPH):
        k = pyro_dp.DPHMC(gauss_model, 0.02, num_steps, 0.3, 2.0, 5.0, 3.0, nonprivate_diagnostics=True,
                          **dict(GOLDEN_KW, **extra))
        m = MCMC(k, num_samples=10, warmup_steps=0, disable_progbar=True)
        m.run(y)
        fracs.append(m.diagnostics()["non-private gradient clipped fraction"]["chain 0"])
        if extra:
            assert sorted(key[0] for key, fn in k._jit_cache.items() if key[0].startswith("dphmc_")) == [
                "dphmc_gradient[T=1.0,nm_g=5.0]", f"dphmc_step[L={num_steps},T=1.0,nm_g=5.0,nm_l=3.0]"]
    assert fracs[0] == fracs[1] and 0.1 < fracs[0] < 0.9


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_dphmc_counts_clipped_rows_only_for_nonprivate_diagnostics():
    """The count of clipped rows is a statistic of the raw data that only
    ``nonprivate_diagnostics=True`` shows; without it DP-HMC's graphs do not compute it (about
    8 % of the compiled banana iteration, docs/performance.md) and the step's info says so with
    NaN fractions, on both paths. The chain and the ledger are the same either way."""
    from pyro_dp.kernels.hmc import hmc_init, hmc_step
    from pyro_dp.mechanisms import NoiseSource

    y = make_data(300, seed=3)
    counted, ledger = _hmc_chain(gauss_model, y, 2, nonprivate_diagnostics=True, **GRAPH)
    for extra in ({}, GRAPH):
        got, got_ledger = _hmc_chain(gauss_model, y, 2, **extra)
        assert got_ledger == ledger
        _close(got, counted, 1e-12)
    one = torch.ones(1, dtype=y.dtype)
    kw = dict(step_size=0.02, num_steps=2, inv_mass=one, mass_sqrt=one, grad_clip=0.3, llr_clip=2.0,
              grad_noise_multiplier=5.0, llr_noise_multiplier=3.0)
    for extra in (GRAPH, {"jit_compile": False}):  # the likelihood of a compiled, then an eager kernel
        k = pyro_dp.DPHMC(gauss_model, 0.02, 2, 0.3, 2.0, 5.0, 3.0, seed=0, **extra)
        MCMC(k, num_samples=2, warmup_steps=0, disable_progbar=True).run(y)
        lik = k.lik
        assert (lik.compiled is not None) == bool(extra["jit_compile"])
        for count, check in ((True, lambda f: 0.0 < f < 1.0), (False, math.isnan)):
            state = hmc_init(lik, torch.zeros(lik.dim, dtype=y.dtype))
            _, info = hmc_step(torch.Generator().manual_seed(0), NoiseSource(seed=1), state, lik,
                               count_clipped=count, **kw)
            assert check(info.grad_clipped_fraction) and check(info.clipped_fraction), (count, info)


def _cv_graphs_give_the_eager_chain(factory, seed, graphs):
    """The control-variate ``factory``'s chain on data with rows whose terms overflow (the per-row
    rule inside the graphs): compiled (replayed graph, inductor) as eager to rounding, the same
    ledger, and each of ``graphs`` compiled."""
    y = make_data(300, seed=seed)
    y[5], y[9] = 1e200, -1e308
    chain, ledger = run(factory, y)
    assert len({tuple(row) for row in chain}) > 3  # the chain moved
    for extra, rtol in ((GRAPH, 1e-12), (dict(jit_compile=True), 1e-10)):
        k = factory(**extra)
        got, got_ledger = run(lambda: k, y)
        assert got_ledger == ledger
        _close(got, chain, rtol)
        compiled = {key[0] for key, fn in k._jit_cache.items() if fn is not None}
        assert set(graphs) <= compiled, compiled


def test_dphmc_control_variate_residual_sum_is_one_graph_with_the_eager_chain():
    """The control-variate DP-HMC step (the default path's) clips each leapfrog step's ``[N, D]``
    gradient differences from the reference; on the compiled path that is one graph (the
    per-example gradients, the difference, the per-row rule, the clip and the sum), and the
    ratio's Taylor residuals another: the eager chain to rounding and the same ledger, also with
    rows whose gradients overflow."""
    _cv_graphs_give_the_eager_chain(lambda **extra: pyro_dp.DPHMC(
        gauss_model, 0.02, 3, 4.0, 4.0, 2.0, 1.0, control_variate=True, curvature_clip=1.0,
        reference_noise_multiplier=0.5, **dict(GOLDEN_KW, **extra)),
        3, ["cv_residual_grad_sum", "cv_residual_ratio_sum"])


def test_dppenalty_control_variate_residual_ratio_sum_is_one_graph_with_the_eager_chain():
    """The control-variate penalty test (DPPenalty's default path) clips each row's Taylor
    residual; on the compiled path one small graph: the eager chain to rounding and the same
    ledger, also with rows whose terms overflow."""
    _cv_graphs_give_the_eager_chain(lambda **extra: pyro_dp.DPPenalty(
        gauss_model, 0.05, llr_clip=4.0, noise_multiplier=1.0, control_variate=True, curvature_clip=1.0,
        reference_noise_multiplier=0.5, **dict(GOLDEN_KW, **extra)), 4, ["cv_residual_ratio_sum"])


def _scale_model(y):
    """Normal(mu, sigma) with a 0-d positive latent: Pyro maps it to the real line with
    ``ComposeTransform(Exp, AffineTransform(0., 1))``, whose forward-mode derivative at a 0-d
    float32 point torch 2.13 returns as float64."""
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 5.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(torch.tensor(3.0, dtype=y.dtype)))
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(mu, sigma), obs=y)


def test_float32_model_keeps_its_dtype_and_the_eager_chain_on_the_compiled_path():
    """A new user's float32 model with a positive scalar latent. The compiled path's
    forward-mode gradient columns came out float64 (the torch quirk of :func:`_scale_model`),
    so DP-HMC's momentum became float64 and its float32 leapfrog graph read float64 bits as
    float32: non-finite trajectories, data-free rejections, a chain stuck at its start while
    eager moved, and a different ledger (gradient releases without their ratio release).
    Now the compiled chain is the eager one (float32: to 1e-4, inductor may reorder sums), the
    ledger is the same and the state stays float32, also for DP-SGLD."""
    y = (1.0 + 2.0 * torch.randn(400, generator=torch.Generator().manual_seed(0), dtype=torch.float64)).float()
    kw = dict(seed=3, noise_seed=4, init_strategy=pyro.infer.autoguide.initialization.init_to_median)
    factories = {
        "hmc": lambda **e: pyro_dp.DPHMC(_scale_model, 0.01, 3, 2.0, 2.0, 3.0, 2.0, **kw, **e),
        "sgld": lambda **e: pyro_dp.DPSGLD(_scale_model, 50, 1e-4, 2.0, **kw, **e),
    }
    for name, make in factories.items():
        chain, ledger = run(make, y)
        for extra in (GRAPH, dict(jit_compile=True)):
            k = make(**extra)
            got, got_ledger = run(lambda: k, y)
            assert got_ledger == ledger, name
            assert_close(torch.tensor(got), torch.tensor(chain), rtol=1e-4, atol=1e-5)
            assert k._state.z.dtype == torch.float32, name
    moved = torch.tensor(chain)
    assert bool((moved[1:] != moved[:-1]).any(1).float().mean() > 0.3)  # the eager chain moves


def test_a_fused_graph_refuses_inputs_of_another_dtype_than_it_was_compiled_for():
    """Inductor checks a graph's input sizes and strides, not dtypes: a float64 input where the
    graph was compiled for float32 would be read as float32 bits. The callable of
    :meth:`~pyro_dp.compiled.CompiledLikelihood.fused_graph` refuses it (an internal error:
    dtypes are not data)."""
    y = make_data(20, seed=1)
    for options in ({"backend": "graph"}, {}):
        lik = PrivateLikelihood(gauss_model, (y,), seed=0, jit_compile=True, jit_options=options)
        z = torch.tensor([0.3], dtype=torch.float64)
        graph = lik.compiled.fused_graph("twice", lambda v: 2 * v, (z,))
        out = graph(z)
        assert (out[0] if isinstance(out, (tuple, list)) else out).tolist() == [0.6]
        for bad in (z.float(), torch.zeros(2, dtype=torch.float64)):
            with pytest.raises(RuntimeError, match="compiled for input 0"):
                graph(bad)
        with pytest.raises(RuntimeError, match="takes 1 inputs"):
            graph(z, z)


def test_dphmc_unfusable_steps_fall_back_before_any_release(monkeypatch):
    """A model the trace cannot represent, and data whose gradient pass needs chunks, run the
    unfused DP-HMC step (decided from code and shapes, before any noise is drawn): the same
    chain and ledger as eager."""
    y = make_data(300, seed=3)
    for model in (branching_model, gauss_model):
        chain, ledger = _hmc_chain(model, y, 2)
        with monkeypatch.context() as m:
            if model is gauss_model:
                m.setattr(compiled_mod, "CHUNK_ELEMENTS", 64)  # 64 rows per chunk: no single-graph pass
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CompileFallbackWarning)
                got, got_ledger = _hmc_chain(model, y, 2, **GRAPH)
        assert got_ledger == ledger
        _close(got, chain, 1e-12)


@pytest.mark.parametrize("name", ["penalty", "penalty_gwmh_adapt", "penalty_init"])
def test_dppenalty_fused_step_is_one_graph_with_the_recorded_chain(name):
    """#17: on the compiled path a DP penalty iteration's release and accept test are one graph
    (the clipped ratio sum, the pre-drawn noise, the penalty test with its data-free validity
    check): the recorded eager chain (the golden tests check both backends) and the fused
    graph, not the unfused ratio pass, ran. Without ``nonprivate_diagnostics`` the graph does not
    count the clipped rows (the info's fraction is NaN); with it, it does, and the chain is the same."""
    for npd in (False, True):
        factory, y = cases(nonprivate_diagnostics=npd, **GRAPH)[name]
        k = factory()
        chain, ledger = run(lambda: k, y)
        assert ledger == RECORDED[name]["ledger"]
        _close(chain, RECORDED[name]["chain"], rtol=1e-12)
        names = {key[0] for key, fn in k._jit_cache.items() if fn is not None}
        steps = [nm for nm in names if nm.startswith("penalty_step[T=1.0,")]
        assert steps and all(nm.endswith("[uncounted]") != npd for nm in steps) and "clipped_ratio_sum" not in names
        frac = k.chain.clipped_sum / max(k.chain.clipped_count, 1)
        assert (0.0 <= frac <= 1.0) if npd else math.isnan(frac)


BACKENDS = [(GRAPH, 1e-12), (dict(jit_compile=True), 1e-10)]


def _fused_graphs_of_recorded_case(name, extra, rtol, fused_prefix):
    """Run the recorded case ``name`` on a compiled backend: the recorded chain and ledger;
    returns the names of the graphs it compiled and the count of its fused ones."""
    factory, y = cases(**extra)[name]
    k = factory()
    chain, ledger = run(lambda: k, y)
    assert ledger == RECORDED[name]["ledger"]
    _close(chain, RECORDED[name]["chain"], rtol=rtol)
    names = [key[0] for key, fn in k._jit_cache.items() if fn is not None]
    return set(names), sum(nm.startswith(fused_prefix) for nm in names)


def _forced_fallbacks_keep_the_eager_chain(monkeypatch, make, y, extra_draws, batch_drawn_outside=False):
    """Draw only ``b + extra_draws`` indices per round, so that rounds with too few distinct ones
    are common: the fused step must restore the generators and let the eager step draw again.
    ``make(**kw)`` builds the kernel; its eager, traced and inductor chains and ledgers must be
    equal (adversarial rows in ``y`` exercise the per-row rule inside the graph), and over the
    2 x 25 compiled steps some fell back and most were fused. With ``batch_drawn_outside`` (a
    step written once, issue 39: the batch is drawn by the mechanisms layer before the step, on
    both paths) there is no fallback: every compiled step drew its batch there, extra rounds
    included."""
    import pyro_dp.mechanisms.batches as mech  # where the batch draws live (the package re-exports them)

    monkeypatch.setattr(mech, "_draws_per_round", lambda b: b + extra_draws)
    eager_calls = []
    orig = mech.sample_without_replacement
    monkeypatch.setattr(mech, "sample_without_replacement", lambda *a, **kw: eager_calls.append(1) or orig(*a, **kw))
    want, want_ledger = run(make, y)
    eager_calls.clear()
    for extra, rtol in BACKENDS:
        got, got_ledger = run(lambda: make(**extra), y)
        assert got_ledger == want_ledger
        _close(got, want, rtol)
    if batch_drawn_outside:
        assert len(eager_calls) == 2 * 25, len(eager_calls)
    else:
        assert 0 < len(eager_calls) < 25, len(eager_calls)


def _adversarial_data(n):
    y = make_data(n, seed=5)
    y[3], y[7], y[11] = 1e200, -1e200, 1e308  # finite rows whose terms overflow: the per-row rule
    return y


@pytest.mark.parametrize("extra, rtol", BACKENDS)
def test_dpbarker_fused_step_is_one_graph_with_the_recorded_chain(extra, rtol):
    """#17: on the compiled path a DP Barker iteration after the proposal is one graph (the
    batch's selection from pre-drawn indices, the clipped ratios' statistics, the release
    noise, the Barker test with its V_corr draw): the recorded eager chain and ledger, and the
    fused graph, not the unfused statistics graph, ran."""
    names, fused = _fused_graphs_of_recorded_case("barker", extra, rtol, "barker_step[")
    assert fused == 1 and not any(nm.startswith("barker_statistics") for nm in names)


def test_dpbarker_step_with_too_few_distinct_draws_per_round_keeps_the_eager_chain(monkeypatch):
    """Rounds with too few distinct indices (the batch drawn before the step, on both paths): the
    eager chain, adversarial rows included."""
    _forced_fallbacks_keep_the_eager_chain(
        monkeypatch, lambda **kw: pyro_dp.DPBarker(gauss_model, 20, 0.1, temperature=0.3, **dict(GOLDEN_KW, **kw)),
        _adversarial_data(60), 4, batch_drawn_outside=True)


@pytest.mark.parametrize("name", ["minibatch_poisson", "minibatch_wor"])
@pytest.mark.parametrize("extra, rtol", BACKENDS)
def test_minibatch_penalty_fused_step_is_one_graph_with_the_recorded_chain(name, extra, rtol):
    """#17: a minibatch penalty iteration after the proposal is one graph (batch selection from
    pre-drawn indices, padded to a bucket for Poisson sizes; the clipped statistics; the release
    noise; the penalty test): the recorded eager chain and ledger, and no unfused graph ran."""
    names, fused = _fused_graphs_of_recorded_case(name, extra, rtol, "minibatch_step[")
    assert 1 <= fused <= 3  # Poisson sizes (100 ± 8 here) share buckets: no graph per size
    assert not any(nm.startswith(("minibatch_poisson", "minibatch_sums")) for nm in names)


@pytest.mark.parametrize("subsampling", ["poisson", "without_replacement"])
@pytest.mark.parametrize("extra", [{}, dict(noise_multiplier=0.0, non_private=True)])
def test_minibatch_penalty_step_keeps_the_eager_chain_on_awkward_batches(monkeypatch, subsampling, extra):
    """Rounds with too few distinct indices, empty or dense Poisson batches (b/N = 0.3 on 40
    rows), adversarial rows, with noise and in the noise-free mode (the batch drawn before the
    step, on both paths): the eager chain."""
    kw0 = dict(GOLDEN_KW, noise_multiplier=1.0)
    _forced_fallbacks_keep_the_eager_chain(
        monkeypatch, lambda **kw: pyro_dp.DPMinibatchPenalty(gauss_model, 12, 0.1, llr_clip=2.0, temperature=0.3,
                                                             subsampling=subsampling, **dict(kw0, **kw, **extra)),
        _adversarial_data(40), 3, batch_drawn_outside=True)


@pytest.mark.parametrize("name", ["sgld", "sgnht"])
@pytest.mark.parametrize("extra, rtol", BACKENDS)
def test_sgmcmc_fused_private_gradient_is_one_graph_with_the_recorded_chain(name, extra, rtol):
    """#17: DP-SGLD/SGNHT's private gradient is one graph (the Poisson batch selected from
    pre-drawn indices, the clipped gradient sum, its noise, the prior's gradient): the recorded
    eager chain and ledger, and no unfused graph ran."""
    names, fused = _fused_graphs_of_recorded_case(name, extra, rtol, "private_gradient[")
    assert fused >= 1 and "clipped_grad_sum_prior[idx]" not in names


def test_sgld_private_gradient_keeps_the_eager_chain_on_awkward_batches(monkeypatch):
    """Rounds with too few distinct indices, empty and dense Poisson batches, adversarial rows
    (a one-coordinate gradient of 1e200: clipped to ±C on both paths; the batch drawn before
    the step on both paths): the eager chain."""
    _forced_fallbacks_keep_the_eager_chain(
        monkeypatch, lambda **kw: pyro_dp.DPSGLD(gauss_model, 12, 1e-3, 2.0, **dict(GOLDEN_KW, **kw)),
        _adversarial_data(40), 3, batch_drawn_outside=True)


def _tempered_penalty_chain(model, y, **extra):
    k = pyro_dp.DPPenalty(model, 0.1, llr_clip=2.0, noise_multiplier=3.0, temperature=0.7, **dict(GOLDEN_KW, **extra))
    return run(lambda: k, y)


def test_dppenalty_fused_step_matches_eager_with_adversarial_rows_and_falls_back_when_untraceable():
    """Finite rows whose per-example terms overflow (log-likelihood -inf, ratio NaN: the per-row
    rule inside the graph) and a temperature: the fused step gives the eager chain and ledger;
    an untraceable model falls back before any draw."""
    y = make_data(300, seed=5)
    y[3], y[7], y[11] = 1e200, -1e200, 1e308
    for model in (gauss_model, branching_model):
        chain, ledger = _tempered_penalty_chain(model, y)
        for extra, rtol in ((GRAPH, 1e-12), (dict(jit_compile=True), 1e-10)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CompileFallbackWarning)
                got, got_ledger = _tempered_penalty_chain(model, y, **extra)
            assert got_ledger == ledger
            _close(got, chain, rtol)


def _logistic(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1], dtype=x.dtype), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=x[idx] @ w), obs=y[idx])


@pytest.mark.parametrize("d", [10, 40])
def test_reverse_mode_gradients_clipped_as_columns_match_eager(d):
    """#17: for FORWARD_MAX_DIM < d <= COLUMNS_MAX_DIM the compiled path clips and sums the
    reverse-mode per-example gradients column by column (one fused loop over the rows), and
    ``hoist_broadcasts`` turns the length-one ``bmm`` of vmap's gradient into a product; above
    COLUMNS_MAX_DIM it keeps rows. Same clipped sums and counts as eager, rows whose gradients
    overflow (the per-row rule) and subsets included."""
    assert compiled_mod.FORWARD_MAX_DIM < 10 <= compiled_mod.COLUMNS_MAX_DIM < 40
    g = torch.Generator().manual_seed(6)
    x = torch.randn(120, d, generator=g, dtype=torch.float64)
    y = torch.bernoulli(torch.full((120,), 0.5, dtype=torch.float64), generator=g)
    # finite rows (the domain) whose per-example terms overflow to ±inf / NaN: the per-row rule
    x[3, 1], x[50, 0], x[51, 4] = 1e300, -1e308, 1e200
    eager = PrivateLikelihood(_logistic, (x, y), seed=0)
    jit = PrivateLikelihood(_logistic, (x, y), seed=0, jit_compile=True)
    z = torch.linspace(-0.3, 0.4, d, dtype=torch.float64)
    for idx in (None, torch.tensor([3, 7, 50, 51, 99])):
        (_, cs), (_, cs_e) = jit.clipped_grad_sum(z, 0.8, idx), eager.clipped_grad_sum(z, 0.8, idx)
        assert_close(cs.total, cs_e.total, rtol=1e-12, atol=1e-12)
        assert int(raw(cs.num_clipped)) == int(raw(cs_e.num_clipped)) and int(cs.num_rows) == int(cs_e.num_rows)


def test_unit_contractions_become_products():
    """``hoist_broadcasts`` rewrite 4: ``bmm``/``mm`` over a contraction of length one is the
    broadcast product (the same values: a sum of one product is that product)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(a, b, u, v):
        return torch.bmm(a, b).sum(0), torch.mm(u, v), torch.bmm(b, b.transpose(1, 2)).sum()  # last: length 3

    g = torch.Generator().manual_seed(7)
    args = (torch.randn(5, 4, 1, generator=g, dtype=torch.float64), torch.randn(5, 1, 3, generator=g, dtype=torch.float64),
            torch.randn(4, 1, generator=g, dtype=torch.float64), torch.randn(1, 6, generator=g, dtype=torch.float64))
    gm = graphs_mod.hoist_broadcasts(make_fx(f, tracing_mode="fake")(*args))
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.aten.bmm.default) == 1 and torch.ops.aten.mm.default not in targets
    for u, v in zip(gm(*args)[: gm.num_own_outputs], f(*args)):
        assert_close(u, v, rtol=0, atol=0)
