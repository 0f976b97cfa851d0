r"""Zhang & Zhang (2023), Fig. 1(a)(b): truncated Gaussian mixture, symmetric KL and average
batch size against the **per-iteration** privacy ε, DP-Fast MH vs its full-batch variant vs
DP Barker.

Setting (§6.1, App. E.1): data in :math:`[-3,3]` (:func:`~pyro_dp.models.make_truncated_gmm_data`),
flat prior (on the box :math:`[-3,3]^2`, see :mod:`pyro_dp.models.mixture`),
:math:`N = 50\,000`, temperature 500 (:math:`T = 1/500`), :math:`\delta = 10^{-5}`, per-datum
bound :math:`c_i` of App. E.1 replaced by its public maximum (``DPFastMH`` refuses data-dependent
bounds), :math:`K = \varepsilon C/\max_i c_i = \varepsilon N` (App. E.1), :math:`\lambda = 10`
and random-walk step 0.06 in θ (the authors' code defaults; ≈ 0.045 in the unconstrained
space the kernels use). The paper compares methods "by fixing the privacy budget for each
iteration and the total number of iterations" (§5.1), so the x axis is the per-iteration ε.

* ``dp_fast_mh``: :class:`~pyro_dp.kernels.DPFastMH`, ``step_epsilon = ε``, ``step_delta = δ``,
  ``privacy_for_free=False`` (the kernel's default; see the kernel docs for why the paper's
  un-noised branch is not (ε, δ)-DP for small δ).
* ``dp_fast_mh_full``: the same with ``full_batch=True``.
* ``dp_barker``: :class:`~pyro_dp.kernels.DPBarker` with the largest batch size from a grid whose
  one-iteration ε (Heikkilä Thm 2 + Cor. 2, RDP → (ε, δ)) is ≤ ε; ``NaN`` when none is.

The score is the histogram symmetric KL (:func:`~pyro_dp.evaluation.symmetric_kl_2d`) of the
chain's draws (after 10 % burn-in) against 2·10⁵ exact draws (grid quadrature), with 30 bins per
axis instead of the authors' 99 because our chains are shorter; ``exact`` rows give the same
statistic for an exact sample of the chain's length (the floor of the estimator's bias).
Columns also hold the average batch size (rows read per iteration) and the total ε of the run
under each kernel's own accountant.

Quick mode (CI): :math:`N = 3000`, 200 iterations, ε ∈ {0.05, 0.2}, one repeat. Full mode:
:math:`N = 50\,000`, 3000 iterations (the paper: 10⁴), ε ∈ {0.01, 0.05, 0.2, 0.5}, one repeat (the first full run also holds a second repeat of the cheap minibatch cells).
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Optional

import torch

from ..accounting import get_accountant
from ..accounting.subsampled import dp_barker_rdp
from .grid import pick_device, pyplot_or_none, quick_mode, run_grid, run_kernel

__all__ = ["FASTMH_PARAMS", "run_fastmh_fig1", "COLUMNS", "barker_batch_for_step_epsilon"]

FASTMH_PARAMS = {
    "full": dict(n=50_000, iters=3000, epsilons=(0.01, 0.05, 0.2, 0.5), repeats=1, delta=1e-5, lam=10.0,
                 step=0.045, barker_step=0.02, num_cells=300),
    "quick": dict(n=3000, iters=200, epsilons=(0.05, 0.2), repeats=1, delta=1e-5, lam=10.0,
                  step=0.045, barker_step=0.02, num_cells=150),
}
ALGORITHMS = ("dp_fast_mh", "dp_barker", "exact", "dp_fast_mh_full")  # cheap cells first
COLUMNS = ["iterations", "sym_kl", "batch_size", "acceptance", "step_epsilon_ledger", "epsilon_total",
           "clipped_fraction"]
_BARKER_BATCHES = (20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)


def _one_step_epsilon(event, delta):
    from ..mechanisms import PrivacyLedger

    led = PrivacyLedger()
    led.record(event, 1)
    return get_accountant("rdp", led).get_epsilon(delta)


def _gauss_eps(event, delta):
    from ..mechanisms import PrivacyLedger

    led = PrivacyLedger()
    led.record(event, 1)
    return get_accountant("gdp", led).get_epsilon(delta)


def barker_batch_for_step_epsilon(step_epsilon: float, n: int, delta: float) -> Optional[int]:
    """Largest batch of a fixed grid whose one DP-Barker iteration is (step_epsilon, delta)-DP
    (Heikkilä Thm 2 + Cor. 2, RDP converted at ``delta``), or ``None``."""
    from ..mechanisms import RDPCurveEvent

    best = None
    for b in _BARKER_BATCHES:
        if b > n or b <= 10:
            continue
        orders, curve = dp_barker_rdp(b, n, 256)
        ev = RDPCurveEvent(tuple(float(a) for a in orders), tuple(curve.tolist()))
        if _one_step_epsilon(ev, delta) <= step_epsilon:
            best = b
    return best


def run_fastmh_fig1(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None) -> dict:
    """Run every missing cell into ``out_dir/fastmh_fig1.csv`` and draw ``fastmh_fig1.png``."""
    from ..evaluation import symmetric_kl_2d
    from ..kernels import DPBarker, DPFastMH
    from ..models import get_problem, truncated_gmm_lipschitz, truncated_gmm_model, truncated_gmm_reference

    q = quick_mode(quick)
    p = FASTMH_PARAMS["quick" if q else "full"]
    dev = pick_device(device)
    prob = get_problem("gmm-truncated", n=p["n"], seed=0)
    x, T = prob.args[0], prob.temperature
    ref = truncated_gmm_reference(x, T, num_cells=p["num_cells"])
    ref_draws = ref.sample(200_000, seed=1)
    xd = x.to(dev)
    c = truncated_gmm_lipschitz()  # public bound, unconstrained space
    n_keep = p["iters"] - p["iters"] // 10

    def compute(cell):
        eps, r, alg = cell["epsilon"], cell["repeat"], cell["algorithm"]
        if alg == "exact":
            s = ref.sample(n_keep, seed=10_000 + r)
            return {"iterations": n_keep, "sym_kl": float(symmetric_kl_2d(s, ref_draws, bins=30))}
        init = {"theta": torch.zeros(2, dtype=x.dtype, device=dev)}  # the authors start at the origin
        warm = p["iters"] // 10
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if alg == "dp_barker":
                b = barker_batch_for_step_epsilon(eps, p["n"], p["delta"])
                if b is None:
                    return {"iterations": 0, "sym_kl": math.nan, "batch_size": math.nan}
                k = DPBarker(truncated_gmm_model, batch_size=b, proposal_scale=p["barker_step"], temperature=T,
                             seed=r, noise_seed=r, reference_delta=p["delta"], nonprivate_diagnostics=True)
            else:
                full = alg == "dp_fast_mh_full"
                k = DPFastMH(truncated_gmm_model, proposal_scale=p["step"], lipschitz=c,
                             lam=None if full else p["lam"], max_batch_size=None if full else max(1, round(eps * p["n"])),
                             step_epsilon=eps, step_delta=p["delta"], full_batch=full, temperature=T, seed=r,
                             noise_seed=r, reference_delta=p["delta"], nonprivate_diagnostics=True)
            s, diag = run_kernel(k, (xd,), num_samples=p["iters"] - warm, warmup_steps=warm, initial_params=init)
        s = s.double().cpu()
        ev = k.planned_events()[1][0]  # the event every iteration records
        if alg == "dp_barker":
            step_eps = _one_step_epsilon(ev, p["delta"])
        else:  # ApproxDPEvent(eps, delta) or, full batch, GaussianEvent(sigma2): its eps at delta
            step_eps = float(ev.epsilon) if hasattr(ev, "epsilon") else _gauss_eps(ev, p["delta"])
        return {
            "iterations": p["iters"],
            "sym_kl": float(symmetric_kl_2d(s, ref_draws, bins=30)),
            "batch_size": diag.get("mean batch size", b if alg == "dp_barker" else math.nan),
            "acceptance": diag.get("acceptance rate", math.nan),
            "step_epsilon_ledger": step_eps,
            "epsilon_total": diag["epsilon_total"],
            "clipped_fraction": diag.get("non-private clipped fraction", math.nan),
        }

    cells = [{"problem": "gmm-truncated", "algorithm": a, "epsilon": float(e), "repeat": r}
             for a in ALGORITHMS for e in p["epsilons"] for r in range(p["repeats"])]
    res = run_grid("fastmh_fig1", out_dir, cells, compute, COLUMNS, progress=False, log=log)
    rows = res["rows"]
    png = None
    plt = pyplot_or_none(log, "fastmh_fig1")
    if plt is not None:
        png = os.path.join(out_dir, "fastmh_fig1.png")
        _plot(rows, png, plt)
    return {"csv": res["csv"], "png": png, "rows": rows, "computed": res["computed"], "skipped": res["skipped"]}


def _plot(rows, path, plt):
    from .grid import summarise

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, metric, logy in ((axes[0], "sym_kl", True), (axes[1], "batch_size", True)):
        for a in ALGORITHMS:
            if metric == "batch_size" and a == "exact":
                continue
            st = sorted((float(v["epsilon"]), v["mean"], v["se"]) for v in summarise(
                [r for r in rows if r["algorithm"] == a], metric, by=("algorithm", "epsilon")) if v["n"])
            if st:
                e, m, se = zip(*st)
                ax.errorbar(e, m, yerr=[0 if not math.isfinite(v) else v for v in se], marker="o", capsize=2,
                            label=a, ls=":" if a == "exact" else "-")
        ax.set(xscale="log", yscale="log" if logy else "linear", xlabel="per-iteration epsilon", ylabel=metric)
        ax.legend(fontsize=7)
    fig.suptitle("Zhang & Zhang 2023 Fig. 1(a)(b): truncated GMM")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
