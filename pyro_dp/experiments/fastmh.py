r"""Zhang & Zhang (2023), Fig. 1(a)–(d): truncated Gaussian mixture. Symmetric KL against the
**per-iteration** privacy ε (a), average batch size against ε (b), and symmetric KL against
iterations (c) and wall time (d), for DP-Fast MH, its full-batch variant, the penalty algorithm
and DP Barker.

Settings and where they come from (``dpfastmh`` = the authors' code, github:ruqizhang/dpfastmh,
``mog/dpfastmh.jl`` for the minibatch chain and ``mog/dpfastmh_full.jl`` for the full-batch one):

* model: :math:`x_i\sim\frac12\mathcal N(\theta_1,\sigma_x^2)+\frac12\mathcal N(\theta_1+\theta_2,
  \sigma_x^2)`, :math:`\sigma_x^2=2`, data drawn at :math:`\theta=(0,1)` (§6.1; ``dpfastmh.jl``
  l. 83–96), truncated to :math:`[-3,3]` (App. E.1) by
  :func:`~pyro_dp.models.make_truncated_gmm_data`;
* :math:`N = 50\,000` (§6.1; ``dpfastmh.jl`` l. 26), temperature 500, i.e. the likelihood to the
  power :math:`T=1/500` (§6.1; ``dpfastmh.jl`` l. 30, ``psi = .../T`` l. 170);
  :math:`\delta = 10^{-5}` per iteration (§6: "in all experiments"; ``dpfastmh.jl`` l. 54);
* flat prior (App. E.1; the code has no prior term, ``dpfastmh.jl`` l. 186–234) on the box
  :math:`|\theta_j|\le 3` that the code's bound assumes (``upper = 3.0``, ``dpfastmh.jl`` l. 163,
  168–169), see :mod:`pyro_dp.models.mixture`;
* per-datum bound :math:`c_i` of App. E.1 (``dpfastmh.jl`` l. 168–170), :math:`M=\|\theta-\theta'\|`;
* minibatch DP-Fast MH: :math:`\lambda = 10` (``dpfastmh.jl`` l. 39–42), random-walk step 0.06 in θ
  (``dpfastmh.jl`` l. 19–22, l. 245–250), :math:`K = \varepsilon C/\max_i c_i` (App. E.1: "set
  :math:`K` to be around :math:`\epsilon C/\max_i c_i`"), which is :math:`\varepsilon N` here;
* full-batch DP-Fast MH: step 0.08 in θ (``dpfastmh_full.jl`` l. 19–21);
* chains start at the origin (``dpfastmh.jl`` l. 128), no burn-in (``dpfastmh.jl`` l. 35–38),
  :math:`10^4` iterations (Fig. 1(c); §6.1 "after :math:`10^4` iterations"; the code's default is
  20 000, ``dpfastmh.jl`` l. 31–34);
* the score: symmetric KL of the 2-d histograms, 99 bins per axis over the range of
  :math:`2\cdot10^5` exact draws, cells floored at :math:`10^{-13}` (``util/SymKL.jl`` l. 3–15,
  :func:`~pyro_dp.evaluation.symmetric_kl_2d` with its defaults), of the first :math:`t` draws
  every 500 iterations (``dpfastmh.jl`` l. 135, 151–155); the wall time at :math:`t` counts the
  sampler only, not the scoring (``dpfastmh.jl`` l. 140–150). Panels (c)(d) are at
  :math:`\varepsilon = 0.05` (Fig. 1 caption);
* the x axis is the per-iteration ε (§5.1: "fixing the privacy budget for each iteration and
  the total number of iterations"), ε ∈ {0.01, 0.05, 0.2, 0.5}.

Lines (``algorithm`` column):

* ``dp_fast_mh``: :class:`~pyro_dp.kernels.DPFastMH`, ``step_epsilon = ε``, ``step_delta = δ``,
  :math:`K=\varepsilon N`, ``privacy_for_free=False`` (the kernel's default).
* ``dp_fast_mh_pff``: the same with Alg. 2's un-noised "privacy for free" branch **on (opt-in)**.
* ``dp_fast_mh_pff_k60``: the same with the authors' code's :math:`K = 60` (``dpfastmh.jl``
  l. 43–46) instead of App. E.1's :math:`K=\varepsilon N`: the configuration the authors' chain ran.
  Where the kernel finds no per-iteration guarantee at all for it (ε ≥ 0.2) the row is empty.
* ``dp_fast_mh_full``: ``full_batch=True`` (privacy for free off).
* ``dp_penalty``: :class:`~pyro_dp.DPPenalty` (Yıldırım & Ermiş 2019), full batch, the same
  public clip :math:`b=c` and step as the full-batch DP-Fast MH, noise multiplier
  :math:`1/\mu` with :math:`\mu` the largest μ-GDP that is (ε, δ)-DP (one Gaussian mechanism per
  iteration: thesis Thm 6), so one iteration is exactly (ε, δ)-DP.
* ``dp_barker``: :class:`~pyro_dp.kernels.DPBarker` with the largest batch of a grid whose
  one-iteration ε (Heikkilä Thm 2 + Cor. 2, RDP → (ε, δ)) is ≤ ε, step 0.02 (unconstrained; our
  choice: App. E.1 sets the baselines "following their original papers" and does not report
  the step they used); empty row when no batch is feasible.
* ``exact``: the same statistic for :math:`t` exact draws (the estimator's floor at that :math:`t`).

``batch_size`` is the mean Poisson draw :math:`B` of Alg. 1 (DP-Fast MH), the fixed batch (DP
Barker) or :math:`N` (full-batch lines). ``full_batch_fraction`` and ``free_fraction`` (DP-Fast MH
lines) are the shares of iterations that ran the full-batch test (:math:`B\ge K`: all
:math:`N` rows are read, so the mean rows read is at least ``full_batch_fraction`` × N; the
authors' code counts those steps as batch size N, ``dpfastmh.jl`` l. 215) and the un-noised
branch. The columns ``step_epsilon_ledger`` and ``step_delta_ledger`` hold what each kernel's
ledger records for one iteration (for a Gaussian event: its ε at δ, and δ). With privacy for free on,
``DPFastMH`` records the certified :math:`(\varepsilon, 1-e^{-\varepsilon})` (or more) per
iteration (:func:`~pyro_dp.accounting.algorithms.fastmh_step_privacy`), not
:math:`(\varepsilon, 10^{-5})`.

Remaining deviations, each forced by privacy validity:

1. **one public bound** :math:`c=\max_{|x|\le3}c_i` (times 1.5, the largest slope of the box's
   logit transform) instead of the per-datum :math:`c_i` (``dpfastmh.jl`` l. 168–174): per-datum
   bounds computed from the data make the batch-size law and the sampling probabilities
   data-dependent, which Thm 2's proof does not cover (``DPFastMH`` refuses them). With it,
   :math:`p=\max_i c_i/C=1/N` and the sampling is uniform.
2. **the data are truncated** to :math:`[-3,3]` (App. E.1) where the code does not truncate
   (``dpfastmh.jl`` l. 83–96): the bound :math:`c` must hold for every possible row.
3. **privacy for free is off** in ``dp_fast_mh``/``dp_fast_mh_full`` (the code always has it
   on, ``dpfastmh.jl`` l. 209–213, 223–227): an un-noised accept bit whose log ratio moves by
   Δ is only :math:`(0,1-e^{-\Delta})`-DP (see :class:`~pyro_dp.kernels.DPFastMH`); it is the
   opt-in ``*_pff*`` lines here, with their real δ.
4. **Gaussian noise** and the **prior ratio**: the code draws its "Gaussian" noise with
   ``rand()`` (uniform, ``dpfastmh.jl`` l. 258, 264) and has no prior term; the kernels draw
   Gaussian noise (the mechanism of Thm 2) and include the (flat) prior's log-Jacobian.
Two more, not about privacy:

5. **sampling in the unconstrained space** of the box (the box makes the flat-prior posterior
   proper; the kernels walk in Pyro's unconstrained coordinates): the steps 0.06/0.08 in θ become
   0.045/0.06 in the logit coordinates (equal at the modes, where the transform's slope is
   4/3); a random walk on the box itself would need the prior's support test, and the
   public bound above is stated in these coordinates.
6. the reference is :math:`2\cdot10^5` exact draws from grid quadrature of the tempered posterior
   (the code loads a stored sample, ``util/SymKL.jl`` l. 4, whose origin is not in the repository).

Not done: the non-private reference lines of §6.1 and the step-size tuning to a 60 %
acceptance rate (App. E.1): the authors' tuned steps are used as shipped.

Layout: one CSV row per (cell, :math:`t`), :math:`t` = 500, 1000, …, 10 000 (``iterations``,
a key column); each chain runs once and all its rows come from that run; ``wall_seconds`` is the
sampler's elapsed time at :math:`t`, and ``epsilon_total`` (the whole chain under the kernel's
own accountant at δ) is filled on the final row only; the grid's ``seconds`` column charges the
whole chain (run and scoring) to its first row.

Full mode: the settings above, two repeats (seeds 0 and 1; the grid took 46 minutes of wall time
with ``--threads 1`` on a 2-core machine shared with other jobs). Quick mode (CI):
:math:`N = 3000`, 100 iterations scored at 50 and 100, ε ∈ {0.05, 0.5} (DP Barker is feasible at
0.5), one repeat.
"""
from __future__ import annotations

