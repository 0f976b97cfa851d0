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

**Non-private references** (§6.1: "the corresponding non-DP version for all DP MH methods"):
:func:`run_fastmh_fig1_nonprivate` runs full-batch MH (the reference of the penalty and the
full-batch DP-Fast MH; the full-batch step) and TunaMH (of minibatch DP-Fast MH; the minibatch
step, λ, :math:`K=N`), both ``DPFastMH(..., non_private=True)`` (no noise, no ledger), into
``fastmh_fig1_nonprivate.csv`` (key ε = inf), a file of its own so that the private CSV's rows
and the tables computed from it are unchanged. DP Barker's non-private counterpart (Seita et
al.'s minibatch Barker test) is not in pyro_dp and is not drawn.

Not done: the step-size tuning to a 60 % acceptance rate (App. E.1): the authors' tuned steps
are used as shipped.

Layout: one CSV row per (cell, :math:`t`), :math:`t` = 500, 1000, …, 10 000 (``iterations``,
a key column); each chain runs once and all its rows come from that run; ``wall_seconds`` is the
sampler's elapsed time at :math:`t`, and ``epsilon_total`` (the whole chain under the kernel's
own accountant at δ) is filled on the final row only; the grid's ``seconds`` column charges the
whole chain (run and scoring) to its first row.

