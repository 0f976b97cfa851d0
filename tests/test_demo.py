"""Issue 61: the demo is quick on a shared machine (one torch thread by default, restored after)
and never silent (a progress line at least every few seconds for every long step, the NUTS
reference and the DP run's set-up included)."""
import time

import pytest
import torch

from pyro_dp.cli import main
from pyro_dp.demo import progress, run_demo


def _soon(predicate, limit=30.0):
    """Whether ``predicate()`` becomes true within ``limit`` seconds (polled; a busy machine may be slow
    to schedule the printing thread: this bounds the wait, it measures nothing)."""
    end = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def test_progress_prints_while_nothing_calls_the_hook_and_counts_iterations():
    lines = []
    with progress("step", total=5, warmup_steps=2, out=lines.append, every=0.02, setup="compiling") as hook:
        # a set-up that calls no hook (MCMC's kernel.setup, a compile) still prints
        assert _soon(lambda: any(line.startswith("step: compiling, ") for line in lines))
        hook(None, None, "Warmup", 1)
        assert _soon(lambda: "step: 2/5 iterations (warmup)" in lines[-1])
        hook(None, None, "Sample [0]", 2)
        assert _soon(lambda: "step: 5/5 iterations (sampling)" in lines[-1])
    assert lines[0] == "step: started (5 iterations)" and lines[-1].startswith("step: done, ")
    n = len(lines)
    time.sleep(0.1)
    assert len(lines) == n  # the printing thread has stopped with the block
    with pytest.raises(ValueError, match="every must be a positive number of seconds"):
        with progress("step", 1, every=0):
            pass


def test_demo_shows_progress_of_the_dp_run_and_of_the_reference_and_restores_threads():
    before = torch.get_num_threads()
    lines = []
    res = run_demo(n=400, num_samples=30, warmup_steps=20, out=lines.append, progress_every=0.05)
    assert res["threads"] == 1 and torch.get_num_threads() == before
    text = "\n".join(lines)
    for label in ("DP run (DPPenalty)", "non-private reference (Pyro's NUTS)"):
        assert f"{label}: started" in text and f"{label}: done" in text
    assert "torch threads: 1" in text and "NUTS mean" in text
    res = run_demo(n=300, num_samples=5, warmup_steps=5, reference=False, out=lambda line: None, threads=0)
    assert res["threads"] == before  # 0: torch's own setting
    with pytest.raises(ValueError, match="threads must be a non-negative int"):
        run_demo(threads=-1, out=lambda line: None)


def test_cli_demo_takes_threads(capsys):
    args = ["demo", "--n", "300", "--num-samples", "5", "--warmup-steps", "5", "--no-reference"]
    assert main(args + ["--threads", "1"]) == 0
    assert "torch threads: 1" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(args + ["--threads", "-1"])
