"""#19: data-parallel DP MCMC over torch.distributed (gloo, 2 processes on this CPU).

* The sharded chain equals the single-process chain on the concatenated rows for the same seeds
  (to float tolerance: the sums are added in another order), the ledgers and ε are identical on
  every rank and to the single-process ones, and no rank holds another rank's rows: each rank
  process loads only its own shard file (written by the parent), its kernel holds exactly
  those rows, and every collective it makes is an all-reduce or broadcast of at most
  ``max(dim, 2)`` numbers (no row-sized tensor and no pickled object ever travels).
* A rank that raises mid-run (rank 1, or rank 0 which holds the noise) makes the other stop
  with an error (no hang), with no release after the failure.
"""
import datetime
import os
import pathlib
import socket
import sys
import traceback
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
from pyro_dp.private import reveal

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))
from tests.kernels.helpers import gauss_model, gauss_model_2d, make_data  # noqa: E402

STEPS = 30


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


KERNELS = {
    "penalty": lambda **kw: pyro_dp.DPPenalty(gauss_model_2d, 0.1, llr_clip=2.0, noise_multiplier=3.0,
                                              guided_walk=True, adapt_proposal=True, **kw),
    "hmc": lambda **kw: pyro_dp.DPHMC(gauss_model_2d, 0.02, 3, 2.0, 2.0, 5.0, 3.0, adapt_step_size=True, **kw),
    # the compiled path: each rank traces its own shard's graph ("graph": exact, no compile time)
    "hmc_graph": lambda **kw: pyro_dp.DPHMC(gauss_model_2d, 0.02, 3, 2.0, 2.0, 5.0, 3.0, adapt_step_size=True,
                                            jit_compile=True, jit_options={"backend": "graph"}, **kw),
    "hmc_init": lambda **kw: pyro_dp.DPHMC(
        gauss_model_2d, 0.02, 3, 2.0, 2.0, 5.0, 3.0,
        init=pyro_dp.DPGradientInit(num_steps=3, step_size=0.5, grad_clip=2.0, noise_multiplier=5.0), **kw),
}
KW = dict(seed=11, noise_seed=12, init_strategy=init_to_mean)
# kernels run by single tests only (not in the chain-equality grid)
EXTRA = {
    # delta = 1/200: above 1/N for the 301 rows of all ranks, below it for one rank's 150 or 151
    "penalty_budget": lambda **kw: pyro_dp.DPPenalty(gauss_model_2d, 0.1, llr_clip=2.0, epsilon=5.0, delta=1 / 200,
                                                     num_iterations=STEPS, **kw),
}


def _data():
    return make_data(301, d=2, seed=4)  # an odd number of rows: shards of 151 and 150


def _run(kernel, y, fail_at=None):
    kernel.setup(STEPS // 2, y)
    params, chain = kernel.initial_params, []
    for i in range(STEPS):
        if fail_at is not None and i == fail_at:
            raise RuntimeError("rank failure injected by the test")
        params = kernel.sample(params)
        chain.append(kernel.lik.flatten(params))
    return torch.stack(chain)


# every torch.distributed collective and point-to-point call: a sharded kernel may use only the
# first two, on tensors of at most max(dim, 2) numbers (a released sum, the clipped counts)
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "all_to_all",
               "all_to_all_single", "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor", "send",
               "recv", "isend", "irecv", "broadcast_object_list", "all_gather_object", "gather_object",
               "scatter_object_list", "send_object_list", "recv_object_list")


def _record_collectives(log):
    """Wrap every collective of :mod:`torch.distributed` to log ``(name, numel)``."""
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is None:
            continue

        def wrapped(*args, _name=name, _original=original, **kwargs):
            t = args[0] if args else None
            log.append((_name, t.numel() if isinstance(t, torch.Tensor) else None))
            return _original(*args, **kwargs)

        setattr(dist, name, wrapped)


def _worker(rank, world, port, out_dir, name, fail_rank):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30))
    result = {"rank": rank}
    log = []
    try:
        shard = torch.load(os.path.join(out_dir, f"shard{rank}.pt"))  # this rank's rows only
        _record_collectives(log)
        k = {**KERNELS, **EXTRA}[name](distributed=True, **KW)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                chain = _run(k, shard, fail_at=5 if rank == fail_rank else None)
            result["warnings"] = [str(w.message) for w in caught]
            result.update(chain=chain, ledger=[[repr(e.event), e.count] for e in k.ledger.entries],
                          eps=k.get_epsilon(1e-5), rows=k.lik.num_rows, global_rows=k.lik.global_num_rows,
                          data=reveal(k.lik.model_args[0], reason="a test: the rank's rows"), dim=k.lik.dim,
                          traced=None if k.lik.compiled is None else (k.lik.compiled.num_compiled,
                                                                      None in k.lik.compiled.cache.values()))
        except Exception as e:  # noqa: BLE001
            result.update(error=f"{type(e).__name__}: {e}", releases=k.ledger.num_releases,
                          trace=traceback.format_exc()[-2000:])
    finally:
        result["collectives"] = log
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def _launch(tmp_path, name, fail_rank=None, world=2, timeout=240):
    y = _data()
    for r in range(world):  # the parent hands each rank its own rows; no rank process loads the rest
        torch.save(y[r::world].clone(), tmp_path / f"shard{r}.pt")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(r, world, PORT[0], str(tmp_path), name, fail_rank))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, "a rank hung"
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(world)]


