"""The DP-HMC paper's Fig. 1 design (Räisä, Koskela & Honkela 2021 §4; the authors' code
``DPBayes/DP-HMC-experiments``): its models, its iteration counts (the budget of fixed-noise
chains divided by the 4 chains that share it), chains pooled per run, SG-MCMC under the same
substitution relation as the others, and the minibatch OCU+GWMH variant of the thesis grid."""
import math

import pytest
import torch
from pyro_dp.private import reveal

from experiments import dphmc_fig1 as F
from experiments._sampling import THESIS_PARAMS, make_kernel, run_chain, thesis_iterations


def _authors_delta(mu, epsilon):
    """``hmc.py``/``dp_penalty.py`` ``adp_delta`` of the authors' code: delta of a Gaussian
    mechanism with privacy loss N(mu, 2 mu) (Sommer et al. Lemma 12), an oracle independent of
    our ``"gdp"`` accountant."""
    d = 2 * math.sqrt(mu)
    return 0.5 * (math.erfc((epsilon - mu) / d) - math.exp(epsilon) * math.erfc((epsilon + mu) / d))


@pytest.mark.parametrize("problem", F.PROBLEMS)
@pytest.mark.parametrize("epsilon", [2.0, 15.0])
def test_paper_iterations_are_the_authors_count_over_four_chains(problem, epsilon):
    n = 100_000
    delta = 0.1 / n
    hmc, pen = F.PARAMS[problem]["dp_hmc"], F.PARAMS[problem]["dp_penalty"]
    mu_h = lambda k: k / (2 * hmc["tau_l"] ** 2 * n) + k * (hmc["L"] + 1) / (2 * hmc["tau_g"] ** 2 * n)  # noqa: E731
    mu_p = lambda k: k / (2 * pen["tau"] ** 2 * n)  # noqa: E731
    for alg, prm, mu in (("dp_hmc", hmc, mu_h), ("dp_penalty", pen, mu_p)):
        total = thesis_iterations(alg, prm, epsilon=epsilon, delta=delta, n=n)
        assert _authors_delta(mu(total), epsilon) <= delta < _authors_delta(mu(total + 1), epsilon)
        per_chain = F.paper_iterations(alg, prm, epsilon=epsilon, delta=delta, n=n)
        assert per_chain == total // 4  # run_chain.py: int(iters / chains), 4 chains
        assert per_chain < total  # mutant: one chain's budget given to each of the 4 chains
    # the counts quoted in the module docstring / results page (banana DP-HMC 27 at eps = 2)
    if problem == "dphmc-banana-2d" and epsilon == 2.0:
        assert F.paper_iterations("dp_hmc", hmc, epsilon=2.0, delta=delta, n=n) == 27


def test_gaussian_is_the_authors_construction():
    cov = F.gauss_cov()
    assert torch.allclose(cov, cov.T)
    ev = torch.linalg.eigvalsh(cov)
    assert torch.allclose(ev.sort().values, torch.tensor(sorted(F.GAUSS_EIGENVALUES), dtype=ev.dtype), rtol=1e-9,
                          atol=1e-12)
    q = torch.tensor(F.GAUSS_EIGENVECTORS, dtype=torch.float64)
    assert torch.allclose(q.T @ q, torch.eye(10, dtype=torch.float64), atol=1e-12)  # QR's Q: orthogonal
    assert float(ev.max() / ev.min()) == pytest.approx(1.7734e4, rel=1e-3)


def test_start_spread_is_the_mean_posterior_sd():
    """The code's start spread (mean of the posterior's coordinate sds), computed data-free: for
    the Gaussian the posterior covariance is data-free, so an exact sample's sds must agree within
    their Monte Carlo error; for the banana it is the posterior's at θ₁'s mean = θ*₁ = 0 (the
    data's x̄₁ would add 4a²s₁²μ₁² to Var θ₂), checked against the closed-form variance there."""
    p = F.gauss10d_problem(20_000)
    x = p.reference_sample(20_000, seed=3)
    assert p.start_sd == pytest.approx(float(x.std(0).mean()), rel=0.03)  # sd of an sd estimate ~0.5 %
    b = F.banana_problem(20_000)
    post = b.posterior
    at_star = type(post)(torch.tensor([0.0, float(post.loc[1])], dtype=torch.float64), post.scale, post.a)
    assert b.start_sd == pytest.approx(float(at_star.variance.sqrt().mean()), rel=1e-3)


