"""The ledger is written by the mechanism (issue 58): every release function of
``pyro_dp.mechanisms`` records its event in the recorder a kernel's step runs in, as it draws;
the engine writes the ledger from that record, and a step's own report (``info.events``) is only
a cross-check. Each test here is paired with a mutant that must fail it."""
import contextlib
import warnings
from collections import Counter

import pytest
import torch

import pyro_dp
import pyro_dp.testing
from pyro_dp.kernels import privacy_engine
from pyro_dp.kernels.privacy_engine import PrivacyEngine, ReleaseMismatchError
from pyro_dp.kernels.releases import ReleasePlan
from pyro_dp.mechanisms import (ClippedSum, GaussianEvent, GaussianStdReleaseSpec, NoiseSource, Recorder,
                                UnrecordedReleaseError, add_gaussian_noise, clipped_sum_with_noise,
                                draw_gaussian_noise, gaussian_release, gaussian_release_spec, noisy_count,
                                noisy_histogram, recorder as recorder_mod, release as release_mod)

from .golden_cases import cases
from .helpers import gauss_model, make_data


# --------------------------------------------------------------------------- (a) a step that misreports


class MisreportingPenalty(pyro_dp.DPPenalty):
    """Draws its noise through the mechanism (GaussianEvent(3.0)) but reports GaussianEvent(30.0):
    a contributor's bookkeeping error that, with the ledger written from the report, would have
    claimed ten times the noise."""

    def releases(self, state=None):
        return ReleasePlan((GaussianEvent(3.0), GaussianEvent(30.0)))

    def _step(self, state):
        new, info = super()._step(state)
        return new, info._replace(events=(GaussianEvent(30.0),))


def _misreport_is_caught():
    y = make_data(50, seed=1)
    k = MisreportingPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=3.0, seed=0, noise_seed=1)
    k.setup(0, y)
    with pytest.raises(ReleaseMismatchError, match=r"reported \[GaussianEvent\(noise_multiplier=30.0\)\] but drew "
                                                   r"\[GaussianEvent\(noise_multiplier=3.0\)\]") as err:
        k.sample(k.initial_params)
    assert "If you wrote this kernel" in str(err.value)  # says what the contributor did wrong
    # the ledger holds what the mechanism drew, not what the step said
    assert [(e.event, e.count) for e in k.ledger.entries] == [(GaussianEvent(3.0), 1)]


def test_a_step_that_reports_another_event_than_it_drew_fails_with_the_contributors_message():
    _misreport_is_caught()


def _ledger_from_the_report(self, drawn, reported, declared, on_release=None, owner="the kernel", label=""):
    """Mutant: the engine before issue 58 — the ledger written from the step's report, unchecked."""
    drawn.take()
    if reported is not None:
        self._write(reported, label, on_release)


def test_mutant_a_ledger_written_from_the_report_fails_the_misreport_test(monkeypatch):
    monkeypatch.setattr(PrivacyEngine, "commit", _ledger_from_the_report)
    with pytest.raises(pytest.fail.Exception):  # no ReleaseMismatchError: the lie goes into the ledger
        _misreport_is_caught()


def test_the_kit_fails_a_misreporting_kernel():
    y = make_data(50, seed=1)
    make = lambda: MisreportingPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=3.0, seed=0,  # noqa: E731
                                       noise_seed=1)
    with pytest.raises(Exception, match="reported"):
        pyro_dp.testing.check_kernel(make, y, checks=["planned_equals_recorded"])


class HidingPenalty(pyro_dp.DPPenalty):
    """Runs its step inside a recorder of its own and reports no release."""

    def _step(self, state):
        with pyro_dp.mechanisms.recording():
            new, info = super()._step(state)
        return new, info._replace(events=())


class RawNoisePenalty(pyro_dp.DPPenalty):
    """Releases a second value with normals drawn from the secret stream itself (no mechanism)
    and reports it as a Gaussian release."""

    def releases(self, state=None):
        return ReleasePlan((GaussianEvent(3.0), GaussianEvent(3.0)))

    def _step(self, state):
        new, info = super()._step(state)
        self.leak = self.lik.per_example_loglik(state.z).clamp(-1, 1).sum() + self._noise.normal(6.0, ())
        return new, info._replace(events=info.events + (GaussianEvent(3.0),))


def _bypasses_caught():
    """For each way around the mechanisms: ``(raised ReleaseMismatchError, ledger entries)``."""
    y, out = make_data(50, seed=1), {}
    for cls in (HidingPenalty, RawNoisePenalty):
        k = cls(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=3.0, seed=0, noise_seed=1)
        k.setup(0, y)
        try:
            k.sample(k.initial_params)
            caught = False
        except ReleaseMismatchError as e:
            caught = "but drew" in str(e)
        out[cls.__name__] = (caught, [(e.event, e.count) for e in k.ledger.entries])
    return out


def test_a_nested_recorder_hides_nothing_and_raw_noise_is_no_release():
    assert _bypasses_caught() == {"HidingPenalty": (True, [(GaussianEvent(3.0), 1)]),
                                  "RawNoisePenalty": (True, [(GaussianEvent(3.0), 1)])}


