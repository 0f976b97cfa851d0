"""pyro_dp.private (issue 58, the kernel boundary by construction): private values propagate
through torch operations, every read into Python raises with the fix, the likelihood returns its
per-row values private, the mechanisms' releases return public values, a kernel that returns a
private state fails, and only an allow-list of modules calls the escape hatch."""
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
        # the values are those of the eager functions the compiled layer traces
        assert torch.equal(reveal(ll, reason="a test"), lik.eager_loglik_and_prior(z, None)[0])


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
