"""DPPenalty(control_variate=True) (issue 40, more posterior per epsilon): the penalty test on
Taylor residuals around the chain's start (pyro_dp/kernels/control_variate.py). Exactness for
the tilted target the module states (MCSE tolerances, with mutants that must fail), the kernel
contract (test kit), accounting against dp_accounting's PLD, the once-per-chain reference release,
and bad inputs."""
import math
import warnings
from types import SimpleNamespace

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_value
from pyro.ops.stats import effective_sample_size

from pyro_dp import DPPenalty
from pyro_dp.kernels import control_variate as cv_mod
from pyro_dp.private import reveal
from pyro_dp.testing import check_kernel

PRIOR_SD = 10.0

TEST = "a test subtracts the raw sum from a release to see its noise (pyro_dp.private)"


def gauss_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), PRIOR_SD))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


def _data(n=1000, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.5


def _kernel(noise_multiplier, **kw):
    # the start 3 posterior sds below the mean, so the reference gradient is far from zero; every
    # row's curvature is 1 (h = 1 clips no residual) and |y_i - mu_0| < 2 b = 8 (no gradient clipped)
    kw.setdefault("init_strategy", init_to_value(values={"mu": torch.tensor(0.5 - 3 / math.sqrt(1000.0),
                                                                             dtype=torch.float64)}))
    share = kw.pop("reference_share", 0.9)  # nm_G from the share of mu^2 over the 4 500 iterations run
    return DPPenalty(gauss_model, 0.05, llr_clip=4.0, noise_multiplier=noise_multiplier, control_variate=True,
                     curvature_clip=1.0, seed=0, noise_seed=1, non_private=noise_multiplier == 0,
                     reference_noise_multiplier=cv_mod.reference_noise_multiplier(noise_multiplier, 4500, share), **kw)


def _exact(y, tilt=0.0):
    """Mean and sd of the posterior of mu tilted by exp(tilt * mu) (conjugate: precision n + 1/s0^2)."""
    prec = y.shape[0] + PRIOR_SD ** -2
    return (float(y.sum()) + tilt) / prec, prec ** -0.5


def _run(kernel, y, n=4000, warmup=500):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=n, warmup_steps=warmup, disable_progbar=True)
        mcmc.run(y)
    return mcmc.get_samples()["mu"]


def _z(draws, mean, sd):
    """The chain mean's error in Monte Carlo standard errors, and its sd ratio's in its own."""
    ess = float(effective_sample_size(draws.reshape(1, -1, 1), 0, 1))
    return (float(draws.mean()) - mean) / (sd / math.sqrt(ess)), (float(draws.std()) / sd - 1) * math.sqrt(2 * ess)


def _uncentred_z(make, y, mean, sd):
    """The mean's error (MC s.e.) of a chain whose reference rows are zeroed (the mutant)."""
    real = cv_mod.release_reference

    def uncentred(*a, **kw):
        cv, event = real(*a, **kw)
        return cv._replace(rows=torch.zeros_like(cv.rows)), event

    cv_mod.release_reference = uncentred
    try:
        return _z(_run(make(), y), mean, sd)[0]
    finally:
        cv_mod.release_reference = real


def _exact_and_uncentred_off(make):
    """The noise-free chain of ``make()`` targets the conjugate posterior (mean and sd within 4 MC
    standard errors); the mutant with the reference rows zeroed is more than 10 MC s.e. off."""
    y = _data()
    mean, sd = _exact(y)
    zm, zs = _z(_run(make(), y), mean, sd)
    assert abs(zm) < 4 and abs(zs) < 4
    assert abs(_uncentred_z(make, y, mean, sd)) > 10


