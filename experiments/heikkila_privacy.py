r"""Heikkilä et al. 2019's privacy curves, and the ε of the Fig. 3 chains under both relations
(issue #60). No sampling: every number is an accountant's, seconds of CPU.

* **Fig. 1(a)(b)** (``heikkila_fig1.csv``): the total ε of ``T`` subsampled DP Barker iterations,
  Thm 2 amplified by Cor. 2 (WBK19 Thm 9, sampling without replacement, substitution:
  :func:`pyro_dp.accounting.subsampled.dp_barker_rdp`), composed in RDP (Mironov 2017, Prop. 1)
  and converted to (ε, δ) at δ = 1/N. Panel (a): ε against the sampling ratio q at T = 5 000;
  panel (b): ε against T at q = 0.001; both for N = 10⁵, 10⁶, 10⁷ (the paper's axes). The batch
  is b = qN. Each point is given under the paper's conversion (Mironov 2017, Prop. 3, as in the
  authors' ``exact_rdp.py``) and under the library's default (Balle et al. 2020, Thm 21). The
  paper's figure has no δ legible in the extracted text ("= 1/N"); we read it as δ = 1/N.
  Fig. 1(c) (clipped share against the proposal variance) needs chains and is not here.
* **Fig. 3's ε under one relation** (``heikkila_fig23_relations.csv``): the shipped DP-SGLD lines
  are accounted as the authors account them, RDP under add/remove; DP Barker's ε (and the
  paper's Definition 1) is under substitution. For each scored t of the DP-SGLD lines this file
  gives the same chains' ε under add/remove (RDP, as shipped; PLD) and under substitution
  (PLD, ``dp_accounting``'s ``REPLACE_ONE``, the kernels' default accountant), and issue #60's
  estimate, add/remove RDP at half the noise multiplier (a substitution moves the clipped sum by up
  to twice the clip; not proved here to bound the substitution ε), all at the Fig. 3 run's
  δ = 2·10⁻⁶.

Run with ``python3 -m experiments heikkila_privacy --out DIR`` (about 10 s; ``--quick`` is the
same computation).
"""
from __future__ import annotations

import csv
import os
from typing import Optional

import numpy as np

__all__ = ["fig1_rows", "relation_rows", "run_heikkila_privacy", "plot_fig1", "plot_fig3_substitution", "FIG1_N", "FIG1_COLUMNS", "RELATION_COLUMNS"]

#: the paper's three data-set sizes (Fig. 1 legends)
FIG1_N = (100_000, 1_000_000, 10_000_000)
#: panel (a): q at T = 5000; panel (b): T at q = 0.001 (the paper's axes: q 0.002–0.010, T 0–10⁵)
FIG1_Q = tuple(round(0.001 * k, 4) for k in range(2, 11))
FIG1_T = tuple(range(5_000, 100_001, 5_000))
FIG1_COLUMNS = ["panel", "n", "q", "batch", "iterations", "delta", "epsilon_mironov", "epsilon_improved"]
RELATION_COLUMNS = ["iterations", "delta", "noise_multiplier_add_remove", "epsilon_add_remove_rdp",
                    "epsilon_add_remove_pld", "epsilon_substitute_pld", "epsilon_substitute_rdp_group"]


def _barker_eps(b: int, n: int, t: int, delta: float):
    from pyro_dp.accounting.rdp import rdp_epsilon
    from pyro_dp.accounting.subsampled import dp_barker_rdp

    orders, rdp = dp_barker_rdp(b, n)
    return tuple(float(rdp_epsilon(orders, t * np.asarray(rdp), delta, conversion=c)[0])
                 for c in ("mironov", "improved"))


def fig1_rows() -> list:
    """Fig. 1(a)(b): one row per (panel, N, q, T)."""
    rows = []
    for n in FIG1_N:
        for panel, grid in (("a", [(q, 5000) for q in FIG1_Q]), ("b", [(0.001, t) for t in FIG1_T])):
            for q, t in grid:
                b = int(round(q * n))
                em, ei = _barker_eps(b, n, t, 1.0 / n)
                rows.append(dict(panel=panel, n=n, q=q, batch=b, iterations=t, delta=1.0 / n,
                                 epsilon_mironov=em, epsilon_improved=ei))
    return rows


