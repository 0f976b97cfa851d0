r"""Heikkilä, Jälkö, Dikmen & Honkela (2019), Figs. 2–3, at the paper's settings: the Gaussian
mixture of Welling & Teh (2011) with tempered likelihoods; DP Barker (subsampled, private
start charged) against the exact tempered posterior, and against two DP-SGLD lines.

**Model** (Heikkilä eqs. (24)–(25)): :math:`\theta_1\sim\mathcal N(0,10)`,
:math:`\theta_2\sim\mathcal N(0,1)`, :math:`x_i\sim\frac12\mathcal N(\theta_1,2)+\frac12\mathcal
N(\theta_1+\theta_2,2)` (variances), :math:`\theta^*=(0,1)`, :math:`N=10^6`, temperature
:math:`T=N_0/N`, :math:`N_0=100` (eq. (23)).

**Settings** ("full"), each from the paper (§4) and the authors' code, DPBayes/DP-MCMC-NeurIPS2019
at its stored HEAD (``gmm_code/``):

* N, θ*: 10⁶, (0, 1) (``main.py`` l. 31–33; paper §4)
* batch b: 1000 (without replacement) (``mog_main.py`` l. 37; ``barker_mog.py`` l. 37)
* temperature T: N0/N = 100/N (``mog_main.py`` l. 40; paper eq. (23))
* proposal: N(0, 0.01 I): variance 0.01 (``mog_main.py`` l. 39; ``barker_mog.py`` l. 41)
* llr clip: 0.99·√b/N0 (untempered) (``mog_main.py`` l. 46)
* noise variance C: 2 (``mog_main.py`` l. 44, 50; paper §3.3)
* iterations: 20 000 (``main.py`` l. 119; paper §4)
* burn-in: 1 000 (``plot_eps_vs_acc_nruns.py`` l. 10; paper §4)
* repeats: 20 (``main.py`` l. 120; paper §4)
* δ: 2·10⁻⁶ (10⁻⁶ start + 1/N) (``plot_mcmc_vs_sgld.py`` l. 53, 62; Fig. 2)
* statistics: mean / variance of draws burn-in+1..t (1/n variance) (``plot_eps_vs_acc_nruns.py`` l. 31–43)
* DP-SGLD batch: 100 (``dp_sgld/dp_sgld_main.py`` l. 19)
* DP-SGLD clip L (tempered): 0.01, i.e. L/T = 100 on the untempered gradient (``dp_sgld_main.py`` l. 20, 56–59)
* DP-SGLD step: eta = 70, η' = eta/N = 7e-5 (``dp_sgld_main.py`` l. 28, 68–69)
* DP-SGLD noise multiplier: b/(√(eta N) L) = 1.195 (add/remove) (``dp_sgld_main.py`` l. 30)
* DP-SGLD start: N(0, I) draw (not charged) (``dp_sgld_main.py`` l. 17)
* DP-SGLD iterations, burn-in: 6·10⁶, 10⁵ (``dp_sgld_main.py`` l. 22; ``plot_mcmc_vs_sgld.py`` l. 95)

The clip: the authors clip the untempered ratio at ``0.99*sqrt(b)/temp_scale/N`` = 0.99·√b/N0
(``mog_main.py`` l. 46). ``DPBarker`` clips at √b/N0, the bound of Heikkilä Thm 2 condition
(19) tempered as in (23) (1 % looser than the authors' clip; the privacy analysis is the same).

**Fig. 3 as curves over t.** One chain per (algorithm, repeat) is run to the largest t; it is
scored at every ``t`` in the setting's ``t_grid`` from its draws ``burn_in+1 .. t``
(Heikkilä §4: "posterior means and variances are computed from the first t iterations of the
private chain alongside the privacy cost ε, which increases with t"). Each (algorithm, t, repeat)
is one CSV row:

* ``epsilon``: the ledger ε after ``t`` iterations **including the start's charge**, at
  δ = 2·10⁻⁶, rounded *up* to 4 decimals (so the key is a reproducible float);
  ``epsilon_exact`` holds the unrounded value. It is the accountant's ε of the chain's own
  events (the start's releases + ``t`` iterations, built as the kernels build them); at the last
  ``t`` it is checked against the ledger of the chain that ran (``epsilon_chain_ledger``);
* ``epsilon_start``: the start's releases alone, at δ = 10⁻⁶ (the paper's DPVI start costs
  (0.22, 10⁻⁶), ``main.py`` l. 65–66);
* ``mean_error`` / ``variance_error``: :math:`\sum_j|\bar\theta_j-m_j|` and
  :math:`\sum_j|s^2_j-v_j|` against the **exact** tempered posterior (grid quadrature,
  :func:`~pyro_dp.models.gmm_reference`); ``variance_error_p2`` against the exact
  :math:`p^2` (the posterior squared, renormalised: prior variances halved, temperature 2T);
  ``var1``, ``var2``: the chain's variances; ``sym_kl``: 30-bin histogram symmetric KL.

**Private start (Barker).** The paper starts every DP Barker chain from a DPVI fit that costs
(0.22, 10⁻⁶) (``main.py`` l. 55–72; added to ε in ``plot_eps_vs_acc_nruns.py`` l. 73). Here each
chain starts from a data-free prior draw and walks by :class:`~pyro_dp.DPGradientInit`
(full-batch DP gradient ascent on the tempered log posterior; Song et al. 2013, Abadi et al.
2016 Alg. 1): 12 steps, per-example clip 5, noise multiplier 100 (substitute, Δ = 2C), step
:math:`\eta/N = 0.015`. Its 12 Gaussian releases are in the chain's ledger, so ``epsilon``
includes them (composed with the chain in RDP, tighter than the paper's sum of ε's); alone
they cost ``epsilon_start`` (0.178 at δ = 10⁻⁶ by RDP, below the paper's 0.22).

**Two DP-SGLD lines.**

* ``dp_sgld``: our :class:`~pyro_dp.kernels.sgmcmc.DPSGLD`, Welling & Teh (2011) eq. 4,
  :math:`\theta'=\theta+\frac\eta2\tilde g+\mathcal N(0,\eta)` with :math:`\eta=4\eta'`: the step
  at which eq. 4's Langevin noise is exactly the authors' privacy noise, so both lines have the
  same noise multiplier and the same ε at every t.
* ``dp_sgld_authors``: the authors' update (``dp_sgld_main.py`` l. 68–70),
  :math:`\theta'=\theta+\eta'\tilde g+\mathcal N(0,\eta')`, i.e. drift :math:`\eta'\tilde g`
  against noise variance :math:`\eta'`. That is eq. 4 for the target :math:`p^2`:
  :math:`\frac{\eta'}2\nabla\log p^2 = \eta'\nabla\log p`. We run it as our ``DPSGLD`` with step
  :math:`\eta'` on the model whose log posterior is doubled: prior variances halved (10→5,
  1→0.5: :math:`2\log\mathcal N(\theta;0,v)=\log\mathcal N(\theta;0,v/2)+c`) and temperature 2T.
  The released quantity is unchanged (the clipped per-example gradient sum of the *same*
  :math:`\ell_i` plus Gaussian noise); only its post-processing differs, so the kernel's accounting
  (the Langevin noise multiplier under add/remove, :math:`2q/(2T\sqrt{\eta'})/C =
  q/(T\sqrt{\eta'}C)` = 1.195, the authors' ``noise_sigma``) is valid and equals ``dp_sgld``'s.

**Deviations from the paper and the authors' code (each with its reason):**

* reference: the **exact** grid posterior instead of a 40 000-step non-private Barker chain
  (the chain's own error would enter the score);
* start: DP gradient ascent (``DPGradientInit``) instead of DPVI (the library's private start;
  DPVI is not in pyro_dp); it is charged per chain, in the ledger. The authors compute one DPVI
  start and reuse it for all 20 repeats (``main.py`` l. 68–72, 127); here each repeat has its own;
* DP Barker: no data-dependent exit (the reference exits when the batch variance exceeds 1,
  ``barker_mog.py`` l. 65–71; the clip bounds it, so ``DPBarker`` never needs to), and the clip is
  √b/N0, the bound of Heikkilä Thm 2 (19)/(23), instead of 0.99·√b/N0;
  :math:`V_{\rm corr}` is the library's fitted mixture;
* privacy accounting: Heikkilä Thm 2 + Cor. 2 composed in RDP with the improved RDP→DP conversion
  (the authors: Mironov's conversion, ``exact_rdp.py``), i.e. a smaller ε for the same chain;
  DP-SGLD as the authors account it: Poisson-subsampled Gaussian RDP under add/remove
  (``plot_mcmc_vs_sgld.py`` l. 64–77; our ``"rdp"`` accountant, improved conversion), not the
  substitute relation of the paper's Definition 1 (our PLD accountant at this noise multiplier and
  q = 10⁻⁴ takes minutes per ε; DP Barker's analysis is substitute); Poisson subsampling
  with rate b/N instead of ``npr.choice`` with replacement (``dp_sgld_main.py`` l. 43), so the
  subsampled-Gaussian analysis applies as stated;
* DP-SGLD (**how it is run**, not what): the paper's 6·10⁶ iterations, 10⁵ burn-in, 20 repeats,
  scored at ``sgld_t_grid`` (ε 0.44–1.09). Through Pyro's runner one DP-SGLD iteration costs
  ~1.7 ms here (56 CPU-hours for one line), so each line runs all its repeats as one vectorised
  loop (:func:`~experiments.sgld_chains.run_sgld_chains`: ``DPSGLD``'s own step function,
  its batch and noise draws from each chain's own privacy stream, and one ledger per chain),
  ~25 min for a line of 20 chains on one core. With ``block=1`` that runner's chain *is* the
  kernel's (``tests/experiments/test_sgld_chains.py``); the full run draws a block of 1 000
  iterations' batches and normals at a time (the same laws, another order, so not the values
  ``DPSGLD(noise_seed=r)`` would give). Chain ``r``'s values depend on which other repeats
  share its run only through rounding. The ``"sgld_check"`` setting (not the paper's) compares
  the two SGLD lines' stationary variances with p and p² at a 40× larger step (eta = 2800),
  4 000 iterations, 1 000 burn-in, 2 repeats (RDP, add/remove accounting);
* quick mode (CI): :math:`N = 2\cdot10^4`, :math:`b = 200`, 600 Barker and SGLD iterations,
  one repeat, coarse reference grid.

Outputs: ``heikkila_fig23.csv`` (tidy), ``heikkila_fig23.png`` (Fig. 3: errors vs ε, one point
per t) and ``heikkila_fig23_scatter.png`` (Fig. 2: first-repeat draws over exact draws; drawn for
the chains computed in this run).
"""
from __future__ import annotations