def test_sg_kernels_are_accounted_under_substitution():
    """Issue #41: DP-SGLD/DP-SGNHT under the same neighbouring relation as DP-HMC and DP penalty
    (the mutant, add/remove, halves the sensitivity and would under-state ε against them)."""
    n = 2000
    p = F.banana_problem(n)
    for alg in ("dp_sgld", "dp_sgnht"):
        prm = F._kernel_params(alg, F.PARAMS[p.name][alg], n)
        k, _ = make_kernel(alg, p, epsilon=2.0, delta=0.1 / n, num_iterations=20, seed=0, params=prm, n=n)
        assert k.relation == "substitute"
    k, _ = make_kernel("dp_sgnht", p, epsilon=2.0, delta=0.1 / n, num_iterations=20, seed=0,
                       params=F._kernel_params("dp_sgnht", F.PARAMS[p.name]["dp_sgnht"], n), n=n)
    assert k.thermostat == F.PARAMS[p.name]["dp_sgnht"]["A"]


def test_four_chains_share_the_budget_at_the_papers_noise():
    """A run of the paper's scheme: ``chains`` chains of ``paper_iterations`` each, the kernel's
    noise calibrated over all of them gives the code's tau sqrt(n) (up to the count's rounding
    down), and the ledger of every chain together stays within ε. Mutant: calibrating one
    chain to the whole budget gives a noise ~sqrt(chains) smaller, outside the tolerance."""
    n, eps, chains = 2000, 6.0, 2
    p = F.banana_problem(n)
    prm = F.PARAMS[p.name]["dp_penalty"]
    its = F.paper_iterations("dp_penalty", prm, epsilon=eps, delta=0.1 / n, n=n, chains=chains)
    row = run_chain("dp_penalty", p, p.reference_sample(200), epsilon=eps, n=n, num_iterations=its, repeat=0,
                    params=prm, adapt=False, num_chains=chains)
    assert row["epsilon_ok"] and row["epsilon_ledger"] <= eps * (1 + 1e-9)
    tau_sqrt_n = prm["tau"] * math.sqrt(n)
    assert row["noise_multiplier"] <= tau_sqrt_n * (1 + 1e-9)
    assert row["noise_multiplier"] == pytest.approx(tau_sqrt_n, rel=0.02)
    one, _ = make_kernel("dp_penalty", p, epsilon=eps, delta=0.1 / n, num_iterations=its, seed=0, params=prm, n=n)
    one.setup(0, *p.args)
    assert one.noise_multiplier < 0.8 * tau_sqrt_n  # the mutant: each chain spending all of ε
    assert 0.0 <= row["acceptance"] <= 1.0


def test_minibatch_ocu_gwmh_is_in_the_fig64_grid():
    from experiments.mmd_vs_epsilon import FIG64_ALGORITHMS, FIG65_ALGORITHMS
    from pyro_dp.models import get_problem

    assert "minibatch_dp_penalty_ocu_gwmh" in FIG64_ALGORITHMS
    assert "minibatch_dp_penalty_ocu_gwmh" not in FIG65_ALGORITHMS  # thesis §6.4: not in Fig. 6.5
    # thesis code mdppa_easy-2d: tau 0.7, prop 0.001, clip 1, batch 1000, ocu = grw = True
    assert THESIS_PARAMS["flat-banana-2d"]["minibatch_dp_penalty_ocu_gwmh"] == dict(prop=0.001, clip=1.0, batch=1000,
                                                                                     tau=0.7)
    n = 2000
    p = get_problem("flat-banana-2d", n=n)
    prm = THESIS_PARAMS["flat-banana-2d"]["minibatch_dp_penalty_ocu_gwmh"]
    # the kernel's privacy (calibration, ledger) is DPMinibatchPenalty's, tested with it; here the
    # grid's wiring, without the ~20 s calibration: a zero-noise chain runs and is scored
    row = run_chain("minibatch_dp_penalty_ocu_gwmh", p, p.reference_sample(100), epsilon=None, n=n,
                    num_iterations=20, repeat=0, params=prm, non_private=True)
    assert math.isfinite(row["mmd"]) and 0.0 <= row["acceptance"] <= 1.0
    k, _ = make_kernel("minibatch_dp_penalty_ocu_gwmh", p, epsilon=None, delta=0.1 / n, num_iterations=20, seed=0,
                       params=dict(prm), n=n, non_private=True)
    assert k.one_component and k.guided_walk
    plain, _ = make_kernel("minibatch_dp_penalty", p, epsilon=None, delta=0.1 / n, num_iterations=20, seed=0,
                           params=dict(prm), n=n, non_private=True)
    assert not (plain.one_component or plain.guided_walk)


