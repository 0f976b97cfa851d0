"""The kernel's parts (issue 63), each through its public API: the randomness
(``kernel.randomness``), the likelihood settings, the start, the checkpoints, and the privacy
engine's worker-facing surface (``require_complete``, ``count_release``). Each is a plain object
with its own state; these tests drive them without a kernel where they can."""
import copy
import pickle
import warnings

import pytest
import torch

import pyro_dp
from pyro_dp.kernels.chain_record import ChainRecord
from pyro_dp.kernels.chain_start import ChainStart
from pyro_dp.kernels.checkpoint import ChainCheckpoints
from pyro_dp.kernels.likelihood_settings import LikelihoodSettings
from pyro_dp.kernels.parts import PartAttribute
from pyro_dp.kernels.privacy_engine import PrivacyEngine
from pyro_dp.kernels.seeds import PURPOSE_INIT, ChainRandomness, kernel_chain_seed
from pyro_dp.kernels.workers import ChainProcesses
from pyro_dp.mechanisms import ReproducibleNoiseWarning

from .helpers import gauss_model, make_data


def test_randomness_seeds_each_chain_and_refuses_a_noise_seed_in_secure_mode():
    r = ChainRandomness(seed=5)
    seeds = []
    for chain in range(3):
        r.chain = chain
        r.start_chain("cpu")
        assert r.rng.initial_seed() == kernel_chain_seed(5, chain, "algorithm")
        assert r.chain_seed(PURPOSE_INIT) == kernel_chain_seed(5, chain, "init")
        seeds.append(r.rng.initial_seed())
    assert len(set(seeds)) == 3 and not r.noise.seeded  # the secret stream: OS entropy
    with pytest.warns(ReproducibleNoiseWarning):
        t = ChainRandomness(seed=5, noise_seed=9)
    t.start_chain("cpu")
    assert t.noise.seeded and t.chain_seed(3, base=9) == kernel_chain_seed(9, 0, "noise")
    with pytest.raises(ValueError, match="secure_mode=True draws the noise seed from the OS"):
        ChainRandomness(noise_seed=1, secure_mode=True)
    assert isinstance(ChainRandomness().seed, int)  # no seed: one from the OS


def test_a_copy_of_the_randomness_continues_the_public_stream_not_the_secret_one():
    r = ChainRandomness(seed=1)
    r.start_chain("cpu")
    r.rng.seed()  # some draws later
    for c in (copy.deepcopy(r), pickle.loads(pickle.dumps(r))):
        assert torch.equal(c.rng.get_state(), r.rng.get_state())
        assert not torch.equal(c.noise.standard_normal((8,)), r.noise.standard_normal((8,)))
    # a worker process: the seeds mix in OS entropy, so parallel chains differ
    w = copy.deepcopy(r)
    w.owner_pid = -1
    assert w.chain_seed(PURPOSE_INIT) != w.chain_seed(PURPOSE_INIT) != r.chain_seed(PURPOSE_INIT)


def test_part_attribute_reads_and_writes_the_part():
    class Kernel:
        seed = PartAttribute("randomness")
        _rng = PartAttribute("randomness", "rng")

    k = Kernel()
    k.randomness = ChainRandomness(seed=3)
    assert k.seed == 3 and k._rng is None and isinstance(Kernel.seed, PartAttribute)
    k.seed = 4
    assert k.randomness.seed == 4 and "seed" not in vars(k)


def test_likelihood_settings_are_checked_when_built_and_build_each_chain_s_likelihood():
    with pytest.raises(TypeError, match="model must be a callable Pyro model"):
        LikelihoodSettings(None)
    with pytest.raises(ValueError, match="temperature"):
        LikelihoodSettings(gauss_model, temperature=0.0)
    with pytest.raises(ValueError, match="jit_options needs jit_compile=True"):
        LikelihoodSettings(gauss_model, jit_compile=False, jit_options={"backend": "graph"})
    assert LikelihoodSettings(gauss_model, public=[1]).public == (1,)  # checked against a call's arguments in build()
    s = LikelihoodSettings(gauss_model, temperature=0.5)
    assert s.jit_compile is None
    y = make_data(12)
    a, b = (s.build((y,), {}, seed=0, jit_cache={}) for _ in range(2))
    assert a.num_rows == 12 and a.temperature == 0.5 and a.compiled is None
    assert all(torch.equal(a.prototype_params[k], b.prototype_params[k]) for k in a.prototype_params)  # same seed


def test_chain_start_takes_the_user_s_values_or_the_init_strategy_s_draw():
    lik = LikelihoodSettings(gauss_model).build((make_data(10),), {}, seed=0, jit_cache={})
    start = ChainStart()
    z0 = start.begin(lik)
    assert torch.equal(z0, lik.flatten(lik.prototype_params)) and start.user is None
    start.initial_params = {k: torch.full_like(v, 0.25) for k, v in lik.prototype_params.items()}
    z1 = start.begin(lik)
    assert bool((z1 == 0.25).all()) and set(start.initial_params) == set(lik.latent_names)
    start.initial_params = {}
    with pytest.raises(ValueError, match="initial_params lacks latent sites"):
        start.begin(lik)
    start.initial_params = {k: torch.full_like(v, float("nan")) for k, v in lik.prototype_params.items()}
    with pytest.raises(ValueError, match="must be finite"):
        start.begin(lik)


def test_checkpoints_keep_a_pending_checkpoint_for_the_next_setup_and_the_last_chain():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=3.0, seed=0)
        k.setup(0, make_data(20))
        k.sample(k.initial_params)
        state = k.state_dict()
        k.cleanup()
        assert k.checkpoints.last is not None and k.state_dict() is k.checkpoints.last  # between runs: the last chain's
        fresh = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=3.0, seed=0)
        assert fresh.checkpoints.load(fresh, state) is False and fresh.checkpoints.pending is state
        fresh.setup(0, make_data(20))
    assert fresh.checkpoints.pending is None and fresh.chain.iteration == 1 and fresh.ledger == k.ledger
    with pytest.raises(RuntimeError, match="call setup\\(\\) before state_dict"):
        ChainCheckpoints().save(fresh, None)


def test_the_engine_asks_its_worker_bookkeeping_whether_its_ledger_is_complete():
    engine = PrivacyEngine()
    engine.require_complete()
    engine.count_release()  # no worker bookkeeping: nothing to count

    class Owner:
        pass

    engine.workers = ChainProcesses(Owner())
    engine.count_release()  # in the owner process (slot -1): not a worker's release
    assert sum(engine.workers.releases.made) == 0
    engine.workers.releases.made[2] += 3  # a worker chain made 3 releases whose ledger never came back
    with pytest.raises(RuntimeError, match="3 release\\(s\\) made by this kernel's chains in MCMC worker"):
        engine.require_complete()


def test_the_chain_record_counts_a_step_and_its_private_start():
    class Info:
        accepted, clipped_fraction = False, 0.25

    r = ChainRecord(warmup_steps=1)
    r.count_step(Info(), "z1", keep_draws=5)
    r.count_step(Info(), "z2", keep_draws=5)
    assert r.iteration == 2 and r.draws == ["z2"] and r.accepted == 0  # only after warmup
    r.started(0.5, None)
    assert r.init_done and r.nonprivate(with_init=True) == {"clipped fraction": 0.25, "init clipped fraction": 0.5}