import math
import os
import time
import warnings
from functools import partial
from typing import Optional

import torch

from .grid import pick_device, pyplot_or_none, quick_mode, run_grid, run_kernel
from .mmd_vs_epsilon import subset_of

__all__ = ["HEIKKILA_PARAMS", "run_heikkila_fig23", "COLUMNS", "ALGORITHMS"]

#: paper setting (full; sources in the module docstring) and the quick CI setting
HEIKKILA_PARAMS = {
    "full": dict(n=1_000_000, n0=100, batch=1000, prop_sd=0.1, iters=20_000, burn_in=1000,
                 t_grid=(2000, 5000, 10_000, 20_000), repeats=20, delta=2e-6, start_delta=1e-6,
                 init_steps=12, init_rate=0.015, init_clip=5.0, init_nm=100.0,
                 sgld_batch=100, sgld_clip_tempered=0.01, sgld_eta=70.0, sgld_eta_n=1_000_000,
                 sgld_iters=6_000_000, sgld_burn_in=100_000, sgld_repeats=20,
                 sgld_t_grid=(500_000, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000, 6_000_000),
                 sgld_accounting=("rdp", "add_remove"),
                 num_cells=300),
    "quick": dict(n=20_000, n0=100, batch=200, prop_sd=0.1, iters=600, burn_in=100,
                  t_grid=(300, 600), repeats=1, delta=2e-6, start_delta=1e-6,
                  init_steps=12, init_rate=0.015, init_clip=5.0, init_nm=100.0,
                  sgld_batch=100, sgld_clip_tempered=0.01, sgld_eta=70.0, sgld_eta_n=1_000_000,
                  sgld_iters=600, sgld_burn_in=100, sgld_t_grid=(300, 600), sgld_repeats=1,
                  sgld_accounting=("rdp", "add_remove"),
                  num_cells=150),
}
#: the p² check (not the paper's setting): both SGLD lines with a 40× larger step (eta = 2800, so
#: η' = 2.8e-3), which mixes in ~300 iterations, to compare their stationary variances with p and
#: p². Its noise multiplier is tiny (0.19 add/remove): ε is large and is accounted by RDP under
#: add/remove, as in the full setting.
HEIKKILA_PARAMS["sgld_check"] = dict(HEIKKILA_PARAMS["full"], repeats=0, sgld_eta=2800.0, sgld_iters=4000,
                                     sgld_burn_in=1000, sgld_t_grid=(2000, 4000), sgld_repeats=2,
                                     sgld_accounting=("rdp", "add_remove"), sgld_block=1)
