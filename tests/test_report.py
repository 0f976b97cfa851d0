"""#42: one privacy report per run (pyro_dp.privacy_report): its total is pyro_dp.get_epsilon for
every kernel, its curve is the ε of each iteration's ledger prefix and ends at the total, it
round-trips through JSON, and making it spends nothing."""
import json
import math
import warnings

import pytest
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.accounting import get_accountant
from pyro_dp.kernels.base import ChainLedger
from pyro_dp.mechanisms import GaussianEvent, PrivacyLedger
from pyro_dp.report import _up

from .kernels.golden_cases import cases
from .kernels.helpers import gauss_model, make_data

CASES = cases()
DELTA = 1e-5


def _run(name, num_chains=2, num_samples=12, warmup_steps=8):
    factory, data = CASES[name]
    kernel = factory()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, num_chains=num_chains,
                    disable_progbar=True)
        mcmc.run(data)
    return mcmc


def _ran(kernel, y, num_samples, warmup_steps=0):
    """``kernel`` after one quiet ``MCMC`` run on ``y``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=True).run(y)
    return kernel


def _marks(kernel):
    return [(led.chain_id, [list(m) for m in led.iteration_marks], led._pending) for led in kernel.privacy.chain_ledgers()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_total_is_get_epsilon_curve_ends_there_json_round_trips_and_nothing_is_spent(name):
    mcmc = _run(name)
    kernel = mcmc.kernel
    ledger, marks, cache = kernel.ledger, _marks(kernel), dict(kernel.privacy.__dict__.get("_eps_cache", {}))
    report = pyro_dp.privacy_report(mcmc, delta=DELTA, curve_points=8)  # few points: "dp_rdp" takes 0.1 s each
    assert report.epsilon == pyro_dp.get_epsilon(mcmc, DELTA)
    assert report.curve_epsilon[-1] == report.epsilon and len(report.curve_iterations) <= 9
    assert report.curve_iterations[0] == 0 and report.curve_epsilon[0] == 0.0
    assert report.curve_iterations[-1] == 20  # warmup + samples, per chain
    assert all(b >= a * (1 - 1e-6) for a, b in zip(report.curve_epsilon, report.curve_epsilon[1:]))
    text = report.to_json()
    json.loads(text)  # strict JSON (no NaN/Infinity literals)
    assert pyro_dp.PrivacyReport.from_json(text) == report
    assert pyro_dp.PrivacyReport.from_dict(report.to_dict()) == report
    # the parts add up to the whole
    assert report.num_chains == 2 and [c.run_chain for c in report.chains] == [0, 1]
    assert sum(c.releases for c in report.chains) == sum(g.releases for g in report.mechanisms) == ledger.num_releases
    assert all(c.iterations == 20 for c in report.chains)
    # a reader recomputes the total from the report alone
    assert get_accountant(report.accountant, report.ledger()).get_epsilon(DELTA) == pytest.approx(report.epsilon,
                                                                                                  rel=1e-9)
    # read-only: the same ledger, the same marks, nothing recorded
    assert kernel.ledger == ledger and _marks(kernel) == marks
    assert dict(kernel.privacy.__dict__.get("_eps_cache", {})) == cache
    assert str(report).startswith("Posterior samples were drawn with the differentially private MCMC kernel")


def _epsilon_by_iteration(name, steps):
    """ε (gdp, or the kernel's accountant) of one chain's ledger after each of ``steps`` iterations."""
    factory, data = CASES[name]
    k = factory()
    k.setup(0, data)
    params, eps = k.initial_params, [0.0]
    for _ in range(steps):
        params = k.sample(params)
        eps.append(get_accountant(k.accountant, k.ledger).get_epsilon(DELTA))
    return k, eps


def _check_curve(kernel, eps_by_iteration):
    report = pyro_dp.privacy_report(kernel, delta=DELTA)
    assert report.curve_iterations == tuple(range(len(eps_by_iteration)))
    for t, e in zip(report.curve_iterations, report.curve_epsilon):
        assert e == pytest.approx(eps_by_iteration[t], rel=1e-9, abs=1e-12), t


@pytest.mark.parametrize("name", ["penalty_init", "hmc", "barker"])
def test_curve_is_the_epsilon_of_each_iterations_ledger_prefix(name):
    """A private start (3 releases in iteration 1), DP-HMC (its first gradient in iteration 1,
    and a trajectory that leaves the support releases no ratio) and an RDP curve."""
    kernel, eps = _epsilon_by_iteration(name, 15)
    _check_curve(kernel, eps)


def test_curve_check_has_power(monkeypatch):
    """Mutant: releases spread evenly over the iterations (ignoring where they were made) put
    the private start's releases late, under-stating the early ε: the check fails."""
    kernel, eps = _epsilon_by_iteration("penalty_init", 15)

    def spread(self, iterations):
        n, T = self.num_releases, max(self.num_iterations, 1)
        return [min(n, round(n * t / T)) for t in iterations]

    monkeypatch.setattr(ChainLedger, "release_positions", spread)
    with pytest.raises(AssertionError):
        _check_curve(kernel, eps)


def test_budget_stop_plan_and_flat_tail():
    y = make_data(300, seed=3)
    kernel = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, epsilon=1.0, delta=DELTA, num_iterations=10, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=20, warmup_steps=5, disable_progbar=True)  # 25 > the 10 planned
        mcmc.run(y)
    report = pyro_dp.privacy_report(mcmc)
    assert report.delta == DELTA and report.within_budget is True and report.epsilon <= 1.0
    plan = report.plan
    assert plan.epsilon == 1.0 and plan.delta == DELTA and plan.num_iterations == 10
    assert plan.iterations_allowed == kernel.privacy.steps_allowed and plan.planned_epsilon <= 1.0
    assert plan.curve_epsilon[-1] == plan.planned_epsilon and plan.curve_iterations[-1] == 25
    chain, = report.chains
    assert chain.budget_exhausted is True and chain.iterations == 25
    assert chain.private_iterations == plan.iterations_allowed < 25
    stop = chain.private_iterations
    tail = [e for t, e in zip(report.curve_iterations, report.curve_epsilon) if t >= stop]
    assert tail and all(e == report.epsilon for e in tail)  # nothing released after the stop
    assert "The budget was (ε = 1, δ = 1e-05)" in str(report)


