"""Planning helpers: iteration budgets and noise calibration never overshoot, and match the
thesis' closed forms (Räisä 2021, Thm 5, 6, 10)."""
import math

import mpmath
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pyro_dp.accounting import (
    calibrate,
    calibrate_noise_multiplier,
    max_iterations,
    planned_epsilon,
    planned_ledger,
    zcdp_max_iterations_penalty,
    zcdp_rho_budget,
)
from pyro_dp.mechanisms import GaussianEvent, PureDPEvent, SubsampledGaussianEvent

EPS = st.floats(0.05, 20.0)
DELTA = st.integers(2, 12).map(lambda e: 10.0**-e)
FAST = settings(max_examples=40, deadline=None)


def dp_hmc(nm_l, nm_g, L):
    """DP-HMC (thesis Alg. 3, reusing the released gradient): one initial gradient, then
    per iteration one log-likelihood ratio and L gradients."""
    return [GaussianEvent(nm_g)], [(GaussianEvent(nm_l), 1), (GaussianEvent(nm_g), L)]


@FAST
@given(eps=EPS, delta=DELTA, k=st.integers(1, 100_000), chains=st.integers(1, 4))
def test_calibrate_noise_multiplier_never_overshoots_and_is_tight(eps, delta, k, chains):
    nm = calibrate_noise_multiplier(eps, delta, k, num_chains=chains)
    assert planned_epsilon(delta, k, GaussianEvent(nm), num_chains=chains) <= eps
    assert planned_epsilon(delta, k, GaussianEvent(nm * (1 - 1e-9)), num_chains=chains) > eps


@FAST
@given(eps=EPS, delta=DELTA, k=st.integers(1, 5000), L=st.integers(1, 20), ratio=st.floats(0.2, 5.0))
def test_calibrate_never_overshoots(eps, delta, k, L, ratio):
    def events(s):
        return dp_hmc(s, ratio * s, L)

    s = calibrate(eps, delta, k, events, rtol=1e-9)
    fixed, per = events(s)
    assert planned_epsilon(delta, k, per, fixed=fixed) <= eps
    fixed, per = events(s * (1 - 2e-9))
    assert planned_epsilon(delta, k, per, fixed=fixed) > eps


@FAST
@given(eps=EPS, delta=DELTA, nm_l=st.floats(1.0, 300.0), nm_g=st.floats(1.0, 300.0),
       L=st.integers(1, 20), chains=st.integers(1, 3))
def test_max_iterations_fits_and_the_next_does_not(eps, delta, nm_l, nm_g, L, chains):
    fixed, per = dp_hmc(nm_l, nm_g, L)
    assume(planned_epsilon(delta, 0, per, fixed=fixed, num_chains=chains) <= eps)
    k = max_iterations(eps, delta, per, fixed=fixed, num_chains=chains)
    assert planned_epsilon(delta, k, per, fixed=fixed, num_chains=chains) <= eps
    assert planned_epsilon(delta, k + 1, per, fixed=fixed, num_chains=chains) > eps


@pytest.mark.parametrize("name", ["zcdp", "rdp", "prv", "dp_rdp"])
def test_other_accountants_never_overshoot(name):
    nm = calibrate_noise_multiplier(2.0, 1e-6, 300, accountant=name, rtol=1e-6)
    assert planned_epsilon(1e-6, 300, GaussianEvent(nm), accountant=name) <= 2.0
    assert planned_epsilon(1e-6, 300, GaussianEvent(nm * (1 - 2e-6)), accountant=name) > 2.0
    assert nm >= calibrate_noise_multiplier(2.0, 1e-6, 300)  # gdp is the tightest
    k = max_iterations(2.0, 1e-6, GaussianEvent(nm), accountant=name)
    assert k >= 300 and planned_epsilon(1e-6, k + 1, GaussianEvent(nm), accountant=name) > 2.0


def test_pld_planning_with_pure_dp_releases():
    per = [(GaussianEvent(30.0), 1), (PureDPEvent(0.01), 1)]
    k = max_iterations(1.0, 1e-5, per, accountant="pld", accountant_kwargs={"value_discretization_interval": 1e-3})
    eps = lambda n: planned_epsilon(1e-5, n, per, accountant="pld",  # noqa: E731
                                    accountant_kwargs={"value_discretization_interval": 1e-3})
    assert eps(k) <= 1.0 < eps(k + 1)


