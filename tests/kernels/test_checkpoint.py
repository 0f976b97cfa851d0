"""#18 item 7: checkpoint and resume. A resumed chain continues exactly (same chain, same ledger)
as an uninterrupted one with the same seeds (``noise_seed``, the test option, included: without
it the resumed chain draws fresh noise), for every kernel; the budget counts everything."""
import pickle
import warnings

import pytest
import torch
from pyro.infer import MCMC

import pyro_dp

from .golden_cases import cases

CASES = cases()


def _chain(kernel, params, steps):
    out = []
    for _ in range(steps):
        params = kernel.sample(params)
        out.append(kernel.lik.flatten(params))
    return params, torch.stack(out)


@pytest.mark.parametrize("name", sorted(CASES))
def test_resume_continues_the_same_chain_and_ledger(name, tmp_path):
    factory, data = CASES[name]
    whole = factory()
    whole.setup(5, data)
    _, expected = _chain(whole, whole.initial_params, 12)

    first = factory()
    first.setup(5, data)
    params, head = _chain(first, first.initial_params, 5)
    torch.save(first.state_dict(), tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    resumed = factory()
    resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
    resumed.setup(0, data)  # the checkpoint's warmup length wins
    _, tail = _chain(resumed, resumed.initial_params, 7)
    assert torch.equal(torch.cat([head, tail]), expected)
    assert resumed.ledger == whole.ledger


def test_resume_inside_mcmc_under_a_budget():
    factory, data = CASES["penalty"]

    def budgeted():
        k = factory()
        k.epsilon, k.delta = 3.0, 1e-5  # about 14 iterations of nm = 3
        return k

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_dp.BudgetExhaustedWarning)
        whole = budgeted()
        MCMC(whole, num_samples=30, warmup_steps=0, disable_progbar=True).run(data)
        first = budgeted()
        MCMC(first, num_samples=6, warmup_steps=0, disable_progbar=True).run(data)
        resumed = budgeted()
        resumed.load_state_dict(first.state_dict())
        mcmc = MCMC(resumed, num_samples=24, warmup_steps=0, disable_progbar=True)
        mcmc.run(data)
    assert resumed.ledger.num_releases == whole.ledger.num_releases == whole._steps_allowed
    assert pyro_dp.get_epsilon(mcmc, 1e-5) <= 3.0 + 1e-9


def test_state_dict_needs_a_chain_and_checks_what_it_loads():
    factory, data = CASES["penalty"]
    k = factory()
    with pytest.raises(RuntimeError, match="setup"):
        k.state_dict()
    k.setup(0, data)
    k.sample(k.initial_params)
    state = k.state_dict()
    with pytest.raises(ValueError, match="DPBarker"):
        CASES["barker"][0]().load_state_dict(state)
    other = factory()
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="rows"):
        other.setup(0, data[:-1])
    with pytest.raises(ValueError, match="checkpoint"):
        factory().load_state_dict({"chain": {}})


def test_resume_on_the_default_path_keeps_the_planned_run_length():
    """2026-11-26 new-user sweep: on the default path (``DPPenalty(model, epsilon=...)``, run
    length read from the MCMC) the documented resume re-planned the budget for the remaining
    iterations only: other noise, then no data read at all (every resumed sample was one
    repeated state). The checkpoint now carries the run length the budget was planned for."""
    from .helpers import gauss_model, make_data

    y = make_data(200, seed=2)
    saved = {}

    def hook(kernel, samples, stage, i):
        if stage == "Sample" and i == 9:
            saved["state"] = kernel.state_dict()

    def kernel():
        return pyro_dp.DPPenalty(gauss_model, epsilon=2.0, seed=0, noise_seed=1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = kernel()
        full = MCMC(whole, num_samples=30, warmup_steps=20, hook_fn=hook, disable_progbar=True)
        full.run(y)
        resumed = kernel()
        resumed.load_state_dict(pickle.loads(pickle.dumps(saved["state"])))
        rest = MCMC(resumed, num_samples=20, warmup_steps=0, disable_progbar=True)
        rest.run(y)
    assert resumed.num_iterations == whole.num_iterations == 50
    assert resumed.noise_multiplier == whole.noise_multiplier
    assert torch.equal(rest.get_samples()["mu"], full.get_samples()["mu"][10:])
    assert resumed.ledger == whole.ledger
    assert rest.diagnostics()["private iterations"]["chain 0"] == 50


def _penalty(**kw):
    from .helpers import gauss_model

    return pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=3.0, seed=0, **kw)


@pytest.mark.fresh_noise
def test_a_resumed_chain_draws_fresh_noise():
    """2026-11-26 privacy audit: a checkpoint restored its noise generator, so resuming it on a
    neighbouring data set replayed the same noise: the difference of the two runs' releases
    was one row's noise-free term. Without ``noise_seed`` the resumed chain's secret stream is
    now fresh OS entropy (its data-free stream continues)."""
    from .helpers import make_data

    y = make_data(30, seed=1)
    k = _penalty()
    k.setup(0, y)
    p = k.sample(k.initial_params)
    state = k.state_dict()
    resumed = _penalty()
    resumed.load_state_dict(state)
    resumed.setup(0, y)
    assert torch.equal(resumed._rng.get_state(), k._rng.get_state())  # data-free: continues
    assert not torch.equal(resumed._noise.standard_normal((8,)), k._noise.standard_normal((8,)))
    assert resumed.ledger == k.ledger and torch.equal(resumed.lik.flatten(resumed.initial_params), k.lik.flatten(p))


def test_a_checkpoint_continues_once_into_a_fresh_kernel_and_one_chain():
    """2026-11-26 privacy audit: one checkpoint resumed in two kernels let each spend the whole
    budget; loaded into a kernel that had run on, it replaced (forgot) the later releases; and
    resumed with ``num_chains=2``, both chains continued it while the kernel filed only one."""
    from .helpers import make_data

    y = make_data(30, seed=1)
    k = _penalty()
    k.setup(0, y)
    k.sample(k.initial_params)
    state = k.state_dict()
    with pytest.raises(ValueError, match="already released"):
        k.load_state_dict(state)  # the kernel ran on: loading would forget its later releases
    first = _penalty()
    first.load_state_dict(state)
    first.setup(0, y)
    with pytest.raises(ValueError, match="already resumed"):
        _penalty().load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k2 = _penalty()
        MCMC(k2, num_samples=3, warmup_steps=0, disable_progbar=True).run(y)
        again = _penalty()
        again.load_state_dict(k2.state_dict())
        with pytest.raises(ValueError, match="num_chains=1"):
            MCMC(again, num_samples=3, warmup_steps=0, num_chains=2, disable_progbar=True).run(y)
    assert again.ledger.num_releases == 0
