"""The one-release forecast (``pyro_dp/default_path/one_release.py``, issue 62): its noise is the
noise DPNoiseAware calibrates (the kernel is the oracle), its predicted posterior width matches
DPNoiseAware's measured width on a model whose profile is known (with a mutant that forgets the
release noise and must fail), and bad input is refused."""
import math
import warnings

import pytest
import torch
from pyro.infer import MCMC

from pyro_dp.default_path.noise_aware import DPNoiseAware
from pyro_dp.default_path.one_release import OneReleaseForecast, one_release_forecast, one_release_noise
from pyro_dp.default_path.prediction import ModelProfile
from pyro_dp.models.examples import normal_mean_model


@pytest.mark.parametrize("epsilon,delta,chains", [(1.0, 1e-5, 1), (0.3, 1e-6, 1), (4.0, 1e-5, 2)])
def test_noise_is_the_kernels_calibration(epsilon, delta, chains):
    """The forecast's (nm_s, nm_H) are what DPNoiseAware sets at set-up (data-free) for the
    same budget, and the tuner's noise is the kernel's tuner's."""
    y = torch.zeros(500, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = DPNoiseAware(normal_mean_model, epsilon=epsilon, delta=delta, num_chains=chains, seed=0)
        k.setup(0, y)
    nm_s, nm_h, tuner = one_release_noise(epsilon=epsilon, delta=delta, num_chains=chains)
    assert nm_s == k.noise_multiplier and nm_h == k.curvature_noise_multiplier
    assert tuner.noise_multipliers == k.init.noise_multipliers
    assert tuner.ratio_quantile(500) == k.init.ratio_quantile(500)


def _posterior_sd(kernel, y, samples=400):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=samples, warmup_steps=150, disable_progbar=True)
        mcmc.run(y)
    return float(mcmc.get_samples()["mu"].std())


def _forecast_sd_ratio_is_met(forget_noise: bool) -> bool:
    """Normal mean (sd 1) on N = 2 000 rows at epsilon = 0.5: the profile is the data's own scores at
    the mean (an oracle the test may read), the non-private posterior sd is 1/sqrt(N) (prior sd
    10, negligible). DPNoiseAware's measured sd over three noise draws, against the forecast's
    sd ratio (the mutant forecasts the posterior without release noise, ratio 1)."""
    n = 2000
    y = torch.randn(n, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.5
    profile = ModelProfile.from_scores("normal mean", (y - y.mean()).reshape(-1, 1))
    f = one_release_forecast(profile, num_rows=n, epsilon=0.5, num_samples=400, warmup_steps=150)
    predicted = 1.0 if forget_noise else f.sd_ratio
    measured = [_posterior_sd(DPNoiseAware(normal_mean_model, epsilon=0.5, delta=1e-5, seed=s, noise_seed=10 + s), y)
                * math.sqrt(n) for s in range(3)]
    ratio = sum(measured) / len(measured) / predicted
    return 0.75 < ratio < 1.33, (predicted, measured)


def test_predicted_width_matches_the_kernel():
    """Within 25 % (the released curvature's noise and the private clip move each run's width by
    about 10 %; three runs averaged): the forecast is the kernel's width, which is about 1.5 times
    the non-private one here."""
    ok, info = _forecast_sd_ratio_is_met(False)
    assert ok, info
    assert info[0] > 1.4, info


def test_predicted_width_mutant_without_release_noise_fails():
    ok, info = _forecast_sd_ratio_is_met(True)
    assert not ok, info


def test_forecast_fields_and_monotonicity():
    f = one_release_forecast("logistic", num_rows=10_000, epsilon=1.0)
    assert isinstance(f, OneReleaseForecast) and f.coverage90 >= 0.9
    more_rows = one_release_forecast("logistic", num_rows=100_000, epsilon=1.0)
    more_eps = one_release_forecast("logistic", num_rows=10_000, epsilon=4.0)
    assert more_rows.sd_ratio < f.sd_ratio and more_eps.sd_ratio < f.sd_ratio
    assert more_rows.shift_sd < f.shift_sd and more_eps.shift_sd < f.shift_sd
    assert more_eps.noise_multiplier < f.noise_multiplier
    # where the curvature's noise swamps the quadratic the prior alone bounds it: infinite width, said as such
    assert math.isinf(one_release_forecast("linear", num_rows=500, epsilon=0.5).sd_ratio)


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_rows=1), "num_rows"),
    (dict(num_rows=1000, epsilon=-1.0), "epsilon"),
    (dict(num_rows=1000, epsilon=1.0, delta=1.5), "delta"),
    (dict(num_rows=1000, epsilon=1.0, num_chains=0), "num_chains"),
])
def test_bad_input_is_refused(kwargs, match):
    kwargs.setdefault("epsilon", 1.0)
    with pytest.raises(ValueError, match=match):
        one_release_forecast("logistic", **kwargs)


def test_model_must_be_a_profile_or_a_builtin_name():
    with pytest.raises(TypeError, match="ModelProfile"):
        one_release_forecast(3, num_rows=1000, epsilon=1.0)
    with pytest.raises(ValueError, match="unknown model profile"):
        one_release_forecast("probit", num_rows=1000, epsilon=1.0)
