"""pyro_dp.accounting.subsampled: golden values from the papers' formulas computed
independently (mpmath), the published DP Barker number, comparison with dp_accounting,
order validity, and the accountants' refusal of what they cannot analyse."""
import math

import numpy as np
import pytest

from pyro_dp.accounting import UnsupportedEventError, get_accountant
from pyro_dp.accounting.rdp import rdp_epsilon
from pyro_dp.accounting.subsampled import (
    barker_batch_rdp,
    barker_orders,
    dp_barker_rdp,
    minibatch_penalty_rdp,
    wbk_amplified_rdp,
)
from pyro_dp.mechanisms import GaussianEvent, PrivacyLedger, RDPCurveEvent, SubsampledGaussianEvent

mp = pytest.importorskip("mpmath")
mp.mp.dps = 60


def _wbk9(q, eps_p, alpha):
    """WBK19 Thm 9 / Heikkilä et al. 2019 Cor 2 / thesis Thm 7 (eq. 22), direct evaluation."""
    q = mp.mpf(q)
    s = 1 + q**2 * mp.binomial(alpha, 2) * min(4 * (mp.e ** eps_p(2) - 1), 2 * mp.e ** eps_p(2))
    s += 2 * mp.fsum(q**j * mp.binomial(alpha, j) * mp.e ** ((j - 1) * eps_p(j)) for j in range(3, alpha + 1))
    return mp.log(s) / (alpha - 1)


def _thm2(b):
    """Heikkilä et al. 2019 Thm 2 (eq. 21)."""
    return lambda a: mp.mpf(5) / (2 * b) + mp.log(mp.mpf(2 * b) / (b - 5 * a)) / (2 * (a - 1)) + mp.mpf(2 * a) / (b - 5 * a)


