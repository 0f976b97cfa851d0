"""#16 (never silently wrong): every check of pyro_dp.check_run fires on a deliberately broken
run, and none fires on a healthy one."""
import warnings

import pytest
import torch
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
from pyro_dp.checks import SamplingWarning, check_run
from pyro_dp.models.examples import normal_mean_model as model

from .kernels.helpers import make_data

Y = make_data(2000, seed=1)  # posterior of mu: N(~mean(y), 1/2000): sd 0.022


def _run(kernel, chains=1, samples=300, warmup=200, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, num_chains=chains, disable_progbar=True, **kw)
        mcmc.run(Y)
    return mcmc


def _kinds(problems):
    return {p.split(":")[0].split(" (")[0].replace("chain 0 ", "").replace("chain 1 ", "") for p in problems}


def test_healthy_run_raises_nothing():
    k = pyro_dp.DPPenalty(model, 0.02, llr_clip=4.0, noise_multiplier=1.0, init_strategy=init_to_mean,
                          adapt_proposal=True, seed=0)
    mcmc = _run(k, chains=2, samples=1000, warmup=300)
    assert check_run(mcmc, warn=False) == []


def test_a_chain_that_never_moves_is_flagged():
    k = pyro_dp.DPPenalty(model, 0.05, llr_clip=1e6, noise_multiplier=5.0, init_strategy=init_to_mean, seed=0)
    with pytest.warns(SamplingWarning, match="did not move"):
        check_run(_run(k, samples=100, warmup=0))
    with pytest.warns(SamplingWarning, match="accepted none"):  # also without check_run: Pyro asks for diagnostics
        MCMC(k, num_samples=20, warmup_steps=0, disable_progbar=True).run(Y)


def test_diagnostics_warns_once_per_chain_state():
    """Asked twice before the chain moves on (a user stepping the kernel, then Pyro), the same
    values come back without the warning repeated; a later state warns again."""
    k = pyro_dp.DPPenalty(model, 0.05, llr_clip=1e6, noise_multiplier=5.0, init_strategy=init_to_mean, seed=0)
    k.setup(0, Y)
    params = k.initial_params
    for _ in range(12):
        params = k.sample(params)

    def warned():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert k.diagnostics()["acceptance rate"] == 0.0
        return [w for w in caught if "accepted none" in str(w.message)]

    assert len(warned()) == 1
    assert warned() == []
    k.sample(params)
    assert len(warned()) == 1


def test_far_start_is_flagged():
    k = pyro_dp.DPPenalty(model, 0.01, llr_clip=4.0, noise_multiplier=1.0, seed=0)
    mcmc = _run(k, samples=600, warmup=0, initial_params={"mu": torch.tensor(1.0, dtype=torch.float64)})
    assert any("started far" in p for p in check_run(mcmc, warn=False))


def test_chains_that_disagree_fail_rhat():
    k = pyro_dp.DPPenalty(model, 0.001, llr_clip=4.0, noise_multiplier=1.0, seed=0)
    start = {"mu": torch.tensor([[0.3], [-0.3]], dtype=torch.float64).reshape(2)}
    mcmc = _run(k, chains=2, samples=200, warmup=0, initial_params=start)
    assert any(p.startswith("split R-hat") for p in check_run(mcmc, warn=False))


def test_mismatched_chain_count_is_flagged_with_its_cause():
    """A budget planned for one chain, two chains run: chain 1 has no budget left and repeats its
    start; the problem names the num_chains mismatch."""
    k = pyro_dp.DPPenalty(model, 0.02, llr_clip=4.0, epsilon=3.0, delta=1e-5, num_iterations=300,
                          init_strategy=init_to_mean, seed=0)
    problems = check_run(_run(k, chains=2, samples=200, warmup=100), warn=False)
    assert any(p.startswith("chain 1 ran out of privacy budget") and "num_chains" in p for p in problems)