PORT = [0]


@pytest.fixture(autouse=True)
def _port():
    PORT[0] = _free_port()


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_sharded_chain_equals_the_single_process_chain(tmp_path, name):
    single = KERNELS[name](**KW)
    want = _run(single, _data())
    want_ledger = [[repr(e.event), e.count] for e in single.ledger.entries]
    ranks = _launch(tmp_path, name)
    y = _data()
    for r in ranks:
        assert "error" not in r, r.get("trace")
        torch.testing.assert_close(r["chain"], want, rtol=1e-9, atol=1e-12)
        assert r["ledger"] == want_ledger and r["eps"] == single.get_epsilon(1e-5)
        assert r["global_rows"] == 301 and r["rows"] == len(y[r["rank"]::2])
        assert torch.equal(r["data"], y[r["rank"]::2])  # its own rows, nothing else
        # what left the rank: small all-reduces and broadcasts only, never rows
        names = {c for c, _ in r["collectives"]}
        assert names <= {"all_reduce", "broadcast"}, names
        assert max(n for _, n in r["collectives"]) <= max(r["dim"], 2)
        if "graph" in name:  # the rank ran its own traced graphs, no eager fallback
            assert r["traced"][0] > 0 and not r["traced"][1], r["traced"]


@pytest.mark.parametrize("fail_rank", [1, 0], ids=["rank1_fails", "rank0_the_noise_holder_fails"])
def test_a_failing_rank_stops_the_others_without_a_hang_or_a_release(tmp_path, fail_rank):
    ranks = _launch(tmp_path, "penalty", fail_rank=fail_rank, timeout=120)
    other = ranks[1 - fail_rank]
    assert "injected" in ranks[fail_rank]["error"]
    assert "error" in other and "injected" not in other["error"], "the other rank must stop with its own error"
    assert "a peer rank raised, died or timed out" in other["error"]
    # the failing rank stopped before iteration 5's release; the other could not complete that release either
    assert ranks[0]["releases"] == ranks[1]["releases"] == 5


def test_the_delta_warning_counts_the_rows_of_every_rank(tmp_path):
    """delta above 1/N is judged on the global N (301 rows), not on one rank's shard."""
    for r in _launch(tmp_path, "penalty_budget"):
        assert "error" not in r, r.get("trace")
        assert r["rows"] < 200 < r["global_rows"] == 301
        assert any("above 1/N for N=301 rows" in w for w in r["warnings"]), r["warnings"]


REFUSED = {  # every kernel that cannot shard refuses at construction, before anything else is checked
    "DPBarker": lambda: pyro_dp.DPBarker(gauss_model, 20, 0.1, distributed=True),
    "DPMinibatchPenalty": lambda: pyro_dp.DPMinibatchPenalty(gauss_model, 20, 0.1, 1.0, 1.0, distributed=True),
    "DPFastMH": lambda: pyro_dp.DPFastMH(gauss_model, 0.1, 1.0, distributed=True),
    "DPSGLD": lambda: pyro_dp.DPSGLD(gauss_model, 20, 0.01, 1.0, 1.0, distributed=True),
    "DPSGNHT": lambda: pyro_dp.DPSGNHT(gauss_model, 20, 0.01, 1.0, noise_multiplier=1.0, distributed=True),
    "DPExpFamPenalty": lambda: pyro_dp.DPExpFamPenalty(gauss_model, None, 0.1, 1.0, distributed=True),
    "DPMultiPartyPenalty": lambda: pyro_dp.DPMultiPartyPenalty(gauss_model, None, 0.1, 1.0, 1.0,
                                                               process_group=object()),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_kernels_that_cannot_shard_refuse(name):
    assert not getattr(pyro_dp, name).supports_distributed
    with pytest.raises(ValueError, match="does not support distributed"):
        REFUSED[name]()


def test_the_process_group_must_exist():
    k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=1.0, distributed=True)
    with pytest.raises(RuntimeError, match="init_process_group"):
        k.setup(0, make_data(10))
    assert not k.ledger


def test_a_chain_in_a_pyro_worker_process_refuses_before_reading_data(monkeypatch):
    # MCMC(num_chains=k) worker processes are outside the ranks' process group: their decisions
    # would disagree with the ranks', so such a chain must stop before any release
    k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=1.0, distributed=True)
    monkeypatch.setattr(type(k.processes), "chain_id", lambda self: 1)
    with pytest.raises(RuntimeError, match="outside the process group"):
        k.setup(0, make_data(10))
    assert not k.ledger