def _tilted_within_4_se_and_no_penalty_too_wide(make):
    """The chain of ``make()`` matches exp(ξ_G μ)·posterior (ξ_G, the reference release's noise,
    read from the kernel) within 4 MC standard errors in mean and sd; the mutant with the
    penalty's −σ²/2 dropped (the noisy test accepts too often) comes out too wide. Returns the
    kernel."""
    y = _data()

    def tilted(k, draws):
        return _z(draws, *_exact(y, tilt=float(k.reference.rows.released - reveal(k.reference.rows.rows.sum(0), reason=TEST))))

    k = make()
    zm, zs = tilted(k, _run(k, y))
    assert abs(zm) < 4 and abs(zs) < 4
    real = cv_mod.penalty_log_accept_threshold
    cv_mod.penalty_log_accept_threshold = lambda lam, var: torch.clamp(lam, max=0.0)
    try:
        k_bad = make()
        draws_bad = _run(k_bad, y)
    finally:
        cv_mod.penalty_log_accept_threshold = real
    assert tilted(k_bad, draws_bad)[1] > 4
    return k


def test_without_noise_the_chain_targets_the_posterior_and_an_uncentred_residual_does_not():
    """noise_multiplier = 0 (the non-private test mode): the residual test is the exact ratio, so
    the chain targets the conjugate posterior (mean and sd within 4 MC standard errors). Mutant:
    residuals not centred by the reference gradients (the rows zeroed, Ĝ still added) count
    the gradient at the start twice: the mean moves by about 3 posterior sds."""
    _exact_and_uncentred_off(lambda: _kernel(0.0))


def test_with_noise_the_chain_targets_the_posterior_tilted_by_the_reference_noise():
    """With noise (σ about 1 on a typical move) the penalty test keeps detailed balance for the
    target tilted by the reference release's noise ξ_G (module docstring): the chain's mean and sd
    match exp(ξ_G μ)·posterior within 4 MC standard errors, ξ_G read from the kernel. Mutant: the
    penalty's −σ²/2 dropped (the noisy test accepts too often): the sd comes out too wide."""
    # the noise matters: sigma = nm 2 h R |delta| = 300 * 2 * 1 * (3 * 0.032) * 0.05 ~ 2.9 at 3 sds from the start
    _tilted_within_4_se_and_no_penalty_too_wide(lambda: _kernel(300.0, reference_share=0.5))


def test_the_kernel_contract():
    """The public kit over the kernel: data-free set-up, budget stop, planned = recorded (the
    reference release once per chain, then one per iteration), copies, the per-row rule (NaN,
    ±inf rows), the audit's hooks, eager = compiled."""
    y = _data(60)
    report = check_kernel(lambda: DPPenalty(gauss_model, 0.1, llr_clip=3.0, noise_multiplier=2.0,
                                            reference_noise_multiplier=0.5, control_variate=True, curvature_clip=1.0),
                          y, name="penalty_cv")
    assert "as planned" in report["planned_equals_recorded"]


def test_accounting_matches_dp_accounting_and_the_reference_is_released_once_per_chain():
    """Explicit settings with a budget: one reference release of multiplier nm_G and one residual
    release of nm per iteration, calibrated to ε; the ledger's ε against dp_accounting's PLD of the
    same releases (substitute relation: its multiplier is 2 nm). Two chains: two reference releases."""
    import dp_accounting

    y = _data(200)
    k = DPPenalty(gauss_model, 0.1, llr_clip=3.0, control_variate=True, curvature_clip=1.0, epsilon=2.0,
                  delta=1e-5, num_chains=2, seed=0, accountant="pld")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):  # the two chains the budget plans, one run each
            MCMC(k, num_samples=30, warmup_steps=10, disable_progbar=True).run(y)
    nm, nm_g = k.noise_multiplier, k.reference_noise_multiplier
    assert nm_g == pytest.approx(nm * math.sqrt((1 - 0.9) / (0.9 * 40)), rel=1e-12)
    assert k.ledger.num_releases == 2 * (1 + 40)
    acc = dp_accounting.pld.PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
                                          value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(2 * nm_g), 2)
    acc.compose(dp_accounting.GaussianDpEvent(2 * nm), 80)
    ref = acc.get_epsilon(1e-5)
    eps = k.get_epsilon(1e-5)
    assert eps <= 2.0 * (1 + 1e-6) and abs(eps - ref) <= 2e-3 * ref