@pytest.mark.parametrize("relation,q,k", [("add_remove", 0.02, 100), ("substitute", 0.05, 100)])
def test_pld_two_stage_search_is_certified_by_the_fine_accountant(relation, q, k):
    """PLD searches locate on a 10x coarser grid and certify on the requested one
    (planning module doc): the results are those of a plain search on the fine grid —
    the calibrated noise fits and 1e-6 less does not; the budget's k fits and k + 1 does not
    (so it is the plain search's answer: eps grows with k)."""
    ev = lambda s: ((), [SubsampledGaussianEvent(q, s)])  # noqa: E731
    eps = lambda n, s: planned_epsilon(1e-5, n, SubsampledGaussianEvent(q, s), accountant="pld",  # noqa: E731
                                       relation=relation)
    nm = calibrate(2.0, 1e-5, k, ev, accountant="pld", relation=relation, rtol=1e-6)
    assert eps(k, nm) <= 2.0 < eps(k, nm * (1 - 1e-6))
    n = max_iterations(2.0, 1e-5, SubsampledGaussianEvent(q, 1.1 * nm), accountant="pld", relation=relation)
    assert eps(n, 1.1 * nm) <= 2.0 < eps(n + 1, 1.1 * nm)


@pytest.mark.parametrize("accountant", ["pld", "gdp"])
def test_calibrate_at_least_is_the_max_without_a_search_when_it_fits(accountant):
    """``calibrate(..., at_least=a)`` is ``max(a, calibrate(...))``; when ``a`` fits the budget
    it is found with one evaluation (DP-SGLD's explicit step at a large budget: no search over
    the small scales that are slow to account)."""
    q, k = 0.05, 200
    calls = []

    def ev(s):
        calls.append(s)
        return (), [SubsampledGaussianEvent(q, s)] if accountant != "gdp" else [GaussianEvent(s)]

    plain = calibrate(2.0, 1e-5, k, ev, accountant=accountant, rtol=1e-6)
    assert len(calls) > 3  # a search
    for a in (0.5 * plain, plain * (1 - 1e-3), plain * 1.001, 3.0 * plain):
        calls.clear()
        got = calibrate(2.0, 1e-5, k, ev, accountant=accountant, rtol=1e-6, at_least=a)
        assert got == max(a, plain) if a > plain else got == pytest.approx(plain, rel=1e-12)
        assert (len(calls) == 1) == (a > plain)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="at_least"):
            calibrate(2.0, 1e-5, k, ev, accountant=accountant, at_least=bad)


@pytest.mark.parametrize("start", [None, 1e-3, 0.37, 0.4, 0.41, 1e3])
@pytest.mark.parametrize("power", [0.5, 1.0, 2.0])
def test_secant_scale_search_brackets_and_converges(start, power):
    """The safeguarded Illinois search on a smooth eps(s) = (c / s)^p: from any start (a coarse
    guess, good or bad) the result fits, 1e-9 less does not, in few evaluations."""
    from pyro_dp.accounting.planning import _secant_scale

    calls = []

    def eps_of(s):
        calls.append(s)
        return (0.4 / s) ** power

    s = _secant_scale(eps_of, 1.0, 1e-9, start=start)
    assert eps_of(s) <= 1.0 < eps_of(s * (1 - 1e-9)) and s == pytest.approx(0.4, rel=1e-9)
    assert len(calls) <= 40  # bisection from [0.5, 1] alone needs ~30 steps after bracketing


@pytest.mark.parametrize("start", [None, 0, 1, 5, 6, 7, 1000, 10**9])
@pytest.mark.parametrize("root", [0, 6, 123_456])
def test_secant_count_search_from_any_start(start, root):
    """The integer search on eps(k) = 0.1 + 1e-3 k^0.7 (increasing; k = root is the last that
    fits): from any guess, the answer fits and the next does not, in few evaluations; fixed
    releases over budget and free iterations raise."""
    from pyro_dp.accounting.planning import _secant_count

    calls = []

    def eps_of(k):
        calls.append(k)
        return 0.1 + 1e-3 * k**0.7

    target = eps_of(root + 0.5)
    calls.clear()
    assert _secant_count(eps_of, target, start=start) == root
    assert len(calls) <= 30  # doubling then bisection: ~34 at root = 123 456
    with pytest.raises(ValueError, match="fixed releases"):
        _secant_count(lambda k: 1.0, 0.5, start=start)
    with pytest.raises(ValueError, match="unbounded"):
        _secant_count(lambda k: 0.0, 0.5, start=start)