**Fig. 2** (:func:`run_fastmh_fig2`): the density estimates after :math:`10^4` iterations at
ε = 0.05, from the same chains (:func:`_fig1_chain`; seeds 0 and 1 are Fig. 1's chains), for
five seeds; DP Barker at ε = 0.2, the smallest ε of the grid where it has a batch. Scored by the
sym. KL and by the weight of the mode (0, 1) (:func:`mode_weight`; its absolute error against
:math:`2\cdot10^5` exact draws), which is what the paper's Fig. 2 prose judges ("cannot estimate the
relative weights of the two modes").

Full mode: the settings above, two repeats (seeds 0 and 1; the grid took 46 minutes of wall time
with ``--threads 1`` on a 2-core machine shared with other jobs). ``run_fastmh_fig1(DIR,
repeats=10)`` on a copy of the shipped CSV adds repeats 2–9 (chain ``r`` is seeded by ``r``
alone; ``repeats=range(2, 6)`` and ``range(6, 10)`` in two processes, each into its own copy,
shard it: concatenate the new rows afterwards). Quick mode (CI):
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

from pyro_dp.accounting import get_accountant
from pyro_dp.accounting.gdp import gdp_mu
from pyro_dp.accounting.subsampled import dp_barker_event
from .grid import KEY_COLUMNS, first_chain_diagnostics, pick_device, pyplot_or_none, quick_mode, read_rows, run_grid

__all__ = ["FASTMH_PARAMS", "run_fastmh_fig1", "run_fastmh_fig1_nonprivate", "NONPRIVATE_ALGORITHMS", "plot_fig4", "rows_read_per_iteration", "COLUMNS", "KEYS", "ALGORITHMS", "barker_batch_for_step_epsilon",
           "FIG2_PARAMS", "FIG2_ALGORITHMS", "FIG2_COLUMNS", "run_fastmh_fig2", "mode_weight"]

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
#: §6.1's non-private references ("the corresponding non-DP version for all DP MH methods"):
#: full-batch MH (for the penalty and full-batch DP-Fast MH) and TunaMH (for minibatch DP-Fast
#: MH); key ε = inf; in ``fastmh_fig1_nonprivate.csv`` (:func:`run_fastmh_fig1_nonprivate`)
NONPRIVATE_ALGORITHMS = ("mh", "tunamh")
COLUMNS = ["sym_kl", "wall_seconds", "batch_size", "acceptance", "step_epsilon_ledger", "step_delta_ledger",
           "epsilon_total", "clipped_fraction", "K", "full_batch_fraction", "free_fraction"]
_BARKER_BATCHES = (20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)


def _one_step(event, delta, accountant):
    from pyro_dp.mechanisms import PrivacyLedger

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
    from pyro_dp.mechanisms import ApproxDPEvent, GaussianEvent

    if isinstance(ev, ApproxDPEvent):
        return float(ev.epsilon), float(ev.delta)
    return _one_step(ev, delta, "gdp" if isinstance(ev, GaussianEvent) else "rdp"), delta


def _fig1_chain(alg: str, eps: float, r: int, *, p: dict, x: torch.Tensor, c: float, temperature: float):
    """One chain of Fig. 1's line ``alg`` at per-iteration ``eps``, seed ``r`` (module docstring):
    ``(draws [iters, 2] or None, facts, sampler seconds after each iteration, total ε)``. ``None``
    draws: no Barker batch meets ``eps``, or no per-iteration guarantee exists (then ``facts``
    holds only ``K``). Fig. 2 reruns these chains (:func:`run_fastmh_fig2`)."""
    from pyro.infer import MCMC

    from pyro_dp.kernels import DPBarker, DPFastMH, DPPenalty
    from pyro_dp.models import truncated_gmm_model
    from pyro_dp.run import get_epsilon

    delta, dev = p["delta"], x.device
    init = {"theta": torch.zeros(2, dtype=x.dtype, device=dev)}  # dpfastmh.jl l. 128: start at the origin
    common = dict(temperature=temperature, seed=r, noise_seed=r, reference_delta=delta, nonprivate_diagnostics=True)
    k_max, b = None, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if alg == "mh":  # non-private full-batch MH: the full-batch lines' reference (§6.1)
            k = DPFastMH(truncated_gmm_model, proposal_scale=p["step_full"], lipschitz=c, full_batch=True,
                         non_private=True, **common)
        elif alg == "tunamh":  # non-private TunaMH (K = N: never full batch): the minibatch lines' reference
            k = DPFastMH(truncated_gmm_model, proposal_scale=p["step"], lipschitz=c, lam=p["lam"],
                         max_batch_size=p["n"], non_private=True, **common)
        elif alg == "dp_barker":
            b = barker_batch_for_step_epsilon(eps, p["n"], delta)
            if b is None:
                return None, {}, None, None
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
                k.setup(0, x)  # data-free: N is public; raises when no guarantee exists
            except ValueError as e:
                if "no per-iteration guarantee" not in str(e):
                    raise
                return None, {"K": k_max}, None, None
        stamps = []
        mcmc = MCMC(k, num_samples=p["iters"], warmup_steps=0, disable_progbar=True, initial_params=init,
                    hook_fn=lambda *a: stamps.append(time.perf_counter()))
        t0 = time.perf_counter()
        mcmc.run(x)
    s = mcmc.get_samples()["theta"].reshape(p["iters"], -1).double().cpu()
    diag = first_chain_diagnostics(mcmc)
    if alg in NONPRIVATE_ALGORITHMS:  # no release, no ledger: ε is infinite
        se, sd = math.inf, math.nan
    else:
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
    eps_total = math.inf if alg in NONPRIVATE_ALGORITHMS else get_epsilon(mcmc, delta=delta)
    return s, chain, [t - t0 for t in stamps], eps_total


def _truncated_gmm(p: dict, device: Optional[str]):
    """``(data on the device, temperature, exact reference, its 2·10⁵ draws, public bound c)`` of
    Fig. 1's truncated GMM at ``p["n"]`` rows (the set-up Figs 1 and 2 share)."""
    from pyro_dp.models import get_problem, truncated_gmm_lipschitz, truncated_gmm_reference

    prob = get_problem("gmm-truncated", n=p["n"], seed=0)
    x, T = prob.args[0], prob.temperature
    ref = truncated_gmm_reference(x, T, num_cells=p["num_cells"])
    c = truncated_gmm_lipschitz()  # public bound, unconstrained space (deviation 1)
    return x.to(pick_device(device)), T, ref, ref.sample(200_000, seed=1), c


def _run_fig1(name, out_dir, quick, log, device, algorithms, epsilons, repeats) -> dict:
    """Fig. 1's grid for ``algorithms`` × ``epsilons`` × repeats into ``out_dir/<name>.csv``
    (:func:`run_fastmh_fig1`, :func:`run_fastmh_fig1_nonprivate`); ``repeats``: their number
    (default: the setting's), or an iterable of repeat indices (to shard a run). Then redraws
    ``fastmh_fig1.png`` from whichever of the two CSVs ``out_dir`` holds."""
    from pyro_dp.evaluation import symmetric_kl_2d

    q = quick_mode(quick)
    p = FASTMH_PARAMS["quick" if q else "full"]
    reps = range(p["repeats"]) if repeats is None else (range(repeats) if isinstance(repeats, int) else repeats)
    xd, T, ref, ref_draws, c = _truncated_gmm(p, device)
    ts = list(range(p["score_every"], p["iters"] + 1, p["score_every"]))
    chains = {}  # (algorithm, epsilon, repeat) -> {t: row}; each chain runs once for all its t

    def kl(s):  # util/SymKL.jl: 99 bins over the reference range, floor 1e-13
        return float(symmetric_kl_2d(s, ref_draws))

    def run_chain(alg, eps, r):
        if alg == "exact":
            s = ref.sample(p["iters"], seed=10_000 + r)
            return {t: {"sym_kl": kl(s[:t])} for t in ts}
        s, chain, stamps, eps_total = _fig1_chain(alg, eps, r, p=p, x=xd, c=c, temperature=T)
        if s is None:
            return {t: dict(chain) for t in ts}
        out = {t: dict(chain, sym_kl=kl(s[:t]), wall_seconds=stamps[t - 1]) for t in ts}
        out[ts[-1]]["epsilon_total"] = eps_total
        return out

    def compute(cell):
        key = (cell["algorithm"], cell["epsilon"], cell["repeat"])
        if key not in chains:
            chains.clear()  # cells come chain by chain
            chains[key] = run_chain(*key)
        return chains[key][cell["iterations"]]

    cells = [{"problem": "gmm-truncated", "algorithm": a, "epsilon": float(e), "repeat": r, "iterations": t}
             for r in reps for a in algorithms for e in epsilons for t in ts]
    res = run_grid(name, out_dir, cells, compute, COLUMNS, key_columns=KEYS, progress=False, log=log)
    png = None
    plt = pyplot_or_none(log, "fastmh_fig1")
    private = read_rows(os.path.join(out_dir, "fastmh_fig1.csv"))
    if plt is not None and private:
        png = os.path.join(out_dir, "fastmh_fig1.png")
        _plot(private, png, plt, final=ts[-1], curve_eps=p["curve_epsilon"], n=p["n"],
              nonprivate=read_rows(os.path.join(out_dir, "fastmh_fig1_nonprivate.csv")))
    return {"csv": res["csv"], "png": png, "rows": res["rows"], "computed": res["computed"], "skipped": res["skipped"]}


def run_fastmh_fig1(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
                    algorithms=ALGORITHMS, repeats=None) -> dict:
    """Run every missing cell into ``out_dir/fastmh_fig1.csv`` and draw ``fastmh_fig1.png``.

    ``repeats``: how many (default: the setting's 2), or an iterable of repeat indices; chain
    ``r`` is seeded by ``r`` alone, so ``repeats=10`` on the shipped CSV runs repeats 2–9 and
    leaves 0–1 as they are. ``algorithms``: a subset of :data:`ALGORITHMS` (unknown names raise)."""
    from .mmd_vs_epsilon import subset_of

    algorithms = subset_of(algorithms, ALGORITHMS, "fastmh_fig1")
    p = FASTMH_PARAMS["quick" if quick_mode(quick) else "full"]
    return _run_fig1("fastmh_fig1", out_dir, quick, log, device, algorithms, p["epsilons"], repeats)


def run_fastmh_fig1_nonprivate(out_dir: str, quick: Optional[bool] = None, log=print,
                               device: Optional[str] = None, repeats=None) -> dict:
    """§6.1's non-private references for Fig. 1 (:data:`NONPRIVATE_ALGORITHMS`: full-batch MH
    with the full-batch step, TunaMH with the minibatch step and λ, both ``DPFastMH(...,
    non_private=True)``, no noise and no ledger) into ``out_dir/fastmh_fig1_nonprivate.csv``
    (key ε = inf, Fig. 1's columns and scoring), then redraws ``fastmh_fig1.png`` with them
    when ``out_dir`` holds ``fastmh_fig1.csv``. ``repeats`` as :func:`run_fastmh_fig1`."""
    return _run_fig1("fastmh_fig1_nonprivate", out_dir, quick, log, device, NONPRIVATE_ALGORITHMS,
                     (math.inf,), repeats)


def _style(a):
    from .grid import series_style

    return series_style(ALGORITHMS.index(a))  # one colour, marker and line style per line in every panel


_NP_LABELS = {"mh": "MH (non-private, full batch)", "tunamh": "TunaMH (non-private, minibatch)"}


def _np_style(a):
    """The non-private references: black, no marker, a line style of their own."""
    return dict(color="k" if a == "mh" else "0.45", ls=(0, (1, 1)) if a == "mh" else (0, (6, 2)), lw=1.3)


def _np_final_means(nonprivate, final, metric):
    """``{algorithm: (mean over repeats at t = final, repeats)}`` of the non-private rows."""
    out = {}
    for a in NONPRIVATE_ALGORITHMS:
        v = [float(r[metric]) for r in nonprivate if r["algorithm"] == a and int(r["iterations"]) == final
             and r[metric] not in ("", "nan")]
        if v:
            out[a] = (sum(v) / len(v), len(v))
    return out


def _plot(rows, path, plt, *, final, curve_eps, n, nonprivate=()):
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
        for a, (m, nr) in _np_final_means(nonprivate, final, metric).items():  # no ε: horizontal lines
            ax.axhline(m, label=_NP_LABELS[a], **_np_style(a))
        ax.set(xscale="log", yscale="log", xlabel="per-iteration ε (δ = 10⁻⁵; substitution)",
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
        for a in NONPRIVATE_ALGORITHMS:
            pts = [(float(r[xcol]), float(r["sym_kl"])) for r in nonprivate
                   if r["algorithm"] == a and r["repeat"] == "0" and r["sym_kl"] not in ("", "nan")]
            if pts:
                xs, ys = zip(*sorted(pts))
                ax.plot(xs, ys, label=_NP_LABELS[a], **_np_style(a))
        ax.set(yscale="log", xscale="log" if xcol == "wall_seconds" else "linear",
               xlabel="iterations t" if xcol == "iterations" else "sampler wall time (s, loaded 2-core machine)",
               ylabel="symmetric KL to exact draws (nats)", title=f"({panel}) ε = {curve_eps}, repeat 0")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Zhang & Zhang 2023 Fig. 1(a)–(d) reproduction: truncated GMM, N = {n:,}; "
                 "the two K = εN lines coincide (dodged sideways)"
                 + (f"\nblack/grey: non-private MH and TunaMH (no ε; in (a)(b) their mean over "
                    f"{len({r['repeat'] for r in nonprivate})} repeats at t = {final})" if nonprivate else ""))
    legend_below(fig, axes, ncol=3)
    fig.subplots_adjust(top=1 - (0.85 if nonprivate else 0.6) / fig.get_figheight())
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------------------- Fig. 2

#: Fig. 2's panels: (a) the ground truth, (b) the penalty algorithm, (c) DP Barker, (d) DP-Fast MH,
#: (e) its full-batch version; plus the authors' K = 60 configuration (privacy for free, opt-in)
FIG2_ALGORITHMS = ("exact", "dp_fast_mh", "dp_fast_mh_pff_k60", "dp_fast_mh_full", "dp_penalty", "dp_barker")
FIG2_COLUMNS = ["sym_kl", "mode_weight", "exact_mode_weight", "mode_weight_error", "acceptance", "batch_size",
                "step_epsilon_ledger", "step_delta_ledger", "epsilon_total", "K", "full_batch_fraction",
                "free_fraction", "clipped_fraction"]
FIG2_PARAMS = {
    "full": dict(FASTMH_PARAMS["full"], epsilon=0.05, barker_epsilon=0.2, repeats=5, density_bins=40),
    "quick": dict(FASTMH_PARAMS["quick"], epsilon=0.05, barker_epsilon=0.5, repeats=1, density_bins=20),
}
#: the two modes of the posterior (§6.1: (θ₁, θ₂) = (0, 1) and (1, −1))
GMM_MODES = ((0.0, 1.0), (1.0, -1.0))


def mode_weight(draws: torch.Tensor) -> float:
    """Share of the 2-d ``draws`` nearer the mode (0, 1) than the mode (1, −1) (§6.1), i.e. the
    weight a density estimate gives the first mode.

    >>> mode_weight(torch.tensor([[0.0, 1.2], [0.9, -1.0], [0.1, 0.8], [1.0, -0.7]]))
    0.5
    """
    m = torch.tensor(GMM_MODES, dtype=draws.dtype)
    d = torch.cdist(draws.reshape(-1, 2), m)
    return float((d[:, 0] < d[:, 1]).double().mean())


def run_fastmh_fig2(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None) -> dict:
    r"""Zhang & Zhang (2023), Fig. 2: density estimates of the truncated GMM after :math:`10^4`
    iterations, one panel per algorithm, at Fig. 1(c)(d)'s :math:`\varepsilon = 0.05`.

    The chains are Fig. 1's (:func:`_fig1_chain`: the same settings, seeds and kernels, so
    repeats 0 and 1 repeat Fig. 1's chains at :math:`\varepsilon = 0.05`), run for ``repeats``
    seeds. DP Barker has no batch whose one iteration is (0.05, 10⁻⁵)-DP (Fig. 1's table), so
    its panel is at the smallest ε of Fig. 1's grid where one exists, ``barker_epsilon`` = 0.2
    (its ``epsilon`` key says so). Writes ``fastmh_fig2.csv`` (one row per chain: sym. KL at
    :math:`t=10^4`, the weight of the mode (0, 1) (:func:`mode_weight`) and its absolute error
    against :math:`2\cdot10^5` exact draws, the ledger's per-iteration (ε, δ) and the chain's
    total ε), ``fastmh_fig2_density.csv`` (repeat 0's 2-d histogram per line, bins over the
    exact draws' range: the figure's data) and ``fastmh_fig2.png``.
    """
    from pyro_dp.evaluation import symmetric_kl_2d
    from pyro_dp.evaluation.metrics import histogram_2d

    q = quick_mode(quick)
    p = FIG2_PARAMS["quick" if q else "full"]
    xd, T, ref, ref_draws, c = _truncated_gmm(p, device)
    w_exact = mode_weight(ref_draws)
    nb = p["density_bins"]
    lo, hi = ref_draws.min(0).values, ref_draws.max(0).values
    xe = torch.linspace(float(lo[0]), float(hi[0]), nb + 1, dtype=ref_draws.dtype)
    ye = torch.linspace(float(lo[1]), float(hi[1]), nb + 1, dtype=ref_draws.dtype)
    dens_path = os.path.join(out_dir, "fastmh_fig2_density.csv")
    densities = {}  # algorithm -> (epsilon, histogram of repeat 0)

    def compute(cell):
        alg, eps, r = cell["algorithm"], cell["epsilon"], cell["repeat"]
        if alg == "exact":
            s, chain, eps_total = ref.sample(p["iters"], seed=10_000 + r), {}, ""
        else:
            s, chain, _, eps_total = _fig1_chain(alg, eps, r, p=p, x=xd, c=c, temperature=T)
            if s is None:
                return dict(chain)
        w = mode_weight(s)
        if r == 0:
            densities[alg] = (eps, histogram_2d(s.to(ref_draws.dtype), xe, ye) / s.shape[0])
        return dict(chain, sym_kl=float(symmetric_kl_2d(s, ref_draws)), mode_weight=w, exact_mode_weight=w_exact,
                    mode_weight_error=abs(w - w_exact), epsilon_total=eps_total)

    def eps_of(a):
        return p["barker_epsilon"] if a == "dp_barker" else p["epsilon"]

    cells = [{"problem": "gmm-truncated", "algorithm": a, "epsilon": float(eps_of(a)), "repeat": r}
             for r in range(p["repeats"]) for a in FIG2_ALGORITHMS]
    os.makedirs(out_dir, exist_ok=True)
    res = run_grid("fastmh_fig2", out_dir, cells, compute, FIG2_COLUMNS, progress=False, log=log)
    if densities:  # repeat 0 ran in this call: its histograms are the figure's data
        _write_density(dens_path, densities, xe, ye, fresh=len(densities) == len(FIG2_ALGORITHMS))
    png = None
    plt = pyplot_or_none(log, "fastmh_fig2")
    if plt is not None and os.path.exists(dens_path):
        png = os.path.join(out_dir, "fastmh_fig2.png")
        _plot_fig2(res["rows"], _read_density(dens_path), png, plt, n=p["n"], iters=p["iters"])
    return {"csv": res["csv"], "png": png, "rows": res["rows"], "computed": res["computed"],
            "skipped": res["skipped"], "density_csv": dens_path}


_DENSITY_COLUMNS = ["algorithm", "epsilon", "theta1", "theta2", "probability"]


def _write_density(path, densities, xe, ye, fresh):
    """Repeat 0's histograms (non-empty cells; centres of the bins) into ``path``; lines already
    there and not recomputed now are kept."""
    import csv

    from .grid import fmt, read_rows

    old = [] if fresh else [r for r in read_rows(path, _DENSITY_COLUMNS) if r["algorithm"] not in densities]
    xc, yc = 0.5 * (xe[1:] + xe[:-1]), 0.5 * (ye[1:] + ye[:-1])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=_DENSITY_COLUMNS)
        w.writeheader()
        w.writerows(old)
        for alg, (eps, h) in densities.items():
            for i, j in torch.nonzero(h > 0).tolist():
                w.writerow({"algorithm": alg, "epsilon": fmt(float(eps)), "theta1": f"{float(xc[i]):.6g}",
                            "theta2": f"{float(yc[j]):.6g}", "probability": f"{float(h[i, j]):.6g}"})