def test_delta_at_epsilon_and_rounding_up():
    mcmc = _run("penalty", num_chains=1)
    report = pyro_dp.privacy_report(mcmc, delta=DELTA, epsilon=2.0)
    acc = get_accountant("gdp", pyro_dp.get_ledger(mcmc))
    assert report.at_epsilon == 2.0 and report.delta_at_epsilon == acc.get_delta(2.0)
    assert "Equivalently, it is (ε = 2, δ = " in str(report)
    assert pyro_dp.PrivacyReport.from_json(report.to_json()) == report
    assert _up(1.2341) == "1.24" and _up(2.0) == "2" and _up(6.5661801) == "6.57" and _up(0.0012301) == "0.00124"
    assert float(_up(report.epsilon)) >= report.epsilon and f"(ε = {_up(report.epsilon)}, δ = 1e-05)" in str(report)


def test_non_private_run_reports_infinity_in_strict_json():
    y = make_data(100, seed=3)
    kernel = _ran(pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=0.0, non_private=True, seed=0),
                  y, 5)
    report = pyro_dp.privacy_report(kernel)
    assert report.epsilon == math.inf and report.non_private
    assert '"epsilon": "inf"' in report.to_json()
    assert pyro_dp.PrivacyReport.from_json(report.to_json()) == report
    assert "NOT differentially private" in str(report)


def test_report_of_nothing_and_of_a_foreign_object_is_refused():
    kernel = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=3.0, seed=0)
    with pytest.raises(ValueError, match="released nothing"):
        pyro_dp.privacy_report(kernel)
    with pytest.raises(TypeError, match="MCMC"):
        pyro_dp.privacy_report(object())
    with pytest.raises(ValueError, match="not a pyro_dp privacy report"):
        pyro_dp.PrivacyReport.from_dict({"format": "something else"})