@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6])
@pytest.mark.parametrize("tau,n,alpha", [(1.0, 100, 0.5), (0.37, 1000, 0.5), (2.0, 50, 0.8), (0.05, 10**5, 0.3)])
def test_thesis_theorem_5_zcdp_penalty(eps, delta, tau, n, alpha):
    k = zcdp_max_iterations_penalty(eps, delta, tau=tau, n=n, alpha=alpha)
    nm = tau * n**alpha  # noise std tau n^alpha c(theta, theta') on a sensitivity-c query
    assert max_iterations(eps, delta, GaussianEvent(nm), accountant="zcdp") == k
    # ... and the tight accountant (Thm 6) allows at least as many
    assert max_iterations(eps, delta, GaussianEvent(nm)) >= k


@mpmath.workdps(50)
@pytest.mark.parametrize("eps,delta,nm", [(1.0, 1e-5, 10.0), (0.5, 1e-6, 31.6), (3.0, 1e-4, 5.0)])
def test_thesis_theorem_6_iterations(eps, delta, nm):
    """k from the search satisfies Thm 6's delta(eps) <= delta, k + 1 does not."""
    def thm6(k):
        m = mpmath.mpf(k) / (2 * mpmath.mpf(nm) ** 2)
        s = 2 * mpmath.sqrt(m)
        return (mpmath.erfc((eps - m) / s) - mpmath.exp(eps) * mpmath.erfc((eps + m) / s)) / 2

    k = max_iterations(eps, delta, GaussianEvent(nm))
    assert thm6(k) <= delta < thm6(k + 1)


@pytest.mark.parametrize("L", [1, 5, 20])
@pytest.mark.parametrize("tau_l,tau_g,n", [(0.5, 0.5, 1000), (0.1, 2.0, 500), (3.0, 0.2, 10**4)])
def test_thesis_theorem_10_dp_hmc_zcdp(L, tau_l, tau_g, n):
    eps, delta = 1.0, 0.1 / n
    rho = zcdp_rho_budget(eps, delta)
    rho_l, rho_g = 1 / (2 * tau_l**2 * n), 1 / (2 * tau_g**2 * n)
    expected = math.floor((rho - rho_g) / (rho_l + L * rho_g))
    fixed, per = dp_hmc(tau_l * math.sqrt(n), tau_g * math.sqrt(n), L)
    if expected < 0:
        with pytest.raises(ValueError, match="fixed releases alone"):
            max_iterations(eps, delta, per, fixed=fixed, accountant="zcdp")
    else:
        assert max_iterations(eps, delta, per, fixed=fixed, accountant="zcdp") == expected


@pytest.mark.parametrize("chains", [1, 2, 3, 7])
def test_chains_compose(chains):
    total = max_iterations(1.0, 1e-5, GaussianEvent(50.0))
    assert max_iterations(1.0, 1e-5, GaussianEvent(50.0), num_chains=chains) == total // chains
    nm1 = calibrate_noise_multiplier(1.0, 1e-5, 100 * chains)
    assert calibrate_noise_multiplier(1.0, 1e-5, 100, num_chains=chains) == pytest.approx(nm1, rel=1e-12)