# sgld_block: iterations whose batches and normals the vectorised runner draws at a time; 1 (the
# check) draws them in DPSGLD's order, so its chains are the kernel's (the shipped check was run
# through the kernel); the full run draws 1 000 at a time (the same laws; run_sgld_chains)

#: line labels: DP Barker, DP-SGLD by Welling & Teh eq. 4, DP-SGLD by the authors' update
ALGORITHMS = ("dp_barker", "dp_sgld", "dp_sgld_authors")

COLUMNS = ["n", "iterations", "burn_in", "epsilon_exact", "epsilon_start", "epsilon_chain_ledger",
           "mean_error", "variance_error", "variance_error_p2", "sym_kl", "mean1", "mean2", "var1", "var2",
           "acceptance", "clipped_fraction", "noise_multiplier", "chain_seconds"]

_PRIOR_VAR = (10.0, 1.0)  # Heikkilä eq. (24)
SCATTER_DRAWS = 20_000  # at most this many of a chain's draws in the Fig. 2 scatter (DP Barker's 19 000: all)
_PRIOR_VAR_SQ = (5.0, 0.5)  # p(θ)^2 ∝ N(θ; 0, v/2): the prior of the p² model (authors' SGLD)


def _key_eps(eps: float) -> float:
    """ε rounded *up* to 4 decimals: a reproducible key that never understates the ledger."""
    return math.ceil(eps * 1e4 - 1e-9) / 1e4


