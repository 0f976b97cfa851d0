"""Composition of (eps, delta)-DP events: closed forms, the exact optimal composition against
its combinatorial statement and dp_accounting's PLD, accountant identities, refusals, and the
with-replacement amplification bound against the paper's (App. B) loose bounds."""
import math
from fractions import Fraction

import pytest

from pyro_dp.accounting import UnsupportedEventError, get_accountant
from pyro_dp.accounting.composition import (
    AdvancedCompositionAccountant,
    OptimalCompositionAccountant,
    drv_epsilon,
    kov_epsilon,
    optimal_delta,
    optimal_epsilon,
    with_replacement_amplification,
)
from pyro_dp.mechanisms import ApproxDPEvent, GaussianEvent, NonPrivateEvent, PrivacyLedger, PureDPEvent


def test_drv_closed_form():
    # Dwork & Roth 2014, Thm 3.20 with delta' = delta_total - k delta
    k, e, d, dt = 200, 0.05, 1e-9, 1e-5
    ref = math.sqrt(2 * k * math.log(1 / (dt - k * d))) * e + k * e * (math.exp(e) - 1)
    assert drv_epsilon(e, d, k, dt) == pytest.approx(ref, rel=1e-14) and drv_epsilon(e, d, k, dt) >= ref
    assert drv_epsilon(e, 1e-7, 200, 1e-5) == math.inf  # k delta spends the budget
    assert drv_epsilon(e, d, 0, dt) == 0.0


def test_kov_never_worse_than_drv_or_basic():
    for e, k in [(0.01, 1000), (0.1, 100), (0.5, 10), (1.0, 3)]:
        kov = kov_epsilon([(e, 1e-9, k)], 1e-5)
        assert kov <= drv_epsilon(e, 1e-9, k, 1e-5) * (1 + 1e-12)
        assert kov <= k * e * (1 + 1e-12)


def _kov_grid_delta(e, d, k, i):
    """Kairouz, Oh & Viswanath 2015, Thm 3.3 verbatim, exact rational arithmetic (e = log r)."""
    total = Fraction(0)
    r = Fraction(math.exp(e))
    for l in range(i):
        total += math.comb(k, l) * (r ** (k - l) - r ** (k - 2 * i + l))
    di = total / (1 + r) ** k
    d = Fraction(d)
    return float(1 - (1 - d) ** k * (1 - di))


