"""#18 item 7: checkpoint and resume. A resumed chain continues exactly (same chain, same ledger)
as an uninterrupted one with the same seeds (``noise_seed``, the test option, included: without
it the resumed chain draws fresh noise), for every kernel; the budget counts everything."""
import pickle
import warnings

import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.kernels.checkpoint import from_plain, is_plain, to_plain

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
    assert is_plain(first.state_dict())  # tensors and plain values only (#42)
    torch.save(first.state_dict(), tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt")  # torch's defaults: weights_only=True (#42)
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
    assert resumed.ledger.num_releases == whole.ledger.num_releases == whole.privacy.steps_allowed
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


@pytest.mark.parametrize("name, planned", [("DPPenalty", 50), ("DPSGLD", 35)])
def test_resume_on_the_default_path_keeps_the_planned_run_length(name, planned):
    """2026-11-26 new-user sweep: on the default path (``DPPenalty(model, epsilon=...)``, run
    length read from the MCMC) the documented resume re-planned the budget for the remaining
    iterations only: other noise, then no data read at all (every resumed sample was one
    repeated state). The checkpoint now carries the run length the budget was planned for, and
    DPSGLD's burn-in (5 of the 20 warmup steps release, 15 idle: 35 releasing iterations)."""
    from .helpers import gauss_model, make_data

    y = make_data(200, seed=2)
    saved = {}

    def hook(kernel, samples, stage, i):
        if stage == "Sample" and i == 9:
            saved["state"] = kernel.state_dict()

    def kernel():
        # the iterative default path (at N = 200 the default path would take the one-release mode, one
        # releasing iteration per chain: tests/test_one_release_mode.py)
        return getattr(pyro_dp, name)(gauss_model, epsilon=2.0, seed=0, noise_seed=1, inference="iterative")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = kernel()
        full = MCMC(whole, num_samples=30, warmup_steps=20, hook_fn=hook, disable_progbar=True)
        full.run(y)
        resumed = kernel()
        resumed.load_state_dict(pickle.loads(pickle.dumps(saved["state"])))
        rest = MCMC(resumed, num_samples=20, warmup_steps=0, disable_progbar=True)
        rest.run(y)
    assert resumed.num_iterations == whole.num_iterations == planned
    assert resumed.burn_in == whole.burn_in == (5 if name == "DPSGLD" else None)
    assert resumed.noise_multiplier == whole.noise_multiplier
    assert torch.equal(rest.get_samples()["mu"], full.get_samples()["mu"][10:])
    assert resumed.ledger == whole.ledger
    assert rest.diagnostics()["private iterations"]["chain 0"] == planned


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


def test_a_default_torch_load_resumes_after_mcmc_with_finished_chains_and_party_ledgers(tmp_path):
    """#42: checkpoints hold only tensors and plain values, so ``torch.load(path)`` with its
    default ``weights_only=True`` reads them — here with finished chains in the cumulative
    ledger, per-party ledgers and labelled releases, resumed inside ``MCMC`` to the same
    chain and ledger as an uninterrupted run."""
    def run(name, samples, state=None):
        factory, data = CASES[name]
        k = factory()
        if state is not None:
            k.load_state_dict(state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc = MCMC(k, num_samples=samples, warmup_steps=0, disable_progbar=True)
            mcmc.run(data)
        return k, mcmc

    for name in ("multiparty", "penalty_init"):
        whole, full = run(name, 10)
        first, _ = run(name, 4)
        torch.save(first.state_dict(), tmp_path / f"{name}.pt")
        resumed, rest = run(name, 6, torch.load(tmp_path / f"{name}.pt"))
        site = next(iter(full.get_samples()))
        assert torch.equal(rest.get_samples()[site], full.get_samples()[site][4:])
        assert resumed.ledger == whole.ledger
        assert resumed.ledger.labelled_entries() == whole.ledger.labelled_entries()
        assert resumed.get_epsilon(1e-5) == whole.get_epsilon(1e-5)
    k = CASES["multiparty"][0]()
    k.setup(0, CASES["multiparty"][1])
    p = k.sample(k.initial_params)
    k.cleanup()  # a finished chain in the cumulative ledger
    k.setup(0, CASES["multiparty"][1])
    k.sample(p)
    state = k.state_dict()
    assert state["chains"] and is_plain(state)
    torch.save(state, tmp_path / "two.pt")
    again = CASES["multiparty"][0]()
    again.load_state_dict(torch.load(tmp_path / "two.pt"))
    again.setup(0, CASES["multiparty"][1])
    assert again.ledger == k.ledger and again.get_epsilon(1e-5, party=1) == k.get_epsilon(1e-5, party=1)


def test_a_checkpoint_builds_nothing_but_its_own_types():
    """Loading rebuilds only pyro_dp's states, events and ledgers (events through their
    validating constructors) and pyro's dual-averaging adapter: any other type name, or a
    tampered event, is refused."""
    from pyro_dp.mechanisms import GaussianEvent, PrivacyLedger

    led = PrivacyLedger()
    led.record(GaussianEvent(3.0), 2, label="tune:start")
    plain = to_plain(led)
    assert is_plain(plain) and from_plain(plain) == led
    bad = to_plain(led)
    bad["entries"][0][0]["fields"]["noise_multiplier"] = -1.0
    with pytest.raises(ValueError, match="noise_multiplier"):
        from_plain(bad)
    for tag, name in (("object", "os:system"), ("namedtuple", "collections:OrderedDict"),
                      ("object", "pyro_dp.kernels.base:secrets"), ("object", "builtins:eval")):
        with pytest.raises(ValueError, match="cannot hold|not a class"):
            from_plain({"__pyro_dp__": tag, "type": name, "state": {}, "fields": []})
    with pytest.raises(ValueError, match="does not exist"):
        from_plain({"__pyro_dp__": "event", "type": "NoiseSource", "fields": {}})
    with pytest.raises(TypeError, match="cannot hold"):
        to_plain(object())


def test_grouped_default_path_resumes_mid_warmup_with_its_group_scale_and_clip(tmp_path):
    """DPGroupedPenalty's group-scale adaptation and private group clip (its part
    ``group_walk``) travel in the checkpoint: a chain resumed mid-warmup on the default path is
    the uninterrupted chain, ledger included (the noise stream is seeded: ``noise_seed``)."""
    from .golden_default_path import cases as default_path_cases
    factory, data = default_path_cases()["grouped"]
    whole = factory()
    whole.setup(8, *data)
    _, expected = _chain(whole, whole.initial_params, 14)
    first = factory()
    first.setup(8, *data)
    params, head = _chain(first, first.initial_params, 5)
    assert first.group_walk.clip is not None and is_plain(first.state_dict())
    torch.save(first.state_dict(), tmp_path / "ckpt.pt")
    resumed = factory()
    resumed.load_state_dict(torch.load(tmp_path / "ckpt.pt"))
    resumed.setup(0, *data)
    _, tail = _chain(resumed, resumed.initial_params, 9)
    assert torch.equal(torch.cat([head, tail]), expected)
    assert resumed.ledger == whole.ledger and resumed.group_scale == whole.group_scale