def test_whitened_gaussian_has_the_mvn_ratios_and_gradients():
    """The Gaussian is run with whitened rows (speed); each row's log-likelihood ratio and
    gradient must be the ``MultivariateNormal`` model's (the log-likelihoods differ by log|L|)."""
    from functools import partial

    from pyro_dp.likelihood import PrivateLikelihood
    from pyro_dp.models import gaussian_model, make_gaussian_data

    p = F.gauss10d_problem(300)
    X = make_gaussian_data(300, F.gauss_cov(), seed=0)
    mvn = PrivateLikelihood(partial(gaussian_model, cov=F.gauss_cov(), prior_var=1e4), (X,),
                            init_strategy=p.init_strategy())
    wht = PrivateLikelihood(p.model, p.args, init_strategy=p.init_strategy())
    g = torch.Generator().manual_seed(0)
    z = p.start + 0.01 * torch.randn(10, generator=g, dtype=torch.float64)
    z2 = z + 0.003 * torch.randn(10, generator=g, dtype=torch.float64)
    r_mvn = mvn.per_example_loglik(z2) - mvn.per_example_loglik(z)
    r_wht = wht.per_example_loglik(z2) - wht.per_example_loglik(z)
    r_mvn, r_wht = reveal((r_mvn, r_wht), reason="the test compares the likelihoods' values")
    assert torch.allclose(r_mvn, r_wht, atol=1e-10, rtol=1e-10)
    assert torch.allclose(*reveal((mvn.per_example_grad(z)[1], wht.per_example_grad(z)[1]), reason="the test"),
                          atol=1e-8, rtol=1e-10)
    assert float(mvn.log_prior(z)) == pytest.approx(float(wht.log_prior(z)))
    assert not torch.allclose(*reveal((mvn.per_example_loglik(z), wht.per_example_loglik(z)), reason="the test"))  # log|L|


def test_full_grid_runs_sg_cells_at_every_epsilon(tmp_path, monkeypatch):
    """The SG chains now run at the paper's length per ε (sg_iterations): the full grid has SG
    cells at every ε of the grid, grouped by (problem, algorithm) after the other cells (one
    vectorised run per group)."""
    seen = []
    monkeypatch.setattr(F, "run_grid", lambda name, out, cells, *a, **k: seen.extend(cells) or {"rows": []})
    monkeypatch.setattr(F, "_plots", lambda rows, out, log: {})
    F.run_dphmc_fig1(str(tmp_path), quick=False, log=None, progress=False, repeats=1)
    by = {}
    for c in seen:
        by.setdefault(c["algorithm"], set()).add(c["epsilon"])
    assert by["dp_sgld"] == by["dp_sgnht"] == by["dp_hmc"] == by["dp_penalty"] == by["exact"] == set(F.PAPER_EPSILONS)
    sg = [(c["problem"], c["algorithm"]) for c in seen if c["algorithm"] in F.SG]
    assert sg == sorted(sg, key=lambda k: (F.PROBLEMS.index(k[0]), F.SG.index(k[1])))  # grouped
    assert F.settings(False)["sg_max_iterations"] is None  # the full run is not capped


