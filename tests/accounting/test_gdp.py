"""Exact Gaussian composition (GDP): golden values, independent closed forms, mpmath and
dp_accounting oracles, pessimistic rounding."""
import math

import mpmath
import pytest

from pyro_dp.accounting import GaussianAccountant, gaussian_mu, gdp_delta, gdp_epsilon, gdp_mu
from pyro_dp.mechanisms import GaussianEvent, PrivacyLedger


@mpmath.workdps(60)
def _mp_delta(eps, mu):
    """60-digit reference of Dong, Roth & Su 2019 Cor. 2.13."""
    eps, mu = mpmath.mpf(eps), mpmath.mpf(mu)
    return mpmath.ncdf(-eps / mu + mu / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / mu - mu / 2)


@mpmath.workdps(60)
def _thesis_thm6_delta(eps, k, nm):
    """Räisä 2021 thesis Thm 6 written independently: k releases, mu = 1/(2 nm^2) each,
    delta = 1/2 (erfc((eps - k mu)/(2 sqrt(k mu))) - e^eps erfc((eps + k mu)/(2 sqrt(k mu))))."""
    m = mpmath.mpf(k) / (2 * mpmath.mpf(nm) ** 2)
    s = 2 * mpmath.sqrt(m)
    return (mpmath.erfc((eps - m) / s) - mpmath.exp(eps) * mpmath.erfc((eps + m) / s)) / 2


def _facts_ledger():
    # FACTS.md: 1000 x (Delta=1, sigma=60) + 11000 x (Delta=0.5, sigma=40), i.e. nm 60 and 80
    ledger = PrivacyLedger()
    ledger.record(GaussianEvent(60.0), 1000)
    ledger.record(GaussianEvent(80.0), 11000)
    return ledger


def test_golden_value_facts():
    # Source: /work/shared/FACTS.md (closed form and dp_accounting PLD agree): 6.56618
    acc = GaussianAccountant(_facts_ledger())
    assert acc.mu == pytest.approx(math.sqrt(1000 / 3600 + 11000 / 6400), rel=1e-14)
    assert round(acc.get_epsilon(1e-5), 5) == 6.56618


def test_golden_value_matches_balle_wang_analytic_gaussian():
    from dp_accounting import get_epsilon_gaussian

    eps = GaussianAccountant(_facts_ledger()).get_epsilon(1e-5)
    ref = get_epsilon_gaussian(1 / math.sqrt(1000 / 3600 + 11000 / 6400), 1e-5)
    assert eps == pytest.approx(ref, rel=1e-7)


@pytest.mark.parametrize("mu", [1e-8, 1e-3, 0.05, 0.3, 1.0, 1.4129854, 4.0, 20.0, 150.0])
@pytest.mark.parametrize("delta", [0.5, 1e-3, 1e-5, 1e-10, 1e-30])
def test_epsilon_is_rounded_up_against_mpmath(mu, delta):
    eps = gdp_epsilon(delta, mu)
    assert gdp_delta(eps, mu) <= delta  # against our own float evaluation
    if eps > 0:
        true_delta = _mp_delta(eps, mu)
        assert true_delta <= delta * (1 + 1e-11)  # never below the exact root
        # ... and not needlessly pessimistic: a slightly smaller eps violates delta
        assert _mp_delta(eps * (1 - 1e-9), mu) > delta
    else:
        assert _mp_delta(0.0, mu) <= delta * (1 + 1e-11)


@pytest.mark.parametrize("mu", [1e-9, 1e-3, 0.1, 0.999, 1.001, 3.0, 30.0, 1000.0])
@pytest.mark.parametrize("eps", [0.0, 1e-4, 0.5, 2.0, 10.0, 100.0, 700.0, 1e4])
def test_delta_accuracy_against_mpmath(mu, eps):
    ref = _mp_delta(eps, mu)
    got = gdp_delta(eps, mu)
    assert not math.isnan(got)
    if ref < 1e-300:
        assert got <= 1e-290
    else:
        assert got == pytest.approx(float(ref), rel=1e-11, abs=0)


def test_large_epsilon_is_finite_and_zero():
    for mu in (0.5, 5.0, 50.0):
        assert gdp_delta(1e6, mu) == 0.0
        assert gdp_delta(800.0, mu) >= 0.0


def test_edge_cases_mu_zero_and_infinite():
    assert gdp_epsilon(1e-5, 0.0) == 0.0
    assert gdp_epsilon(1e-5, math.inf) == math.inf
    assert gdp_delta(1.0, 0.0) == 0.0 and gdp_delta(1.0, math.inf) == 1.0
    assert gaussian_mu([]) == 0.0
    assert gaussian_mu([(math.inf, 10)]) == 0.0
    acc = GaussianAccountant()
    acc.record(GaussianEvent(math.inf), 5)
    assert acc.get_epsilon(1e-5) == 0.0 and acc.get_delta(0.1) == 0.0


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-3, 2.0, math.nan])
def test_gdp_epsilon_rejects_bad_delta(bad):
    with pytest.raises(ValueError, match="delta"):
        gdp_epsilon(bad, 1.0)