@pytest.mark.parametrize("b, n", [(1000, 100_000), (1000, 10**6), (50, 500), (11, 11)])
def test_dp_barker_rdp_golden(b, n):
    orders, eps = dp_barker_rdp(b, n)
    assert orders == tuple(range(2, min((b - 1) // 5, 256) + 1))
    for i in (0, len(orders) // 2, len(orders) - 1):
        a = orders[i]
        assert eps[i] == pytest.approx(float(_wbk9(mp.mpf(b) / n, _thm2(b), a)), rel=1e-12)


def test_dp_barker_reproduces_heikkila_figure_2():
    """Heikkilä et al. 2019 §4 / Fig. 2: N = 1e6, b = 1000, 20 000 sampling + 1 000 burn-in
    iterations of DP Barker, plus DPVI initialisation at (0.22, 1e-6): reported (1.22, 2e-6)-DP.
    Thm 2 + Cor 2 with Mironov's conversion (the paper's) at delta = 2e-6 give 0.9997 for the
    21 000 iterations. (We read the DPVI cost as added in epsilon, as the figure caption
    suggests.) The default, improved conversion (Balle et al. 2020 Thm 21) certifies 0.8292
    for the same curve, the value of dp_accounting's ``compute_epsilon``."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    orders, eps = dp_barker_rdp(1000, 10**6)
    e, _ = rdp_epsilon(orders, 21_000 * eps, 2e-6, conversion="mironov")
    assert round(e + 0.22, 2) == 1.22
    assert e == pytest.approx(0.99974, abs=1e-5)
    improved, _ = rdp_epsilon(orders, 21_000 * eps, 2e-6)
    assert improved == pytest.approx(0.82919, abs=1e-5)
    assert compute_epsilon(orders, 21_000 * eps, 2e-6)[0] <= improved <= e


@pytest.mark.parametrize("q, nm", [(0.01, 1.0), (0.001, 2.0), (0.1, 5.0)])
def test_minibatch_penalty_rdp_golden_and_vs_dp_accounting(q, nm):
    """Thesis Thm 8: eps'(alpha) = alpha / (2 tau), tau = nm^2, amplified by WBK19 Thm 9.
    dp_accounting implements the strengthened WBK19 Thm 27 for the same mechanism (sampling
    without replacement, replace-one): it can only be tighter."""
    from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_sample_wor_gaussian

    orders = list(range(2, 65))
    ours = minibatch_penalty_rdp(q, nm, orders)
    tau = mp.mpf(nm) ** 2
    for i in (0, 10, 62):
        golden = _wbk9(q, lambda a: mp.mpf(a) / (2 * tau), orders[i])
        assert ours[i] == pytest.approx(float(golden), rel=1e-12)
    theirs = _compute_rdp_sample_wor_gaussian(q, nm, orders)
    assert np.all(theirs <= ours * (1 + 1e-12))
    # the two agree closely at small orders, where the min{} of Thm 27 picks Thm 9's term
    assert theirs[0] == pytest.approx(ours[0], rel=1e-9)


def test_barker_orders_and_invalid_orders():
    assert barker_orders(11) == (2,)
    assert barker_orders(1000)[-1] == 199
    assert barker_orders(10**5)[-1] == 256  # capped: fewer orders are only pessimistic
    with pytest.raises(ValueError, match="too small"):
        barker_orders(10)
    with pytest.raises(ValueError, match="b/5"):
        barker_batch_rdp(100, [20])  # 5 alpha = b: Thm 2 does not hold
    with pytest.raises(ValueError, match="b/5"):
        barker_batch_rdp(100, [2.5])  # non-integer order
    with pytest.raises(ValueError, match="integer"):
        wbk_amplified_rdp(0.1, lambda j: 0.1, [2.5])
    with pytest.raises(ValueError, match="num_rows"):
        dp_barker_rdp(100, 50)


def test_rdp_curve_events_never_extrapolate():
    """A ledger of Barker curves composes on the listed orders only; adding a curve with fewer
    orders can only raise epsilon; accountants that cannot analyse RDP curves refuse them."""
    orders, eps = dp_barker_rdp(1000, 10**5)
    ev = RDPCurveEvent(tuple(map(float, orders)), tuple(eps.tolist()))
    led = PrivacyLedger()
    led.record(ev, 1000)
    e_full = get_accountant("rdp", led).get_epsilon(1e-5)
    e_golden, _ = rdp_epsilon(orders, 1000 * eps, 1e-5)
    assert e_full == pytest.approx(e_golden, rel=1e-12)
    led2 = led.copy()
    short_orders, short_eps = dp_barker_rdp(20, 10**5)  # orders 2, 3 only
    led2.record(RDPCurveEvent(tuple(map(float, short_orders)), tuple(short_eps.tolist())))
    assert get_accountant("rdp", led2).get_epsilon(1e-5) > e_full
    led2.record(GaussianEvent(100.0))  # composes at every order
    get_accountant("rdp", led2).get_epsilon(1e-5)
    for name in ("gdp", "pld", "prv", "dp_rdp", "zcdp"):
        with pytest.raises(UnsupportedEventError):
            get_accountant(name, led).get_epsilon(1e-5)


# ---------------------------------------------------------------------------- subsampled Gaussian


def test_poisson_subsampled_gaussian_pld_vs_prv_add_remove():
    """dp_accounting's PLD and prv_accountant (a second library) agree on the
    Poisson-subsampled Gaussian within PRV's stated eps_error (add/remove: PRV's relation)."""
    led = PrivacyLedger("add_remove")
    led.record(SubsampledGaussianEvent(0.01, 1.0, "poisson"), 2000)
    e_pld = get_accountant("pld", led).get_epsilon(1e-5)
    e_prv = get_accountant("prv", led, eps_error=0.01).get_epsilon(1e-5)  # an upper bound
    assert e_pld <= e_prv + 1e-9
    assert e_prv - e_pld <= 2 * 0.01 + 1e-3


def test_poisson_subsampled_gaussian_substitute_one_step_oracle():
    """Substitute relation, one step, checked against a direct numerical integral.
    Contributions lie in [-1/2, 1/2] (in units of the substitute sensitivity) and the absent
    row contributes 0, so the pair of output laws is P = (1-q) N(0, s^2) + q N(1/2, s^2),
    Q = (1-q) N(0, s^2) + q N(-1/2, s^2); delta(eps) = int max(0, p - e^eps q) (the hockey-stick
    divergence). PLD must be pessimistic and within its discretisation error."""
    from scipy import optimize, stats

    q, s = 0.05, 0.8
    led = PrivacyLedger()
    led.record(SubsampledGaussianEvent(q, s, "poisson"))
    acc = get_accountant("pld", led)

    def p_sf(x, sign):  # P(X > x) under (1-q) N(0, s^2) + q N(sign/2, s^2)
        return (1 - q) * stats.norm.sf(x, 0, s) + q * stats.norm.sf(x, sign * 0.5, s)

    def log_ratio(x):
        p = (1 - q) * stats.norm.pdf(x, 0, s) + q * stats.norm.pdf(x, 0.5, s)
        qq = (1 - q) * stats.norm.pdf(x, 0, s) + q * stats.norm.pdf(x, -0.5, s)
        return math.log(p / qq)

    for eps in (0.02, 0.05, 0.1):
        # p/q is increasing in x: the hockey stick integrates over x > x*, in closed form
        x_star = optimize.brentq(lambda x: log_ratio(x) - eps, -10, 10, xtol=1e-14)
        d = p_sf(x_star, 1) - math.exp(eps) * p_sf(x_star, -1)
        d_pld = acc.get_delta(eps)
        assert d_pld >= d * (1 - 1e-9)
        assert d_pld <= d * 1.01 + 1e-9


def test_schemes_and_relations_are_matched_or_refused():
    """Poisson sampling is analysed by 'pld' under substitute (centred contributions) and by
    'prv'/'rdp' only under add/remove; sampling without replacement only by 'dp_rdp' under
    substitute (WBK19)."""
    wor, poi = SubsampledGaussianEvent(0.01, 1.0, "without_replacement"), SubsampledGaussianEvent(0.01, 1.0)
    for name, ev, relation in [
        ("pld", wor, "substitute"),
        ("prv", poi, "substitute"),
        ("rdp", poi, "substitute"),
        ("dp_rdp", poi, "substitute"),
        ("dp_rdp", wor, "add_remove"),
        ("gdp", poi, "substitute"),
    ]:
        led = PrivacyLedger(relation)
        led.record(ev, 10)
        with pytest.raises(UnsupportedEventError):
            get_accountant(name, led).get_epsilon(1e-5)
    led = PrivacyLedger()
    led.record(poi, 10)
    assert get_accountant("pld", led).get_epsilon(1e-5) > 0
    led = PrivacyLedger()
    led.record(wor, 10)
    assert get_accountant("dp_rdp", led).get_epsilon(1e-5) > 0
