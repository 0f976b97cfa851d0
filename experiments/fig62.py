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
  Kasiviswanathan 2019 Thm 27 (``dp_rdp`` accountant). These two are valid bounds.
* The thesis's second minibatch curve, the Fourier accountant (Koskela, Jälkö & Honkela 2020,
  Sec. 5.2; PyPI ``fourier-accountant``, ``get_delta_S``: sampling without replacement under
  substitution), is drawn as a **reference line only** (accounting ``fourier_reference``),
  computed as the thesis code does (``code/dp_penalty_minibatch.py`` lines 58–77,
  ``adp_delta``/``adp_iters``; ``code/plot_iterations.py`` lines 32–36): the largest ``k``
  with ``get_delta_S(target_eps=eps, sigma=sqrt(tau), q=b/n, ncomp=k)`` :math:`\le\delta`,
  at the package defaults ``nx = 10**6``, ``L = 20``. No ledger uses it. The accountant
  self-composes the one-step worst-case pair
  :math:`(1-q)N(0,\sigma^2) + qN(1,\sigma^2)` vs :math:`(1-q)N(0,\sigma^2) + qN(-1,\sigma^2)`;
  Lebeda, Regehr, Kamath & Steinke 2024 show that self-composing the one-step worst case
  does not in general bound the composed mechanism, and construct proper dominating pairs
  for the Gaussian under sampling without replacement and substitution. So the curve is not
  a valid bound on :math:`k` iterations. Also, that pair has substitute sensitivity 2 in the
  package's convention (means :math:`\pm 1`; a test checks it at :math:`q = 1`), while the
  thesis (``Thesis/thesis.tex`` lines 1987–1993) reads it as sensitivity 1: within the
  accountant's own analysis the thesis's ``sigma = sqrt(tau)`` is half the mechanism's noise,
  so the thesis's line is conservative by that factor. We keep the thesis's call, so the line
  is the thesis's line. It needs the optional ``fourier_accountant`` (in the ``test``
  extra); without it the curve is skipped with a logged message.