def test_planned_ledger_counts():
    fixed, per = dp_hmc(3.0, 4.0, 10)
    ledger = planned_ledger(5, per, fixed=fixed, num_chains=2)
    assert ledger.num_releases == 2 * (1 + 5 * 11)
    assert ledger.aggregate() == {GaussianEvent(4.0): 2 * 51, GaussianEvent(3.0): 10}
    assert planned_ledger(3, (GaussianEvent(1.0), GaussianEvent(2.0))).num_releases == 6
    assert planned_ledger(3, (GaussianEvent(1.0), 4)).num_releases == 12


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: max_iterations(0.0, 1e-5, GaussianEvent(1.0)), ValueError, "epsilon"),
        (lambda: max_iterations(-1.0, 1e-5, GaussianEvent(1.0)), ValueError, "epsilon"),
        (lambda: max_iterations(math.inf, 1e-5, GaussianEvent(1.0)), ValueError, "epsilon"),
        (lambda: max_iterations(1.0, 0.0, GaussianEvent(1.0)), ValueError, "delta"),
        (lambda: max_iterations(1.0, 1.0, GaussianEvent(1.0)), ValueError, "delta"),
        (lambda: max_iterations(1.0, 1e-5, []), ValueError, "at least one"),
        (lambda: max_iterations(1.0, 1e-5, [1.0]), TypeError, "PrivacyEvent"),
        (lambda: max_iterations(1.0, 1e-5, [(GaussianEvent(1.0), -1)]), ValueError, "non-negative"),
        (lambda: max_iterations(1.0, 1e-5, GaussianEvent(1.0), fixed=[(GaussianEvent(0.1), 5)]),
         ValueError, "fixed releases alone"),
        (lambda: max_iterations(1.0, 1e-5, GaussianEvent(math.inf)), ValueError, "unbounded"),
        (lambda: max_iterations(1.0, 1e-5, GaussianEvent(1.0), num_chains=0), ValueError, "num_chains"),
        (lambda: max_iterations(1.0, 1e-5, GaussianEvent(1.0), accountant="nope"), ValueError, "unknown"),
        (lambda: calibrate_noise_multiplier(1.0, 1e-5, 0), ValueError, "num_releases"),
        (lambda: calibrate_noise_multiplier(1.0, 1e-5, 2.5), TypeError, "num_releases"),
        (lambda: calibrate_noise_multiplier(1.0, 2.0, 10), ValueError, "delta"),
        (lambda: calibrate(1.0, 1e-5, 0, lambda s: ((), [GaussianEvent(s)])), ValueError, "num_iterations"),
        (lambda: calibrate(1.0, 1e-5, 10, "gauss"), TypeError, "callable"),
        (lambda: calibrate(1.0, 1e-5, 10, lambda s: ((), [GaussianEvent(1e3)])), ValueError, "every noise scale"),
        (lambda: calibrate(1.0, 1e-5, 10, lambda s: ([PureDPEvent(2.0)], [GaussianEvent(s)]), accountant="zcdp"),
         ValueError, "no noise scale"),
        (lambda: zcdp_max_iterations_penalty(1.0, 1e-5, tau=0.0, n=10, alpha=0.5), ValueError, "tau"),
        # s10 audit: fixed releases over the budget with a subsampled per-iteration release under "pld":
        # the search grew the scale until dp_accounting's std**2 overflowed (OverflowError)
        (lambda: calibrate(1.0, 1e-5, 10, lambda s: ([PureDPEvent(2.0)], [SubsampledGaussianEvent(0.1, s)]),
                           accountant="pld", relation="add_remove"),
         ValueError, "square overflows"),
    ],
)
def test_bad_inputs(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("accountant", ["gdp", "rdp", "pld"])
def test_max_iterations_stops_at_its_cap_and_evaluates_nothing_above_it(accountant, monkeypatch):
    """``cap``: the largest count that fits, or ``cap`` when the budget allows more, without
    composing any count above the cap (the plan of a generous budget: minutes of PLD
    composition for millions of iterations, 2026-11-29)."""
    import pyro_dp.accounting.planning as planning

    ev = [GaussianEvent(10.0)]
    full = max_iterations(1.0, 1e-5, ev, accountant=accountant)
    seen = []
    real = planning.planned_epsilon

    def spy(delta, k, *a, **kw):
        seen.append(k)
        return real(delta, k, *a, **kw)

    monkeypatch.setattr(planning, "planned_epsilon", spy)
    assert max_iterations(1.0, 1e-5, ev, accountant=accountant, cap=full + 3) == full  # the cap does not bind
    assert max_iterations(1.0, 1e-5, ev, accountant=accountant, cap=full - 2) == full - 2
    assert max(seen) <= full + 3
    seen.clear()
    # a generous budget: millions fit (Poisson-subsampled Gaussians where the accountant composes them)
    generous = [SubsampledGaussianEvent(0.1, 16.0)] if accountant == "pld" else [GaussianEvent(16.0)]
    assert max_iterations(200.0, 1e-5, generous, accountant=accountant, cap=1000) == 1000
    assert max(seen) <= 1000
    with pytest.raises(ValueError, match="cap"):
        max_iterations(1.0, 1e-5, ev, cap=-1)


def test_the_plan_says_when_its_cap_stopped_a_chain():
    from pyro_dp.kernels.plan import PLAN_CAP_MIN, PrivacyPlan, counts, plan_cap
    from pyro_dp.mechanisms import PrivacyLedger

    plan = PrivacyPlan(200.0, 1e-5, fixed=[], per_iteration=[GaussianEvent(2.0)], cap=5)
    assert plan.steps_allowed == 5 and plan.capped
    led = PrivacyLedger()
    led.record(GaussianEvent(2.0), 5)
    step = counts([GaussianEvent(2.0)])
    assert not plan.fits(led, counts([]), step)
    assert "the plan covers" in plan.stop_cause(led, step, 0)
    tight = PrivacyPlan(1.0, 1e-5, fixed=[], per_iteration=[GaussianEvent(10.0)], cap=100)
    assert tight.steps_allowed == 7 and not tight.capped
    assert "share of the budget" in tight.stop_cause(led, counts([GaussianEvent(10.0)] * 8), 0)
    assert plan_cap(1500) == PLAN_CAP_MIN and plan_cap(None) is None