def test_too_few_iterations_fail_ess():
    k = pyro_dp.DPPenalty(model, 0.002, llr_clip=4.0, noise_multiplier=1.0, init_strategy=init_to_mean, seed=0)
    assert any(p.startswith("effective sample size") for p in check_run(_run(k, samples=60, warmup=0), warn=False))


def test_bad_arguments():
    with pytest.raises(ValueError, match="rhat_threshold"):
        check_run(object(), rhat_threshold=0)
    with pytest.raises(TypeError, match="MCMC"):
        check_run(object())


def test_linear_memory_ess_gives_pyros_values_without_the_quadratic_copy():
    """Pyro 1.9's ESS takes its running minimum through an M x M masked copy (M = half the
    draws): 2.7 GB for the 20 000 draws a kernel checks at the end of every chain. Inside
    ``linear_memory_ess`` the values are Pyro's, bit for bit (random walks, white noise, several
    chains, an odd length), the copy is never built, and Pyro's function is restored after."""
    import pyro.ops.stats as stats

    from pyro_dp.checks import linear_memory_ess

    g = torch.Generator().manual_seed(0)
    cases = [torch.randn(1, 4001, generator=g, dtype=torch.float64),
             torch.cumsum(torch.randn(1, 3000, generator=g, dtype=torch.float64), 1),
             torch.randn(3, 999, generator=g, dtype=torch.float64) + torch.arange(3.0).unsqueeze(1),
             torch.cumsum(torch.randn(2, 501, 2, generator=g), 1)]
    original = stats._cummin
    for x in cases:
        want = stats.effective_sample_size(x, chain_dim=0, sample_dim=1)
        with linear_memory_ess():
            assert stats._cummin is not original
            got = stats.effective_sample_size(x, chain_dim=0, sample_dim=1)
        assert torch.equal(got, want)
    assert stats._cummin is original
    # the running minimum itself, against Pyro's quadratic one
    r = torch.rand(300, 4, generator=g, dtype=torch.float64)
    from pyro_dp.checks import _running_min

    assert torch.equal(_running_min(r), original(r))
    # 40 000 draws: Pyro's copy would be 20 000^2 float64 entries (3.2 GB); none is built
    built = []
    x = torch.randn(1, 40_000, generator=g, dtype=torch.float64)
    with linear_memory_ess():
        real = torch.Tensor.repeat
        try:
            torch.Tensor.repeat = lambda self, *a: built.append(a) or real(self, *a)
            stats.effective_sample_size(x, chain_dim=0, sample_dim=1)
        finally:
            torch.Tensor.repeat = real
    assert built == []


def test_the_ess_warning_says_running_longer_will_not_help_when_the_noise_limits_the_moves():
    """#40: 'run longer' only where longer would help. Where the default path found (before the
    chain ran) that the privacy noise limits each move, more iterations at the same epsilon
    add noise per iteration; the end-of-chain warning says so. A chain that is not
    noise-limited gets the usual advice (its draws here: a random walk, strongly autocorrelated)."""
    import warnings as _w

    import pyro
    import pyro.distributions as dist

    def logistic(X, y):
        w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=X.dtype), 2.0).to_event(1))
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

    g = torch.Generator().manual_seed(0)
    X = torch.randn(3000, 2, generator=g, dtype=torch.float64) / 2
    y = torch.bernoulli(torch.sigmoid(X @ torch.tensor([1.0, -1.0], dtype=torch.float64)), generator=g)
    # the plain test (the default's control variate is not limited by the move's length)
    k = pyro_dp.DPPenalty(logistic, epsilon=0.3, seed=0, noise_seed=0, control_variate=False, inference="iterative")  # noise seeded: a test option
    with _w.catch_warnings(record=True) as ws:
        _w.simplefilter("always")
        MCMC(k, num_samples=150, warmup_steps=100, disable_progbar=True).run(X, y)
    ess = [str(w.message) for w in ws if "effective sample size below" in str(w.message)]
    assert k.forecast.noise_limited and ess and "more iterations will not help" in ess[0]
    walk = torch.cumsum(torch.randn(400, 2, generator=g, dtype=torch.float64), 0)
    assert "run longer" in pyro_dp.checks.chain_problems(walk)[0]