@pytest.mark.parametrize("k,nm", [(1, 1.0), (10, 3.0), (100, 10.0), (1000, 60.0), (12000, 80.0)])
@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
def test_thesis_theorem_6_equals_gdp_delta(k, nm, eps):
    acc = GaussianAccountant()
    acc.record(GaussianEvent(nm), k)
    ref = _thesis_thm6_delta(eps, k, nm)
    assert acc.get_delta(eps) == pytest.approx(float(ref), rel=1e-9, abs=1e-300)


@mpmath.workdps(60)
def test_thesis_theorem_11_heterogeneous():
    """Thm 11 (DP-HMC): k ratios with sigma'^2 = tau_l^2 n, kL+1 gradients with tau_g^2 n."""
    k, L, n, tau_l, tau_g = 200, 5, 1000, 0.8, 1.3
    acc = GaussianAccountant()
    acc.record(GaussianEvent(tau_g * math.sqrt(n)))
    for _ in range(k):
        acc.record(GaussianEvent(tau_l * math.sqrt(n)))
        acc.record(GaussianEvent(tau_g * math.sqrt(n)), L)
    m = mpmath.mpf(k) / (2 * tau_l**2 * n) + mpmath.mpf(k * L + 1) / (2 * tau_g**2 * n)
    for eps in (0.5, 1.0, 2.0):
        ref = (mpmath.erfc((eps - m) / (2 * mpmath.sqrt(m)))
               - mpmath.exp(eps) * mpmath.erfc((eps + m) / (2 * mpmath.sqrt(m)))) / 2
        assert acc.get_delta(eps) == pytest.approx(float(ref), rel=1e-9)


def _dp_accounting_pld_eps(nm, k, deltas):
    from dp_accounting import GaussianDpEvent, NeighboringRelation
    from dp_accounting.pld import PLDAccountant

    # dp_accounting's REPLACE_ONE Gaussian puts the neighbours at +-1 (sensitivity 2):
    # noise multiplier 2*nm there is noise multiplier nm relative to the substitute sensitivity.
    acc = PLDAccountant(NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4)
    acc.compose(GaussianDpEvent(2 * nm), k)
    return [acc.get_epsilon(d) for d in deltas]


@pytest.mark.parametrize("nm,k", [(0.8, 1), (3.0, 10), (20.0, 1000), (60.0, 5000)])
def test_agrees_with_dp_accounting_pld(nm, k):
    deltas = [1e-3, 1e-6, 1e-9]
    for delta, ref in zip(deltas, _dp_accounting_pld_eps(nm, k, deltas)):
        acc = GaussianAccountant()
        acc.record(GaussianEvent(nm), k)
        eps = acc.get_epsilon(delta)
        assert eps <= ref * (1 + 1e-9)  # the PLD is an upper bound
        assert eps == pytest.approx(ref, rel=1e-3)


@pytest.mark.parametrize("delta", [0.3, 1e-4, 1e-8, 1e-12])
@pytest.mark.parametrize("mu", [0.01, 0.7, 2.0, 9.0])
def test_delta_of_epsilon_roundtrip_is_conservative(mu, delta):
    acc = GaussianAccountant()
    acc.record(GaussianEvent(1.0 / mu))
    eps = acc.get_epsilon(delta)
    if eps > 0:
        assert acc.get_delta(eps) <= delta


@pytest.mark.parametrize("eps,delta", [(0.1, 1e-5), (1.0, 1e-5), (8.0, 1e-9), (50.0, 0.1)])
def test_gdp_mu_is_rounded_down(eps, delta):
    mu = gdp_mu(eps, delta)
    assert gdp_delta(eps, mu) <= delta
    assert gdp_delta(eps, mu * (1 + 1e-9)) > delta
    assert _mp_delta(eps, mu) <= delta * (1 + 1e-9)


@mpmath.workdps(60)
def test_gaussian_mu_is_never_below_the_exact_sum():
    pairs = [(0.3, 7), (1.7, 13), (60.0, 1000), (80.0, 11000)]
    exact = mpmath.sqrt(mpmath.fsum(mpmath.mpf(c) / mpmath.mpf(nm) ** 2 for nm, c in pairs))
    mu = gaussian_mu(pairs)
    assert mu >= exact and mu == pytest.approx(float(exact), rel=1e-14)