def _read_density(path):
    from .grid import read_rows

    return read_rows(path, _DENSITY_COLUMNS)


def _plot_fig2(rows, dens, path, plt, *, n, iters):
    """Fig. 2: one density panel per line (repeat 0; the same colour scale and axes in every
    panel, the two modes marked), then the mode weight and the sym. KL of every repeat against the
    exact draws (the non-private reference)."""
    from matplotlib.colors import LogNorm

    from .grid import LABELS

    algs = [a for a in FIG2_ALGORITHMS if any(r["algorithm"] == a for r in dens)]
    fig, axes = plt.subplots(2, 4, figsize=(18, 8.6))
    th1 = sorted({float(r["theta1"]) for r in dens})
    th2 = sorted({float(r["theta2"]) for r in dens})
    dx = min((b - a for a, b in zip(th1, th1[1:])), default=0.1)
    dy = min((b - a for a, b in zip(th2, th2[1:])), default=0.1)
    vmax = max(float(r["probability"]) for r in dens)
    mesh = None
    for ax, a in zip(axes.flat, algs):
        pts = [(float(r["theta1"]), float(r["theta2"]), float(r["probability"])) for r in dens if r["algorithm"] == a]
        x1, x2, pr = zip(*pts)
        eps = next(r["epsilon"] for r in dens if r["algorithm"] == a)
        mesh = ax.hist2d(x1, x2, bins=[[min(th1) - dx / 2 + k * dx for k in range(len(th1) + 1)],
                                       [min(th2) - dy / 2 + k * dy for k in range(len(th2) + 1)]],
                         weights=pr, norm=LogNorm(vmin=1e-4, vmax=vmax), cmap="viridis")[3]
        for m in GMM_MODES:
            ax.plot(*m, marker="+", color="red", ms=12, mew=2, ls="", label="_mode")
        r0 = next((r for r in rows if r["algorithm"] == a and r["repeat"] == "0"), None)
        extra = ""
        if r0 is not None and r0["mode_weight"] not in ("", "nan"):
            extra = f"\nsym. KL {float(r0['sym_kl']):.2f}, weight of (0, 1): {float(r0['mode_weight']):.2f}"
        where = "" if a == "exact" else f", ε = {float(eps):g}"
        ax.set(title=f"{LABELS.get(a, a)}{where}{extra}", xlabel="θ₁", ylabel="θ₂")
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(algs):6]:
        ax.axis("off")
    reps = max((int(r["repeat"]) for r in rows), default=-1) + 1
    w_exact = next((float(r["exact_mode_weight"]) for r in rows if r["exact_mode_weight"] not in ("", "nan")), None)
    for ax, metric, ylab in ((axes[1, 2], "mode_weight", "weight of the mode (0, 1)\n(share of draws, 0–1)"),
                             (axes[1, 3], "sym_kl", "symmetric KL to exact draws (nats)")):
        for i, a in enumerate(FIG2_ALGORITHMS):
            vals = [(int(r["repeat"]), float(r[metric])) for r in rows
                    if r["algorithm"] == a and r[metric] not in ("", "nan")]
            if not vals:
                continue
            xs = [i + (rep - (reps - 1) / 2) * 0.12 for rep, _ in vals]  # repeats side by side
            ax.plot(xs, [v for _, v in vals], ls="", **dict(_style2(a), label=LABELS.get(a, a)))
        if metric == "mode_weight" and w_exact is not None:
            ax.axhline(w_exact, color="k", ls=":", lw=1, label="2·10⁵ exact draws (non-private floor)")
        if metric == "sym_kl":
            ax.set_yscale("log")
        eps_b = next((float(r["epsilon"]) for r in rows if r["algorithm"] == "dp_barker"), None)
        short = dict(_SHORT, dp_barker=f"DP Barker\n(ε = {eps_b:g})" if eps_b is not None else "DP Barker")
        ax.set_xticks(range(len(FIG2_ALGORITHMS)), [short.get(a, a) for a in FIG2_ALGORITHMS], rotation=30,
                      ha="right", fontsize=8)
        ax.set(ylabel=ylab, xlabel=f"line (every repeat, {reps} seeds, side by side)",
               title="(f) mode weight" if metric == "mode_weight" else f"(g) sym. KL at t = {iters:,}")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Zhang & Zhang 2023 Fig. 2 reproduction: truncated GMM, N = {n:,}, density after {iters:,} "
                 "iterations (repeat 0); red +: the two modes")
    from .grid import legend_below

    legend_below(fig, [axes[1, 2], axes[1, 3]], ncol=4)
    if mesh is not None:  # one colour scale for the six density panels, in the right margin
        fig.subplots_adjust(right=0.9)
        top = axes[0, 0].get_position()
        cax = fig.add_axes([0.925, top.y0, 0.012, top.y1 - top.y0])
        fig.colorbar(mesh, cax=cax, label="share of draws per bin")
        cax.set_xlabel("log scale", fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)


