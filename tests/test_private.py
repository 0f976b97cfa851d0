"""pyro_dp.private (issue 58, the kernel boundary by construction): private values propagate
through torch operations, every read into Python raises with the fix, the likelihood returns its
per-row values private (its ``eager_*`` methods and ``model_args`` too), a fused graph's outputs
are private unless released, every data-derived tensor of every kernel family's state is private
on the eager and the compiled path, the mechanisms' releases return public values, a kernel that
returns a private state fails, and only an allow-list of modules calls the escape hatch."""
import ast
import pathlib

import numpy as np
import pytest
import torch
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
import pyro_dp.private as private_mod
from pyro_dp.likelihood import PrivateLikelihood
from pyro_dp.mechanisms import (GaussianReleaseSpec, GaussianStdReleaseSpec, GaussianEvent, NoiseSource, add_gaussian_noise,
                                clip_and_sum, clipped_sum_with_noise, gaussian_release, noisy_count, noisy_histogram,
                                recording)
from pyro_dp.mechanisms.release import graph_release
from pyro_dp.models.examples import normal_mean_model
from pyro_dp.private import (DIAGNOSTIC_READS, REVEAL_ALLOWED, Private, PrivateReadError, check_public, private,
                             reveal, tainting)

PACKAGE = pathlib.Path(pyro_dp.__file__).parent


def _x():
    return private(torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64))


PROPAGATING = {
    "add public": lambda x, p: x + p, "radd public": lambda x, p: p + x, "mul": lambda x, p: x * 2,
    "sum": lambda x, p: x.sum(), "mean": lambda x, p: x.mean(), "max": lambda x, p: x.max(),
    "index public": lambda x, p: x[torch.tensor([0, 2])], "slice": lambda x, p: x[1:],
    "mask": lambda x, p: x[p > 0], "where": lambda x, p: torch.where(x > 0, p, -p),
    "compare": lambda x, p: x > 0, "stack": lambda x, p: torch.stack([p, x]), "cat": lambda x, p: torch.cat([p, x]),
    "detach": lambda x, p: x.detach(), "data": lambda x, p: x.data, "clone": lambda x, p: x.clone(),
    "to": lambda x, p: x.to(torch.float32), "clamp": lambda x, p: x.clamp(-1, 1), "norm": lambda x, p: torch.linalg.vector_norm(x),
    "isfinite all": lambda x, p: torch.isfinite(x).all(), "unsqueeze": lambda x, p: x.unsqueeze(-1),
    "clip_and_sum total": lambda x, p: clip_and_sum(x, 1.0).total, "clip_and_sum count": lambda x, p: clip_and_sum(x, 1.0).num_clipped,
}


@pytest.mark.parametrize("op", list(PROPAGATING))
def test_taint_propagates_through_common_operations(op):
    out = PROPAGATING[op](_x(), torch.ones(3, dtype=torch.float64))
    assert isinstance(out, Private), op


def test_shapes_and_dtypes_stay_public():
    x = _x()
    assert x.shape == (3,) and len(x) == 3 and x.dtype == torch.float64 and x.dim() == 1 and x.numel() == 3
    assert type(x.shape[0]) is int
    assert repr(x) == "Private(shape=(3,), dtype=torch.float64)" and str(x) == repr(x)  # no values printed


READS = {
    "bool": lambda x: bool(x.sum() > 0), "if": lambda x: 1 if x[0] > 0 else 0, "int": lambda x: int(x[0]),
    "float": lambda x: float(x[0]), "item": lambda x: x[0].item(), "tolist": lambda x: x.tolist(),
    "numpy": lambda x: x.numpy(), "np.asarray": lambda x: np.asarray(x), "index": lambda x: [1, 2, 3][x[0].long()],
    "range": lambda x: range(x[0].long()), "format": lambda x: f"{x[0]:.3f}", "equal": lambda x: torch.equal(x, x),
    "allclose": lambda x: torch.allclose(x, x), "is_nonzero": lambda x: torch.is_nonzero(x[0]),
    "as_subclass": lambda x: x.as_subclass(torch.Tensor), "in place into public": lambda x: torch.zeros(3).add_(x),
    "setitem into public": lambda x: torch.zeros(3, dtype=torch.float64).__setitem__(0, x[0]),
    "copy_ into public": lambda x: torch.zeros(3, dtype=torch.float64).copy_(x),
    "out= public": lambda x: torch.add(x, 1, out=torch.zeros(3, dtype=torch.float64)),
}


