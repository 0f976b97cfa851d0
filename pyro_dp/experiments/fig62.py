r"""Räisä 2021 thesis, Fig. 6.2: iterations allowed vs :math:`\varepsilon` for each accounting
method, on the 2-d flat banana (:math:`n = 10^5`, :math:`\delta = 0.1/n`).

Parameters are those of the thesis code (``oraisa/masters-thesis``, ``plot_iterations.py`` and
``params/{dpps,hmc,mdpps}_easy-2d.py``): noise multipliers are :math:`\tau n^{\alpha}` with
:math:`\alpha = 1/2`.

* DP penalty, :math:`\tau = 0.1` (nm :math:`= 0.1\sqrt n`): zCDP (thesis Thm 5,
  :func:`~pyro_dp.accounting.zcdp_max_iterations_penalty`) vs the tight Gaussian/PLD bound
  (Thm 6, :func:`~pyro_dp.accounting.max_iterations` with the ``"gdp"`` accountant).
* DP-HMC, :math:`\tau_l = 0.1`, :math:`\tau_g = 0.4`, :math:`L = 10`: zCDP (Thm 10,
  :func:`~pyro_dp.accounting.algorithms.dphmc_max_iterations_zcdp`) vs tight (Thm 11,
  :func:`~pyro_dp.accounting.algorithms.dphmc_max_iterations`).
* Minibatch DP penalty, :math:`\tau = 0.7` (nm :math:`=\sqrt{0.7}`), batch :math:`b = 1000`
  without replacement: RDP (Thm 8, integer orders 2–199, Mironov's conversion as in the
  thesis), and, as a tighter RDP analysis of the same mechanism, Wang, Balle &
  Kasiviswanathan 2019 Thm 27 (``dp_rdp`` accountant). The thesis's second curve (Fourier
  accountant, sampling without replacement under substitution) is **not** reproduced: our
  PLD adapter (dp_accounting) has no analysis of sampling without replacement and refuses
  the event, and we did not hand-write one (its dominating pair needs care; Lebeda et al.
  2024 show how such analyses go wrong under composition).

Everything is deterministic. Output: a tidy CSV, ``fig62.csv`` (one row per algorithm,
accounting method and :math:`\varepsilon`), and ``fig62.png`` when matplotlib is importable.
"""
from __future__ import annotations

import csv
import math
import os
from typing import Callable, Dict, List, Optional, Tuple
from ..accounting.algorithms import dphmc_max_iterations, dphmc_max_iterations_zcdp
from ..accounting import max_iterations, minibatch_penalty_rdp, zcdp_max_iterations_penalty

__all__ = ["FIG62_PARAMS", "METHODS", "FULL_ONLY", "epsilon_grid", "fig62_iterations", "run_fig62", "COLUMNS"]

#: thesis Fig. 6.2 setting (2-d flat banana) and the thesis code's algorithm parameters
FIG62_PARAMS = {
    "n": 100_000,
    "delta": 0.1 / 100_000,
    "penalty_tau": 0.1,
    "hmc_tau_l": 0.1,
    "hmc_tau_g": 0.4,
    "hmc_num_steps": 10,
    "minibatch_tau": 0.7,
    "minibatch_batch_size": 1000,
}

COLUMNS = ["experiment", "algorithm", "accounting", "theorem", "epsilon", "delta", "n", "iterations"]


def _penalty_nm(p):
    return p["penalty_tau"] * math.sqrt(p["n"])  # tau n^alpha, alpha = 1/2


def _penalty_zcdp(eps, p):

    return zcdp_max_iterations_penalty(eps, p["delta"], tau=p["penalty_tau"], n=p["n"], alpha=0.5)


def _penalty_tight(eps, p):
    from ..mechanisms import GaussianEvent

    return max_iterations(eps, p["delta"], GaussianEvent(_penalty_nm(p)), accountant="gdp")


def _hmc_nms(p):
    s = math.sqrt(p["n"])
    return p["hmc_num_steps"], p["hmc_tau_l"] * s, p["hmc_tau_g"] * s


def _hmc_zcdp(eps, p):

    return dphmc_max_iterations_zcdp(eps, p["delta"], *_hmc_nms(p))


def _hmc_tight(eps, p):

    return dphmc_max_iterations(eps, p["delta"], *_hmc_nms(p), accountant="gdp")


def _minibatch_rdp(eps, p):
    from ..mechanisms import RDPCurveEvent

    orders = tuple(range(2, 200))  # thesis code: alpha in range(2, 200)
    q = p["minibatch_batch_size"] / p["n"]
    curve = minibatch_penalty_rdp(q, math.sqrt(p["minibatch_tau"]), orders)  # thesis Thm 8
    return max_iterations(eps, p["delta"], RDPCurveEvent(orders, tuple(curve)), accountant="rdp",
                          accountant_kwargs={"conversion": "mironov"})


