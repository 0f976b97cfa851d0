r"""Räisä 2021 thesis Figs 6.4–6.9: MMD (and mean error, variance error, acceptance, clipped
fractions) against :math:`\varepsilon` for the DP MCMC algorithms on the Table 6.1
benchmarks.

* ``fig64`` — Fig. 6.4 (+ Fig. 6.6 clipping, Fig. 6.8 gradient clipping): the flat and
  tempered bananas, d = 2 and 10; DP penalty, DP penalty OCU+GWMH, DP-HMC, DP Barker,
  minibatch DP penalty, minibatch DP penalty OCU+GWMH (thesis code ``mdppa``).
* ``fig65`` — Fig. 6.5 (+ Figs 6.7, 6.8, 6.9): 30-d Gaussian, narrow banana, correlated
  Gaussian and the circle; DP penalty, DP penalty OCU+GWMH, DP-HMC (the thesis leaves the
  minibatch algorithms out here). The circle's mean error is thesis Fig. 6.9 (we can also
  score it by MMD: its exact sampler is in :mod:`pyro_dp.models`).

Every cell calibrates the kernel's noise to the target :math:`(\varepsilon, \delta = 0.1/n)`
with the kernel's own calibration and checks the ledger's ε against it (column
``epsilon_ok``; a violation raises). Rows with ``algorithm == "exact"`` are the baseline:
an independent exact sample of the chains' kept size against the reference sample.

**Full mode is the thesis's setting** (``oraisa/masters-thesis`` at ``f859f56``:
``code/banana.smk`` lines 1–2 and ``code/circle.smk`` for the grid, ``code/run_chain.py``
for δ = 0.1/n, ``code/params/`` for every parameter, see
:data:`~experiments._sampling.THESIS_PARAMS`): each problem at its Table 6.1 ``n``
(10⁵–2·10⁵), ε ∈ {1, …, 6} (the circle: {0.5, 0.75, 1}), 20 repeats per cell, the thesis's
fixed noise :math:`\tau` and **its iteration counts** (the most iterations ε allows,
:func:`~experiments._sampling.thesis_iterations`), the first half of each chain
discarded, the thesis's hand-tuned proposal scales and step sizes used as they are (no
warm-up adaptation), and the compiled path (``jit_compile=True``; graphs shared by the cells
of one (problem, algorithm)). Run it with ``python3 -m experiments fig64 --workers 2``
(resumable; cells are ordered so that a partial run holds whole (problem, algorithm, ε)
groups of 20 repeats).

Deviations that remain, each forced by validity:

* the minibatch DP penalty's iteration count comes from a valid accountant (dp_accounting's
  RDP for sampling without replacement, WBK19 Thm 27), not the thesis's Fourier accountant,
  whose one-step worst-case pair does not compose (Lebeda et al. 2024; Fig. 6.2): fewer
  iterations at the same ε (none at ε ≤ 2 on the 2-d banana);
* DP-HMC's noise is calibrated to the thesis's iteration count with our accounting of the
  kernel's :math:`kL+1` gradient releases (the thesis code releases :math:`k(L+1)`), so it is
  slightly *smaller* than the thesis's;
* DP Barker's count uses the improved RDP → (ε, δ) conversion: slightly more iterations;
* the exact baseline (``algorithm == "exact"``) compares 1 000 exact draws with the reference.

Quick mode (CI): n = 2000, ε = 2, one repeat, a fixed iteration count with the noise
calibrated by each kernel (the thesis scheme at that n allows only a handful of iterations),
proposal scales widened to the smaller n (:func:`~experiments._sampling.width_scale`)
and adapted during warm-up, the minibatch penalty sampling without replacement as in the
thesis.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence

from .grid import pick_device, plot_metric_vs_epsilon, quick_mode, run_grid, summarise

__all__ = ["FIG64_PROBLEMS", "FIG65_PROBLEMS", "COLUMNS", "settings", "run_mmd_vs_epsilon", "run_fig64",
           "run_fig65", "subset_of"]

FIG64_PROBLEMS = ("flat-banana-2d", "tempered-banana-2d", "flat-banana-10d", "tempered-banana-10d")
FIG65_PROBLEMS = ("gauss-30d", "narrow-banana", "correlated-gauss", "circle")
FIG64_ALGORITHMS = ("dp_penalty", "dp_penalty_ocu_gwmh", "dp_hmc", "dp_barker", "minibatch_dp_penalty",
                    "minibatch_dp_penalty_ocu_gwmh")
FIG65_ALGORITHMS = ("dp_penalty", "dp_penalty_ocu_gwmh", "dp_hmc")

#: (problem, algorithm) cells left out because the kernel fails there (reported, not worked around):
#: (problem, algorithm) pairs a kernel cannot run (none: DPHMC on the circle's flat prior used
#: to raise in the log prior's gradient; fixed, see ``tests/kernels/test_hmc.py``).
KNOWN_FAILURES: set = set()

COLUMNS = ["n", "delta", "iterations", "mmd", "mean_error", "var_error", "acceptance", "clipped_fraction",
           "grad_clipped_fraction", "noise_multiplier", "epsilon_ledger", "epsilon_ok", "budget_exhausted"]


def settings(quick: bool, fig: str = "fig64") -> dict:
    """Grid sizes of the full and quick modes (module docstring). ``n=None``: each problem at
    its Table 6.1 size (:data:`~experiments._sampling.THESIS_N`); ``iterations=None``:
    the thesis's scheme (fixed noise ``tau``, iterations from ε,
    :func:`~experiments._sampling.thesis_iterations`)."""
    if quick:
        return dict(n=2000, epsilons=[2.0], repeats=1, iterations=30, hmc_gradients=40, minibatch_iterations=20,
                    ref_size=300, adapt=True, jit_compile=False, problem_epsilons={}, exact_size=15)
    # banana.smk: epsilons = [1, 2, 3, 4, 5, 6], inds = range(20); circle.smk: eps=[0.5, 0.75, 1]
    return dict(n=None, epsilons=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], repeats=20, iterations=None,
                ref_size=2000, adapt=False, jit_compile=True, problem_epsilons={"circle": [0.5, 0.75, 1.0]},
                exact_size=1000)


def _iterations(algorithm: str, params: dict, s: dict) -> Optional[int]:
    if s["iterations"] is None:  # the thesis's scheme: make_kernel counts them
        return None
    if algorithm == "dp_hmc":  # same gradient budget whatever L (thesis L = 5..40)
        return max(8, 2 * round(s["hmc_gradients"] / params["L"] / 2))
    if algorithm in ("minibatch_dp_penalty", "minibatch_dp_penalty_ocu_gwmh"):
        return s["minibatch_iterations"]
    return s["iterations"]


def run_mmd_vs_epsilon(name: str, out_dir: str, problems: Sequence[str], algorithms: Sequence[str],
                       quick: Optional[bool] = None, log=print, device: Optional[str] = None,
                       overrides: Optional[dict] = None, progress: bool = True, workers: int = 1) -> dict:
    """Run the (problem × algorithm × ε × repeat) grid into ``out_dir/<name>.csv`` (resumable)
    and draw ``<name>.png`` (MMD), ``<name>_clipping.png`` (ratio clipped fraction),
    ``<name>_mean_error.png`` and ``<name>_grad_clipping.png`` (DP-HMC)."""
    from pyro_dp.models import TABLE_6_1, get_problem
    from ._sampling import ALGORITHMS, THESIS_N, THESIS_PARAMS, exact_baseline, grid_cells, run_chain, to_device

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
            p = to_device(get_problem(pname, n=s["n"] or THESIS_N[pname]), dev)
            cache[pname] = (p, p.reference_sample(s["ref_size"], seed=12345))
        return cache[pname]

    cells = grid_cells(
        problems,
        lambda pname: [a for a in algorithms if a in THESIS_PARAMS[pname] and (pname, a) not in KNOWN_FAILURES],
        s["epsilons"], s["repeats"], epsilons_for=lambda pname: s["problem_epsilons"].get(pname, s["epsilons"]),
    )

    def compute(cell):
        p, ref = problem(cell["problem"])
        n = s["n"] or THESIS_N[cell["problem"]]
        if cell["algorithm"] == "exact":
            return dict(exact_baseline(ref, p, s["exact_size"], cell["repeat"]), n=n)
        params = THESIS_PARAMS[cell["problem"]][cell["algorithm"]]
        return run_chain(cell["algorithm"], p, ref, epsilon=cell["epsilon"], n=n,
                         num_iterations=_iterations(cell["algorithm"], params, s), repeat=cell["repeat"],
                         params=params, adapt=s["adapt"], jit_compile=s["jit_compile"])

    res = run_grid(name, out_dir, cells, compute, COLUMNS, progress=progress, log=log, workers=workers)
    rows = res["rows"]
    out = dict(res)
    out.update(_plots(name, out_dir, rows, log))
    return out


def baseline_of(rows, metric="mmd") -> Dict[str, float]:
    """Mean of ``metric`` over the ``exact`` rows, per problem."""
    return {s["problem"]: s["mean"] for s in summarise([r for r in rows if r["algorithm"] == "exact"], metric,
                                                        by=("problem", "algorithm")) if s["n"] > 0}


#: The thesis figure each panel set reproduces (Räisä 2021 thesis §6.4).
_FIGURES = {"fig64": {"mmd": "6.4", "clipping": "6.6", "grad_clipping": "6.8", "mean_error": "6.4 (mean error)"},
            "fig65": {"mmd": "6.5", "clipping": "6.7", "grad_clipping": "6.8", "mean_error": "6.9"}}


def _plots(name, out_dir, rows, log, note: str = "") -> dict:
    chains = [r for r in rows if r["algorithm"] != "exact"]
    hmc = [r for r in chains if r["algorithm"] == "dp_hmc"]
    reps = max((int(r["repeat"]) for r in chains), default=-1) + 1
    figs = _FIGURES.get(name, {})

    def title(key, what):
        fig = f"thesis Fig. {figs[key]} reproduction: " if key in figs else f"{name}: "
        return f"{fig}{what}, mean ± s.e. over {reps} repeats{note}"

    out = {"png": plot_metric_vs_epsilon(chains, "mmd", os.path.join(out_dir, f"{name}.png"),
                                         baseline=baseline_of(rows), title=title("mmd", "MMD vs ε"), log=log)}
    for metric, suffix, rs, base, what, logy in (
            ("clipped_fraction", "clipping", chains, None, "clipped fraction of the ratios (log scale)", True),
            ("mean_error", "mean_error", chains, baseline_of(rows, "mean_error"), "mean error", False),
            ("grad_clipped_fraction", "grad_clipping", hmc, None, "DP-HMC's clipped fraction of the gradients",
             False)):
        out[f"png_{suffix}"] = plot_metric_vs_epsilon(
            rs, metric, os.path.join(out_dir, f"{name}_{suffix}.png"), baseline=base, logy=logy,
            title=title(suffix, what), log=log,
            hlines=[(0.1, "10 % (the thesis's 'less than 10 % clipping')")] if suffix == "clipping" else ())
    return out


def subset_of(chosen: Optional[Sequence[str]], allowed: Sequence[str], name: str) -> tuple:
    """The algorithms of ``allowed`` named in ``chosen`` (all of them when ``chosen`` is ``None``),
    in ``allowed``'s order, so that a restricted run writes the same cells as the full grid.

    >>> subset_of(["dp_hmc", "dp_penalty"], FIG65_ALGORITHMS, "fig65")
    ('dp_penalty', 'dp_hmc')
    >>> subset_of(["minibatch_dp_penalty"], FIG65_ALGORITHMS, "fig65")
    Traceback (most recent call last):
    ...
    ValueError: fig65 has no algorithm(s) ['minibatch_dp_penalty']; choose from ('dp_penalty', 'dp_penalty_ocu_gwmh', 'dp_hmc')
    """
    if chosen is None:
        return tuple(allowed)
    bad = [a for a in chosen if a not in allowed]
    if bad or not chosen:
        raise ValueError(f"{name} has no algorithm(s) {bad}; choose from {tuple(allowed)}")
    return tuple(a for a in allowed if a in chosen)


def run_fig64(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
              problems: Optional[Sequence[str]] = None, workers: int = 1,
              algorithms: Optional[Sequence[str]] = None) -> dict:
    """Thesis Fig. 6.4 (+ 6.6, 6.8): bananas, d = 2 and 10 (``quick``: the 2-d ones only).
    ``algorithms``: run only these of :data:`FIG64_ALGORITHMS` (the exact baselines run too)."""
    q = quick_mode(quick)
    probs = problems or (FIG64_PROBLEMS[:2] if q else FIG64_PROBLEMS)
    return run_mmd_vs_epsilon("fig64", out_dir, probs, subset_of(algorithms, FIG64_ALGORITHMS, "fig64"), quick=q,
                              log=log, device=device, workers=workers)


def run_fig65(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
              problems: Optional[Sequence[str]] = None, workers: int = 1,
              algorithms: Optional[Sequence[str]] = None) -> dict:
    """Thesis Fig. 6.5 (+ 6.7, 6.8, 6.9): harder models and the circle. ``quick``: correlated
    Gaussian and circle only. ``algorithms``: run only these of :data:`FIG65_ALGORITHMS`."""
    q = quick_mode(quick)
    probs = problems or (("correlated-gauss", "circle") if q else FIG65_PROBLEMS)
    return run_mmd_vs_epsilon("fig65", out_dir, probs, subset_of(algorithms, FIG65_ALGORITHMS, "fig65"), quick=q,
                              log=log, device=device, workers=workers)