def test_default_min_ess_is_the_margin_times_the_bonferroni_normal_quantile_squared():
    """default_min_ess(d) = 1.5 Φ⁻¹(1 − 0.01/(2d))², checked against scipy's quantile (an
    independent oracle); bad input refused."""
    from scipy.stats import norm

    from pyro_dp.checks import ESS_ESTIMATE_MARGIN, MC_ERROR_TAIL, default_min_ess, monte_carlo_min_ess

    assert ESS_ESTIMATE_MARGIN == 1.5
    for d in (1, 2, 5, 20, 100, 10_000):
        assert monte_carlo_min_ess(d) == pytest.approx(norm.ppf(1 - MC_ERROR_TAIL / (2 * d)) ** 2, rel=1e-9)
        assert default_min_ess(d) == pytest.approx(1.5 * norm.ppf(1 - MC_ERROR_TAIL / (2 * d)) ** 2, rel=1e-9)
    assert default_min_ess(1) < default_min_ess(5) < default_min_ess(100)
    for bad in (0, -1, 2.0, True, None):
        with pytest.raises(ValueError, match="num_coords"):
            default_min_ess(bad)


def test_default_min_ess_keeps_monte_carlo_error_beyond_one_sd_at_one_percent():
    """What the threshold promises (checks.default_min_ess): with ``m`` independent draws
    (ESS = m) at the threshold for ``d`` coordinates, some mean lands beyond one posterior sd in
    at most 1 % of runs. 40 000 simulated runs of d = 5 at the threshold: the frequency is within
    4 binomial standard errors of its exact value (below 1 %); a mutant threshold at the
    unsplit 95 % quantile (1.96² ≈ 3.8 draws) fails it (about 21 % of runs). (The threshold on
    the *estimate* is 1.5 times this ESS: next test.)"""
    from pyro_dp.checks import monte_carlo_min_ess

    d, reps = 5, 40_000
    g = torch.Generator().manual_seed(0)

    def beyond(m):  # fraction of runs with some |mean of m N(0,1) draws| > 1
        means = torch.randn(reps, d, generator=g, dtype=torch.float64) / m ** 0.5  # exact law of the mean
        return float((means.abs() > 1).any(1).double().mean())

    def exact(m):
        from scipy.stats import norm
        return 1 - (1 - 2 * norm.sf(m ** 0.5)) ** d

    for m, ok in ((monte_carlo_min_ess(d), True), (1.96 ** 2, False)):
        p, q = beyond(m), exact(m)
        assert abs(p - q) <= 4 * (q * (1 - q) / reps) ** 0.5
        assert (p <= 0.01 + 4 * (0.01 * 0.99 / reps) ** 0.5) == ok


def test_the_threshold_on_the_estimate_is_median_unbiased_for_short_autocorrelated_chains():
    """Why :data:`~pyro_dp.checks.ESS_ESTIMATE_MARGIN`: Pyro's ESS estimate over-reads a short
    chain's ESS. 200 AR(1) chains of 1 000 draws whose true ESS, n(1−ρ)/(1+ρ), is exactly the
    ESS the 1 % Monte Carlo rule asks for with d = 5 coordinates (9.55): the estimate passes the
    threshold in at most half of them (0.5 + 3 binomial standard errors; measured 0.43 with 400
    chains). The mutant without the margin lets most of them pass (0.76 measured), and fails."""
    from pyro.ops.stats import effective_sample_size

    from pyro_dp.checks import default_min_ess, monte_carlo_min_ess

    n, reps = 1000, 200
    true_ess = monte_carlo_min_ess(5)
    rho = (n - true_ess) / (n + true_ess)
    g = torch.Generator().manual_seed(3)
    e = torch.randn(reps, n, generator=g, dtype=torch.float64)
    x = torch.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + (1 - rho * rho) ** 0.5 * e[:, t]
    est = torch.tensor([float(effective_sample_size(x[i].reshape(1, -1), 0, 1)) for i in range(reps)])
    bound = 0.5 + 3 * (0.25 / reps) ** 0.5
    assert float((est >= default_min_ess(5)).double().mean()) <= bound
    assert float((est >= true_ess).double().mean()) > bound  # mutant: no margin