def _minibatch_wbk(eps, p):
    from ..mechanisms import SubsampledGaussianEvent

    # the same mechanism as Thm 8, analysed by Wang, Balle & Kasiviswanathan 2019 Thm 27
    # (RDP of sampling without replacement under substitution; dp_accounting's implementation,
    # improved RDP -> (eps, delta) conversion of Canonne, Kamath & Steinke 2020)
    q = p["minibatch_batch_size"] / p["n"]
    ev = SubsampledGaussianEvent(q, math.sqrt(p["minibatch_tau"]), scheme="without_replacement")
    return max_iterations(eps, p["delta"], ev, accountant="dp_rdp")


#: (algorithm, accounting, theorem) -> iterations(epsilon, params)
METHODS: Dict[Tuple[str, str, str], Callable[[float, dict], int]] = {
    ("dp_penalty", "zcdp", "Thm 5"): _penalty_zcdp,
    ("dp_penalty", "tight_gdp", "Thm 6"): _penalty_tight,
    ("minibatch_dp_penalty", "rdp", "Thm 8"): _minibatch_rdp,
    ("minibatch_dp_penalty", "rdp_wbk", "WBK19 Thm 27"): _minibatch_wbk,
    ("dp_hmc", "zcdp", "Thm 10"): _hmc_zcdp,
    ("dp_hmc", "tight_gdp", "Thm 11"): _hmc_tight,
}


#: methods left out of ``--quick`` runs (a numerical RDP analysis: ~6 s per ε on 2 CPU cores)
FULL_ONLY = {("minibatch_dp_penalty", "rdp_wbk")}


def epsilon_grid(quick: bool = False) -> List[float]:
    r"""Thesis grid ``linspace(0.5, 6, 50)`` plus 1, 2, 4 (rounded to 6 decimals); ``quick``:
    ``[0.5, 1, 2, 4, 6]`` (a subset, so a quick run's rows are reused by a full one)."""
    if quick:
        return [0.5, 1.0, 2.0, 4.0, 6.0]
    grid = {round(0.5 + 5.5 * i / 49, 6) for i in range(50)} | {1.0, 2.0, 4.0}
    return sorted(grid)


def fig62_iterations(algorithm: str, accounting: str, epsilon: float, params: Optional[dict] = None) -> int:
    """Iterations allowed for one cell of the figure."""
    p = dict(FIG62_PARAMS, **(params or {}))
    for (alg, acc, _), fn in METHODS.items():
        if (alg, acc) == (algorithm, accounting):
            return int(fn(float(epsilon), p))
    raise KeyError(f"no method ({algorithm!r}, {accounting!r}); known: {[k[:2] for k in METHODS]}")


def _key(row) -> Tuple[str, str, str]:
    return (row["algorithm"], row["accounting"], f"{float(row['epsilon']):.6f}")


def _read_rows(path: str) -> List[dict]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and list(rows[0].keys()) != COLUMNS:
        raise ValueError(f"{path} has columns {list(rows[0].keys())}, expected {COLUMNS}")
    return rows


def run_fig62(out_dir: str, quick: bool = False, params: Optional[dict] = None, log=print,
              device: Optional[str] = None) -> dict:
    """Compute every missing cell, append it to ``out_dir/fig62.csv`` (resumable: cells whose
    rows already exist are skipped), and plot when matplotlib is importable.

    ``device`` is accepted for a uniform CLI and ignored: this figure is pure accounting.

    Returns ``{"csv": path, "png": path or None, "computed": int, "skipped": int, "rows": [...]}``.
    """
    p = dict(FIG62_PARAMS, **(params or {}))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "fig62.csv")
    rows = _read_rows(path)
    have = {_key(r) for r in rows}
    computed = skipped = 0
    new_file = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new_file:
            w.writeheader()
        for (alg, acc, thm), fn in METHODS.items():
            if quick and (alg, acc) in FULL_ONLY:
                continue
            for eps in epsilon_grid(quick):
                row = {"experiment": "fig62", "algorithm": alg, "accounting": acc, "theorem": thm,
                       "epsilon": f"{eps:.6f}", "delta": repr(p["delta"]), "n": str(p["n"]),
                       "iterations": None}
                if _key(row) in have:
                    skipped += 1
                    continue
                row["iterations"] = str(int(fn(eps, p)))
                w.writerow(row)
                f.flush()  # a killed run keeps every finished cell
                rows.append(row)
                have.add(_key(row))
                computed += 1
    log(f"fig62: {computed} cells computed, {skipped} already in {path}")
    png = _plot(rows, os.path.join(out_dir, "fig62.png"), log)
    return {"csv": path, "png": png, "computed": computed, "skipped": skipped, "rows": rows}


def _plot(rows, path, log) -> Optional[str]:
    from .grid import pyplot_or_none

    plt = pyplot_or_none(log, "fig62")
    if plt is None:
        return None
    panels = [("dp_penalty", "DP penalty"), ("minibatch_dp_penalty", "Minibatch DP penalty"), ("dp_hmc", "DP HMC")]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    for ax, (alg, title) in zip(axes, panels):
        for (a, acc, thm) in METHODS:
            if a != alg:
                continue
            pts = sorted((float(r["epsilon"]), int(r["iterations"])) for r in rows
                         if r["algorithm"] == alg and r["accounting"] == acc)
            if pts:
                ax.plot(*zip(*pts), marker=".", label=f"{acc} ({thm})")
        ax.set(title=title, xlabel="epsilon", ylabel="iterations")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