@pytest.mark.parametrize("e, d, k", [(0.3, 0.0, 7), (0.5, 1e-4, 12), (1.0, 1e-6, 5)])
def test_optimal_delta_matches_kov_theorem_3_3(e, d, k):
    for i in range(k // 2 + 1):
        ref = _kov_grid_delta(e, d, k, i)
        got = optimal_delta(e, d, k, (k - 2 * i) * e)
        assert got == pytest.approx(ref, rel=1e-9, abs=1e-15) and got >= ref * (1 - 1e-12)


def test_optimal_single_release_and_monotone():
    assert optimal_epsilon(0.7, 1e-6, 1, 1e-6) == pytest.approx(0.7)  # the event itself, delta~ = 0
    assert 0.7 - 1e-8 <= optimal_epsilon(0.7, 0.0, 1, 1e-9) <= 0.7  # delta(eps_g) = P(L=eps)(1 - e^(eps_g - eps))
    eps = [optimal_epsilon(0.1, 1e-9, k, 1e-5) for k in (10, 100, 1000)]
    assert eps == sorted(eps)
    assert optimal_epsilon(0.1, 2e-7, 100, 1e-5) == math.inf  # 100 x 2e-7 > 1e-5


@pytest.mark.parametrize("e, d, k", [(0.1, 1e-8, 300), (0.5, 1e-9, 60)])
def test_optimal_matches_dp_accounting_pld(e, d, k):
    """dp_accounting's PLD (pessimistic, connect-the-dots) of the same events: an upper
    bound on the exact optimal composition, close to it."""
    from dp_accounting.pld import common, privacy_loss_distribution

    params = common.DifferentialPrivacyParameters(e, d)
    pld = privacy_loss_distribution.from_privacy_parameters(params, 1e-4).self_compose(k).get_epsilon_for_delta(1e-5)
    opt = optimal_epsilon(e, d, k, 1e-5)
    assert opt <= pld * (1 + 1e-9) and pld - opt <= 5e-3
    assert optimal_delta(e, d, k, opt) <= 1e-5


def test_accountants_composition_identities():
    ev = ApproxDPEvent(0.2, 1e-9)
    a = PrivacyLedger()
    a.record(ev, 6)
    b = PrivacyLedger()
    for _ in range(6):
        b.record(ev)
    for cls in (AdvancedCompositionAccountant, OptimalCompositionAccountant):
        ea, eb = cls(a).get_epsilon(1e-6), cls(b).get_epsilon(1e-6)
        assert ea == eb
        assert cls(a).get_delta(ea) <= 1e-6 * (1 + 1e-6)
        assert get_accountant(cls, a).get_epsilon(1e-6) == ea
    assert OptimalCompositionAccountant(a).get_epsilon(1e-6) <= AdvancedCompositionAccountant(a).get_epsilon(1e-6)


def test_heterogeneous_ledgers_are_valid_upper_bounds():
    led = PrivacyLedger()
    led.record(ApproxDPEvent(0.1, 1e-9), 50)
    led.record(PureDPEvent(0.3), 10)
    opt = OptimalCompositionAccountant(led).get_epsilon(1e-5)
    # the smaller of the worst event composed optimally (11.39) and dp_accounting's PLD of the
    # dominating pairs, composed independently here (4.8957, value_discretization_interval=1e-4)
    from dp_accounting.pld import common, privacy_loss_distribution as pld_lib

    pairs = [pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(e, d), 1e-4).self_compose(k)
             for e, d, k in ((0.1, 1e-9, 50), (0.3, 0.0, 10))]
    pld = pairs[0].compose(pairs[1]).get_epsilon_for_delta(1e-5)
    assert opt == pytest.approx(min(optimal_epsilon(0.3, 1e-9, 60, 1e-5), pld), rel=1e-12)
    assert opt == pytest.approx(4.8957, abs=1e-4)
    # valid: never below the exact optimum of a part of the composition
    assert opt >= max(optimal_epsilon(0.1, 1e-9, 50, 1e-5), optimal_epsilon(0.3, 0.0, 10, 1e-5))
    assert OptimalCompositionAccountant(led).get_delta(opt) <= 1e-5 * (1 + 1e-6)
    adv = AdvancedCompositionAccountant(led).get_epsilon(1e-5)
    assert adv <= 50 * 0.1 + 10 * 0.3 + 1e-12  # never worse than basic composition
    assert adv == pytest.approx(kov_epsilon([(0.1, 1e-9, 50), (0.3, 0.0, 10)], 1e-5))


def test_refusals_and_non_private():
    for cls in (AdvancedCompositionAccountant, OptimalCompositionAccountant):
        acc = cls()
        with pytest.raises(UnsupportedEventError):
            acc.record(GaussianEvent(3.0))
        led = PrivacyLedger()
        led.record(ApproxDPEvent(0.1, 0.0), 3)
        led.record(NonPrivateEvent())
        assert cls(led).get_epsilon(1e-5) == math.inf
        assert cls().get_epsilon(1e-5) == 0.0


def test_with_replacement_amplification_against_paper_bounds():
    """App. B: eps' <= 6 K p eps0 and delta' <= 2 K p delta0 (for eps0 <= 1); our exact
    expressions are below, grow with B, and reduce to group privacy at p = 1."""
    for eps0 in (0.1, 0.5, 1.0):
        for b, p in ((100, 1e-3), (1000, 1e-4), (50, 0.01)):
            e, d = with_replacement_amplification(eps0, 1e-6, b, p)
            assert e <= 6 * b * p * eps0 and d <= 2 * b * p * 1e-6 * math.exp(b * p * eps0)
            e2, d2 = with_replacement_amplification(eps0, 1e-6, b + 1, p)
            assert e2 > e and d2 > d
    e, _ = with_replacement_amplification(0.3, 0.0, 4, 1.0)
    assert e == pytest.approx(2 * 4 * 0.3)  # coupling through q_0 costs 2 B eps0 at p = 1
    e, _ = with_replacement_amplification(5.0, 1e-6, 100, 1e-3)  # eps0 > 2.9: 6Bp eps0 fails
    assert e > 6 * 100 * 1e-3 * 5.0
