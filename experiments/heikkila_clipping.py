r"""Heikkilä, Jälkö, Dikmen & Honkela (2019), Fig. 1(c): the share of clipped log-likelihood
ratios against the proposal variance, on the tempered GMM of Figs. 2–3 (issue #60).

**What the panel plots** (paper §3.3: "Figure 1(c) shows how frequently we need to clip the
log-likelihood ratios to maintain the bound in (19) as a function of proposal variance using a
Gaussian mixture model problem defined in Section 4"): for each Gaussian proposal variance
:math:`\sigma^2`, one DP Barker chain's clipped ratios over all its :math:`T` iterations and
:math:`b` rows per batch, :math:`\#\text{clipped}/(Tb)`. Settings from the authors' code,
DPBayes/DP-MCMC-NeurIPS2019 at its stored HEAD (``gmm_code/``):

* proposal variances: ``np.linspace(0.005, 0.02, 10)`` (``mog_main_prop_var.py`` l. 36)
* one chain per variance, T = 20 000 iterations, no burn-in (``main.py``: ``dp_T = 20000``;
  ``mog_main_prop_var.py`` l. 35 ``burn_in = 0``), seeded once (``npr.seed(123)``)
* b = 1000, N = 10⁶, temperature N0/N with N0 = 100, C = 2, clip 0.99·√b/N0 (untempered):
  as Figs. 2–3 (``mog_main_prop_var.py`` l. 34–44)
* the statistic: ``clip_counts.sum(1)/T/batch_size`` (``plot_var_vs_clip.py`` l. 16–20)

Here each chain is :class:`~pyro_dp.DPBarker` as in :mod:`experiments.heikkila` (its private
start, ``DPGradientInit``, charged in the ledger; clip √b/N0, the bound of Thm 2 (19)/(23)), and
the statistic is the kernel's opt-in ``"non-private clipped fraction"``: the mean over the
chain's iterations of (clipped rows)/b, i.e. the authors' #clipped/(Tb). It is a diagnostic,
**not private** (it reads every batch's ratios and is in no ledger), as the authors' count is.

**Scale.** The shipped run (``"reduced"``, the default) takes 2 000 iterations per chain
instead of 20 000, with 2 repeats per variance (seeds 0, 1), to fit ~10 CPU-minutes: the
share is a per-iteration average, so a shorter chain changes its standard error, not its
expectation, once the start's transient (the chain starts at the private start's point, near
the mode) has passed. ``"full"`` is the authors' 20 000 iterations, one chain per variance
(~1–2 h here). Every chain's ε (substitution, δ = 2·10⁻⁶, its start included) is in the CSV;
ε does not depend on the proposal.

Run with ``python3 -m experiments heikkila_fig1c --out DIR --threads 1`` (``--quick``:
N = 2·10⁴, b = 200, 100 iterations, three variances).
"""
from __future__ import annotations

import math
import os
import time
import warnings
from typing import Optional

import numpy as np
import torch

from .grid import pick_device, pyplot_or_none, quick_mode, run_grid, run_kernel

__all__ = ["CLIP_PARAMS", "COLUMNS", "KEYS", "run_heikkila_fig1c", "plot_fig1c"]

_VARS = tuple(float(v) for v in np.linspace(0.005, 0.02, 10))  # mog_main_prop_var.py l. 36

#: settings: "full" (the authors'), "reduced" (shipped), "quick" (CI); the rest is
#: :data:`experiments.heikkila.HEIKKILA_PARAMS` of the same mode
CLIP_PARAMS = {
    "full": dict(base="full", prop_vars=_VARS, iters=20_000, repeats=1),
    "reduced": dict(base="full", prop_vars=_VARS, iters=2_000, repeats=2),
    "quick": dict(base="quick", prop_vars=(0.005, 0.01, 0.02), iters=100, repeats=1),
}
KEYS = ("experiment", "problem", "algorithm", "epsilon", "proposal_variance", "repeat")
COLUMNS = ["n", "batch", "iterations", "epsilon_exact", "clipped_fraction", "acceptance", "chain_seconds"]