Everything is deterministic. Output: a tidy CSV, ``fig62.csv`` (one row per algorithm,
accounting method and :math:`\varepsilon`), and ``fig62.png`` when matplotlib is importable.
"""
from __future__ import annotations

import csv
import math
import os
from typing import Callable, Dict, List, Optional, Tuple
from pyro_dp.accounting.algorithms import dphmc_max_iterations, dphmc_max_iterations_zcdp
from pyro_dp.accounting import max_iterations, minibatch_penalty_rdp, zcdp_max_iterations_penalty
from pyro_dp.accounting.planning import _secant_count

__all__ = ["FIG62_PARAMS", "METHODS", "FULL_ONLY", "REFERENCE_ONLY", "FOURIER_NX", "FOURIER_L", "epsilon_grid",
           "fig62_iterations", "fourier_delta", "fourier_available", "run_fig62", "COLUMNS"]

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
    from pyro_dp.mechanisms import GaussianEvent

    return max_iterations(eps, p["delta"], GaussianEvent(_penalty_nm(p)), accountant="gdp")


def _hmc_nms(p):
    s = math.sqrt(p["n"])
    return p["hmc_num_steps"], p["hmc_tau_l"] * s, p["hmc_tau_g"] * s


def _hmc_zcdp(eps, p):

    return dphmc_max_iterations_zcdp(eps, p["delta"], *_hmc_nms(p))


def _hmc_tight(eps, p):

    return dphmc_max_iterations(eps, p["delta"], *_hmc_nms(p), accountant="gdp")


def _minibatch_rdp(eps, p):
    from pyro_dp.mechanisms import RDPCurveEvent

    orders = tuple(range(2, 200))  # thesis code: alpha in range(2, 200)
    q = p["minibatch_batch_size"] / p["n"]
    curve = minibatch_penalty_rdp(q, math.sqrt(p["minibatch_tau"]), orders)  # thesis Thm 8
    return max_iterations(eps, p["delta"], RDPCurveEvent(orders, tuple(curve)), accountant="rdp",
                          accountant_kwargs={"conversion": "mironov"})


def _minibatch_wbk(eps, p):
    from pyro_dp.mechanisms import SubsampledGaussianEvent

    # the same mechanism as Thm 8, analysed by Wang, Balle & Kasiviswanathan 2019 Thm 27
    # (RDP of sampling without replacement under substitution; dp_accounting's implementation,
    # improved RDP -> (eps, delta) conversion of Canonne, Kamath & Steinke 2020)
    q = p["minibatch_batch_size"] / p["n"]
    ev = SubsampledGaussianEvent(q, math.sqrt(p["minibatch_tau"]), scheme="without_replacement")
    return max_iterations(eps, p["delta"], ev, accountant="dp_rdp")


#: the Fourier accountant's discretisation: the package defaults, which the thesis code uses
FOURIER_NX, FOURIER_L = 10**6, 20.0
#: a coarser grid only to locate the count; the count returned is certified on ``FOURIER_NX``
#: (at the thesis's points the two grids' delta agree to ~1e-6 relative)
_FOURIER_COARSE_NX = 10**5


def fourier_available() -> bool:
    """Whether the optional ``fourier_accountant`` package is importable."""
    try:
        import fourier_accountant  # noqa: F401
    except ImportError:
        return False
    return True


def fourier_delta(epsilon: float, k: int, params: Optional[dict] = None, nx: int = FOURIER_NX) -> float:
    r""":math:`\delta(\varepsilon)` of ``k`` minibatch-penalty iterations by the Fourier accountant,
    exactly the thesis code's ``adp_delta`` (``code/dp_penalty_minibatch.py`` lines 58–59).

    A reference value, **not** a valid bound (module doc: Lebeda et al. 2024). ``k = 0``
    releases nothing: :math:`\delta = 0` (the package refuses ``ncomp = 0``).
    """
    import fourier_accountant as fa

    p = dict(FIG62_PARAMS, **(params or {}))
    if int(k) == 0:
        return 0.0
    # Koskela, Jälkö & Honkela 2020, Sec. 5.2 (substitute relation, sampling without replacement):
    # FFT composition of the PLD of (1-q)N(0, s^2) + qN(1, s^2) vs (1-q)N(0, s^2) + qN(-1, s^2),
    # with the thesis's s = sqrt(tau) and q = b/n (thesis.tex lines 1987-1993)
    return float(fa.get_delta_S(target_eps=float(epsilon), sigma=math.sqrt(p["minibatch_tau"]),
                                q=p["minibatch_batch_size"] / p["n"], ncomp=int(k), nx=int(nx), L=FOURIER_L))


def _minibatch_fourier(eps, p):
    # thesis code adp_iters (dp_penalty_minibatch.py lines 61-77): the largest k with
    # delta_FA(k) <= delta. Located on the coarse grid, then searched again from that guess on
    # the thesis's grid, so fourier_delta(k) <= delta < fourier_delta(k + 1) holds at FOURIER_NX.
    delta = p["delta"]
    guess = _secant_count(lambda k: fourier_delta(eps, k, p, nx=_FOURIER_COARSE_NX), delta)
    if fourier_delta(eps, guess, p) <= delta < fourier_delta(eps, guess + 1, p):
        return guess  # the usual case: two evaluations on the thesis's grid
    return _secant_count(lambda k: fourier_delta(eps, k, p), delta, start=guess)


#: (algorithm, accounting, theorem) -> iterations(epsilon, params)
METHODS: Dict[Tuple[str, str, str], Callable[[float, dict], int]] = {
    ("dp_penalty", "zcdp", "Thm 5"): _penalty_zcdp,
    ("dp_penalty", "tight_gdp", "Thm 6"): _penalty_tight,
    ("minibatch_dp_penalty", "rdp", "Thm 8"): _minibatch_rdp,
    ("minibatch_dp_penalty", "rdp_wbk", "WBK19 Thm 27"): _minibatch_wbk,
    ("minibatch_dp_penalty", "fourier_reference", "KJH20 (reference only; invalid: Lebeda et al. 2024)"):
        _minibatch_fourier,
    ("dp_hmc", "zcdp", "Thm 10"): _hmc_zcdp,
    ("dp_hmc", "tight_gdp", "Thm 11"): _hmc_tight,
}


#: methods left out of ``--quick`` runs (numerical analyses: WBK19 ~6 s, Fourier ~1.5 s per ε
#: on 2 shared CPU cores)
FULL_ONLY = {("minibatch_dp_penalty", "rdp_wbk"), ("minibatch_dp_penalty", "fourier_reference")}

#: curves that are not valid privacy bounds, drawn dashed for comparison with the thesis only
REFERENCE_ONLY = {("minibatch_dp_penalty", "fourier_reference")}

#: methods that need an optional package: (algorithm, accounting) -> (is it importable, name)
_OPTIONAL = {("minibatch_dp_penalty", "fourier_reference"): (fourier_available, "fourier-accountant")}


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
            if (alg, acc) in _OPTIONAL and not _OPTIONAL[(alg, acc)][0]():
                pkg = _OPTIONAL[(alg, acc)][1]
                log(f"fig62: skipping {alg}/{acc}: the optional package {pkg!r} is not installed "
                    f"(pip install {pkg})")
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
    """Thesis Fig. 6.2: iterations allowed against ε, one panel per algorithm, one line per
    accounting method (the Fourier curve dashed grey: a reference only)."""
    from .grid import legend_below, pyplot_or_none, series_style

    plt = pyplot_or_none(log, "fig62")
    if plt is None:
        return None
    panels = [("dp_penalty", "DP penalty"), ("minibatch_dp_penalty", "minibatch DP penalty (b = 1000)"),
              ("dp_hmc", "DP-HMC (L = 10)")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 5.2))
    n, delta = (rows[0]["n"], rows[0]["delta"]) if rows else ("n", "δ")
    for ax, (alg, title) in zip(axes, panels):
        for i, (a, acc, thm) in enumerate(METHODS):
            if a != alg:
                continue
            pts = sorted((float(r["epsilon"]), int(r["iterations"])) for r in rows
                         if r["algorithm"] == alg and r["accounting"] == acc)
            if not pts:
                continue
            if (a, acc) in REFERENCE_ONLY:
                ax.plot(*zip(*pts), linestyle="--", color="grey",
                        label="Fourier accountant (thesis), reference only:\nnot valid under composition "
                              "(Lebeda et al. 2024)")
            else:
                st = series_style(i)
                ax.plot(*zip(*pts), color=st["color"], ls=st["ls"], marker=st["marker"], mfc="none", ms=3,
                        markevery=4, label=f"{title.split(' (')[0]}: {acc} ({thm})")
        ax.set(title=title, xlabel=f"target ε (δ = {float(delta):g}, n = {int(float(n)):,})",
               ylabel="iterations allowed (count)")
        ax.grid(alpha=0.3)
    fig.suptitle("thesis Fig. 6.2 reproduction: iterations allowed by each accounting method, flat 2-d banana")
    legend_below(fig, axes, ncol=3)
    fig.subplots_adjust(top=1 - 0.6 / fig.get_figheight())
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
