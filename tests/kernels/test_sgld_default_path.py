"""DPSGLD's default path (#40): ``DPSGLD(model, epsilon=ε)`` reads every row each iteration, tunes
its clip and whitened coordinates privately (``DPAutoTune(whiten=True)``) and takes the largest
step whose release noise fits inside Langevin's diffusion ("privacy for free", Wang, Fienberg &
Smola 2015), capped where the unadjusted step's bias is small; the rest of the diffusion is
data-free. Checked: the settings and the ledger, refusals, the kernel contract, and the posterior
of a conjugate linear model against its exact Gaussian posterior (tolerance from the Monte Carlo
standard error plus the documented bias budget), with a mutant whose release noise exceeds the
diffusion (step ×4) that must fail."""
import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.kernels import sgmcmc
from pyro_dp.kernels.sgmcmc import DPSGLD, DPSGNHT
from pyro_dp.default_path.driver import LANGEVIN_STEP_CAP
from pyro_dp.kernels.diagnostics import ess_advice
from pyro_dp.default_path.tuning import DPAutoTune, posterior_scale_guess
from pyro_dp.testing import check_kernel

PRIOR_SD = 10.0


def linear(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=X.dtype, device=X.device), PRIOR_SD).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(X @ w, 1.0), obs=y)


def data(n=4000, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = 0.5 * torch.randn(n, generator=g, dtype=torch.float64)
    X = torch.stack([torch.ones_like(x), x], 1)
    y = X @ torch.tensor([0.5, -1.0], dtype=torch.float64) + torch.randn(n, generator=g, dtype=torch.float64)
    return X, y


def exact_posterior(X, y):
    """The conjugate Gaussian posterior of :func:`linear` (unit noise, N(0, PRIOR_SD²) prior)."""
    prec = X.T @ X + torch.eye(2, dtype=X.dtype) / PRIOR_SD ** 2
    cov = torch.linalg.inv(prec)
    return cov @ (X.T @ y), cov.diagonal().sqrt()


def _run(kernel, X, y, num_samples, warmup_steps):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=True)
        mcmc.run(X, y)
    return mcmc


def test_the_default_path_reads_every_row_and_takes_the_free_step():
    X, y = data(2000)
    k = DPSGLD(linear, epsilon=4.0, seed=0)
    assert k.auto_tuned == ("step_size", "grad_clip") and k.step_size is None and k.grad_clip is None
    mcmc = _run(k, X, y, 40, 40)
    assert k.batch_size == 2000 and k.sample_rate == 1.0  # q = 1: no subsampling, N public
    assert pyro_dp.get_epsilon(mcmc, delta=k.delta) <= 4.0 * (1 + 1e-9)
    assert {"tune:start", "tune:clip", "tune:metric"} <= set(k.ledger.by_label())
    # privacy for free: the release's noise is at most Langevin's, the data-free top-up the rest
    assert k.noise_multiplier <= k.langevin_noise_multiplier * (1 + 1e-9)
    assert k.diffusion == pytest.approx(k.step_size * (1 - (k.noise_multiplier / k.langevin_noise_multiplier) ** 2),
                                        abs=1e-15)
    sd = posterior_scale_guess(k.init.result.grad_clip, 2000, 2)
    assert k.step_size <= LANGEVIN_STEP_CAP * sd * sd * (1 + 1e-12)


def test_the_warmup_releases_only_its_burn_in_and_the_rest_is_idle():
    """The default path's warmup releases a burn-in of ``LANGEVIN_BURN_IN`` (0.15) of the draws,
    30 of 100 warmup steps before 200 draws: the first 70 are idle, before the chain's first read
    of the data (nothing released, the data-free start returned), and the budget funds the 230
    releasing iterations. With the step and clip given, every warmup step releases."""
    X, y = data(2000)
    k = DPSGLD(linear, epsilon=4.0, seed=0)
    seen, real = [], k.sample

    def sample(params):
        out = real(params)
        seen.append((k.privacy.live.num_releases, out["w"].clone()))
        return out

    k.sample = sample
    mcmc = _run(k, X, y, 200, 100)
    assert (k.sample_rate, k.num_iterations, k.burn_in) == (1.0, 230, 30)
    assert [r for r, _ in seen[:70]] == [0] * 70 and seen[70][0] > 0
    assert all(torch.equal(w, seen[0][1]) for _, w in seen[:70])
    assert k.ledger.by_label()[""] == 230  # the per-iteration releases: the burn-in and the draws
    assert pyro_dp.get_epsilon(mcmc, delta=k.delta) == pytest.approx(4.0, rel=1e-6)
    assert len(mcmc.get_samples()["w"]) == 200
    given = DPSGLD(linear, batch_size=2000, step_size=1e-4, grad_clip=5.0, epsilon=400.0, seed=0)
    _run(given, X, y, 20, 10)
    assert given.burn_in is None and given.num_iterations == 30 and given.ledger.by_label()[""] == 30


def test_a_large_budget_caps_the_step_and_tops_the_diffusion_up_data_free():
    """At ε = 200 the free step is far above the cap: the step is the cap and almost all of the
    diffusion is the data-free top-up, drawn from the algorithm stream (a fixed seed and noise
    seed give the same chain)."""
    X, y = data(2000)
    chains = []
    for _ in range(2):
        k = DPSGLD(linear, epsilon=200.0, seed=3, noise_seed=4)
        chains.append(_run(k, X, y, 20, 20).get_samples()["w"])
        sd = posterior_scale_guess(k.init.result.grad_clip, 2000, 2)
        assert k.step_size == pytest.approx(LANGEVIN_STEP_CAP * sd * sd, rel=1e-12)
        assert 0.9 * k.step_size < k.diffusion < k.step_size
    assert torch.equal(chains[0], chains[1])


