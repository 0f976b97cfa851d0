r"""The main demo: private Bayesian logistic regression next to the non-private posterior.

Data are synthetic (built in, no download): ``N`` rows with features scaled into the unit
ball. The private run is the card's line, ``MCMC(DPPenalty(model, epsilon=ε), ...)`` with
nothing else given: the default path spends a fixed share of the budget on a private start,
the clips, the coordinates' scales and the posterior's metric, then samples with the penalty
test on Taylor residuals around the start (``docs/tuning.md``), and picks the eager or the
compiled path from the run's predicted cost. The non-private reference is Pyro's NUTS. (Until
2026-11-29 the demo hand-set a guided walk with ``llr_clip=1``; on its own data the default
path was closer to NUTS, 0.09-0.10 sd against 0.5, without a warning.)

Run it with ``pyro-dp demo`` (or ``python -m pyro_dp demo``).

**Speed on a shared machine.** Each iteration's work is small (5·10⁴ rows × 3 coordinates), and
torch's default of one OpenMP thread per core then loses far more to waiting for busy cores
than it gains: on a 2-core machine at load 7-10 the same reduced demo took 174.8 s with
torch's default threads and 20.4 s with one (issue 61). The demo therefore runs with
``threads=1`` (``pyro-dp demo --threads N``; ``0`` keeps torch's default) and restores torch's
setting when it returns.

**Progress.** Every long step prints a line at least every ``progress_every`` seconds (default
5): the DP run (its set-up, the private tuning and any compile included, then its iterations)
and the non-private NUTS reference, so a slow machine is never silent.
"""
from __future__ import annotations

import contextlib
import textwrap
import threading
import time
import warnings
from typing import Callable, Optional

import torch
from pyro.infer import MCMC, NUTS

from .kernels import DPPenalty
from .models.examples import logistic_model, make_logistic_data, normal_mean_model  # noqa: F401 (re-exported)
from .report import privacy_report
from .run import get_epsilon

__all__ = ["normal_mean_model", "logistic_model", "make_logistic_data", "run_demo", "progress"]


def _say(line: str) -> None:
    """``print`` flushed at once: progress shows also when the output is a pipe or a file."""
    print(line, flush=True)