import math
import os
import time
import warnings
from typing import Optional

import torch

from ..accounting import get_accountant
from ..accounting.gdp import gdp_mu
from ..accounting.subsampled import dp_barker_event
from .grid import KEY_COLUMNS, first_chain_diagnostics, pick_device, pyplot_or_none, quick_mode, run_grid

__all__ = ["FASTMH_PARAMS", "run_fastmh_fig1", "COLUMNS", "KEYS", "ALGORITHMS", "barker_batch_for_step_epsilon"]

FASTMH_PARAMS = {
    "full": dict(n=50_000, iters=10_000, score_every=500, epsilons=(0.01, 0.05, 0.2, 0.5), repeats=2, delta=1e-5,
                 lam=10.0, step=0.045, step_full=0.06, barker_step=0.02, k_code=60, num_cells=300, curve_epsilon=0.05),
    "quick": dict(n=3000, iters=100, score_every=50, epsilons=(0.05, 0.5), repeats=1, delta=1e-5,
                  lam=10.0, step=0.045, step_full=0.06, barker_step=0.02, k_code=60, num_cells=150, curve_epsilon=0.05),
}
#: cheap lines first
ALGORITHMS = ("exact", "dp_fast_mh", "dp_fast_mh_pff", "dp_fast_mh_pff_k60", "dp_barker", "dp_fast_mh_full",
              "dp_penalty")