def relation_rows() -> list:
    """The Fig. 3 DP-SGLD lines' ε at each scored t, under add/remove and under substitution."""
    from pyro_dp.accounting import planned_epsilon
    from pyro_dp.mechanisms import SubsampledGaussianEvent

    from .heikkila import HEIKKILA_PARAMS, _epsilon, _plans

    p = dict(HEIKKILA_PARAMS["full"])
    out = {t: dict(iterations=t, delta=p["delta"]) for t in p["sgld_t_grid"]}
    for acc, rel, col in (("rdp", "add_remove", "epsilon_add_remove_rdp"), ("pld", "add_remove", "epsilon_add_remove_pld"),
                          ("pld", "substitute", "epsilon_substitute_pld")):
        plan = _plans(dict(p, sgld_accounting=(acc, rel)))
        for t in out:
            out[t][col] = _epsilon(plan["dp_sgld"], t, p["delta"])
            if rel == "add_remove":
                out[t]["noise_multiplier_add_remove"] = plan["sgld_nm"]
    for t, row in out.items():  # issue #60's estimate: add/remove at twice the sensitivity
        ev = SubsampledGaussianEvent(p["sgld_batch"] / p["n"], row["noise_multiplier_add_remove"] / 2, "poisson")
        row["epsilon_substitute_rdp_group"] = planned_epsilon(p["delta"], t, [ev], accountant="rdp",
                                                              relation="add_remove")
    return list(out.values())


def _write(path, columns, rows):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()})


def plot_fig1(rows, path, plt) -> None:
    """Fig. 1(a)(b): ε against q and against T, one line per N and conversion."""
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    styles = {100_000: ("C0", "o", "-"), 1_000_000: ("C1", "s", "--"), 10_000_000: ("C2", "^", ":")}
    for ax, panel, xcol, xlabel in ((axes[0], "a", "q", "sampling ratio q = b/N (T = 5 000)"),
                                    (axes[1], "b", "iterations", "iterations T (q = 0.001)")):
        for n, (c, m, ls) in styles.items():
            sel = [r for r in rows if r["panel"] == panel and int(r["n"]) == n]
            x = [float(r[xcol]) for r in sel]
            ax.plot(x, [float(r["epsilon_mironov"]) for r in sel], color=c, marker=m, ls=ls,
                    label=f"N = {n:.0e}, Mironov's conversion (the paper's)")
            ax.plot(x, [float(r["epsilon_improved"]) for r in sel], color=c, marker=m, ls=ls, alpha=0.45,
                    mfc="none", label=f"N = {n:.0e}, improved conversion (the library's)")
        ax.set(xlabel=xlabel, ylabel="total ε at δ = 1/N (substitution)",
               title=f"({panel}) privacy vs {'subsampling ratio' if panel == 'a' else 'iterations'}")
        ax.grid(alpha=0.3)
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=3, fontsize=7)
    fig.suptitle("Heikkilä et al. 2019 Fig. 1(a)(b): DP Barker's total ε (Thm 2 + Cor. 2, RDP)")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_fig3_substitution(rows, relations, path, plt) -> None:
    """Heikkilä Fig. 3 redrawn under one relation: the DP-SGLD lines at their ε under substitution
    (``relations``' PLD column) instead of the add/remove ε the run recorded; DP Barker unchanged
    (substitution already). Draws nothing for DP-SGLD rows at a t the relations file lacks."""
    if plt is None:
        return
    from .heikkila import _fig3

    sub = {float(r["iterations"]): float(r["epsilon_substitute_pld"]) for r in relations}
    out = []
    for r in rows:
        if r["algorithm"].startswith("dp_sgld"):
            if float(r["iterations"]) not in sub:
                continue
            r = dict(r, epsilon=repr(sub[float(r["iterations"])]))
        out.append(r)
    _fig3(out, path, plt, xlabel="ε under substitution after t (δ = 2·10⁻⁶)",
          subtitle="one relation for every line, substitution: DP-SGLD's ε by PLD (the run recorded add/remove), "
                   "DP Barker's by RDP, its private start included")


def run_heikkila_privacy(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None) -> dict:
    """Write ``heikkila_fig1.csv``, ``heikkila_fig23_relations.csv`` and ``heikkila_fig1.png``
    into ``out_dir`` (``quick`` and ``device`` are accepted and ignored: no sampling)."""
    from .grid import pyplot_or_none

    os.makedirs(out_dir, exist_ok=True)
    f1 = fig1_rows()
    _write(os.path.join(out_dir, "heikkila_fig1.csv"), FIG1_COLUMNS, f1)
    rel = relation_rows()
    _write(os.path.join(out_dir, "heikkila_fig23_relations.csv"), RELATION_COLUMNS, rel)
    plot_fig1(f1, os.path.join(out_dir, "heikkila_fig1.png"), pyplot_or_none(log))
    log(f"heikkila_privacy: {len(f1)} Fig. 1 points, {len(rel)} Fig. 3 ε rows -> {out_dir}")
    return {"fig1": f1, "relations": rel}
