"""Issue 62: the default path's one-release mode (``pyro_dp/default_path/inference.py``,
``OneReleaseMode`` in ``pyro_dp/default_path/noise_aware.py``)."""
import json

import pytest

from tests.kernels import golden_noise_aware as golden

GOLDEN = json.loads(golden.GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(golden.cases()))
def test_dpnoiseaware_same_chains_ledger_and_warnings_as_recorded(name):
    """DPNoiseAware as a kernel holding the part: the chains, labelled ledger and warnings of
    ``golden_noise_aware.record`` (recorded before the refactor), bit for bit."""
    chains, ledger, warned = golden.run(*golden.cases()[name])
    rec = GOLDEN[name]
    assert chains == rec["chains"]
    assert ledger == rec["ledger"]
    assert warned == rec["warnings"]


# ----------------------------------------------------------------------------- the choice and the switch
import warnings  # noqa: E402

import pyro  # noqa: E402
import pyro.distributions as dist  # noqa: E402
import torch  # noqa: E402
from pyro.infer import MCMC  # noqa: E402

import pyro_dp  # noqa: E402
import pyro_dp.default_path.noise_aware as na  # noqa: E402
from pyro_dp.default_path.inference import ONE_RELEASE_MU2N, mu2n  # noqa: E402
from pyro_dp.kernels.scales import init_to_center  # noqa: E402
from tests.kernels.helpers import gauss_model, make_data  # noqa: E402


def _set_up(kernel, *data):
    """Set-up only (data-free: nothing is released), with its messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel.setup(10, *data)
    return [f"{w.category.__name__}: {w.message}" for w in caught if w.category.__module__.startswith("pyro_dp")]


@pytest.mark.parametrize("cls", [pyro_dp.DPPenalty, pyro_dp.DPHMC])
def test_the_choice_is_data_free(cls):
    """Neighbouring data sets (one row substituted, by a wild value) give the same choice and the
    same messages, and set-up releases nothing; the choice follows mu^2 N on both sides."""
    y = make_data(2000, seed=1)
    y2 = y.clone()
    y2[17] = 1e6
    k1, k2 = cls(gauss_model, epsilon=0.5, seed=0), cls(gauss_model, epsilon=0.5, seed=0)
    m1, m2 = _set_up(k1, y), _set_up(k2, y2)
    assert m1 == m2 and any("ONE-RELEASE MODE" in m for m in m1)
    assert k1.one_release is not None and k2.one_release is not None
    assert k1.one_release.reason == k2.one_release.reason
    assert k1.ledger.num_releases == k2.ledger.num_releases == 0
    assert mu2n(epsilon=0.5, delta=1e-5, num_rows=2000) < ONE_RELEASE_MU2N
    big = cls(gauss_model, epsilon=8.0, seed=0)  # mu^2 N = 2.78 * 2000 = 5551: the iterative chain
    assert not any("ONE-RELEASE" in m for m in _set_up(big, y))
    assert getattr(big, "one_release", None) is None


def test_the_switch():
    y = make_data(500, seed=1)
    k = pyro_dp.DPPenalty(gauss_model, epsilon=0.5, inference="iterative")
    assert not any("ONE-RELEASE" in m for m in _set_up(k, y)) and getattr(k, "one_release", None) is None
    with pytest.raises(ValueError, match="inference must be one of 'auto', 'iterative', 'one_release'"):
        pyro_dp.DPPenalty(gauss_model, epsilon=0.5, inference="one-release")
    with pytest.raises(ValueError, match="was given llr_clip"):  # the user chose the iterative chain's clip
        _set_up(pyro_dp.DPPenalty(gauss_model, llr_clip=1.0, epsilon=0.5, inference="one_release"), y)
    with pytest.raises(ValueError, match="DPBarker has no one-release mode"):
        _set_up(pyro_dp.DPBarker(gauss_model, 100, 0.1, epsilon=0.5, inference="one_release"), y)
    with pytest.raises(ValueError, match="DPNoiseAware is the one-release mode"):
        pyro_dp.DPNoiseAware(gauss_model, epsilon=0.5, inference="iterative")
    asked = pyro_dp.DPPenalty(gauss_model, epsilon=8.0, inference="one_release")  # above the threshold: as asked
    _set_up(asked, y)
    assert asked.one_release.reason == "asked for (inference='one_release')"
    given = pyro_dp.DPPenalty(gauss_model, llr_clip=1.0, epsilon=0.5)  # a setting given: never switched
    assert not any("ONE-RELEASE" in m for m in _set_up(given, y))


def _chain(kernel, y, steps=12):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel.setup(8, y)
        p, out = kernel.initial_params, []
        for _ in range(steps):
            p = kernel.sample(p)
            out.append(kernel.lik.flatten(p).tolist())
    return out, [(repr(e), c, lab) for e, c, lab in kernel.ledger.labelled_entries()]


@pytest.mark.parametrize("cls", [pyro_dp.DPPenalty, pyro_dp.DPHMC])
def test_the_mode_is_dpnoiseaware_bit_for_bit(cls):
    """A default-path kernel in the mode runs DPNoiseAware's chain and ledger at the same settings
    and seeds (DPNoiseAware given the default path's data-free start, the prior centre)."""
    y = make_data(300, seed=7)
    kw = dict(seed=3, noise_seed=4, epsilon=1.0, delta=1e-5)
    ref = _chain(pyro_dp.DPNoiseAware(gauss_model, init_strategy=init_to_center, **kw), y)
    assert _chain(cls(gauss_model, **kw), y) == ref


def test_the_run_says_it_is_an_approximation_and_stays_in_its_budget():
    y = make_data(300, seed=2)
    k = pyro_dp.DPHMC(gauss_model, seed=0)  # as written: the default budget, eps = 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(k, num_samples=40, warmup_steps=20, disable_progbar=True)
        mcmc.run(y)
    d = k.diagnostics()
    assert "approximation" in d["approximation"] and d["inference"].startswith("one_release: mu(eps, delta)^2 N")
    report = pyro_dp.privacy_report(mcmc)
    assert report.approximation.startswith("one-release mode: one-release noise-aware (quadratic) approximation")
    assert "APPROXIMATION" in str(report) and pyro_dp.PrivacyReport.from_json(report.to_json()) == report
    pytest.importorskip("arviz")
    assert pyro_dp.to_arviz(mcmc).attrs["approximation"] == report.approximation
    assert pyro_dp.get_epsilon(mcmc, 1e-5) <= k.epsilon + 1e-9
    fixed, per_iteration = k.planned_events()  # the plan is what was recorded: one releasing iteration
    planned = {}
    for e in list(fixed) + list(per_iteration):
        ev, c = e if isinstance(e, tuple) else (e, 1)
        planned[ev] = planned.get(ev, 0) + c
    assert dict(k.ledger.aggregate().items()) == planned


# ----------------------------------------------------------------------------- statistical check
def logistic_model(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 3.0).to_event(1))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("y", dist.Bernoulli(logits=x[i] @ w), obs=y[i])