KEYS = tuple(KEY_COLUMNS) + ("iterations",)
COLUMNS = ["sym_kl", "wall_seconds", "batch_size", "acceptance", "step_epsilon_ledger", "step_delta_ledger",
           "epsilon_total", "clipped_fraction", "K", "full_batch_fraction", "free_fraction"]
_BARKER_BATCHES = (20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)


def _one_step(event, delta, accountant):
    from ..mechanisms import PrivacyLedger

    led = PrivacyLedger()
    led.record(event, 1)
    return get_accountant(accountant, led).get_epsilon(delta)


def barker_batch_for_step_epsilon(step_epsilon: float, n: int, delta: float) -> Optional[int]:
    """Largest batch of a fixed grid whose one DP-Barker iteration is (step_epsilon, delta)-DP
    (Heikkilä Thm 2 + Cor. 2, RDP converted at ``delta``), or ``None``."""
    best = None
    for b in _BARKER_BATCHES:
        if b > n or b <= 10:
            continue
        ev = dp_barker_event(b, n, 256)
        if _one_step(ev, delta, "rdp") <= step_epsilon:
            best = b
    return best


def _step_privacy(ev, delta):
    """(ε, δ) that the ledger records for one iteration: an ``ApproxDPEvent`` as is, a Gaussian
    or RDP event as its ε at ``delta``."""
    from ..mechanisms import ApproxDPEvent, GaussianEvent

    if isinstance(ev, ApproxDPEvent):
        return float(ev.epsilon), float(ev.delta)
    return _one_step(ev, delta, "gdp" if isinstance(ev, GaussianEvent) else "rdp"), delta