def test_sg_iterations_are_the_one_chain_count_over_four_chains():
    """The paper's scheme for the SG chains: the most iterations ε allows at the Langevin noise
    (PLD, substitution), divided by the 4 chains that share it (int(iters / chains)), so
    4k fits and 4(k+1) does not. The counts quoted in docs/results.md (Gaussian, ε = 2: DP-SGLD
    1395, DP-SGNHT 2617). Mutant: each chain given the whole budget (chains=1)."""
    from pyro_dp.accounting import max_iterations, planned_epsilon

    n, delta = 100_000, 1e-6
    counts = {}
    for alg in ("dp_sgld", "dp_sgnht"):
        prm = F._kernel_params(alg, F.PARAMS["dphmc-gauss-10d"][alg], n)
        k = F.sg_iterations(alg, prm, epsilon=2.0, delta=delta, n=n)
        ev = F.sg_event(alg, prm, n=n)
        assert k == max_iterations(2.0, delta, ev, accountant="pld") // 4
        assert planned_epsilon(delta, k, [ev], accountant="pld", num_chains=4) <= 2.0
        assert planned_epsilon(delta, k + 1, [ev], accountant="pld", num_chains=4) > 2.0
        assert F.sg_iterations(alg, prm, epsilon=2.0, delta=delta, n=n, chains=1) > 3 * k  # the mutant
        counts[alg] = k
    assert counts == {"dp_sgld": 1395, "dp_sgnht": 2617}
    assert F.sg_event("dp_sgld", F._kernel_params("dp_sgld", F.PARAMS["dphmc-gauss-10d"]["dp_sgld"], n),
                      n=n).noise_multiplier == pytest.approx(5 / 3)  # b / (2 N C sqrt(2 eta / N)), substitute


@pytest.mark.parametrize("algorithm", ("dp_sgld", "dp_sgnht"))  # the authors' lines are not kernels (below)
def test_sg_rows_are_the_kernels_runs(algorithm):
    """With block=1 the vectorised group run (_sg_runs) is, chain by chain, the kernels' run that
    run_chain makes for the same cell (same starts, seeds, privacy and algorithm streams), so a
    prefix's row equals run_chain's row of that length: MMD, errors, noise and ledger ε. Mutant:
    repeat 1's row scored from repeat 0's kernel run (the chains of another repeat) differs."""
    from experiments._sampling import run_chain

    n, chains, t_max, t = 2000, 2, 24, 16
    p = F.gauss10d_problem(n)
    ref = p.reference_sample(200, seed=1)
    prm = F._kernel_params(algorithm, F.PARAMS[p.name][algorithm], n)
    group = {"run": F._sg_runs(algorithm, p, prm, num_iterations=t_max, repeats=2, chains=chains, block=1), "eps": {}}
    row = F._sg_row(group, p, ref, dict(algorithm=algorithm, epsilon=6.0, repeat=1), num_iterations=t, n=n,
                    chains=chains, max_draws=20)
    kern = run_chain(algorithm, p, ref, epsilon=6.0, n=n, num_iterations=t, repeat=1, params=prm, adapt=False,
                     num_chains=chains, max_draws=20)
    for col in ("mmd", "mean_error", "var_error", "noise_multiplier", "epsilon_ledger"):
        assert row[col] == pytest.approx(kern[col], rel=1e-9, abs=1e-12), col
    assert row["iterations"] == kern["iterations"] == t and row["epsilon_ledger"] <= 6.0
    other = run_chain(algorithm, p, ref, epsilon=6.0, n=n, num_iterations=t, repeat=0, params=prm, adapt=False,
                      num_chains=chains, max_draws=20)
    assert row["mean_error"] != pytest.approx(other["mean_error"], rel=1e-6)


def _one_step(algorithm, p, params, iterations=1):
    """Two chains of ``algorithm`` (``_sg_runs``, kernel draws: block=1): the increments of their
    first ``iterations`` points from the starts, ``[chains, iterations, d]``, and the run."""
    from experiments._sampling import start_point

    out = F._sg_runs(algorithm, p, params, num_iterations=iterations, repeats=1, chains=2, block=1)
    starts = torch.stack([start_point(p, c) for c in range(2)])
    pts = torch.cat([starts[:, None], out.draws], 1)
    return pts[:, 1:] - pts[:, :-1], out


