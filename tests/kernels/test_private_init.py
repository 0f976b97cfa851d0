"""DPGradientInit: the update rule, its releases in the ledger, budgets and calibration
counting them, data-free setup, and bad input."""
import math
import warnings

import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp import DPGradientInit, DPHMC, DPMultiPartyPenalty, DPPenalty
from pyro_dp.accounting import planned_epsilon
from pyro_dp.mechanisms import GaussianEvent
from tests.kernels.helpers import M0, S, S0, gauss_model, make_data
from tests.kernels.test_penalty import CountingNormal, _gdp_reference, counting_model

FAR = {"mu": torch.tensor(-8.0, dtype=torch.float64)}


def _kernel(init, **kw):
    kw.setdefault("noise_multiplier", 3.0)
    k = DPPenalty(gauss_model, 0.2, llr_clip=4.0, seed=0, init=init, **kw)
    k.initial_params = FAR
    return k


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_non_private_update_is_gradient_ascent_on_the_log_posterior():
    """With no noise and no clipping the init is plain gradient ascent; compare with the
    recurrence written out for the conjugate Gaussian (helpers: y_i ~ N(mu, S^2), mu ~ N(M0, S0^2)):
    mu <- mu + eta/N * (sum_i (y_i - mu)/S^2 - (mu - M0)/S0^2)."""
    y = make_data(200)
    init = DPGradientInit(num_steps=7, step_size=0.3, grad_clip=1e6, noise_multiplier=0.0)
    k = _kernel(init, noise_multiplier=0.0, non_private=True)
    k.setup(0, y)
    z, events, frac = init.run(k.lik, torch.tensor([-8.0], dtype=torch.float64), k._noise)
    mu, n = -8.0, len(y)
    for _ in range(7):
        mu = mu + 0.3 / n * (float((y - mu).sum()) / S**2 - (mu - M0) / S0**2)
    assert float(z) == pytest.approx(mu, rel=1e-12)
    assert len(events) == 7 and frac == 0.0


def test_init_releases_are_in_the_ledger_and_epsilon_is_exact():
    y = make_data(300)
    init = DPGradientInit(num_steps=15, step_size=0.5, grad_clip=4.0, noise_multiplier=4.0)
    k = _kernel(init)
    mcmc = MCMC(k, num_samples=20, warmup_steps=5, disable_progbar=True)
    mcmc.run(y)
    ledger = pyro_dp.get_ledger(mcmc)
    assert ledger.num_releases == 15 + 25
    # 15 releases at nm 4 and 25 at nm 3 compose to mu^2 = 15/16 + 25/9 (GDP, Dong et al. Cor 3.3)
    k_equiv = 9.0 * (15 / 16 + 25 / 9)  # = number of nm-3 releases with the same mu
    assert pyro_dp.get_epsilon(mcmc, 1e-5) == pytest.approx(_gdp_reference(k_equiv, 3.0, 1e-5), rel=1e-3)
    # the walk reached the posterior from mu = -8 (posterior sd ~ 1/sqrt(300))
    assert abs(float(mcmc.get_samples()["mu"].mean()) - float(y.mean())) < 0.3


def test_each_sequential_chain_runs_its_own_init():
    y = make_data(100)
    init = DPGradientInit(num_steps=4, step_size=0.5, grad_clip=4.0, noise_multiplier=4.0)
    k = DPPenalty(gauss_model, 0.2, llr_clip=4.0, noise_multiplier=3.0, seed=0, init=init)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sequential chains on a small machine
        mcmc = MCMC(k, num_samples=5, warmup_steps=0, num_chains=2, disable_progbar=True)
        mcmc.run(y)
    assert pyro_dp.get_ledger(mcmc).num_releases == 2 * (4 + 5)


def test_budget_counts_the_init():
    y = make_data(100)
    init = DPGradientInit(num_steps=30, step_size=0.5, grad_clip=4.0, noise_multiplier=30.0)
    k = _kernel(init, epsilon=4.0, delta=1e-5, noise_multiplier=10.0)
    k.setup(0, y)
    from pyro_dp.accounting import max_iterations

    assert k.privacy.steps_allowed == max_iterations(4.0, 1e-5, GaussianEvent(10.0), fixed=init.events())
    assert 0 < k.privacy.steps_allowed < max_iterations(4.0, 1e-5, GaussianEvent(10.0))
    with pytest.warns(pyro_dp.BudgetExhaustedWarning):
        mcmc = MCMC(k, num_samples=k.privacy.steps_allowed + 10, disable_progbar=True)
        mcmc.run(y)
    assert pyro_dp.get_epsilon(mcmc, 1e-5) <= 4.0
    # an init that alone exceeds the budget is refused at setup, before any data is read
    greedy = _kernel(DPGradientInit(num_steps=30, step_size=0.5, grad_clip=4.0, noise_multiplier=0.5),
                     epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError):
        greedy.setup(0, y)