def run_fastmh_fig1(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None) -> dict:
    """Run every missing cell into ``out_dir/fastmh_fig1.csv`` and draw ``fastmh_fig1.png``."""
    from pyro.infer import MCMC

    from ..evaluation import symmetric_kl_2d
    from ..kernels import DPBarker, DPFastMH, DPPenalty
    from ..models import get_problem, truncated_gmm_lipschitz, truncated_gmm_model, truncated_gmm_reference
    from ..run import get_epsilon

    q = quick_mode(quick)
    p = FASTMH_PARAMS["quick" if q else "full"]
    dev = pick_device(device)
    prob = get_problem("gmm-truncated", n=p["n"], seed=0)
    x, T = prob.args[0], prob.temperature
    ref = truncated_gmm_reference(x, T, num_cells=p["num_cells"])
    ref_draws = ref.sample(200_000, seed=1)
    xd = x.to(dev)
    c = truncated_gmm_lipschitz()  # public bound, unconstrained space (deviation 1)
    ts = list(range(p["score_every"], p["iters"] + 1, p["score_every"]))
    delta = p["delta"]
    chains = {}  # (algorithm, epsilon, repeat) -> {t: row}; each chain runs once for all its t

    def kl(s):  # util/SymKL.jl: 99 bins over the reference range, floor 1e-13
        return float(symmetric_kl_2d(s, ref_draws))

    def run_chain(alg, eps, r):
        if alg == "exact":
            s = ref.sample(p["iters"], seed=10_000 + r)
            return {t: {"sym_kl": kl(s[:t])} for t in ts}
        init = {"theta": torch.zeros(2, dtype=x.dtype, device=dev)}  # dpfastmh.jl l. 128: start at the origin
        common = dict(temperature=T, seed=r, noise_seed=r, reference_delta=delta, nonprivate_diagnostics=True)
        k_max, b = None, None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if alg == "dp_barker":
                b = barker_batch_for_step_epsilon(eps, p["n"], delta)
                if b is None:
                    return {t: {} for t in ts}
                k = DPBarker(truncated_gmm_model, batch_size=b, proposal_scale=p["barker_step"], **common)
            elif alg == "dp_penalty":
                # one iteration = one Gaussian mechanism with noise multiplier nm (thesis Thm 6):
                # exactly (eps, delta)-DP iff 1/nm <= mu(eps, delta) (Dong, Roth & Su 2019, Cor. 2.13)
                k = DPPenalty(truncated_gmm_model, proposal_scale=p["step_full"], llr_clip=c,
                              noise_multiplier=1.0 / gdp_mu(eps, delta), **common)
            else:
                full = alg == "dp_fast_mh_full"
                # App. E.1: K ~ eps C / max_i c_i = eps N (one bound for all rows); the code: K = 60
                k_max = p["k_code"] if alg == "dp_fast_mh_pff_k60" else max(1, round(eps * p["n"]))
                try:
                    k = DPFastMH(truncated_gmm_model, proposal_scale=p["step_full" if full else "step"], lipschitz=c,
                                 lam=None if full else p["lam"], max_batch_size=None if full else k_max,
                                 step_epsilon=eps, step_delta=delta, full_batch=full,
                                 privacy_for_free=alg.startswith("dp_fast_mh_pff"), **common)
                    k.initial_params = init
                    k.setup(0, xd)  # data-free: N is public; raises when no guarantee exists
                except ValueError as e:
                    if "no per-iteration guarantee" not in str(e):
                        raise
                    return {t: {"K": k_max} for t in ts}
            stamps = []
            mcmc = MCMC(k, num_samples=p["iters"], warmup_steps=0, disable_progbar=True, initial_params=init,
                        hook_fn=lambda *a: stamps.append(time.perf_counter()))
            t0 = time.perf_counter()
            mcmc.run(xd)
        s = mcmc.get_samples()["theta"].reshape(p["iters"], -1).double().cpu()
        diag = first_chain_diagnostics(mcmc)
        se, sd = _step_privacy(k.planned_events()[1][0], delta)  # the event every iteration records
        chain = {
            "batch_size": diag.get("mean batch size", b if b is not None else p["n"]),
            "acceptance": diag.get("acceptance rate", math.nan),
            "step_epsilon_ledger": se, "step_delta_ledger": sd,
            "clipped_fraction": diag.get("non-private clipped fraction", math.nan),
            "K": k_max if k_max is not None else "",
            # DPFastMH only: share of iterations that ran the full-batch test / the un-noised branch
            "full_batch_fraction": diag.get("full-batch fraction", ""),
            "free_fraction": diag.get("privacy-for-free fraction", ""),
        }
        out = {t: dict(chain, sym_kl=kl(s[:t]), wall_seconds=stamps[t - 1] - t0) for t in ts}
        out[ts[-1]]["epsilon_total"] = get_epsilon(mcmc, delta=delta)
        return out

    def compute(cell):
        key = (cell["algorithm"], cell["epsilon"], cell["repeat"])
        if key not in chains:
            chains.clear()  # cells come chain by chain
            chains[key] = run_chain(*key)
        return chains[key][cell["iterations"]]

    cells = [{"problem": "gmm-truncated", "algorithm": a, "epsilon": float(e), "repeat": r, "iterations": t}
             for r in range(p["repeats"]) for a in ALGORITHMS for e in p["epsilons"] for t in ts]
    res = run_grid("fastmh_fig1", out_dir, cells, compute, COLUMNS, key_columns=KEYS, progress=False, log=log)
    rows = res["rows"]
    png = None
    plt = pyplot_or_none(log, "fastmh_fig1")
    if plt is not None:
        png = os.path.join(out_dir, "fastmh_fig1.png")
        _plot(rows, png, plt, final=ts[-1], curve_eps=p["curve_epsilon"], n=p["n"])
    return {"csv": res["csv"], "png": png, "rows": rows, "computed": res["computed"], "skipped": res["skipped"]}