def test_partial_or_contradictory_settings_are_refused():
    with pytest.raises(ValueError, match="both step_size and grad_clip"):
        DPSGLD(linear, step_size=0.1, epsilon=2.0)
    with pytest.raises(ValueError, match="calibrates the noise"):
        DPSGLD(linear, noise_multiplier=2.0)
    with pytest.raises(TypeError, match="batch_size"):  # DPSGNHT has no default path: its settings are required
        DPSGNHT(linear, epsilon=2.0)
    with pytest.raises(ValueError, match="no default path"):
        DPSGNHT(linear, None, None, None, epsilon=2.0)
    # under add/remove N is private: no full batch by default, the batch size must be given
    k = DPSGLD(linear, epsilon=2.0, relation="add_remove", public_num_rows=2000)
    with pytest.raises(ValueError, match="batch_size=None"):
        k.setup(0, *data(2000))


def test_the_default_path_passes_the_kernel_contract():
    X, y = data(400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = check_kernel(lambda: DPSGLD(linear, epsilon=50.0, init=DPAutoTune(num_steps=10, whiten=True)),
                              (X, y), checks=["setup_is_data_free", "budget_stops", "planned_equals_recorded",
                                              "copies", "per_row_rule", "eager_equals_compiled"])
    assert "as planned" in report["planned_equals_recorded"]


@pytest.mark.parametrize("mutant", [False, True], ids=["honest", "mutant-noise-above-diffusion"])
def test_the_posterior_is_the_exact_one(mutant, monkeypatch):
    """ε = 4, N = 4000: every posterior mean within 4 Monte Carlo standard errors (from the
    chain's ESS) plus 0.25 sd (the bias budget: the unadjusted step's variance factor ≤ 1.08,
    the clip's headroom) of the exact posterior's, every sd within 30 %. The mutant takes a step
    4× the free one with no top-up: its release noise alone is then twice Langevin's standard
    deviation, and the chain is overdispersed."""
    if mutant:
        from pyro_dp.default_path import hook  # the default path's recipes (DPSGLD's: hook._sgld)
        real = hook.apply_tuning

        def wrong(self, result, **kwargs):
            real(self, result, **kwargs)
            self.step_size, self.diffusion = 4 * (self.langevin_noise_multiplier / self.noise_multiplier) ** 2 \
                * self.step_size, 0.0

        monkeypatch.setattr(hook, "apply_tuning", wrong)
    X, y = data(4000)
    mean, sd = exact_posterior(X, y)
    k = DPSGLD(linear, epsilon=4.0, seed=1, noise_seed=2)
    w = _run(k, X, y, 1500, 500).get_samples()["w"]
    ess = pyro.ops.stats.effective_sample_size(w[None], chain_dim=0, sample_dim=1)
    err = ((w.mean(0) - mean).abs() / sd)
    ratio = w.std(0) / sd
    ok = bool((err <= 4 / ess.sqrt() + 0.25).all() and ((ratio - 1).abs() <= 0.3).all())
    assert ok != mutant, (err, ratio, ess)


def linear_subsampled(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=X.dtype, device=X.device), PRIOR_SD).to_event(1))
    with pyro.plate("data", X.shape[0], subsample_size=200) as idx:
        pyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])


def test_a_plate_s_subsample_size_is_the_batch_and_its_accountant_the_subsampled_one():
    """The default path honours the plate's ``subsample_size`` (q = b/N); the Gaussian-only
    accountant it picks for the full batch cannot compose a subsampled release, so it takes the
    PLD one, before any data is read."""
    X, y = data(2000)
    k = DPSGLD(linear_subsampled, epsilon=4.0, seed=0)
    assert k.accountant == "gdp"
    mcmc = _run(k, X, y, 10, 10)
    assert k.batch_size == 200 and k.sample_rate == 0.1 and k.accountant == "pld"
    assert pyro_dp.get_epsilon(mcmc, delta=k.delta) <= 4.0 * (1 + 1e-9)


def test_a_noise_limited_step_is_said_before_the_chain_runs():
    """At ε = 0.3 on 2000 rows the free step is far below its cap and the predicted ESS
    (``langevin_ess`` at the guessed scale) is below ``default_min_ess``: the kernel says so at the chain's start,
    and the end-of-chain ESS advice says more iterations will not help (and does not point to
    DPSGLD itself). At ε = 50 the cap binds: no such warning."""
    X, y = data(2000)
    said = {}
    for eps in (0.3, 50.0):
        k = DPSGLD(linear, epsilon=eps, seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            MCMC(k, num_samples=200, warmup_steps=100, disable_progbar=True).run(X, y)
        said[eps] = [str(w.message) for w in caught if "limits the Langevin step" in str(w.message)]
        assert k.forecast.noise_limited == (eps == 0.3)
    assert len(said[0.3]) == 1 and "effective samples" in said[0.3][0] and not said[50.0]
    advice = DPSGLD(linear, epsilon=0.3)
    advice.forecast.noise_limited = True
    assert "will not help" in ess_advice(advice) and "DPSGLD" not in ess_advice(advice)