@pytest.mark.parametrize("make", ["penalty", "hmc"])
def test_calibration_leaves_room_for_the_init(make):
    y = make_data(100)
    init = DPGradientInit(num_steps=20, step_size=0.5, grad_clip=4.0, noise_multiplier=20.0)
    budget = dict(epsilon=2.0, delta=1e-5, num_iterations=200)
    if make == "penalty":
        with_init = DPPenalty(gauss_model, 0.2, llr_clip=4.0, seed=0, init=init, **budget)
        without = DPPenalty(gauss_model, 0.2, llr_clip=4.0, seed=0, **budget)
    else:
        hmc = dict(step_size=0.01, num_steps=3, grad_clip=4.0, llr_clip=4.0, seed=0)
        with_init = DPHMC(gauss_model, init=init, **hmc, **budget, inference="iterative")
        without = DPHMC(gauss_model, **hmc, **budget, inference="iterative")
    for k in (with_init, without):
        k.setup(0, y)
    fixed, events = with_init.planned_events()  # the init's releases, then the kernel's once per chain
    eps = planned_epsilon(1e-5, 200, events, fixed=fixed)
    assert eps <= 2.0 and eps == pytest.approx(2.0, rel=1e-3)
    assert with_init.privacy.steps_allowed >= 200  # the planned run fits, init included
    nm = "noise_multiplier" if make == "penalty" else "llr_noise_multiplier"
    assert getattr(with_init, nm) > getattr(without, nm)


def test_setup_stays_data_free_with_an_init():
    y = make_data(30)
    init = DPGradientInit(num_steps=3, step_size=0.5, grad_clip=4.0, noise_multiplier=4.0)
    k = DPPenalty(counting_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0, init=init)
    CountingNormal.calls = 0
    k.setup(10, y)
    k.setup(10, y)
    assert CountingNormal.calls == 0 and k.ledger.num_releases == 0
    k.sample(k.initial_params)
    assert CountingNormal.calls > 0 and k.ledger.num_releases == 4


def test_bad_input():
    with pytest.raises(ValueError):
        DPGradientInit(num_steps=0, step_size=0.1, grad_clip=1.0, noise_multiplier=1.0)
    with pytest.raises(TypeError):
        DPGradientInit(num_steps=2.5, step_size=0.1, grad_clip=1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError):
        DPGradientInit(num_steps=2, step_size=-0.1, grad_clip=1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError):
        DPGradientInit(num_steps=2, step_size=0.1, grad_clip=math.inf, noise_multiplier=1.0)
    with pytest.raises(TypeError, match="private initialiser"):
        DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, init=object())
    zero = DPGradientInit(num_steps=2, step_size=0.1, grad_clip=1.0, noise_multiplier=0.0)
    with pytest.raises(ValueError, match="non_private"):
        DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, init=zero)
    ok = DPGradientInit(num_steps=2, step_size=0.1, grad_clip=1.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="private init"):
        DPMultiPartyPenalty(gauss_model, torch.zeros(10, dtype=torch.long), 0.2, llr_clip=1.0, noise_multiplier=3.0, init=ok)


def test_divergence_is_an_error_not_a_silent_nan():
    y = make_data(50)
    init = DPGradientInit(num_steps=200, step_size=1e6, grad_clip=4.0, noise_multiplier=4.0)
    k = _kernel(init)
    k.setup(0, y)
    with pytest.raises(FloatingPointError, match="diverged"):
        k.sample(k.initial_params)


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_non_finite_row_gradients_count_as_zero():
    """A row whose gradient is not finite must not make the init fail (that would reveal the
    row): it contributes zero, like in DPHMC's gradient release."""

    from tests.kernels.helpers import ClippedGradSum

    class Lik(ClippedGradSum):
        num_rows, temperature = 3, 1.0

        def per_example_grad(self, z):
            g = torch.tensor([[1.0], [float("nan")], [1.0]], dtype=torch.float64)
            return torch.zeros(3, dtype=torch.float64), g

        def grad_log_prior(self, z):
            return torch.zeros_like(z)

    from pyro_dp.mechanisms import NoiseSource

    init = DPGradientInit(num_steps=1, step_size=3.0, grad_clip=10.0, noise_multiplier=0.0)
    z, events, _ = init.run(Lik(), torch.zeros(1, dtype=torch.float64), NoiseSource(seed=0))
    assert float(z) == pytest.approx(2.0)  # (1 + 0 + 1) * 3 / 3


def test_planned_events_include_the_init():
    init = DPGradientInit(num_steps=7, step_size=0.5, grad_clip=4.0, noise_multiplier=4.0)
    k = _kernel(init)
    with pytest.raises(RuntimeError, match="setup"):
        k.planned_events()
    k.setup(0, make_data(20))
    fixed, per = k.planned_events()
    assert fixed == [(GaussianEvent(4.0), 7)] and per == [GaussianEvent(3.0)]