def test_plot_draws_spent_planned_and_budget():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = make_data(300, seed=3)
    kernel = _ran(pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, epsilon=2.0, delta=DELTA, seed=0), y, 30, 10)
    report = pyro_dp.privacy_report(kernel)
    ax = report.plot()
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["planned (1 chain)", "spent (1 chain)", "budget ε = 2"]
    assert list(ax.get_lines()[1].get_ydata()) == list(report.curve_epsilon)
    assert list(ax.get_lines()[0].get_ydata()) == list(report.plan.curve_epsilon)
    plt.close("all")


# ------------------------------------------------------------------ iteration marks


def test_iteration_marks_survive_copies_pickles_and_state_dicts():
    import pickle

    led = ChainLedger(kernel_id="k", chain_id="c")
    led.record(GaussianEvent(4.0), 3, label="init:X")
    for _ in range(4):
        led.record(GaussianEvent(9.0))
        led.end_iteration()
    led.end_iteration()  # an iteration after a budget stop: no release
    assert led.iteration_marks == [[4, 1], [1, 3], [0, 1]] and led.num_iterations == 5
    assert led.release_positions([0, 1, 2, 4, 5]) == [0, 4, 5, 7, 7]
    for other in (led.copy(), pickle.loads(pickle.dumps(led))):
        assert other.iteration_marks == led.iteration_marks
    fresh = ChainLedger(kernel_id="k2", chain_id="c")
    fresh.load_state_dict(led.state_dict())
    assert fresh.iteration_marks == led.iteration_marks and fresh.kernel_id == "k2"
    restored = ChainLedger(kernel_id="k2", chain_id="c")
    restored.extend(led)  # how a checkpoint's ledger is restored into a new kernel object
    assert restored.iteration_marks == led.iteration_marks and restored == led


def test_releases_without_marks_count_from_where_they_were_recorded():
    """Pessimistic: an old ledger (no marks) counts all its releases at iteration 0; a plain
    ledger extended into a chain's counts from the iteration before."""
    old = PrivacyLedger()
    old.record(GaussianEvent(5.0), 6)
    led = ChainLedger()
    led.extend(old)
    assert led.release_positions([0, 1]) == [6, 6]
    led.record(GaussianEvent(5.0))
    led.end_iteration()
    led.record(GaussianEvent(5.0), 2)
    led.extend(old)  # pending releases and the extension: not tied to the next iteration
    led.record(GaussianEvent(5.0))
    led.end_iteration()
    assert led.iteration_marks == [[6, 0], [1, 1], [2, 0], [6, 0], [1, 1]]
    assert led.release_positions([0, 1, 2]) == [6, 15, 16]
    bare = ChainLedger()
    bare.load_state_dict(old.state_dict())  # a state without marks
    assert bare.release_positions([0, 3]) == [6, 6]


def test_chains_run_in_worker_processes_bring_their_iteration_marks_back(monkeypatch):
    import pyro.infer.mcmc.api as api

    monkeypatch.setattr(api.mp, "cpu_count", lambda: 8)
    y = make_data(50)
    kernel = pyro_dp.DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=3.0, seed=0)
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=10, num_chains=2, disable_progbar=True)
    assert type(mcmc.sampler).__name__ == "_MultiSampler"
    mcmc.run(y)
    mcmc.run(y)  # a second run: four chains of the kernel object, two of them in the last run
    report = pyro_dp.privacy_report(mcmc, delta=DELTA)
    assert report.epsilon == pyro_dp.get_epsilon(mcmc, DELTA) and report.num_releases == 120
    assert [c.iterations for c in report.chains] == [30] * 4
    assert sorted(c.run_chain for c in report.chains if c.run_chain is not None) == [0, 1]
    # after t iterations of each chain: 4t releases of the same Gaussian
    for t, e in zip(report.curve_iterations, report.curve_epsilon):
        led = PrivacyLedger()
        led.record(GaussianEvent(3.0), 4 * t)
        assert e == pytest.approx(get_accountant("gdp", led).get_epsilon(DELTA), rel=1e-12)


# ------------------------------------------------------------------ issue 61: resumes, per-chain ε, N, clips