_SHORT = {"exact": "exact", "dp_fast_mh": "DP-Fast MH\nK = εN", "dp_fast_mh_pff_k60": "DP-Fast MH\nK = 60, pff",
          "dp_fast_mh_full": "DP-Fast MH\nfull batch", "dp_penalty": "penalty"}


def _style2(a):
    from .grid import series_style

    st = series_style(FIG2_ALGORITHMS.index(a))
    return {k: v for k, v in st.items() if k != "ls"}


# ----------------------------------------------------------------------------------------- Fig. 4

def rows_read_per_iteration(row: dict, n: int) -> float:
    r"""Mean rows a chain read per iteration, from a Fig. 1 CSV row: :math:`N` for the full-batch
    lines, DP Barker's fixed batch, and for the minibatch DP-Fast MH lines
    :math:`(1 - f)\,\bar B + f N` with ``f`` = ``full_batch_fraction`` (an iteration whose draw
    :math:`B \ge K` reads all rows, Alg. 2). ``batch_size`` and ``f`` are the chain's means over its
    10⁴ iterations (the CSV holds no per-t values), so Fig. 4's x axis is ``t`` times this rate.

    >>> rows_read_per_iteration({"algorithm": "dp_fast_mh_pff_k60", "batch_size": "80", "full_batch_fraction": "0.5"}, 100)
    90.0
    """
    b = float(row["batch_size"])
    f = row.get("full_batch_fraction", "")
    if row["algorithm"].startswith("dp_fast_mh") and row["algorithm"] != "dp_fast_mh_full" and f not in ("", "nan"):
        return (1 - float(f)) * b + float(f) * n
    return b