def test_mutant_a_nested_recorder_that_keeps_its_releases_fails_the_bypass_test(monkeypatch):
    monkeypatch.setattr(Recorder, "record_all", lambda self, events: None)
    assert _bypasses_caught()["HidingPenalty"] == (False, [])


# --------------------------------------------------------------------------- (b) no release without a recorder


def _releases():
    """Every release function of the mechanisms layer, each a thunk making one release."""
    x = torch.ones(3, dtype=torch.float64)
    spec, std_spec = gaussian_release_spec(2.0), GaussianStdReleaseSpec(GaussianEvent(2.0))
    cs = ClippedSum(torch.tensor(1.0, dtype=torch.float64), torch.tensor(0), torch.tensor(1))
    return {
        "clipped_sum_with_noise": lambda n: clipped_sum_with_noise(x, 1.0, 2.0, n),
        "clipped_sum_with_noise (nm=0)": lambda n: clipped_sum_with_noise(x, 1.0, 0.0, n),
        "add_gaussian_noise": lambda n: add_gaussian_noise(x.sum(), 1.0, 2.0, n),
        "draw_gaussian_noise": lambda n: draw_gaussian_noise(x, 1.0, 2.0, n),
        "noisy_histogram": lambda n: noisy_histogram(torch.tensor([0, 1]), 3, 2.0, n),
        "noisy_count": lambda n: noisy_count(torch.tensor(2), 2.0, n),
        "gaussian_release": lambda n: gaussian_release(x.sum(), 1.0, GaussianEvent(2.0), n),
        "GaussianReleaseSpec.draw": lambda n: spec.release(cs, 1.0, spec.draw(n)),
        "GaussianReleaseSpec.draw (nm=0)": lambda n: gaussian_release_spec(0.0).draw(n),
        "GaussianReleaseSpec.draw_each": lambda n: spec.draw_each(n, 3),
        "GaussianReleaseSpec.draw_tentative": lambda n: spec.draw_tentative(n),
        "GaussianStdReleaseSpec.draw": lambda n: std_spec.draw(n),
    }


def _releases_that_do_not_raise():
    out = []
    for name, make in _releases().items():
        noise = NoiseSource(seed=0, warn=False)
        before = noise.generator.get_state()
        try:
            make(noise)
            out.append(name)
        except UnrecordedReleaseError:
            assert torch.equal(noise.generator.get_state(), before), f"{name} drew before it refused"
    return out


def test_a_release_with_no_recorder_open_raises_before_it_draws():
    assert recorder_mod.open_recorder() is None
    assert _releases_that_do_not_raise() == []


def test_a_kernels_release_function_called_outside_a_step_raises():
    y = make_data(50, seed=1)
    k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=3.0, seed=0, noise_seed=1)
    k.setup(0, y)
    state = k._state
    with pytest.raises(UnrecordedReleaseError, match="no recorder open"):
        pyro_dp.kernels.penalty.penalty_release(k.lik, k._noise, state, state.z + 0.1, llr_clip=1.0,
                                                noise_multiplier=3.0)


def test_mutant_releases_that_record_nowhere_fail_the_test(monkeypatch):
    monkeypatch.setattr(release_mod, "record_release", lambda *a, **k: None)
    assert len(_releases_that_do_not_raise()) == len(_releases())  # the test above would fail


def test_inside_a_recorder_each_release_records_its_event_and_a_withdrawn_one_is_taken_back(release_recorder):
    noise = NoiseSource(seed=0, warn=False)
    for make in _releases().values():
        make(noise)
    spec = gaussian_release_spec(2.0)
    spec.withdraw(noise)  # the tentative draw above, called off
    ev, free = GaussianEvent(2.0), pyro_dp.mechanisms.NonPrivateEvent()
    assert Counter(release_recorder.events) == Counter({ev: 11, free: 2})
    with pyro_dp.mechanisms.parallel():  # disjoint parties: the worst one, once
        clipped_sum_with_noise(torch.ones(2), 1.0, 3.0, noise)
        clipped_sum_with_noise(torch.ones(2), 1.0, 1.5, noise)
    assert release_recorder.events[-1] == GaussianEvent(1.5) and len(release_recorder.events) == 14


# --------------------------------------------------------------------------- (c) recorded = ledger = reported = plan


@contextlib.contextmanager
def _spy():
    """Every release the recorders received, as the mechanisms recorded it (after the parallel
    scopes' worst-party rule and the withdrawals), independently of the engine's ledger."""
    seen = []
    record, withdraw = Recorder.record, Recorder.withdraw

    def spy_record(self, event, count=1, tentative=False):
        if self._parties is None:
            seen.append([event, int(count), tentative])
        record(self, event, count, tentative)

    def spy_withdraw(self):
        withdraw(self)
        last = max(i for i, s in enumerate(seen) if s[2])
        seen[last][1] -= 1

    Recorder.record, Recorder.withdraw = spy_record, spy_withdraw
    try:
        yield seen
    finally:
        Recorder.record, Recorder.withdraw = record, withdraw