def _resume(old_kernel, y, num_samples, make):
    """A new kernel continuing ``old_kernel``'s chain through ``torch.save``/plain ``torch.load``."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(old_kernel.state_dict(), buf)
    buf.seek(0)
    kernel = make()
    kernel.load_state_dict(torch.load(buf))  # torch's default weights_only=True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=0, disable_progbar=True)
        mcmc.run(y)
    return kernel, mcmc


def test_a_resumed_run_reports_its_full_length_after_any_number_of_resumes():
    y = make_data(60)

    def make():
        return pyro_dp.DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=20.0, seed=0)

    kernel = _ran(make(), y, num_samples=150, warmup_steps=50)
    for more, total in ((100, 300), (40, 340)):  # two resumes in a row: 200 + 100 + 40 iterations
        kernel, mcmc = _resume(kernel, y, more, make)
        report = pyro_dp.privacy_report(mcmc, delta=DELTA)
        (chain,) = report.chains
        assert (chain.iterations, chain.private_iterations, chain.releases) == (total, total, total)
        assert f"over 1 chain of {total} iterations (warmup included)" in str(report)
        assert report.curve_iterations[-1] == total and report.curve_epsilon[-1] == report.epsilon


def test_a_checkpoint_without_iteration_marks_still_reports_the_private_iterations():
    """A checkpoint written before the marks were saved: the paragraph falls back on the chain's
    private iterations, never the resumed part alone."""
    from pyro_dp.report import _chain_iterations

    summary = pyro_dp.report.ChainSummary(chain=0, chain_id="c", iterations=100, releases=300, epsilon=1.0,
                                          by_label=(("", 300),), run_chain=0, private_iterations=300)
    assert _chain_iterations(summary) == 300
    assert _chain_iterations(summary.__class__(**{**summary.__dict__, "private_iterations": None})) == 100


def test_paragraph_gives_each_chains_epsilon_n_clip_bounds_and_what_a_noise_multiplier_is():
    y = make_data(80)
    kernel = pyro_dp.DPPenalty(gauss_model, 0.2, llr_clip=0.5, noise_multiplier=30.0, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(kernel, num_samples=20, warmup_steps=10, num_chains=2, disable_progbar=True)
        mcmc.run(y)
    report = pyro_dp.privacy_report(mcmc, delta=DELTA)
    text = " ".join(str(report).split())
    chain_eps = _up(report.chains[0].epsilon)
    assert report.chains[0].epsilon == report.chains[1].epsilon < report.epsilon
    assert f"Each of its 2 chains alone spent ε = {chain_eps} at δ = 1e-05" in text
    assert report.num_rows == 80 and "N = 80 rows" in text
    assert report.clips == (("llr_clip", 0.5),) and "llr_clip = 0.5" in text
    assert "noise multiplier 30: a noise multiplier is the noise's standard deviation divided by" in text
    assert "(twice the clip bound under the substitute-one relation)" in text
    assert pyro_dp.PrivacyReport.from_json(report.to_json()) == report  # the new fields round-trip


def test_paragraph_of_chains_with_different_epsilons_lists_them():
    from pyro_dp.report import _per_chain

    y = make_data(40)
    kernel = _ran(pyro_dp.DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=20.0, seed=0), y, 10)
    kernel = _ran(kernel, y, 30)  # a second, longer run of the same kernel object: two chains
    report = pyro_dp.privacy_report(kernel, delta=DELTA)
    sentence = _per_chain(report)
    assert sentence.startswith("Each chain alone, at δ = 1e-05, spent ε = ")
    assert f"{_up(report.chains[0].epsilon)} (chain 0), {_up(report.chains[1].epsilon)} (chain 1)" in sentence


def test_add_remove_reports_the_stated_public_row_count_not_n():
    from pyro_dp.report import _public_rows

    y = make_data(50)
    kernel = pyro_dp.DPSGLD(gauss_model, 10, 1e-3, 1.0, relation="add_remove", public_num_rows=1000, seed=0)
    assert _public_rows(kernel, "add_remove") == 1000
    kernel = pyro_dp.DPPenalty(gauss_model, 0.2, llr_clip=1.0, noise_multiplier=20.0, seed=0)
    kernel.setup(0, y)
    assert _public_rows(kernel, "substitute") == 50