def run_heikkila_fig1c(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
                       setting: Optional[str] = None) -> dict:
    """Run every missing (variance, repeat) chain into ``out_dir/heikkila_fig1c.csv`` and draw
    ``heikkila_fig1c.png``. ``setting``: a :data:`CLIP_PARAMS` name (default ``"quick"`` or
    ``"reduced"`` from ``quick``)."""
    from pyro_dp.kernels import DPBarker
    from pyro_dp.models import get_problem, gmm_model

    from .heikkila import _PRIOR_VAR, HEIKKILA_PARAMS, _epsilon, _key_eps, _plans

    c = CLIP_PARAMS[setting or ("quick" if quick_mode(quick) else "reduced")]
    p = dict(HEIKKILA_PARAMS[c["base"]], iters=c["iters"])
    dev = pick_device(device)
    prob = get_problem("gmm-heikkila", n=p["n"], seed=0)
    x = prob.args[0].to(dev)
    T = prob.temperature
    plans = _plans(p)
    eps = _epsilon(plans["dp_barker"], p["iters"], p["delta"])  # substitution, start included

    def compute(cell):
        r, var = cell["repeat"], cell["proposal_variance"]
        g = torch.Generator().manual_seed(1000 + r)  # as experiments.heikkila: the same starts
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = torch.randn(2, generator=g, dtype=torch.float64) * torch.tensor(_PRIOR_VAR).sqrt()
            k = DPBarker(gmm_model, batch_size=p["batch"], proposal_scale=math.sqrt(var), temperature=T,
                         init=plans["init"], epsilon=eps * 1.001, delta=p["delta"], num_iterations=p["iters"],
                         seed=r, noise_seed=r, reference_delta=p["delta"], nonprivate_diagnostics=True)
            t0 = time.perf_counter()
            _, diag = run_kernel(k, (x,), num_samples=p["iters"], warmup_steps=0,
                                 initial_params={"theta": start.to(dev)})
            secs = time.perf_counter() - t0
        assert abs(diag["epsilon_total"] - eps) <= 1e-9 * max(1.0, eps)  # the plan is the ledger
        return {"n": p["n"], "batch": p["batch"], "iterations": p["iters"], "epsilon_exact": eps,
                "clipped_fraction": diag["non-private clipped fraction"],
                "acceptance": diag.get("acceptance rate", float("nan")), "chain_seconds": round(secs, 3)}

    cells = [{"problem": "gmm-heikkila", "algorithm": "dp_barker", "epsilon": _key_eps(eps),
              "proposal_variance": v, "repeat": r} for r in range(c["repeats"]) for v in c["prop_vars"]]
    res = run_grid("heikkila_fig1c", out_dir, cells, compute, COLUMNS, key_columns=KEYS, log=log)
    png = os.path.join(out_dir, "heikkila_fig1c.png")
    plot_fig1c(res["rows"], png, pyplot_or_none(log, "heikkila_fig1c"))
    return {"csv": res["csv"], "png": png, "rows": res["rows"], "computed": res["computed"],
            "skipped": res["skipped"]}


def plot_fig1c(rows, path, plt) -> None:
    """Fig. 1(c): mean clipped share (± s.e. over repeats, where there are several) against the
    proposal variance, each repeat's point shown."""
    if plt is None:
        return
    by = {}
    for r in rows:
        by.setdefault(float(r["proposal_variance"]), []).append(float(r["clipped_fraction"]))
    v = sorted(by)
    m = [float(np.mean(by[k])) for k in v]
    se = [float(np.std(by[k], ddof=1) / math.sqrt(len(by[k]))) if len(by[k]) > 1 else 0.0 for k in v]
    it = sorted({int(float(r["iterations"])) for r in rows})
    reps = max(len(b) for b in by.values())
    eps = sorted({float(r["epsilon"]) for r in rows})
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    ax.errorbar(v, m, yerr=se, color="C0", marker="o", capsize=3,
                label=f"DP Barker, mean ± s.e. over {reps} chain(s) of {', '.join(f'{t:,}' for t in it)} iterations")
    xs = [float(r["proposal_variance"]) for r in rows]
    ax.scatter(xs, [float(r["clipped_fraction"]) for r in rows], s=12, color="C1", marker="x", zorder=3,
               label="each chain")
    ax.set(xlabel="proposal variance σ² (θ units²)", ylabel="share of clipped log-likelihood ratios, #clipped / (T b)",
           title="Heikkilä et al. 2019 Fig. 1(c) reproduction: clipping vs proposal variance\n"
                 f"GMM, N = 10⁶, b = 1000, N0 = 100; ε = {', '.join(f'{e:.3g}' for e in eps)} "
                 "(substitution, δ = 2·10⁻⁶, start included)")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    from .grid import legend_below

    legend_below(fig, [ax], ncol=1)
    fig.savefig(path, dpi=110)
    plt.close(fig)