def _logistic_data(seed, n=2000):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True).clamp_min(1.0)  # the unit ball
    y = torch.bernoulli(torch.sigmoid(x @ torch.tensor([1.0, -0.5], dtype=torch.float64)), generator=g)
    return x, y


def _exact_moments(x, y, half=1.2, n=161):
    """The non-private posterior mean and sd by quadrature on a grid around the MAP (2-d)."""
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=100)

    def nll():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w, y, reduction="sum") + (w ** 2).sum() / 18
        loss.backward()
        return loss
    opt.step(nll)
    c = w.detach()
    a = torch.linspace(-half, half, n, dtype=torch.float64)
    g = torch.stack(torch.meshgrid(a + c[0], a + c[1], indexing="ij"), -1).reshape(-1, 2)
    lp = -torch.nn.functional.binary_cross_entropy_with_logits(
        (g @ x.T), y.expand(len(g), -1), reduction="none").sum(1) - (g ** 2).sum(1) / 18
    p = torch.softmax(lp, 0)
    mean = (p[:, None] * g).sum(0)
    return mean, ((p[:, None] * (g - mean) ** 2).sum(0)).sqrt()


def _runs(seeds, inference="auto"):
    """Per coordinate of each seeded run: whether the non-private mean lies in the run's central
    90 % interval, and the run's sd over the non-private sd."""
    hits, ratios = [], []
    for seed in seeds:
        x, y = _logistic_data(seed)
        k = pyro_dp.DPPenalty(logistic_model, epsilon=0.5, seed=seed, noise_seed=50 + seed, inference=inference)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc = MCMC(k, num_samples=300, warmup_steps=200, disable_progbar=True)
            mcmc.run(x, y)
        d = mcmc.get_samples()["w"]
        lo, hi = torch.quantile(d, 0.05, dim=0), torch.quantile(d, 0.95, dim=0)
        m, sd = _exact_moments(x, y)
        hits += [bool(a <= v <= b) for a, v, b in zip(lo, m, hi)]
        ratios += (d.std(0) / sd).tolist()
    return hits, ratios


SEEDS = (0, 1, 2)


@pytest.mark.slow
def test_the_default_path_is_calibrated_at_a_small_budget():
    """Logistic regression (2 features in the unit ball), N = 2000, eps = 0.5, ``DPPenalty(model,
    epsilon=0.5)`` as written: the default path runs the one-release mode, whose 90 % intervals hold
    the non-private posterior mean in every coordinate of 3 seeded runs, and are wider than the
    non-private posterior's by the release noise (sd ratio at least 1.1; forecast 1.3-1.7 here)."""
    hits, ratios = _runs(SEEDS)
    assert all(hits) and min(ratios) >= 1.1, (hits, ratios)


@pytest.mark.slow
def test_mutant_iterative_chain_is_not_calibrated():
    """The mutant: the iterative chain forced at the same budget misses in most coordinate-runs."""
    assert sum(_runs(SEEDS, inference="iterative")[0]) <= 2


@pytest.mark.slow
def test_mutant_noise_blind_mode_is_not_calibrated(monkeypatch):
    """The mutant: the mode without the release noise in its likelihood (the releases read as
    exact) is as narrow as the non-private posterior while its mean is shifted by the noise: it
    fails the width the calibrated run has (its coverage alone, 2 coordinates a run, has little
    power at this budget: measured 2 of 2 covered on seed 0, 1.2 sd off)."""
    original = na.noise_aware_loglik

    def blind(release, z, curvature_psd=None):
        return original(release._replace(score_std=0.0, curvature_std=0.0), z, curvature_psd)
    monkeypatch.setattr(na, "noise_aware_loglik", blind)
    hits, ratios = _runs(SEEDS[:1])
    assert not (all(hits) and min(ratios) >= 1.1), (hits, ratios)
