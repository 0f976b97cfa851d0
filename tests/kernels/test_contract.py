"""One contract, every kernel (#15): data-free set-up, planned = recorded releases, a budget
that stops before it is exceeded, pickling mid-chain, and bad inputs refused. Per-kernel files
keep only what is specific to their algorithm."""
import pickle
import warnings
from collections import Counter

import pytest
import torch

import pyro_dp
from pyro_dp.kernels.base import _counts

from .golden_cases import cases

CASES = cases()


def _setup(name):
    factory, data = CASES[name]
    k = factory()
    k.setup(5, data)
    return k


@pytest.mark.parametrize("name", sorted(CASES))
def test_setup_is_data_free_and_repeatable(name):
    k = _setup(name)
    k.setup(0, CASES[name][1])  # MCMC._set_transforms calls setup again: it must cost nothing
    assert not k.ledger and k.transforms is not None


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_releases_are_exactly_the_planned_ones(name):
    k = _setup(name)
    params, steps = k.initial_params, 7
    for _ in range(steps):
        params = k.sample(params)
    once, per = k.planned_events()
    planned = _counts(once)
    for ev, c in _counts(per).items():
        planned[ev] += c * steps
    recorded = Counter(k.ledger.aggregate())
    if name == "hmc":  # a trajectory that leaves the support releases no ratio (data-free rejection)
        assert all(recorded[ev] <= c for ev, c in planned.items()) and set(recorded) <= set(planned)
    else:
        assert recorded == planned


@pytest.mark.parametrize("name", sorted(set(CASES) - {"sgld", "sgnht"}))
def test_budget_stops_before_it_is_exceeded(name):
    factory, data = CASES[name]
    probe = factory()
    probe.setup(0, data)
    # a budget worth about 5 iterations of this kernel
    params = probe.initial_params
    for _ in range(5):
        params = probe.sample(params)
    budget = probe.get_epsilon(1e-5)
    k = factory()
    k.epsilon, k.delta = budget, 1e-5  # as if given to __init__ (noise is fixed by the factory)
    k.setup(0, data)
    params = k.initial_params
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_dp.BudgetExhaustedWarning)
        for _ in range(12):
            params = k.sample(params)
    assert k._budget_exhausted and k.get_epsilon(1e-5) <= budget * (1 + 1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_pickles_mid_chain_and_continues_identically(name):
    k = _setup(name)
    params = k.sample(k.initial_params)
    clone = pickle.loads(pickle.dumps(k))
    a, b = k.sample(params), clone.sample(params)
    for site in a:
        assert torch.equal(a[site], b[site])
    assert clone.ledger == k.ledger


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_settings_are_refused_and_a_nan_row_is_not(name):
    """A bad setting is refused before any data access; a NaN row is not refused (an exception
    that depends on one row would reveal it: docs/privacy.md, "One per-row rule"), and set-up
    still reads nothing."""
    factory, data = CASES[name]
    k = factory()
    bad = data.clone()
    bad[0] = float("nan")
    k.setup(0, bad)
    assert not k.ledger
    with pytest.raises(ValueError, match="epsilon"):
        type(k)(k.model, **{**_required_args(k), "epsilon": -1.0, "delta": 1e-5})


def _required_args(k):
    """Constructor arguments that rebuild ``k`` (enough to reach the budget check)."""
    import inspect

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
    k = _setup(name)
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