def _recorded_vs_ledger(name, factory, data, steps=6):
    """Problems found in ``steps`` iterations of one golden case (empty: none)."""
    reported = []
    commit = PrivacyEngine.commit

    def spy_commit(self, drawn, events, declared, *args, **kw):
        reported.extend(events or ())
        return commit(self, drawn, events, declared, *args, **kw)

    PrivacyEngine.commit = spy_commit
    try:
        with warnings.catch_warnings(), _spy() as seen:
            warnings.simplefilter("ignore")
            k = factory()
            k.setup(steps // 2, data)
            params = k.initial_params
            for _ in range(steps):
                params = k.sample(params)
    except (ReleaseMismatchError, RuntimeError) as e:
        return [f"{name}: {type(e).__name__}: {e}"]
    finally:
        PrivacyEngine.commit = commit
    problems = []
    recorded = Counter()
    for ev, c, _ in seen:
        recorded[ev] += c
    if recorded != Counter(k.ledger.aggregate()):
        problems.append(f"{name}: the mechanisms recorded {dict(recorded)}, the ledger holds {k.ledger.aggregate()}")
    init_labelled = Counter()
    for ev, c, label in k.ledger.labelled_entries():
        if label:
            init_labelled[ev] += c
    if Counter(reported) + init_labelled != recorded:
        problems.append(f"{name}: the steps reported {Counter(reported)} (+ private start {dict(init_labelled)}), "
                        f"the mechanisms recorded {dict(recorded)}")
    once, per = k.planned_events()
    planned = privacy_engine._counts(once)
    for ev, c in privacy_engine._counts(per).items():
        planned[ev] += c * steps
    fewer_ok = isinstance(k, pyro_dp.DPHMC)  # a trajectory that leaves the support releases no ratio
    fits = all(recorded[ev] <= planned.get(ev, 0) for ev in recorded)
    if not fits or (not fewer_ok and recorded != planned):
        problems.append(f"{name}: planned {dict(planned)}, recorded {dict(recorded)}")
    return problems


GOLDEN = cases()


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_what_the_mechanisms_recorded_is_the_ledger_the_report_and_the_plan(name):
    assert _recorded_vs_ledger(name, *GOLDEN[name]) == []


def test_the_private_starts_releases_keep_their_labels():
    factory, y = GOLDEN["penalty_init"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = factory()
        k.setup(0, y)
        k.sample(k.initial_params)
    labels = [label for _, _, label in k.ledger.labelled_entries()]
    assert labels == ["init:DPGradientInit", ""]


@contextlib.contextmanager
def _every_party_recorded():
    yield  # mutant: no parallel composition, each party's release recorded


def _one_record_per_draw_each(self, noise, count, shape=(), device=None, *, event=None):
    # mutant: L releases drawn at once recorded as one
    return torch.stack([self.draw(noise, shape, device, event=event)] +
                       [self._secret_draw(noise, tuple(shape), device, lambda: noise.standard_normal(shape), 0)
                        for _ in range(int(count) - 1)])


@pytest.mark.parametrize("mutant, case", [("parallel", "multiparty"), ("draw_each", "hmc")])
def test_mutant_recorders_fail_the_recorded_equals_ledger_test(monkeypatch, mutant, case):
    if mutant == "parallel":
        monkeypatch.setattr(pyro_dp.kernels.multiparty, "parallel", _every_party_recorded)
    else:
        monkeypatch.setattr(pyro_dp.mechanisms.GaussianReleaseSpec, "draw_each", _one_record_per_draw_each)
    assert _recorded_vs_ledger(case, *GOLDEN[case]) != []


# --------------------------------------------------------------------------- a withdrawn release


def _withdrawn_releases_recorded():
    """DP-HMC steps of which every third leaves the support (a data-free rejection: the ratio's
    normal, drawn before the step, is withdrawn): the iterations whose recorded events are not
    the step's released ones."""
    from pyro_dp.kernels.hmc import hmc_step

    from .test_hmc import SETTINGS, corr2d_stepping

    terms, settings, rng, noise, ones, state = corr2d_stepping()
    wrong = []
    for i in range(6):
        settings["step_size"] = 1e200 if i % 3 == 1 else SETTINGS["corr2d"]["step_size"]
        with pyro_dp.mechanisms.recording() as drawn:
            state, info = hmc_step(rng, noise, state, terms, inv_mass=ones, mass_sqrt=ones, **settings)
        if Counter(drawn.events) != Counter(info.events):
            wrong.append((i, drawn.events, info.events))
    return wrong


def test_a_withdrawn_ratio_release_is_not_recorded():
    assert _withdrawn_releases_recorded() == []


def test_mutant_a_recorder_that_keeps_withdrawn_draws_fails(monkeypatch):
    monkeypatch.setattr(Recorder, "withdraw", lambda self: None)
    assert [i for i, _, _ in _withdrawn_releases_recorded()] == [1, 4]