def test_an_autocorrelated_chain_warns_below_the_threshold_and_not_above():
    """AR(1) chains of 2 000 draws with ESS ≈ n(1−ρ)/(1+ρ) of about 4 (warns: a mean 1 sd off is
    plausible) and about 60 (no warning); a mutant threshold of 100 warns on the second too."""
    from pyro_dp.checks import chain_problems

    g = torch.Generator().manual_seed(1)
    n = 2000

    def ar1(rho):
        e = torch.randn(n, 3, generator=g, dtype=torch.float64)
        x = torch.empty_like(e)
        x[0] = e[0]
        for t in range(1, n):
            x[t] = rho * x[t - 1] + (1 - rho * rho) ** 0.5 * e[t]
        return x

    slow, fast = ar1(1 - 2 * 4 / n), ar1(1 - 2 * 60 / n)   # ESS about 4 and 60 per coordinate
    assert any(p.startswith("effective sample size below 12.9") for p in chain_problems(slow))
    assert not any(p.startswith("effective sample size") for p in chain_problems(fast))
    assert any(p.startswith("effective sample size below 100") for p in chain_problems(fast, min_ess=100.0))


def test_an_ess_just_under_the_threshold_is_printed_so_that_it_reads_under():
    """A coordinate's ESS that rounds to the threshold at three digits is printed with four
    (2026-11-29: a DPSGLD chain warned "below 14.3: beta[0] 14.3"); others keep three."""
    from pyro_dp.checks import _below

    assert _below(14.31, 14.33) == "14.31"
    assert _below(6.651, 14.33) == "6.65"


def test_a_chain_too_short_to_judge_warns_at_its_end_instead_of_saying_nothing():
    """Issue 61: eight runs of 30 draws, three far off (two with a sign flipped), none warned. A
    chain with fewer draws after warmup than the end-of-chain checks need says so."""
    from pyro_dp.kernels.diagnostics import _MIN_CHECKED_DRAWS

    def caught(samples):
        k = pyro_dp.DPPenalty(model, 0.02, llr_clip=4.0, noise_multiplier=1.0, init_strategy=init_to_mean, seed=0)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            mcmc = MCMC(k, num_samples=samples, warmup_steps=20, disable_progbar=True)
            mcmc.run(Y)
        said = [str(w.message) for w in got if issubclass(w.category, SamplingWarning) and "too few" in str(w.message)]
        return said, mcmc.diagnostics().get("sampling problems", {}).get("chain 0", ())

    said, problems = caught(30)
    assert len(said) == 1 and said[0].startswith("DPPenalty chain: only 30 draws after warmup: too few")
    assert problems and problems[0].startswith("only 30 draws after warmup")
    said, problems = caught(_MIN_CHECKED_DRAWS)  # enough: the checks themselves run, no such notice
    assert said == [] and not any("too few" in p for p in problems)


def test_check_run_says_when_there_are_too_few_draws_to_check():
    k = pyro_dp.DPPenalty(model, 0.02, llr_clip=4.0, noise_multiplier=1.0, init_strategy=init_to_mean, seed=0)
    problems = check_run(_run(k, samples=3, warmup=10), warn=False)
    assert any(p.startswith("only 3 draws per chain: too few to check the samples") for p in problems)
