"""One contract, every kernel (#15, #39): the public kernel test kit :func:`pyro_dp.testing.check_kernel`
run over every kernel of the package — data-free set-up, budget stop, planned = recorded releases,
copies (pickle, deepcopy, the secret stream reseeded), the per-row rule, the audit's hooks, eager =
compiled — one test per kernel and check, so a failure names both. The kit's own mutants are in
``tests/test_testing.py``. Per-kernel files keep only what is specific to their algorithm."""
import inspect

import pytest
import torch

from pyro_dp.testing import KERNEL_CHECKS, check_kernel

from .golden_cases import cases

CASES = cases()
#: DP-HMC may skip its ratio release: a trajectory that leaves the support is rejected data-free
OPTIONS = {"hmc": {"fewer_releases_ok": True}}


#: eager = compiled: tests/test_compiled.py runs every case on the traced and the inductor path
#: against the recorded eager chains (tests/kernels/golden), a stronger check; the kit's own is
#: exercised by tests/test_testing.py and tests/test_new_kernel.py
CHECKS = [c for c in KERNEL_CHECKS if c != "eager_equals_compiled"]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_contract(name, check):
    factory, data = CASES[name]
    options = {k: v for k, v in OPTIONS.get(name, {}).items() if check == "planned_equals_recorded"}
    check_kernel(factory, data, checks=[check], name=name, **options)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_settings_are_refused_before_any_data_access(name):
    """A bad setting is refused in ``__init__``, before any data is seen (a NaN row is *not*
    refused: the kit's per-row check)."""
    factory, _ = CASES[name]
    k = factory()
    with pytest.raises(ValueError, match="epsilon"):
        type(k)(k.model, **{**_required_args(k), "epsilon": -1.0, "delta": 1e-5})


def _required_args(k):
    """Constructor arguments that rebuild ``k`` (enough to reach the budget check)."""
    sig = inspect.signature(type(k).__init__)
    out = {}
    for p in list(sig.parameters.values())[2:]:
        if p.default is inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD:
            out[p.name] = getattr(k, p.name, None)
    return out


@pytest.mark.parametrize("name", ["penalty", "hmc", "barker", "sgld"])
def test_params_changed_from_outside_restart_the_state(name):
    """``sample`` skips its flatten-and-compare only for the very dict it returned, holding the
    very tensors (#17): a new dict, a new tensor in the returned dict, or the returned dict of a
    state that has since been replaced all restart the state at the given point (as before)."""
    factory, data = CASES[name]
    k = factory()
    k.setup(5, data)
    params = k.sample(k.initial_params)
    site = next(iter(params))
    moved = {site: params[site] + 0.25}
    restarted = []
    real = k._init_state

    def spy(z):
        restarted.append(z.clone())
        return real(z)

    k._init_state = spy
    out = k.sample(moved)  # a new dict: restarts
    for _ in range(3):
        out = k.sample(out)  # the dicts it returned: no restart
    assert len(restarted) == 1 and torch.allclose(restarted[0], k.lik.flatten(moved))
    out[site] = out[site] + 0.5  # a new tensor in the returned dict
    k.sample(out)
    assert len(restarted) == 2 and torch.allclose(restarted[1], k.lik.flatten(out))