def test_authors_sgld_has_the_textbook_drift_and_half_its_noise_variance():
    """The DP-HMC paper's code (``sgld.py`` l. 173-179): θ' = θ + η'ĝ + N(0, η'), η' = eta/n; our
    textbook line (Welling & Teh eq. 4 at step 2η') has the same drift η'ĝ and noise variance 2η'.
    With common random numbers (the same batch and normals ξ) eq. 4 at steps 2η' and 4η' give
    Δ₂ = D + √2·cξ and Δ₄ = 2D + 2cξ (c = √η'), which fix the drift D and the noise cξ; the
    authors' line (``dp_sgld_authors``: eq. 4 at step η' on p²) must be D + cξ, i.e. the same drift
    and half the noise variance, and exactly Δ₄/2 (the same release: eq. 4 at 4η' has the
    authors' noise multiplier). Mutants that must fail: the textbook line itself, and the authors'
    step on p (without doubling the log posterior: drift D/2)."""
    n = 2000
    p = F.gauss10d_problem(n)
    prm_a = F._kernel_params("dp_sgld_authors", F._params(p.name, "dp_sgld_authors"), n)
    prm_t = F._kernel_params("dp_sgld", F.PARAMS[p.name]["dp_sgld"], n)
    assert prm_t["eta"] == pytest.approx(2 * prm_a["eta"]) and prm_a["eta"] == F.PARAMS[p.name]["dp_sgld"]["eta"] / n
    d_a, out_a = _one_step("dp_sgld_authors", p, prm_a)
    d_t, out_t = _one_step("dp_sgld", p, prm_t)
    d_4, out_4 = _one_step("dp_sgld", p, dict(prm_t, eta=4 * prm_a["eta"]))
    noise = (d_4 - 2 * d_t) / (2 * (1 - math.sqrt(2)))  # cξ
    drift = d_t - math.sqrt(2) * noise
    scale = float(d_t.abs().max())
    assert float(noise.abs().max()) > 0.03 * scale and float(drift.abs().max()) > 0.1 * scale  # both matter here
    assert torch.allclose(d_a, drift + noise, rtol=0, atol=1e-9 * scale)  # same drift, variance η' = half of 2η'
    assert torch.allclose(d_a, d_4 / 2, rtol=0, atol=1e-9 * scale)  # eq. 4 at 4η' on p, halved
    assert out_a.noise_multiplier == pytest.approx(out_4.noise_multiplier, rel=1e-12)  # ... the same release
    assert out_t.noise_multiplier == pytest.approx(math.sqrt(2) * out_a.noise_multiplier, rel=1e-12)
    assert not torch.allclose(d_t, drift + noise, rtol=0, atol=1e-3 * scale)  # mutant: the textbook update
    d_m, _ = _one_step("dp_sgld", p, prm_a)  # mutant: the authors' step on p, not p²
    assert not torch.allclose(d_m, drift + noise, rtol=0, atol=1e-3 * scale)