def _style(a):
    from .grid import series_style

    return series_style(ALGORITHMS.index(a))  # one colour, marker and line style per line in every panel


def _plot(rows, path, plt, *, final, curve_eps, n):
    """Zhang & Zhang Fig. 1(a)–(d). Lines with equal values (the two K = εN lines; the full-batch
    DP-Fast MH and the penalty lines' batch size N) are dodged sideways and differ in marker and
    line style, so neither hides the other; the exact-draws line is the non-private reference."""
    from .grid import LABELS, dodge, legend_below, summarise

    fig, axes = plt.subplots(1, 4, figsize=(18, 5.4))
    last = [r for r in rows if int(r["iterations"]) == final]
    k = len(ALGORITHMS)
    reps = max((int(r["repeat"]) for r in rows), default=-1) + 1
    for ax, metric in ((axes[0], "sym_kl"), (axes[1], "batch_size")):
        for a in ALGORITHMS:
            if metric == "batch_size" and a == "exact":
                continue
            st = sorted((float(v["epsilon"]), v["mean"], v["se"]) for v in summarise(
                [r for r in last if r["algorithm"] == a], metric, by=("algorithm", "epsilon")) if v["n"])
            if st:
                e, m, se = zip(*st)
                style = dict(_style(a), ls=":", marker="") if a == "exact" else _style(a)
                ax.errorbar(dodge(e, ALGORITHMS.index(a), k, width=0.15), m,
                            yerr=[0 if not math.isfinite(v) else v for v in se], capsize=2,
                            label=LABELS.get(a, a), **style)
        if metric == "batch_size":  # a B >= K step reads all N rows (Alg. 2): rows read >= that share x N
            for a in ALGORITHMS:
                pts = sorted((float(r["epsilon"]), float(r["full_batch_fraction"]) * n) for r in last
                             if r["algorithm"] == a and r["repeat"] == "0" and a != "dp_fast_mh_full"
                             and r["full_batch_fraction"] not in ("", "nan") and float(r["full_batch_fraction"]) > 0)
                if pts:
                    e, v = zip(*pts)
                    ax.plot(dodge(e, ALGORITHMS.index(a), k, width=0.15), v, marker="x", ls=(0, (2, 2)),
                            color=_style(a)["color"],
                            label=f"{LABELS.get(a, a)}: rows read ≥ full-batch share × N (repeat 0)")
        ax.set(xscale="log", yscale="log", xlabel="per-iteration ε (δ = 10⁻⁵)",
               ylabel="symmetric KL to exact draws (nats)" if metric == "sym_kl"
               else "batch size B (rows per iteration, Alg. 1)",
               title=f"({'a' if metric == 'sym_kl' else 'b'}) at t = {final}; mean ± s.e., {reps} repeats")
        ax.grid(alpha=0.3)
    curve = [r for r in rows if float(r["epsilon"]) == curve_eps]
    for ax, xcol, panel in ((axes[2], "iterations", "c"), (axes[3], "wall_seconds", "d")):
        for a in ALGORITHMS:
            if xcol == "wall_seconds" and a == "exact":
                continue
            pts = [(float(r[xcol]), float(r["sym_kl"])) for r in curve
                   if r["algorithm"] == a and r["repeat"] == "0" and r["sym_kl"] not in ("", "nan")]
            if pts:
                xs, ys = zip(*sorted(pts))
                style = dict(_style(a), ls=":", marker="") if a == "exact" else dict(_style(a), markevery=4)
                if xcol == "iterations":
                    xs = dodge(xs, ALGORITHMS.index(a), k, log=False, width=0.05)
                ax.plot(xs, ys, label=LABELS.get(a, a), **style)
        ax.set(yscale="log", xscale="log" if xcol == "wall_seconds" else "linear",
               xlabel="iterations t" if xcol == "iterations" else "sampler wall time (s, loaded 2-core machine)",
               ylabel="symmetric KL to exact draws (nats)", title=f"({panel}) ε = {curve_eps}, repeat 0")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Zhang & Zhang 2023 Fig. 1(a)–(d) reproduction: truncated GMM, N = {n:,}; "
                 "the two K = εN lines coincide (dodged sideways)")
    legend_below(fig, axes, ncol=3)
    fig.subplots_adjust(top=1 - 0.6 / fig.get_figheight())
    fig.savefig(path, dpi=110)
    plt.close(fig)