def _plans(p):
    """Data-free privacy plans: per algorithm, ``(fixed events, per-iteration events,
    accountant, relation, noise multiplier)``, and the kernels' hyper-parameters."""
    from pyro_dp.accounting.subsampled import dp_barker_event
    from pyro_dp import DPGradientInit
    from pyro_dp.kernels.sgmcmc import langevin_noise_multiplier
    from pyro_dp.mechanisms import SubsampledGaussianEvent

    n, T = p["n"], p["n0"] / p["n"]
    init = DPGradientInit(num_steps=p["init_steps"], step_size=p["init_rate"] * n, grad_clip=p["init_clip"],
                          noise_multiplier=p["init_nm"])
    barker_ev = dp_barker_event(p["batch"], n, 256)  # Heikkilä Thm 2 + Cor. 2 (as DPBarker._rdp_event)
    q = p["sgld_batch"] / n
    eta_a = p["sgld_eta"] / p["sgld_eta_n"]  # η' = eta/N (dp_sgld_main.py l. 28, 68-69)
    clip = p["sgld_clip_tempered"] * p["sgld_eta_n"] / p["n0"]  # L/T at the authors' N: 0.01 / 1e-4 = 100
    # authors' line: eq. 4 on p² (step η', temperature 2T); ours: eq. 4 on p with η = 4η' (same noise)
    acc, rel = p["sgld_accounting"]
    nm = langevin_noise_multiplier("sgld", step_size=eta_a, sample_rate=q, grad_clip=clip, temperature=2 * T,
                                   relation=rel)
    nm_ours = langevin_noise_multiplier("sgld", step_size=4 * eta_a, sample_rate=q, grad_clip=clip,
                                        temperature=T, relation=rel)
    assert abs(nm - nm_ours) < 1e-12 * nm  # both lines release the same mechanism
    sgld_ev = SubsampledGaussianEvent(q, nm, "poisson")
    return {
        "init": init, "T": T, "eta_authors": eta_a, "sgld_clip": clip, "sgld_nm": nm,
        "dp_barker": (init.events(), [barker_ev], "rdp", "substitute", float("nan")),
        "dp_sgld": ([], [sgld_ev], acc, rel, nm),
        "dp_sgld_authors": ([], [sgld_ev], acc, rel, nm),
    }