@pytest.mark.parametrize("problem", F.PROBLEMS)
def test_authors_sgld_ledger_is_the_codes_sigma(problem):
    """The authors' DP-SGLD is accounted as their code accounts it (``sgld.py`` l. 54, 148:
    σ = b/(2C√(eta·n)), q = b/n, substitution via ``get_delta_S``): its event's noise multiplier is
    that σ, the textbook line's at step 4η/n (the same release), and 1/√2 of the textbook line's at
    its step 2η/n, so it runs fewer iterations at the same ε (the paper's counts; ledger = plan is
    checked per row by ``_sg_row``). Its counts at ε = 2 and 15 are quoted in docs/results.md.
    Mutant: the authors' step accounted on p (temperature not doubled) gives twice the σ."""
    from pyro_dp.accounting import max_iterations

    n, delta = 100_000, 1e-6
    raw = F.PARAMS[problem]["dp_sgld"]
    prm_a = F._kernel_params("dp_sgld_authors", raw, n)
    sigma = raw["batch"] / (2 * raw["grad_clip"] * math.sqrt(raw["eta"] * n))  # sgld.py l. 54, sigma_mul = 1
    ev = F.sg_event("dp_sgld_authors", prm_a, n=n)
    assert ev.noise_multiplier == pytest.approx(sigma, rel=1e-12) and ev.sample_rate == raw["batch"] / n
    assert F.sg_event("dp_sgld", dict(prm_a, eta=4 * prm_a["eta"]), n=n) == ev  # the same release
    tb = F.sg_event("dp_sgld", F._kernel_params("dp_sgld", raw, n), n=n)
    assert tb.noise_multiplier == pytest.approx(math.sqrt(2) * sigma, rel=1e-12)
    assert F.sg_event("dp_sgld", prm_a, n=n).noise_multiplier != pytest.approx(sigma)  # the mutant
    k = F.sg_iterations("dp_sgld_authors", prm_a, epsilon=2.0, delta=delta, n=n)
    assert k == max_iterations(2.0, delta, ev, accountant="pld") // 4
    assert k < F.sg_iterations("dp_sgld", F._kernel_params("dp_sgld", raw, n), epsilon=2.0, delta=delta, n=n)
    # the authors' DP-SGNHT releases what ours does (sgld.py l. 253-254, 284: sigma_mul = 2A)
    raw_h = F.PARAMS[problem]["dp_sgnht"]
    sig_h = raw_h["batch"] / (2 * raw_h["grad_clip"] * math.sqrt(raw_h["eta"] * n)) * math.sqrt(2 * raw_h["A"])
    ev_h = F.sg_event("dp_sgnht_authors", F._kernel_params("dp_sgnht_authors", raw_h, n), n=n)
    assert ev_h == F.sg_event("dp_sgnht", F._kernel_params("dp_sgnht", raw_h, n), n=n)
    assert ev_h.noise_multiplier == pytest.approx(sig_h, rel=1e-12)


def test_authors_sgnht_moves_with_the_old_momentum():
    """The authors' DP-SGNHT (``sgld.py`` l. 290-292) moves θ by h·p with the momentum *before*
    its update, so with common random numbers (the same start, momentum p₀ and first release)
    its first move is h·p₀ and its second is our DPSGNHT's first (h·p₁, Ding et al. Alg. 1); the
    release and ledger are ours. Mutant: our update in its place (first move h·p₁) fails."""
    from pyro_dp.kernels.base import kernel_chain_seed
    from pyro_dp.kernels.sgmcmc import sgnht_init
    from experiments._sampling import start_point

    n = 2000
    p = F.gauss10d_problem(n)
    prm = F._kernel_params("dp_sgnht", F.PARAMS[p.name]["dp_sgnht"], n)
    d_a, out_a = _one_step("dp_sgnht_authors", p, prm, iterations=2)
    d_o, out_o = _one_step("dp_sgnht", p, prm, iterations=2)
    seed = sum(map(ord, "dp_sgnht"))  # repeat 0's run_chain seed (common to both lines)
    p0 = torch.stack([sgnht_init(None, start_point(p, c), torch.Generator().manual_seed(
        kernel_chain_seed(seed, c, "algorithm")), prm["A"]).momentum for c in range(2)])
    h, scale = prm["eta"], float(d_o.abs().max())
    assert torch.allclose(d_a[:, 0], h * p0, rtol=0, atol=1e-9 * scale)  # θ₁ = θ₀ + h p₀
    assert torch.allclose(d_a[:, 1], d_o[:, 0], rtol=0, atol=1e-9 * scale)  # θ₂ − θ₁ = h p₁
    assert not torch.allclose(d_o[:, 0], h * p0, rtol=0, atol=1e-3 * scale)  # mutant: Alg. 1's first move
    assert out_a.noise_multiplier == out_o.noise_multiplier
    assert [led.entries for led in out_a.ledgers] == [led.entries for led in out_o.ledgers]