def plot_fig4(rows, path, plt, *, eps=0.05, n=50_000, barker_eps=0.2, nonprivate=()):
    """Zhang & Zhang App. Fig. 4: sym. KL against the rows read so far, at ε = ``eps``, from the
    Fig. 1 CSV (mean over the repeats at each t). DP Barker has no (0.05, 10⁻⁵)-DP batch, so its
    line is at ``barker_eps`` (labelled); the exact draws are the non-private reference (drawn
    against t × N, the rows a full-data chain would have read)."""
    from .grid import LABELS

    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 5.4))
    for a in ALGORITHMS:
        e = barker_eps if a == "dp_barker" else eps
        sel = [r for r in rows if r["algorithm"] == a and float(r["epsilon"]) == e and r["sym_kl"] not in ("", "nan")]
        if not sel:
            continue
        by_t = {}
        for r in sel:
            rate = n if a == "exact" else rows_read_per_iteration(r, n)
            by_t.setdefault(int(r["iterations"]), []).append((int(r["iterations"]) * rate, float(r["sym_kl"])))
        pts = sorted((sum(x for x, _ in v) / len(v), sum(y for _, y in v) / len(v)) for v in by_t.values())
        xs, ys = zip(*pts)
        style = dict(_style(a), ls=":", marker="") if a == "exact" else dict(_style(a), markevery=4)
        label = LABELS.get(a, a) + (f" (ε = {e}: no ε = {eps} batch)" if e != eps else "") \
            + (", x = t·N" if a == "exact" else "")
        ax.plot(xs, ys, label=label, **style)
    for a in NONPRIVATE_ALGORITHMS:  # §6.1's non-private references: MH reads N a step, TunaMH its batch
        by_t = {}
        for r in nonprivate:
            if r["algorithm"] == a and r["sym_kl"] not in ("", "nan"):
                rate = n if a == "mh" else float(r["batch_size"])
                by_t.setdefault(int(r["iterations"]), []).append((int(r["iterations"]) * rate, float(r["sym_kl"])))
        if by_t:
            pts = sorted((sum(x for x, _ in v) / len(v), sum(y for _, y in v) / len(v)) for v in by_t.values())
            xs, ys = zip(*pts)
            ax.plot(xs, ys, label=f"{_NP_LABELS[a]}, {len({r['repeat'] for r in nonprivate})} repeats",
                    **_np_style(a))
    reps = len({r["repeat"] for r in rows})
    ax.set(xscale="log", yscale="log", xlabel="rows read so far (t × mean rows per iteration)",
           ylabel="symmetric KL to exact draws (nats)",
           title=f"Zhang & Zhang App. Fig. 4 from the Fig. 1 CSV, mean of {reps} repeats\n"
                 f"ε = {eps} per iteration (δ = 10⁻⁵, substitution)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