def test_bad_settings_are_refused():
    with pytest.raises(TypeError, match="control_variate"):
        DPPenalty(gauss_model, 0.1, llr_clip=3.0, noise_multiplier=1.0, control_variate=1)
    ok = dict(noise_multiplier=1.0, reference_noise_multiplier=0.5)
    with pytest.raises(ValueError, match="curvature_clip"):
        DPPenalty(gauss_model, 0.1, llr_clip=3.0, control_variate=True, **ok)
    with pytest.raises(ValueError, match="curvature_clip"):
        DPPenalty(gauss_model, 0.1, llr_clip=3.0, control_variate=True, curvature_clip=-1.0, **ok)
    with pytest.raises(ValueError, match="reference_noise_multiplier"):
        DPPenalty(gauss_model, 0.1, llr_clip=3.0, noise_multiplier=1.0, control_variate=True, curvature_clip=1.0)
    with pytest.raises(ValueError, match="reference_noise_multiplier"):
        DPPenalty(gauss_model, 0.1, llr_clip=3.0, control_variate=True, curvature_clip=1.0, noise_multiplier=1.0,
                  reference_noise_multiplier=0.0)
    for share in (0.0, 1.0, 1.5, True):
        with pytest.raises(ValueError, match="reference_share"):
            DPPenalty(gauss_model, 0.1, llr_clip=3.0, control_variate=True, curvature_clip=1.0,
                      reference_share=share, **ok)


def test_helpers():
    assert cv_mod.default_curvature_clip(4, 50_000, 1.0) == pytest.approx(2 * 4 / 50_000)
    assert cv_mod.default_curvature_clip(4, 50_000, 0.5, temperature=2.0) == pytest.approx(2 * 4 / (2 * 50_000 * 0.25))
    # the share of mu^2: 1/nm_G^2 = share/(1-share) * I/nm^2
    nm, i, s = 50.0, 400, 0.75
    g = cv_mod.reference_noise_multiplier(nm, i, s)
    assert (1 / g ** 2) / (1 / g ** 2 + i / nm ** 2) == pytest.approx(s)


# ---------------------------------------------------------------------------- DP-HMC
def _hmc(nm_l, nm_g, **kw):
    from pyro_dp import DPHMC

    kw.setdefault("init_strategy", init_to_value(values={"mu": torch.tensor(0.5 - 3 / math.sqrt(1000.0),
                                                                             dtype=torch.float64)}))
    share = kw.pop("reference_share", 0.9)
    nm_ref = 0.0 if nm_l == 0 else nm_l * cv_mod.hmc_reference_noise_multiplier(4500, 3, nm_g / nm_l, share)
    return DPHMC(gauss_model, 0.02, 3, 4.0, 4.0, nm_g, nm_l, control_variate=True, curvature_clip=1.0,
                 reference_noise_multiplier=nm_ref, seed=0, noise_seed=1, non_private=nm_l == 0, **kw)


def test_dphmc_without_noise_targets_the_posterior_and_an_uncentred_gradient_does_not():
    """DPHMC(control_variate=True), noise-free: the residual test is the exact ratio and the
    gradients exact, so the chain targets the conjugate posterior (4 MC s.e.). Mutant: the rows
    zeroed (gradient differences and residuals not centred; Ĝ still added): about 3 sds off."""
    _exact_and_uncentred_off(lambda: _hmc(0.0, 0.0))


def test_dphmc_with_noise_targets_the_tilted_posterior():
    """With noise on the gradients and the ratio (σ on a typical trajectory about 1), the chain
    targets the posterior tilted by the reference noise ξ_G (module docstring): mean and sd within
    4 MC standard errors. Mutant: the penalty's −σ²/2 dropped: the sd comes out too wide."""
    _tilted_within_4_se_and_no_penalty_too_wide(lambda: _hmc(300.0, 300.0, reference_share=0.5))