@pytest.mark.parametrize("read", list(READS))
def test_every_way_out_to_python_raises_and_names_the_fix(read):
    with pytest.raises(PrivateReadError, match=r"private value \(computed from the data\)(.|\n)*pyro_dp.mechanisms"
                                               r"(.|\n)*reveal"):
        READS[read](_x())


def test_writing_into_a_private_tensor_and_pickling_keep_it_private():
    import copy
    import pickle
    x = _x()
    x[0] = 5.0  # into a private tensor: allowed, it stays private
    assert isinstance(x, Private)
    for y in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x)):
        assert isinstance(y, Private) and torch.equal(reveal(y, reason="a test"), reveal(x, reason="a test"))


def test_reveal_needs_a_reason_and_returns_plain_tensors():
    x = _x()
    with pytest.raises(ValueError, match="reason"):
        reveal(x, reason="")
    out = reveal((x, [x], None, 3), reason="a test")
    assert type(out[0]) is torch.Tensor and type(out[1][0]) is torch.Tensor and out[2:] == (None, 3)


def test_the_likelihood_returns_private_values_and_a_public_prior():
    y = torch.tensor([0.0, 3.0, 1.0], dtype=torch.float64)
    for extra in ({}, dict(jit_compile=True, jit_options={"backend": "graph"})):
        lik = PrivateLikelihood(normal_mean_model, (y,), seed=0, **extra)
        z, z1 = torch.tensor([0.5], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
        ll, lp = lik.loglik_and_prior(z)
        assert isinstance(ll, Private) and not isinstance(lp, Private)  # the prior reads no data
        assert isinstance(lik.per_example_loglik(z, torch.tensor([0, 2])), Private)
        assert all(isinstance(t, Private) for t in lik.per_example_grad(z))
        r, lp1 = lik.log_ratios(z, z1)
        assert isinstance(r, Private) and not isinstance(lp1, Private)
        ll_g, cs = lik.clipped_grad_sum(z, 1.0)
        assert isinstance(ll_g, Private) and isinstance(cs.total, Private) and isinstance(cs.num_clipped, Private)
        assert not isinstance(cs.num_rows, Private)  # the batch's size: public
        ll1, lp1, cs1 = lik.clipped_ratio_sum(z1, ll, 1.0)  # a private input is taken back
        assert isinstance(ll1, Private) and isinstance(cs1.total, Private) and not isinstance(lp1, Private)
        assert isinstance(lik.clipped_difference_sum(ll1, ll, 1.0).total, Private)
        assert not isinstance(lik.log_prior(z), Private) and not isinstance(lik.grad_log_prior(z), Private)
        # the values are those of the eager functions the compiled layer traces (private too)
        assert torch.equal(reveal(ll, reason="a test"), reveal(lik.eager_loglik_and_prior(z, None)[0], reason="a test"))


def test_the_switch_turns_the_wrapping_off():
    y = torch.tensor([0.0, 3.0], dtype=torch.float64)
    lik = PrivateLikelihood(normal_mean_model, (y,), seed=0)
    with tainting(False):
        assert type(lik.per_example_loglik(torch.zeros(1, dtype=torch.float64))) is torch.Tensor
    assert isinstance(lik.per_example_loglik(torch.zeros(1, dtype=torch.float64)), Private)


def test_the_mechanisms_release_public_values():
    x = _x()
    noise = NoiseSource(seed=0, warn=False)
    with recording():
        outs = [clipped_sum_with_noise(x, 1.0, 2.0, noise), clipped_sum_with_noise(clip_and_sum(x, 1.0), 1.0, 0.0, noise),
                add_gaussian_noise(x.sum(), 1.0, 2.0, noise), gaussian_release(x.sum(), 1.0, GaussianEvent(1.0), noise),
                noisy_count((x > 0).sum(), 1.0, noise), noisy_histogram((x > 0).long(), 2, 1.0, noise)]
        spec = GaussianReleaseSpec(2.0)
        rel = spec.release(clip_and_sum(x, 1.0), 1.0, spec.draw(noise))
        std_spec = GaussianStdReleaseSpec(GaussianEvent(1.0))
        released = std_spec.release(x.sum(), torch.tensor(1.0, dtype=torch.float64), std_spec.draw(noise))
    for out in outs:
        assert not isinstance(out.value, Private) and isinstance(out.clipped_fraction, float)
    assert not any(isinstance(t, Private) for t in rel) and not isinstance(released, Private)


def _penalty(cls):
    return cls(normal_mean_model, 0.2, llr_clip=4.0, noise_multiplier=2.0, init_strategy=init_to_mean, seed=0)


class DecidesOnRawTerms(pyro_dp.DPPenalty):
    """A step whose accept decision is a private tensor: ``torch.where(ll.sum() > t, z_new, z)``
    with no Python read (nothing raises inside the step)."""

    def _step(self, state):
        state, info = super()._step(state)
        ll = self.lik.per_example_loglik(state.z)
        return state._replace(z=torch.where(ll.sum() > -100.0, state.z + 0.1, state.z)), info


def test_a_kernel_returning_a_private_state_fails_and_the_honest_one_runs():
    y = torch.randn(30, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    honest = _penalty(pyro_dp.DPPenalty)
    honest.setup(0, y)
    p = honest.initial_params
    for _ in range(3):
        p = honest.sample(p)
    assert not any(isinstance(v, Private) for v in p.values())
    bad = _penalty(DecidesOnRawTerms)
    bad.setup(0, y)
    with pytest.raises(PrivateReadError, match="the parameters DPKernel.sample returns holds a private value"):
        bad.sample(bad.initial_params)


def test_check_public_names_the_private_entries():
    check_public({"a": torch.ones(1)})
    with pytest.raises(PrivateReadError, match=r"\(b\)"):
        check_public({"a": torch.ones(1), "b": _x()})


def _callers(name):
    """``{module path relative to pyro_dp/: number of calls of ``name``}`` over the package's code."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)]
        if calls:
            found[path.relative_to(PACKAGE).as_posix()] = len(calls)
    return found


def _outside(found, allowed):
    return sorted(set(found) - set(allowed))


def test_only_the_allow_listed_modules_call_the_escape_hatch():
    assert _outside(_callers("reveal"), REVEAL_ALLOWED) == []
    assert _outside(_callers("diagnostic"), DIAGNOSTIC_READS + ("private.py",)) == []
    # every listed module is used (a stale entry would widen the hatch silently)
    assert set(REVEAL_ALLOWED) == set(_callers("reveal"))
    assert set(DIAGNOSTIC_READS) <= set(_callers("diagnostic"))


def test_the_allow_list_check_fails_its_mutant(tmp_path, monkeypatch):
    """A kernel module that calls reveal (the mutant) is found outside the allow-list."""
    mutant = PACKAGE / "kernels" / "_reveal_mutant_for_test.py"
    mutant.write_text("from ..private import reveal\n\ndef peek(x):\n    return reveal(x, reason='peek')\n")
    try:
        assert _outside(_callers("reveal"), REVEAL_ALLOWED) == ["kernels/_reveal_mutant_for_test.py"]
    finally:
        mutant.unlink()


def test_no_kernel_code_uses_torch_internals_around_the_type():
    """The type is not a sandbox (pyro_dp.private's docstring): the bypasses through torch
    internals are grepped out of the kernels and the default path."""
    names = ("DisableTorchFunction", "_make_subclass", "untyped_storage", "_disabled_torch_function_impl")
    for sub in ("kernels", "default_path"):
        for path in sorted((PACKAGE / sub).rglob("*.py")):
            text = path.read_text()
            assert not [n for n in names if n in text], path


def test_the_eager_methods_and_the_arguments_are_private_outside_the_likelihood():
    """The likelihood's internals with public names (``eager_*``, ``per_row``) and its arguments'
    data leaves come out private; the log prior and the public arguments stay plain; the switch
    turns it off."""
    y = torch.tensor([0.0, 3.0, 1.0], dtype=torch.float64)

    def model(y, scale, prior=None):
        return normal_mean_model(y)

    lik = PrivateLikelihood(model, (y, 2.0), {"prior": torch.ones(2)}, seed=0)
    z, idx = torch.tensor([0.5], dtype=torch.float64), torch.tensor([0, 2])
    assert all(isinstance(r, Private) for r in lik.eager_rows(idx))
    ll, lp = lik.eager_loglik_and_prior(z, None)
    assert isinstance(ll, Private) and not isinstance(lp, Private)
    assert isinstance(lik.eager_terms(z)[0], Private) and not isinstance(lik.eager_terms(z)[1], Private)
    assert isinstance(lik.eager_isolated_loglik(z), Private)
    assert all(isinstance(t, Private) for t in lik.eager_per_example_grad(z, None))
    assert isinstance(lik.per_row(torch.func.vmap(lik.eager_row_term, in_dims=(None, 0)), z), Private)
    assert not isinstance(lik.eager_log_prior(z), Private)
    args, kwargs = lik.model_args, lik.model_kwargs
    assert isinstance(args[0], Private) and args[1] == 2.0 and not isinstance(kwargs["prior"], Private)
    with pytest.raises(PrivateReadError):
        float(args[0].sum())
    # the values are the data's; inside the likelihood (its own evaluation) nothing is wrapped
    assert torch.equal(reveal(args[0], reason="a test"), y)
    assert torch.equal(reveal(ll, reason="a test"), reveal(lik.per_example_loglik(z), reason="a test"))
    with tainting(False):
        assert type(lik.eager_rows(None)[0]) is torch.Tensor and type(lik.model_args[0]) is torch.Tensor


# every kernel family, small settings; each on the eager and the compiled path (jit_compile=True;
# the traced graph run as it is: the same fused graphs inductor would compile, their outputs marked
# by the same code)
_Y = torch.randn(40, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1.0
_COMMON = dict(init_strategy=init_to_mean, seed=0)
FAMILIES = {
    "penalty": lambda **j: pyro_dp.DPPenalty(normal_mean_model, 0.2, llr_clip=4.0, noise_multiplier=2.0, **_COMMON, **j),
    "hmc": lambda **j: pyro_dp.DPHMC(normal_mean_model, step_size=0.05, num_steps=3, grad_clip=3.0, llr_clip=4.0,
                                     grad_noise_multiplier=2.0, llr_noise_multiplier=1.0, **_COMMON, **j),
    "barker": lambda **j: pyro_dp.DPBarker(normal_mean_model, batch_size=20, proposal_scale=0.1, temperature=0.5,
                                           **_COMMON, **j),
    "minibatch": lambda **j: pyro_dp.DPMinibatchPenalty(normal_mean_model, batch_size=20, proposal_scale=0.1,
                                                        llr_clip=4.0, noise_multiplier=2.0, **_COMMON, **j),
    "sgld": lambda **j: pyro_dp.DPSGLD(normal_mean_model, step_size=1e-3, batch_size=20, grad_clip=3.0,
                                       noise_multiplier=1.0, **_COMMON, **j),
    "fastmh": lambda **j: pyro_dp.DPFastMH(normal_mean_model, 0.1, lipschitz=4.0, full_batch=True, step_epsilon=0.9,
                                           step_delta=1e-6, **_COMMON, **j),
}
#: state fields computed from the data (the per-row caches): private by construction
PRIVATE_FIELDS = {"cache", "loglik"}
PATHS = {"eager": dict(jit_compile=False), "compiled": dict(jit_compile=True, jit_options={"backend": "graph"})}


def _tensors(obj, path="state"):
    if torch.is_tensor(obj):
        yield path, obj
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for f in obj._fields:
            yield from _tensors(getattr(obj, f), f"{path}.{f}")
    elif isinstance(obj, (list, tuple)):
        for i, o in enumerate(obj):
            yield from _tensors(o, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, o in obj.items():
            yield from _tensors(o, f"{path}[{k!r}]")


def _state_violations(kernel) -> list:
    """The tensors of the kernel's state that derive from the data but are not private (a per-row
    tensor, ``N`` entries first, or a field of :data:`PRIVATE_FIELDS`), and the public fields that
    came out private (the point, its prior, a released gradient)."""
    n, out = kernel.lik.num_rows, []
    for path, t in _tensors(kernel._state):
        from_data = path.split(".")[-1].split("[")[0] in PRIVATE_FIELDS or (t.dim() >= 1 and t.shape[0] == n)
        if from_data != isinstance(t, Private):
            out.append(f"{path}: {'plain' if from_data else 'private'}")
    return out


def _run_family(family, path, steps=4):
    k = FAMILIES[family](**PATHS[path])
    k.setup(0, _Y)
    p = k.initial_params
    for _ in range(steps):
        p = k.sample(p)
    return k


def _fused(kernel) -> list:
    return [key[0] for key, g in kernel.lik.compiled.cache.items() if isinstance(key[0], str) and g is not None
            and callable(g) and any(w in key[0] for w in ("step", "gradient", "private_gradient"))]


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_data_derived_tensor_of_a_kernels_state_is_private(family, path):
    """Walks the state after some steps: every per-row tensor and cache is private, on both paths
    (the compiled path's fused graphs included), and the public fields are plain."""
    k = _run_family(family, path)
    assert _state_violations(k) == []
    if path == "compiled" and family in ("penalty", "hmc", "barker", "minibatch", "sgld"):
        assert _fused(k), "the compiled run did not use a fused step graph: the test would not test it"
    if family in ("penalty", "hmc", "fastmh"):
        assert any(isinstance(t, Private) for _, t in _tensors(k._state))  # there is a cache to check


@pytest.mark.parametrize("family", ["penalty", "hmc"])
def test_the_state_walk_fails_its_mutants(family, monkeypatch):
    """Mutants: a fused graph's outputs left as they come out of the graph (the compiled path), and
    the likelihood's wrapping switched off (the eager path): the per-row cache is plain, caught."""
    import pyro_dp.graphs
    with monkeypatch.context() as m:
        m.setattr(pyro_dp.graphs.OutputTaint, "apply", lambda self, out, xs: out)
        assert _state_violations(_run_family(family, "compiled")), "the fused-graph mutant was not caught"
    with monkeypatch.context() as m:
        m.setattr("pyro_dp.likelihood.private", lambda x: x)
        m.setattr("pyro_dp.likelihood.private_sum", lambda x: x)
        assert _state_violations(_run_family(family, "eager")), "the eager mutant was not caught"


def test_a_fused_graph_marks_its_outputs_from_their_sources():
    """``fused_graph``: an output computed from the data is private, a released one (computed
    from the noise input) public, a data-free one plain; naming raw terms released is refused at
    the trace."""
    lik = PrivateLikelihood(normal_mean_model, (_Y,), seed=0, jit_compile=True, jit_options={"backend": "graph"})
    cl = lik.compiled
    z, xi = torch.tensor([0.5], dtype=torch.float64), torch.zeros((), dtype=torch.float64)

    def fn(zz, x):
        ll, lp = lik.eager_loglik_and_prior(zz, None)
        return ll, lp, ll.sum() + x, zz * 2

    g = cl.fused_graph("test_marks", fn, (z, xi), released=(2,), noise=(1,), release=graph_release)
    ll, lp, released, doubled = g(z, xi)
    assert isinstance(ll, Private) and not isinstance(lp, Private)
    assert not isinstance(released, Private) and not isinstance(doubled, Private)
    with pytest.raises(RuntimeError, match="named released but is computed from the data and none of its noise"):
        cl.fused_graph("test_marks_raw", lambda zz, x: (lik.eager_loglik_and_prior(zz, None)[0].sum(), x),
                       (z, xi), released=(0,), noise=(1,), release=graph_release)
    # a private input makes an output computed from it private
    h = cl.fused_graph("test_marks_input", lambda zz, old: (old * 2, zz + 1), (z, ll))
    out = h(z, ll)
    assert isinstance(out[0], Private) and not isinstance(out[1], Private)


#: what kernel and default-path code may not touch: the raw data behind the likelihood
_RAW = {"args", "kwargs", "leaves", "data", "rows", "leaves_with"}


def _raw_reads(root) -> list:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "arguments":
                if node.attr in _RAW:
                    found.append(f"{path.name}: .arguments.{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr in ("_data", "_leaves", "_runs", "eager_rows"):
                found.append(f"{path.name}: .{node.attr}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "build"
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "arguments"
                    and not (node.args and isinstance(node.args[0], ast.Call)
                             and getattr(node.args[0].func, "attr", None) == "stand_in")):
                found.append(f"{path.name}: .arguments.build without stand-ins")
    return found


def test_no_kernel_or_default_path_code_reaches_the_raw_data(tmp_path):
    """The data arguments are reachable only inside the likelihood layer: kernel and default-path
    code reads no ``lik.arguments`` data (``args``, ``kwargs``, ``leaves``, ``data``, ``rows``; a
    ``build`` only of stand-ins), no compiled layer's bound data (``_data``), no ``eager_rows``
    (what it needs comes through ``per_row``, private). The mutant (a module reading them) is found."""
    for sub in ("kernels", "default_path"):
        assert _raw_reads(PACKAGE / sub) == [], sub
    (tmp_path / "mutant.py").write_text("def peek(lik):\n    return lik.arguments.data[0], lik.arguments.build([])\n")
    assert sorted(_raw_reads(tmp_path)) == ["mutant.py: .arguments.build without stand-ins", "mutant.py: .arguments.data"]
