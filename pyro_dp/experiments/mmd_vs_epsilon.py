r"""Räisä 2021 thesis Figs 6.4–6.9: MMD (and mean error, variance error, acceptance, clipped
fractions) against :math:`\varepsilon` for the DP MCMC algorithms on the Table 6.1
benchmarks.

* ``fig64`` — Fig. 6.4 (+ Fig. 6.6 clipping, Fig. 6.8 gradient clipping): the flat and
  tempered bananas, d = 2 and 10; DP penalty, DP penalty OCU+GWMH, DP-HMC, DP Barker,
  minibatch DP penalty.
* ``fig65`` — Fig. 6.5 (+ Figs 6.7, 6.8, 6.9): 30-d Gaussian, narrow banana, correlated
  Gaussian and the circle; DP penalty, DP penalty OCU+GWMH, DP-HMC (the thesis leaves the
  minibatch algorithms out here). The circle's mean error is thesis Fig. 6.9 (we can also
  score it by MMD: its exact sampler is in :mod:`pyro_dp.models`).

Every cell calibrates the kernel's noise to the target :math:`(\varepsilon, \delta = 0.1/n)`
with the kernel's own calibration and checks the ledger's ε against it (column
``epsilon_ok``; a violation raises). Rows with ``algorithm == "exact"`` are the baseline:
an independent exact sample of the chains' kept size against the reference sample.

**Deviations from the thesis** (its scale — n = 10⁵–2·10⁵, 20 chains, ε = 1…6, a DP-HMC
iteration costing tens of ms at n = 10⁵ — does not fit the ~15 CPU-minutes we allow):

* ``n = 10⁴`` for every problem (Table 6.1: 10⁵–2·10⁵), tempering :math:`T = n_0/n` kept, so
  the tempered posteriors are the thesis's and the flat ones are :math:`\sqrt{10}`–
  :math:`\sqrt{20}` times wider; proposal scales and step sizes are widened accordingly
  (:func:`~pyro_dp.experiments._sampling.width_scale`). A smaller n makes DP harder: the
  same ε buys roughly :math:`\sqrt{N/n}` times less signal-to-noise, so our curves sit to
  the right of the thesis's.
* a fixed iteration count with calibrated noise instead of the thesis's fixed noise
  :math:`\tau n^{1/2}` with ε-dependent iterations (see :mod:`._sampling`); warm-up
  adaptation replaces hand tuning; 300 iterations (DP-HMC: 300 gradient evaluations, i.e.
  300/L iterations; minibatch penalty 150); 5 repeats for fig64, 3 for fig65 (thesis 20, or
  15 in ``banana.smk``); ε ∈ {1, 3, 6}. Full runs take about 15 minutes each on one core of
  an otherwise idle 2-core machine (``--threads 1``).
* the minibatch penalty samples without replacement (thesis scheme) but is accounted by
  ``dp_accounting``'s RDP (WBK19), not the Fourier accountant; the OCU+GWMH minibatch
  variant (``mdppa``) is not run.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence

from .grid import pick_device, plot_metric_vs_epsilon, quick_mode, run_grid, summarise

__all__ = ["FIG64_PROBLEMS", "FIG65_PROBLEMS", "COLUMNS", "settings", "run_mmd_vs_epsilon", "run_fig64",
           "run_fig65"]

FIG64_PROBLEMS = ("flat-banana-2d", "tempered-banana-2d", "flat-banana-10d", "tempered-banana-10d")
FIG65_PROBLEMS = ("gauss-30d", "narrow-banana", "correlated-gauss", "circle")
FIG64_ALGORITHMS = ("dp_penalty", "dp_penalty_ocu_gwmh", "dp_hmc", "dp_barker", "minibatch_dp_penalty")
FIG65_ALGORITHMS = ("dp_penalty", "dp_penalty_ocu_gwmh", "dp_hmc")

#: (problem, algorithm) cells left out because the kernel fails there (reported, not worked around):
#: (problem, algorithm) pairs a kernel cannot run (none: DPHMC on the circle's flat prior used
#: to raise in the log prior's gradient; fixed, see ``tests/kernels/test_hmc.py``).
KNOWN_FAILURES: set = set()

COLUMNS = ["n", "delta", "iterations", "mmd", "mean_error", "var_error", "acceptance", "clipped_fraction",
           "grad_clipped_fraction", "noise_multiplier", "epsilon_ledger", "epsilon_ok", "budget_exhausted"]


def settings(quick: bool, fig: str = "fig64") -> dict:
    """Grid sizes of the full and quick modes (module docstring)."""
    if quick:
        return dict(n=2000, epsilons=[2.0], repeats=1, iterations=30, hmc_gradients=40, minibatch_iterations=20,
                    ref_size=300)
    return dict(n=10_000, epsilons=[1.0, 3.0, 6.0], repeats=5 if fig == "fig64" else 3, iterations=300, hmc_gradients=300,
                minibatch_iterations=150, ref_size=2000)


def _iterations(algorithm: str, params: dict, s: dict) -> int:
    if algorithm == "dp_hmc":  # same gradient budget whatever L (thesis L = 5..40)
        return max(8, 2 * round(s["hmc_gradients"] / params["L"] / 2))
    if algorithm == "minibatch_dp_penalty":
        return s["minibatch_iterations"]
    return s["iterations"]


def run_mmd_vs_epsilon(name: str, out_dir: str, problems: Sequence[str], algorithms: Sequence[str],
                       quick: Optional[bool] = None, log=print, device: Optional[str] = None,
                       overrides: Optional[dict] = None, progress: bool = True) -> dict:
    """Run the (problem × algorithm × ε × repeat) grid into ``out_dir/<name>.csv`` (resumable)
    and draw ``<name>.png`` (MMD), ``<name>_clipping.png`` (ratio clipped fraction),
    ``<name>_mean_error.png`` and ``<name>_grad_clipping.png`` (DP-HMC)."""
    from ..models import TABLE_6_1, get_problem
    from ._sampling import ALGORITHMS, THESIS_PARAMS, exact_baseline, grid_cells, run_chain, to_device

    quick = quick_mode(quick)
    s = dict(settings(quick, name), **(overrides or {}))
    for p in problems:
        if p not in TABLE_6_1:
            raise KeyError(f"unknown problem {p!r}; choose from {sorted(TABLE_6_1)}")
    for a in algorithms:
        if a not in ALGORITHMS:
            raise KeyError(f"unknown algorithm {a!r}; choose from {ALGORITHMS}")
    dev = pick_device(device)
    cache: Dict[str, tuple] = {}

    def problem(pname):
        if pname not in cache:
            p = to_device(get_problem(pname, n=s["n"]), dev)
            cache[pname] = (p, p.reference_sample(s["ref_size"], seed=12345))
        return cache[pname]

    cells = grid_cells(
        problems,
        lambda pname: [a for a in algorithms if a in THESIS_PARAMS[pname] and (pname, a) not in KNOWN_FAILURES],
        s["epsilons"], s["repeats"],
    )

    def compute(cell):
        p, ref = problem(cell["problem"])
        if cell["algorithm"] == "exact":
            return dict(exact_baseline(ref, p, s["iterations"] - s["iterations"] // 2, cell["repeat"]), n=s["n"])
        params = THESIS_PARAMS[cell["problem"]][cell["algorithm"]]
        return run_chain(cell["algorithm"], p, ref, epsilon=cell["epsilon"], n=s["n"],
                         num_iterations=_iterations(cell["algorithm"], params, s), repeat=cell["repeat"],
                         params=params)

    res = run_grid(name, out_dir, cells, compute, COLUMNS, progress=progress, log=log)
    rows = res["rows"]
    out = dict(res)
    out.update(_plots(name, out_dir, rows, log))
    return out


def baseline_of(rows, metric="mmd") -> Dict[str, float]:
    """Mean of ``metric`` over the ``exact`` rows, per problem."""
    return {s["problem"]: s["mean"] for s in summarise([r for r in rows if r["algorithm"] == "exact"], metric,
                                                        by=("problem", "algorithm")) if s["n"] > 0}


def _plots(name, out_dir, rows, log) -> dict:
    chains = [r for r in rows if r["algorithm"] != "exact"]
    hmc = [r for r in chains if r["algorithm"] == "dp_hmc"]
    out = {"png": plot_metric_vs_epsilon(chains, "mmd", os.path.join(out_dir, f"{name}.png"),
                                         baseline=baseline_of(rows), title=f"{name}: MMD vs epsilon", log=log)}
    for metric, suffix, rs, base in (("clipped_fraction", "clipping", chains, None),
                                     ("mean_error", "mean_error", chains, baseline_of(rows, "mean_error")),
                                     ("grad_clipped_fraction", "grad_clipping", hmc, None)):
        out[f"png_{suffix}"] = plot_metric_vs_epsilon(rs, metric, os.path.join(out_dir, f"{name}_{suffix}.png"),
                                                      baseline=base, title=f"{name}: {metric}", log=log)
    return out


def run_fig64(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
              problems: Optional[Sequence[str]] = None) -> dict:
    """Thesis Fig. 6.4 (+ 6.6, 6.8): bananas, d = 2 and 10 (``quick``: the 2-d ones only)."""
    q = quick_mode(quick)
    probs = problems or (FIG64_PROBLEMS[:2] if q else FIG64_PROBLEMS)
    return run_mmd_vs_epsilon("fig64", out_dir, probs, FIG64_ALGORITHMS, quick=q, log=log, device=device)


def run_fig65(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
              problems: Optional[Sequence[str]] = None) -> dict:
    """Thesis Fig. 6.5 (+ 6.7, 6.8, 6.9): harder models and the circle. ``quick``: correlated
    Gaussian and circle only."""
    q = quick_mode(quick)
    probs = problems or (("correlated-gauss", "circle") if q else FIG65_PROBLEMS)
    return run_mmd_vs_epsilon("fig65", out_dir, probs, FIG65_ALGORITHMS, quick=q, log=log, device=device)