def test_dphmc_contract_and_accounting():
    """The kit over DPHMC(control_variate=True) (a trajectory that leaves the support releases no
    ratio: fewer releases are allowed), and the calibrated ledger against dp_accounting's PLD:
    per chain one reference release (nm_G), G_{1,0} and L gradients per iteration (nm_g), one
    ratio per iteration (nm_l)."""
    import dp_accounting

    from pyro_dp import DPHMC

    y = _data(60)
    check_kernel(lambda: DPHMC(gauss_model, 0.05, 3, 3.0, 3.0, 2.0, 1.0, control_variate=True, curvature_clip=1.0,
                               reference_noise_multiplier=0.5), y, name="hmc_cv", fewer_releases_ok=True)
    k = DPHMC(gauss_model, 0.05, 3, 3.0, 3.0, control_variate=True, curvature_clip=1.0, epsilon=2.0, delta=1e-5,
              seed=0, accountant="pld")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MCMC(k, num_samples=30, warmup_steps=10, disable_progbar=True).run(_data(200))
    nm_l, nm_g, nm_ref = k.llr_noise_multiplier, k.grad_noise_multiplier, k.reference_noise_multiplier
    assert nm_ref == pytest.approx(nm_l * cv_mod.hmc_reference_noise_multiplier(40, 3, nm_g / nm_l, 0.9), rel=1e-12)
    labels = k.ledger.by_label()
    assert k.ledger.num_releases <= 1 + 1 + 40 * 4 and labels[""] >= 1 + 1 + 40 * 3
    acc = dp_accounting.pld.PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
                                          value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(2 * nm_ref), 1)
    acc.compose(dp_accounting.GaussianDpEvent(2 * nm_g), 1 + 40 * 3)
    acc.compose(dp_accounting.GaussianDpEvent(2 * nm_l), 40)
    ref = acc.get_epsilon(1e-5)
    eps = k.get_epsilon(1e-5)
    assert eps <= 2.0 * (1 + 1e-6) and eps <= ref * (1 + 2e-3)


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_the_releases_carry_the_noise_their_events_record():
    """The noise actually added is the noise the ledger's events state: the reference release adds
    nm_G · 2b' times the secret stream's standard normals (checked against a twin stream), and the
    residual release has sd nm · 2c with c = min(hR, 2b')‖Δ‖ computed by hand. Mutant: a release
    spec with half the noise multiplier (the event unchanged) fails both."""
    from pyro_dp.mechanisms import NoiseSource

    y = _data(200)
    k = DPPenalty(gauss_model, 0.1, llr_clip=3.0, noise_multiplier=2.0, reference_noise_multiplier=0.5,
                  control_variate=True, curvature_clip=1.0, seed=0)
    k.setup(0, y)
    lik, z0 = k.lik, torch.tensor([0.3], dtype=torch.float64)
    z, z_new = torch.tensor([0.4], dtype=torch.float64), torch.tensor([0.1], dtype=torch.float64)

    def check(spec_of):
        real = cv_mod.gaussian_release_spec
        cv_mod.gaussian_release_spec = spec_of
        try:
            a, b = NoiseSource(seed=3, warn=False), NoiseSource(seed=3, warn=False)
            cv, event = cv_mod.release_reference(lik, a, z0, 6.0, 0.5)
            ok_ref = torch.allclose(cv.released - reveal(cv.rows.sum(0), reason=TEST), 0.5 * 2 * 6.0 * b.standard_normal((1,)),
                                    rtol=1e-12, atol=0.0)
            spec = cv_mod.gaussian_release_spec(2.0)
            ll0, ll1 = lik.per_example_loglik(z), lik.per_example_loglik(z_new)
            rel, _ = cv_mod.release_residual(lik, spec, cv, z, z_new, ll0, ll1, torch.zeros((), dtype=torch.float64),
                                             1.0, 6.0)
            c = min(1.0 * max(abs(0.4 - 0.3), abs(0.1 - 0.3)), 2 * 6.0) * abs(0.1 - 0.4)
            ok_res = float(rel.noise_std) == pytest.approx(2.0 * 2 * c, rel=1e-12)
            return ok_ref and ok_res and event.noise_multiplier == 0.5
        finally:
            cv_mod.gaussian_release_spec = real

    assert check(cv_mod.gaussian_release_spec)
    real = cv_mod.gaussian_release_spec

    def half(nm, relation="substitute"):  # the mutant: draws and adds half the noise, records nm
        weak = real(nm / 2, relation)
        return SimpleNamespace(event=real(nm, relation).event, draw=weak.draw, release=weak.release)

    assert not check(half)