def _epsilon(plan, t, delta):
    from pyro_dp.accounting import planned_epsilon

    fixed, per, acc, rel, _ = plan
    return planned_epsilon(delta, int(t), per, fixed=fixed, accountant=acc, relation=rel)


def run_heikkila_fig23(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
                       algorithms=ALGORITHMS, repeats=None, setting: Optional[str] = None) -> dict:
    """Run every missing cell into ``out_dir/heikkila_fig23.csv`` and draw the figures.

    ``algorithms`` and ``repeats`` (an iterable of repeat indices) restrict the cells run, to
    shard a run over processes: each chain seeds itself from its repeat, so the concatenated
    CSVs equal one unsharded run's. A name not in :data:`ALGORITHMS` raises ``ValueError``
    (listing the valid ones) before anything runs: a typo in ``--algorithms`` must not run
    nothing and report success. ``setting`` picks a :data:`HEIKKILA_PARAMS` entry by name
    (default: ``"quick"`` or ``"full"`` from ``quick``)."""
    from pyro_dp.evaluation import symmetric_kl_2d
    from pyro_dp.kernels import DPBarker
    from pyro_dp.models import get_problem, gmm_model, gmm_reference

    algorithms = subset_of(algorithms, ALGORITHMS, "heikkila_fig23")  # refuses unknown names
    q = quick_mode(quick)
    p = HEIKKILA_PARAMS[setting or ("quick" if q else "full")]
    dev = pick_device(device)
    prob = get_problem("gmm-heikkila", n=p["n"], seed=0)
    x = prob.args[0]
    T = prob.temperature
    plans = _plans(p)
    ref = gmm_reference(x, T, num_cells=p["num_cells"])  # exact tempered posterior (grid quadrature)
    ref_mean, ref_var = ref.mean(), ref.variance()
    # exact p²: prior² · lik^(2T), renormalised (the authors' SGLD target; module docstring)
    ref_var_sq = gmm_reference(x, 2 * T, num_cells=p["num_cells"], prior_var=_PRIOR_VAR_SQ).variance()
    ref_draws = ref.sample(200_000, seed=1)
    xd = x.to(dev)
    start_eps = _epsilon((plans["dp_barker"][0], [], "rdp", "substitute", 0), 0, p["start_delta"])
    eps_cache, chain = {}, {}
    scatter = {}

    def eps_at(algo, t):
        k = (algo, t)
        if k not in eps_cache:
            eps_cache[k] = _epsilon(plans[algo], t, p["delta"])
        return eps_cache[k]

    def run_barker(r):
        """DP Barker's chain for repeat ``r`` (Pyro's runner): its draws (burn-in included) and diagnostics."""
        g = torch.Generator().manual_seed(1000 + r)
        iters = p["iters"]
        budget = eps_at("dp_barker", iters) * 1.001  # the chain's own plan (a budget the kernel enforces)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reproducible-noise and ESS notes
            # data-free start: a prior draw (the authors' DPVI starts from 2·randn, main.py l. 64)
            start = torch.randn(2, generator=g, dtype=torch.float64) * torch.tensor(_PRIOR_VAR).sqrt()
            k = DPBarker(gmm_model, batch_size=p["batch"], proposal_scale=p["prop_sd"], temperature=T,
                         init=plans["init"], epsilon=budget, delta=p["delta"], num_iterations=iters, seed=r,
                         noise_seed=r, reference_delta=p["delta"], nonprivate_diagnostics=True)
            t0 = time.perf_counter()
            s, diag = run_kernel(k, (xd,), num_samples=iters, warmup_steps=0, initial_params={"theta": start.to(dev)})
            secs = time.perf_counter() - t0
        return {r: (s.double().cpu(), diag, secs)}

    def run_sgld(algo):
        """Every requested repeat of one DP-SGLD line as one vectorised run
        (:func:`~experiments.sgld_chains.run_sgld_chains`: DPSGLD's step and draws, checked
        equal to the kernel's chain in ``tests/experiments/test_sgld_chains.py``): ``{repeat:
        (draws, diagnostics, seconds)}``. Chain ``r`` starts from ``randn(2)`` (``dp_sgld_main.py``
        l. 17: not charged) drawn from seed ``1000 + r`` and has the privacy stream
        ``DPSGLD(noise_seed=r)`` would have (both lines share it: common random numbers)."""
        from pyro_dp.accounting import get_accountant
        from pyro_dp.kernels.base import kernel_chain_seed
        from .sgld_chains import run_sgld_chains

        reps = [r for r in range(p["sgld_repeats"]) if repeats is None or r in set(repeats)]
        starts = torch.stack([torch.randn(2, generator=torch.Generator().manual_seed(1000 + r), dtype=torch.float64)
                              for r in reps])
        if algo == "dp_sgld":  # Welling & Teh 2011 eq. 4 with η = 4η'
            model, step, temp = gmm_model, 4 * plans["eta_authors"], T
        else:  # authors' θ += η' ĝ + N(0, η') = eq. 4 on p² (prior var/2, temperature 2T), step η'
            model, step, temp = partial(gmm_model, prior_var=_PRIOR_VAR_SQ), plans["eta_authors"], 2 * T
        acc, rel = plans[algo][2], plans[algo][3]
        out = run_sgld_chains(model, (xd,), starts.to(dev), num_iterations=p["sgld_iters"],
                              batch_size=p["sgld_batch"], step_size=step, grad_clip=plans["sgld_clip"],
                              noise_seeds=[kernel_chain_seed(r, 0, "noise") for r in reps], temperature=temp,
                              noise_multiplier=plans["sgld_nm"], relation=rel,
                              # the authors' add/remove accounting with N public (q = b/N): stated explicitly (#38)
                              public_num_rows=p["n"] if rel == "add_remove" else None, log=log,
                              block=p.get("sgld_block", 1000))
        assert abs(out.noise_multiplier - plans["sgld_nm"]) <= 1e-12 * plans["sgld_nm"]  # the plan's mechanism ran
        return {r: (out.draws[i], {"epsilon_total": get_accountant(acc, out.ledgers[i]).get_epsilon(p["delta"]),
                                   "non-private clipped fraction": float(out.clipped_fraction[i])},
                    out.seconds / len(reps)) for i, r in enumerate(reps)}

    def compute(cell):
        algo, r, t = cell["algorithm"], cell["repeat"], cell["t"]
        key = (algo, r) if algo == "dp_barker" else algo  # a DP-SGLD line runs all its repeats at once
        if chain.get("key") != key:
            chain.clear()  # one line's chains in memory at a time (20 x 6e6 x 2 float64: 1.9 GB)
            chain["key"] = key
            chain["runs"] = run_barker(r) if algo == "dp_barker" else run_sgld(algo)
        s, diag, secs = chain["runs"][r]
        burn = p["burn_in"] if algo == "dp_barker" else p["sgld_burn_in"]
        w = s[burn:t]  # draws burn_in+1 .. t (plot_eps_vs_acc_nruns.py l. 17, 31-43)
        m, v = w.mean(0), w.var(0, unbiased=False)  # E[X], E[X^2]-E[X]^2 as the authors (l. 37-43)
        full_t = t == len(s)
        led = diag["epsilon_total"]
        if full_t:  # the plan is the ledger: same events, same accountant
            assert abs(led - cell["epsilon_exact"]) <= 1e-9 * max(1.0, led), (led, cell["epsilon_exact"])
            if r == 0:
                scatter[algo] = w
        return {
            "n": p["n"], "iterations": t, "burn_in": burn, "epsilon_exact": cell["epsilon_exact"],
            "epsilon_start": start_eps if algo == "dp_barker" else 0.0, "epsilon_chain_ledger": led,
            "mean_error": float((m - ref_mean).abs().sum()),
            "variance_error": float((v - ref_var).abs().sum()),
            "variance_error_p2": float((v - ref_var_sq).abs().sum()),
            "sym_kl": float(symmetric_kl_2d(w, ref_draws, bins=30)),
            "mean1": float(m[0]), "mean2": float(m[1]), "var1": float(v[0]), "var2": float(v[1]),
            "acceptance": diag.get("acceptance rate", float("nan")),
            "clipped_fraction": diag.get("non-private clipped fraction", float("nan")),
            "noise_multiplier": plans[algo][4], "chain_seconds": round(secs, 3),
        }

    cells = []
    # DP Barker cells first (all repeats), then each SGLD line (its repeats run together)
    for algo, reps, grid in [("dp_barker", p["repeats"], p["t_grid"])] + [
            (a, p["sgld_repeats"], p["sgld_t_grid"]) for a in ("dp_sgld", "dp_sgld_authors")]:
        for r in range(reps):
            if algo not in algorithms or (repeats is not None and r not in set(repeats)):
                continue
            for t in grid:
                e = eps_at(algo, t)
                cells.append({"problem": "gmm-heikkila", "algorithm": algo, "epsilon": _key_eps(e), "repeat": r,
                              "t": t, "epsilon_exact": e, "_order": (algo != "dp_barker", algo, r, t)})
    cells.sort(key=lambda c: c["_order"])
    res = run_grid("heikkila_fig23", out_dir, cells, compute, COLUMNS, progress=False, log=log)
    rows = res["rows"]
    png = None
    plt = pyplot_or_none(log, "heikkila_fig23")
    if plt is not None:
        png = os.path.join(out_dir, "heikkila_fig23.png")
        _fig3(rows, png, plt)
        if scatter:
            _scatter(scatter, ref.sample(5000, seed=2), os.path.join(out_dir, "heikkila_fig23_scatter.png"), plt)
    return {"csv": res["csv"], "png": png, "rows": rows, "computed": res["computed"], "skipped": res["skipped"],
            "reference_mean": ref_mean.tolist(), "reference_variance": ref_var.tolist(),
            "reference_variance_p2": ref_var_sq.tolist(), "epsilon_start": start_eps}