@contextlib.contextmanager
def progress(label: str, total: int, warmup_steps: int = 0, out: Callable[[str], None] = _say,
             every: float = 5.0, setup: str = "setting up"):
    """Print how a long ``MCMC`` run is going, at least every ``every`` seconds, from the moment
    the block is entered (``MCMC``'s set-up included, which calls no hook) until it is left.
    Yields a ``hook_fn`` for :class:`pyro.infer.MCMC` that records the iteration reached; a
    background thread prints ``label: it/total iterations (warmup|sampling), s`` from it (or
    ``label: <setup>, s`` before the first iteration). The lines are about the run's progress only
    (iteration counts and wall time), read nothing else, and print nothing when the block is
    quicker than ``every``, apart from its start and end lines.

    >>> lines = []
    >>> with progress("toy", total=3, out=lines.append, every=0.01) as hook:
    ...     for i in range(3):
    ...         hook(None, None, "Sample", i); time.sleep(0.03)
    >>> lines[0], lines[-1].split(",")[0]
    ('toy: started (3 iterations)', 'toy: done')
    >>> any("/3 iterations (sampling)" in line for line in lines)
    True
    """
    if not every > 0:
        raise ValueError(f"every must be a positive number of seconds, got {every!r}")
    t0 = time.perf_counter()
    state = {"it": 0, "stage": None}

    def hook(kernel, samples, stage, i):
        warm = str(stage).lower().startswith("warm")
        state["it"] = (int(i) + 1) if warm else int(warmup_steps) + int(i) + 1
        state["stage"] = "warmup" if warm else "sampling"

    def line() -> str:
        elapsed = time.perf_counter() - t0
        if state["stage"] is None:
            return f"{label}: {setup}, {elapsed:.0f} s"
        return f"{label}: {state['it']}/{total} iterations ({state['stage']}), {elapsed:.0f} s"

    stop = threading.Event()

    def beat():
        while not stop.wait(every):
            out(line())

    out(f"{label}: started ({total} iterations)")
    thread = threading.Thread(target=beat, name=f"pyro_dp progress: {label}", daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        stop.set()
        thread.join()
    out(f"{label}: done, {time.perf_counter() - t0:.1f} s")


def run_demo(
    n: int = 50000,
    epsilon: float = 4.0,
    delta: float = 1e-5,
    num_samples: int = 2000,
    warmup_steps: int = 1000,
    seed: int = 0,
    device: Optional[str] = None,
    reference: bool = True,
    out=_say,
    threads: Optional[int] = 1,
    progress_every: float = 5.0,
) -> dict:
    """Run DPPenalty's default path (``DPPenalty(model, epsilon=..., delta=...)``) and NUTS.

    :param int threads: torch's CPU threads for the run (``torch.set_num_threads``; default 1,
        fastest for this small per-iteration work on a shared machine, module docstring);
        ``None`` or ``0`` keeps torch's setting. Restored when the demo returns.
    :param float progress_every: seconds between progress lines of each long step (:func:`progress`).

    Returns a dict with the DP and reference posterior means/sds, the ε spent and the run's
    :func:`~pyro_dp.privacy_report` (``"privacy_report"``), whose paragraph it prints last.

    >>> res = run_demo(n=500, num_samples=10, warmup_steps=5, reference=False, out=lambda line: None)
    >>> res["epsilon"] <= 4.0, res["threads"]
    (True, 1)
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0):
        raise ValueError(f"threads must be a non-negative int (0: torch's default), got {threads!r}")
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _run_demo(n, epsilon, delta, num_samples, warmup_steps, seed, device, reference, out, progress_every)
    finally:
        torch.set_num_threads(before)


def _run_demo(n, epsilon, delta, num_samples, warmup_steps, seed, device, reference, out, progress_every) -> dict:
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    X, y, w_true = make_logistic_data(n, seed=seed, device=device)
    iters = num_samples + warmup_steps
    out(f"pyro_dp demo: private Bayesian logistic regression, N={n} rows, d={X.shape[1]}, device={device}")
    out(f"budget: epsilon={epsilon}, delta={delta}, {iters} iterations (warmup included); "
        f"torch threads: {torch.get_num_threads()}")
    # the card's line: the budget and nothing else (the run length is read from MCMC; the eager or
    # compiled path is chosen from the run's predicted cost, docs/performance.md)
    kernel = DPPenalty(logistic_model, epsilon=epsilon, delta=delta, seed=seed)
    t0 = time.perf_counter()
    with progress("DP run (DPPenalty)", iters, warmup_steps, out=out, every=progress_every,
                  setup="setting up (private start, clips and metric; compiling if it pays)") as hook:
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=True, hook_fn=hook)
        mcmc.run(X, y)
    t_dp = time.perf_counter() - t0
    w_dp = mcmc.get_samples()["w"]
    eps = get_epsilon(mcmc, delta)
    diag = mcmc.diagnostics()
    mode = getattr(kernel, "one_release", None)  # the default path's one-release mode (issue 62), where it chose it
    result = {
        "dp_mean": w_dp.mean(0),
        "dp_sd": w_dp.std(0),
        "epsilon": eps,
        "noise_multiplier": kernel.noise_multiplier if mode is None else mode.noise_multiplier,
        "acceptance": diag["acceptance rate"]["chain 0"],
        "seconds": t_dp,
        "threads": torch.get_num_threads(),
    }
    ref_mean = ref_sd = None
    if reference:
        t0 = time.perf_counter()
        with warnings.catch_warnings(), progress("non-private reference (Pyro's NUTS)", 300, 100, out=out,
                                                 every=progress_every) as hook:
            warnings.simplefilter("ignore")
            ref = MCMC(NUTS(logistic_model), num_samples=200, warmup_steps=100, disable_progbar=True, hook_fn=hook)
            ref.run(X, y)
        w_ref = ref.get_samples()["w"]
        ref_mean, ref_sd = w_ref.mean(0), w_ref.std(0)
        result.update(ref_mean=ref_mean, ref_sd=ref_sd, ref_seconds=time.perf_counter() - t0)
    out("")
    out(f"{'coef':>6} {'true':>7} {'DP mean':>9} {'DP sd':>7}" + (f" {'NUTS mean':>10} {'NUTS sd':>8}" if reference else ""))
    for j in range(X.shape[1]):
        line = f"{'w[%d]' % j:>6} {float(w_true[j]):7.3f} {float(result['dp_mean'][j]):9.3f} {float(result['dp_sd'][j]):7.3f}"
        if reference:
            line += f" {float(ref_mean[j]):10.3f} {float(ref_sd[j]):8.3f}"
        out(line)
    out("")
    if mode is None:
        out(f"DPPenalty: noise multiplier {kernel.noise_multiplier:.2f} (the accept test's noise sd over its release's "
            f"sensitivity), acceptance {result['acceptance']:.2f}, {t_dp:.1f} s")
    else:
        out(f"DPPenalty ran the default path's ONE-RELEASE MODE at this budget, an approximation ({mode.approximation}; "
            f"{mode.reason}): score noise multiplier {mode.noise_multiplier:.2f}, {t_dp:.1f} s")
    out(f"privacy spent: epsilon = {eps:.4f} at delta = {delta} (tight Gaussian accountant, all chains)")
    report = result["privacy_report"] = privacy_report(mcmc, delta=delta)
    out("")
    out("The privacy statement to publish with the samples (pyro_dp.privacy_report(mcmc); export the samples with "
        "pyro_dp.to_arviz(mcmc), which holds no data):")
    out(textwrap.fill(str(report), 100))
    return result