# ------------------------------------------------------------------ DP-HMC without gradient releases
def _walk(nm_l, **kw):
    """DPHMC(gradients=False): the trajectory on a zero gradient, a random walk of L eta = 0.06
    (about 2 posterior sds) under the residual test; the reference nm from the share of mu^2."""
    from pyro_dp import DPHMC

    kw.setdefault("init_strategy", init_to_value(values={"mu": torch.tensor(0.5 - 3 / math.sqrt(1000.0),
                                                                             dtype=torch.float64)}))
    share = kw.pop("reference_share", 0.9)
    nm_ref = 0.0 if nm_l == 0 else cv_mod.reference_noise_multiplier(nm_l, 4500, share)
    return DPHMC(gauss_model, 0.02, 3, 4.0, 4.0, None, nm_l, control_variate=True, curvature_clip=1.0,
                 reference_noise_multiplier=nm_ref, seed=0, noise_seed=1, non_private=nm_l == 0, gradients=False, **kw)


@pytest.mark.slow  # the walk's residual test is DPPenalty's (the two tests above, with their mutants, in CI)
def test_dphmc_without_gradients_targets_the_posterior_and_an_uncentred_residual_does_not():
    """DPHMC(gradients=False), noise-free: a symmetric random walk under the exact ratio, so the
    chain targets the conjugate posterior (4 MC s.e.). Mutant: the reference rows zeroed (the
    residuals not centred, Ĝ still added): about 3 sds off."""
    _exact_and_uncentred_off(lambda: _walk(0.0))


@pytest.mark.slow  # the walk's residual test is DPPenalty's (the two tests above, with their mutants, in CI)
def test_dphmc_without_gradients_targets_the_tilted_posterior():
    """With noise (σ about 1 on a typical move) the walk keeps detailed balance for the posterior
    tilted by the reference noise ξ_G: mean and sd within 4 MC standard errors. Mutant: the
    penalty's −σ²/2 dropped: the sd comes out too wide."""
    k = _tilted_within_4_se_and_no_penalty_too_wide(lambda: _walk(300.0, reference_share=0.5))
    assert not k.uses_gradients and k.diagnostics()["gradients"] is False


def test_dphmc_without_gradients_contract_and_accounting():
    """The kit over DPHMC(gradients=False), and its calibrated ledger against dp_accounting's PLD:
    per chain one reference release (nm_G for a share of mu^2 against one ratio per iteration),
    then one ratio per iteration (nm_l), no gradient release at all; nm_l and nm_G are
    DPPenalty's on the same budget (the same releases)."""
    import dp_accounting

    from pyro_dp import DPHMC

    check_kernel(lambda: _walk(2.0), _data(60), name="hmc_walk")
    k = DPHMC(gauss_model, 0.05, 3, 3.0, 3.0, control_variate=True, curvature_clip=1.0, epsilon=2.0, delta=1e-5,
              seed=0, accountant="pld", gradients=False)
    p = DPPenalty(gauss_model, 0.05, llr_clip=3.0, control_variate=True, curvature_clip=1.0, epsilon=2.0, delta=1e-5,
                  seed=0, accountant="pld")
    for kernel in (k, p):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MCMC(kernel, num_samples=30, warmup_steps=10, disable_progbar=True).run(_data(200))
    nm_l, nm_ref = k.llr_noise_multiplier, k.reference_noise_multiplier
    assert k.grad_noise_multiplier is None
    assert (nm_l, nm_ref) == (pytest.approx(p.noise_multiplier, rel=1e-12), pytest.approx(p.reference_noise_multiplier,
                                                                                          rel=1e-12))
    assert nm_ref == pytest.approx(cv_mod.reference_noise_multiplier(nm_l, 40, 0.9), rel=1e-12)
    assert k.ledger.num_releases == 1 + 40
    acc = dp_accounting.pld.PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
                                          value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(2 * nm_ref), 1)
    acc.compose(dp_accounting.GaussianDpEvent(2 * nm_l), 40)
    eps = k.get_epsilon(1e-5)
    assert eps <= 2.0 * (1 + 1e-6) and eps <= acc.get_epsilon(1e-5) * (1 + 2e-3)