def _fig3(rows, path, plt, xlabel=None, subtitle=None):
    """Fig. 3 of the paper: mean ± s.e. over repeats of each error against ε (one point per t).
    The errors are against the exact tempered posterior, so 0 is the non-private reference (the
    paper measures against a 40 000-step non-private chain instead). ``xlabel``/``subtitle``
    replace the ε axis label and the title's second line (the one-relation redraw of
    :mod:`experiments.heikkila_privacy`)."""
    from .grid import LABELS, METRIC_LABELS, legend_below, series_style, summarise

    algs = sorted({r["algorithm"] for r in rows})
    reps = max((int(r["repeat"]) for r in rows), default=-1) + 1
    check = all(a.startswith("dp_sgld") for a in algs)  # the p² check: uncharged start
    xlabel = xlabel or ("ε after t iterations (start uncharged; δ = 2·10⁻⁶)" if check
                        else "ε after t iterations (δ = 2·10⁻⁶)")
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    for ax, metric in zip(axes, ("mean_error", "variance_error", "sym_kl")):
        for i, s in enumerate(algs):
            st = sorted((float(v["epsilon"]), v["mean"], v["se"], v["iterations"]) for v in summarise(
                [r for r in rows if r["algorithm"] == s], metric, by=("algorithm", "epsilon", "iterations")) if v["n"])
            if st:
                e, m, se, it = zip(*st)
                ax.errorbar(e, m, yerr=[0 if not math.isfinite(v) else v for v in se], capsize=2,
                            label=LABELS.get(s, s), **series_style(i))
                marks = range(len(e)) if len(e) <= 4 else (0, len(e) - 1)  # a long curve: its ends only
                for j in marks:
                    ax.annotate(f"t = {int(float(it[j])):,}", (e[j], m[j]), fontsize=7, xytext=(4, 4),
                                textcoords="offset points")
        ax.axhline(0.0, color="k", ls=":", lw=1, label="exact tempered posterior (0 error)")
        ax.set(xscale="log", xlabel=xlabel,
               ylabel={"sym_kl": "symmetric KL to exact draws (nats, 30 bins)",
                       "mean_error": "mean error: Σ|sample mean − exact mean|\n(units of θ)"}.get(
                   metric, METRIC_LABELS.get(metric)))
        ax.set_ylim(bottom=-0.02 * ax.get_ylim()[1])
        reached = sorted({float(r["epsilon"]) for r in rows})
        ticks = _spread(reached)  # the ε reached at some t, plainly, none crowding the next
        ax.set_xticks(ticks, [f"{e:.3g}" for e in ticks])
        ax.minorticks_off()
        ax.set_xlim(reached[0] / 1.15, reached[-1] * 1.25)
        ax.grid(alpha=0.3)
    if check:
        fig.suptitle("Heikkilä et al. 2019, the p² check (not a private setting: ε ≈ 50–60): the two DP-SGLD "
                     f"updates' errors against the exact posterior, mean ± s.e. over {reps} repeats")
    else:
        fig.suptitle("Heikkilä et al. 2019 Fig. 3 reproduction: tempered GMM (N0 = 100), error against the exact "
                     f"posterior vs ε, mean ± s.e. over {reps} repeats\n" + (subtitle or (
                         "DP Barker's ε includes its private start; "
                         "DP-SGLD starts from an uncharged N(0, I) draw, as the authors' code")))
    legend_below(fig, axes, ncol=3)
    fig.subplots_adjust(top=1 - 0.6 / fig.get_figheight())
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _spread(values, parts: int = 6):
    """The sorted ``values`` (positive), dropping each one that lies within a sixth (``parts``) of
    the log range of the last one kept: tick labels on a log axis that do not overlap.

    >>> _spread([0.279, 0.414, 0.4355, 0.4991, 0.579, 0.6262, 0.7534, 0.823, 0.8772, 0.9887, 1.0906])
    [0.279, 0.414, 0.579, 0.7534, 0.9887]
    >>> _spread([50.5564, 59.7125])
    [50.5564, 59.7125]
    """
    vals = sorted(values)
    if len(vals) < 2:
        return vals
    ratio = (vals[-1] / vals[0]) ** (1.0 / parts)
    out = []
    for v in vals:
        if not out or v >= out[-1] * ratio * (1 - 1e-12):
            out.append(v)
    return out


def _scatter(state, exact, path, plt):
    from .grid import LABELS

    keys = sorted(state)
    fig, axes = plt.subplots(1, len(keys), figsize=(4.0 * len(keys), 4.0), squeeze=False)
    for ax, k in zip(axes[0], keys):
        ax.scatter(exact[:, 0], exact[:, 1], s=1, alpha=0.2, color="0.6", label="exact draws (non-private)")
        s, every = state[k], max(1, -(-len(state[k]) // SCATTER_DRAWS))  # thinned evenly: a long chain's
        shown = s[::every]  # millions of points would cover the exact draws whatever their spread
        ax.scatter(shown[:, 0], shown[:, 1], s=1, alpha=0.3, label=LABELS.get(k, k))
        what = f"{len(s):,} draws" + (f", 1 in {every:,} shown" if every > 1 else "")
        ax.set(title=f"{LABELS.get(k, k)}\nrepeat 0, {what}", xlim=(-2.5, 2.5), ylim=(-2.5, 2.6),
               xlabel="θ1 (data units)", ylabel="θ2 (data units)")
        ax.legend(fontsize=7, markerscale=5, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