def test_the_default_path_releases_gradients_only_where_the_forecast_says_they_pay():
    """DPHMC(model, epsilon=...) decides before the plan, data-free, by hmc_gradient_gain: on 5000
    rows at eps = 2 the gradients do not pay (no gradient release in the ledger: the private
    start's and tuner's, one reference, one ratio per iteration), at eps = 1000 they do (L + 1
    gradients per iteration); gradients=True keeps them. Fails for a kernel that always or never
    releases them."""
    from pyro_dp import DPHMC
    from pyro_dp.default_path.forecast import HMC_GRADIENT_GAIN, hmc_gradient_gain
    from pyro_dp.models.default_suite import linear_model, make_linear_data

    X, yy = make_linear_data(5000, 0)

    def run(eps, **kw):
        k = DPHMC(linear_model, epsilon=eps, seed=0, **kw, inference="iterative")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MCMC(k, num_samples=20, warmup_steps=10, disable_progbar=True).run(X, yy)
        gain = hmc_gradient_gain(num_rows=5000, epsilon=eps, delta=k.delta, dim=k.lik.likelihood_dim,
                                 num_samples=20, warmup_steps=10)
        return k, gain

    walk, gain = run(2.0)
    assert gain < HMC_GRADIENT_GAIN and not walk.uses_gradients and walk.grad_noise_multiplier is None
    assert walk.ledger.by_label()[""] == 1 + 30  # the reference and 30 ratios; the tuner's carry their labels
    assert walk.target_accept_prob == 0.3 and walk.logging()["gradients"] == "none (walk)"
    hmc, gain = run(1000.0)
    assert gain >= HMC_GRADIENT_GAIN and hmc.uses_gradients and hmc.ledger.by_label()[""] >= 1 + 30 * 6
    forced, _ = run(2.0, gradients=True)
    assert forced.uses_gradients and forced.target_accept_prob == 0.5


def test_the_gradient_choice_stays_with_the_noise_it_was_calibrated_for():
    """The default path's choice is made with its noise calibration and kept: a later set-up of
    the same kernel object with another warmup length (a second ``mcmc.run``) would forecast
    the other choice, but the noise was calibrated for the first (before 2026-11-29 the choice was
    re-derived and the second set-up failed: "the fixed releases alone exceed the privacy budget",
    a gradient event of noise multiplier 0). Data-free: set-ups only."""
    from pyro_dp import DPHMC
    from pyro_dp.default_path.forecast import HMC_GRADIENT_GAIN, hmc_gradient_gain
    from pyro_dp.models.default_suite import linear_model, make_linear_data

    X, yy = make_linear_data(5000, 0)

    def pays(eps, warmup):
        return hmc_gradient_gain(num_rows=5000, epsilon=eps, delta=1e-5, dim=5, num_samples=1500 - warmup,
                                 warmup_steps=warmup) >= HMC_GRADIENT_GAIN

    eps = next(e for e in range(60, 400, 5) if pays(e, 500) != pays(e, 1))  # where the warmup flips the forecast
    k = DPHMC(linear_model, epsilon=float(eps), num_iterations=1500, seed=0, jit_compile=False, inference="iterative")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k.setup(500, X, yy)
        first, events = k.uses_gradients, k.releases().per_iteration
        assert k.lik.likelihood_dim == 5 and first == pays(eps, 500)
        k.cleanup()
        k.setup(1, X, yy)
    assert k.uses_gradients == first and k.releases().per_iteration == events
    assert (k.grad_noise_multiplier is None) == (not first)


def test_bad_gradients_settings_are_refused():
    from pyro_dp import DPHMC

    with pytest.raises(TypeError, match="gradients must be"):
        DPHMC(gauss_model, epsilon=1.0, gradients="yes", inference="iterative")
    with pytest.raises(ValueError, match="leave grad_noise_multiplier out"):
        DPHMC(gauss_model, 0.1, 3, 1.0, 1.0, 2.0, 2.0, gradients=False, control_variate=True, curvature_clip=1.0,
              reference_noise_multiplier=1.0)
    with pytest.raises(ValueError, match="use DPPenalty"):
        DPHMC(gauss_model, epsilon=1.0, gradients=False, control_variate=False, inference="iterative")
