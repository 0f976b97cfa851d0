"""The per-release white-box audit (:mod:`pyro_dp.release_audit`, issue 58): every release kind
of every kernel family passes two-sided (sound and powerful) with the honest kernel, and fails
against its mutants.

The cases (``tests/release_audit_cases.py``): the Gaussian-mean model on 20 rows (DP Barker: 100;
the grouped kernel: a three-group model on 30), neighbours at the clip for each release kind,
``DRAWS = 60`` draws per data set for the honest kernels and ``MUTANT_DRAWS = 40`` for the
mutants, two-sided intervals at confidence 0.999, power at 0.8 of the ledger's mu.

**How often these tests are wrong.** The secret noise is fresh (OS entropy) in every draw, so
every audit is random; the probabilities below are exact for Gaussian releases
(``release_audit_cases.prob_not_sound`` / ``prob_powerful``: the noncentral-t law of the
statistic), computed at the mu's of the design column of docs/audit.md's table.

* An honest release fails *sound* with probability at most 5e-4 (the interval's upper tail,
  whatever its mu below the ledger's) and fails *powerful* with probability at most 5e-4 when
  its mu is at least 0.8 of the ledger's — at mu = mu_ledger = 2 (most cases) 4e-8; at the
  smallest ledger mu audited for power (0.5, DP-SGLD; 0.555, the default path's counts), 6e-5.
  Where the design mu is below the ledger's (the neighbours not quite at the clip), the test
  says so first (``mu_design >= 0.8 mu_ledger``, from the noise-free runs). DP Barker is
  audited for soundness only: its ledger (an RDP curve, Heikkilä et al. 2019 Thm 2, equivalent
  to mu = 0.404) is looser than the release's own noise (mu = 0.142), so no audit at the clip
  can be powerful against it (its interval reaches 0.8 of it by width alone: probability 0.99
  at 60 draws). So is the default path's ``tune:scale`` release in two coordinates: its ledger
  assumes the substitute sensitivity 2 A sqrt(2 D) of a vector whose entries lie in [-A, A],
  but half of them are counts in {0, A}, so one row moves it by at most 2 A sqrt(D) (checked:
  the design mu is the ledger's over sqrt(2), exactly) — a pessimistic ledger, not a leak.
* A weak-noise mutant (a fifth of the noise: mu five times the design's) misses (is reported
  sound) with probability below 1e-6 for every case (DP-SGLD, mu 2.5 against 0.5: 8e-7; the
  default path's counts, 2.8 against 0.555: 1e-8; the others below 1e-11). DP Barker's mutant
  keeps a twentieth of its noise (mu 2.8 against 0.404): 1e-11.
* The tuning-only mutant (a fifth of the noise in the default path's tuning releases only):
  the same probabilities as the default-path cases above.
* The power mutant (DPPenalty with the row at 0.1 and 0: a twentieth of the sensitivity, mu 0.1
  against 2) is reported powerful with probability 4e-6.
"""
import numpy as np
import pytest
import torch

import pyro_dp
from pyro_dp.mechanisms import GaussianEvent, NoiseSource, NonPrivateEvent, RDPCurveEvent, clipped_sum_with_noise
from pyro_dp.mechanisms import tap as tap_module
from pyro_dp.mechanisms import tap_releases
from pyro_dp.release_audit import audit_releases, gaussian_mu_of_event, mu_confidence_interval
from pyro_dp.testing import weak_noise

from .release_audit_cases import (AT_CLIP, CASES, CONFIDENCE, DRAWS, FACTOR, KERNEL_CASES, MUTANT_DRAWS, KW, NM,
                                  REPLAY_CASES, SUBSAMPLED, model, pair, prob_not_sound, prob_powerful,
                                  tuning_weak_noise)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: DP Barker's ledger is looser than its noise (module doc): its mutant keeps a twentieth, and
#: its honest release is audited for soundness only
MUTANT_FACTOR = {"DPBarker": 1 / 20}
SOUNDNESS_ONLY = {"DPBarker", "default2d:scale"}


def _audit(factory, case, num_draws):
    _, (d, dp), labels, expected = CASES[case]
    out = audit_releases(factory, d, dp, num_draws=num_draws, confidence=CONFIDENCE, labels=labels)
    assert len(out) == expected, [str(a) for a in out]
    assert all(a.skipped is None for a in out), [str(a) for a in out]
    return out


@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_every_release_kind_is_sound_and_powerful(case):
    for a in _audit(CASES[case][0], case, DRAWS):
        assert a.sound, str(a)
        if AT_CLIP.get(case, lambda _: True)(a):
            if case == "default2d:scale":  # the substitute sensitivity 2A sqrt(2D) is reached only up to
                assert a.mu_design == pytest.approx(a.mu_ledger / 2 ** 0.5, rel=1e-6), str(a)  # 2A sqrt(D)
            elif case in SOUNDNESS_ONLY:
                assert a.mu_design < 0.8 * a.mu_ledger, str(a)  # the ledger is looser than the noise
            else:
                assert a.mu_design >= 0.8 * a.mu_ledger, str(a)  # the neighbours are at the clip ...
                assert a.powerful, str(a)  # ... and the audit sees it


@pytest.mark.parametrize("case", ["DPPenalty"])
def test_weak_noise_mutant_is_not_sound(case):
    """With a fresh kernel per draw (``draws="kernel"``). Every other family's and release's
    mutant: the replayed audits below, which see the same releases at the cost of one run."""
    factory, factor = CASES[case][0], MUTANT_FACTOR.get(case, FACTOR)
    for a in _audit(lambda: weak_noise(factory(), factor), case, MUTANT_DRAWS):
        if AT_CLIP.get(case, lambda _: True)(a):
            assert not a.sound, str(a)


@pytest.mark.parametrize("case", ["default:rule"])
def test_tuning_releases_with_weak_noise_are_not_sound(case):
    """With a fresh kernel per draw; every other tuning release's: the replayed audits below."""
    factory = CASES[case][0]
    for a in _audit(lambda: tuning_weak_noise(factory(), FACTOR), case, MUTANT_DRAWS):
        assert a.label.startswith("tune:"), str(a)
        assert not a.sound, str(a)


def test_tuning_only_mutant_scales_tuning_draws_only():
    """The tuning-only mutant's noise source scales its draws while the private start and tuning
    run (``_run_private_start``) and leaves the chain's own draws as they are."""
    from .release_audit_cases import TuningOnlyScaledNoise

    src = TuningOnlyScaledNoise(NoiseSource(seed=3, warn=False), FACTOR)
    ref = NoiseSource(seed=3, warn=False)
    assert torch.equal(src.standard_normal((4,)), ref.standard_normal((4,)))
    src.tuning = True
    assert torch.allclose(src.standard_normal((4,)), FACTOR * ref.standard_normal((4,)))
    k = tuning_weak_noise(CASES["default:sum"][0](), FACTOR)
    k.seed, k.noise_seed, k.jit_compile = 0, 7, False
    d, _ = pair("sum")
    flags = []
    original = type(k).__mro__[1]._run_private_start

    def spy(self):
        flags.append(self._noise.tuning)
        original(self)

    type(k).__mro__[1]._run_private_start, restore = spy, original
    try:
        k.setup(0, *d)
        k.sample(k.initial_params)
    finally:
        type(k).__mro__[1]._run_private_start = restore
    assert flags == [True] and k._noise.tuning is False
    assert any(lab.startswith("tune:") for _, _, lab in k.ledger.labelled_entries())


def test_neighbours_off_the_clip_are_not_powerful():
    """The power check works: the row at 0.1 and at 0 moves DP penalty's release by a twentieth
    of its sensitivity (mu 0.1 against 2): sound, and not powerful."""
    (d,), (dp,) = pair("tenth")
    (a,) = audit_releases(CASES["DPPenalty"][0], d, dp, num_draws=DRAWS, confidence=CONFIDENCE)
    assert a.sound and not a.powerful, str(a)
    assert a.mu_design < 0.2 * a.mu_ledger, str(a)


# --------------------------------------------------------------------------- the pieces


def test_mu_interval_covers_and_is_exact():
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(200):
        mu, lo, hi = mu_confidence_interval(rng.normal(1.0, 2.0, 50), rng.normal(0.0, 2.0, 50), 0.9)
        covered += lo <= 0.5 <= hi
    assert 160 <= covered <= 196  # 180 expected (binomial sd 4.2)
    with pytest.raises(ValueError):
        mu_confidence_interval([1.0, 1.0], [1.0, 1.0])


def test_miss_probabilities_are_monotone():
    assert prob_not_sound(2.0, 2.0, DRAWS) == pytest.approx((1 - CONFIDENCE) / 2, rel=1e-6)
    assert prob_not_sound(10.0, 2.0, MUTANT_DRAWS) > 1 - 1e-12
    assert prob_powerful(0.1, 2.0, DRAWS) < 1e-5 < 1 - 1e-6 < prob_powerful(2.0, 2.0, DRAWS)


def test_gaussian_mu_of_events():
    assert gaussian_mu_of_event(GaussianEvent(4.0))[0] == 0.25
    assert gaussian_mu_of_event(pyro_dp.mechanisms.SubsampledGaussianEvent(1.0, 2.0))[0] == 0.5
    assert gaussian_mu_of_event(pyro_dp.mechanisms.SubsampledGaussianEvent(0.1, 2.0))[0] is None
    assert gaussian_mu_of_event(RDPCurveEvent((2.0, 4.0), (1.0, 0.5)))[0] == pytest.approx(0.5)
    assert gaussian_mu_of_event(NonPrivateEvent())[0] is None
    assert gaussian_mu_of_event(pyro_dp.mechanisms.ApproxDPEvent(1.0, 1e-5))[0] is None


def test_tap_is_off_by_default_and_does_not_nest():
    assert tap_module.ACTIVE is None
    out = clipped_sum_with_noise(torch.ones(3, dtype=torch.float64), 1.0, 2.0, NoiseSource())
    assert out.value.shape == ()
    with tap_releases() as seen:
        with pytest.raises(RuntimeError, match="nest"):
            with tap_releases():
                pass
        clipped_sum_with_noise(torch.ones(3, dtype=torch.float64), 1.0, 2.0, NoiseSource())
    assert tap_module.ACTIVE is None and len(seen) == 1


def test_compiled_kernels_are_refused():
    (d,), (dp,) = pair()
    with pytest.raises(ValueError, match="eagerly"):
        audit_releases(lambda: pyro_dp.DPPenalty(model, 0.3, llr_clip=1.0, noise_multiplier=NM, jit_compile=True,
                                                 **KW), d, dp, num_draws=2)



# --------------------------------------------------------------------------- replayed audits



def _replay(case, factory=None):
    c = REPLAY_CASES[case]
    out = audit_releases(factory or c.factory, *c.data, num_draws=c.num_draws, confidence=CONFIDENCE,
                         labels=c.labels, occurrence=c.occurrence, num_iterations=c.num_iterations, row=c.row,
                         draws="replay")
    assert len(out) == c.expected, [str(a) for a in out]
    assert all(a.skipped is None and a.draws == "replay" for a in out), [str(a) for a in out]
    return c, out


@pytest.mark.parametrize("case", sorted(REPLAY_CASES))
def test_every_release_replayed_is_sound_and_powerful(case):
    """Every release the case audits (later occurrences, subsampled releases given their batch,
    the default path's deep releases) is sound, and where its neighbours are at the clip,
    powerful — against the ledger's mu where the ledger is tight, else against the mu its noise
    allows at the true sensitivity (``ratio``: the looseness, asserted exactly)."""
    c, out = _replay(case)
    for a in out:
        assert a.sound, str(a)
        assert a.conditional == (case in SUBSAMPLED), str(a)  # given its batch, against 1/nm un-amplified
        if c.at_clip is not None and not c.at_clip(a):
            continue
        if c.ratio is None:
            assert a.mu_design >= 0.8 * a.mu_ledger, str(a)  # the neighbours are at the clip ...
            assert a.powerful, str(a)  # ... and the audit sees it
        else:
            if c.ratio == "loose":
                assert a.mu_design < 0.8 * a.mu_ledger, str(a)  # DP Barker: the ledger is looser than the noise
            else:
                assert a.mu_design == pytest.approx(c.ratio * a.mu_ledger, rel=1e-6), str(a)
            assert a.powerful_at(a.mu_design), str(a)  # the power check against the noise drawn


@pytest.mark.parametrize("case", sorted(REPLAY_CASES))
def test_every_release_replayed_fails_with_weak_noise(case):
    """The weak-noise mutant (a fifth of the noise; ``"tuning"``: in the private start and tuning
    only) is not sound for every release the case's neighbours are at the clip for."""
    c = REPLAY_CASES[case]
    mutate = weak_noise if c.mutant == "weak" else tuning_weak_noise
    _, out = _replay(case, lambda: mutate(c.factory(), FACTOR))
    for a in out:
        if c.at_clip is None or c.at_clip(a):
            assert not a.sound, str(a)


def test_subsampled_release_is_skipped_without_row_and_says_why():
    """A subsampled release (rate below 1) without ``row=`` is a mixture over the secret batch:
    skipped, with the reason; so are DP Barker's subsampled release (its curve is the amplified
    one) and DP-Fast MH's minibatch release (its batch is not pinned)."""
    c = REPLAY_CASES["DPSGLD:poisson"]
    (a,) = audit_releases(c.factory, *c.data, num_draws=4, draws="replay")
    assert a.skipped is not None and "row=" in a.skipped and "rate 0.25" in a.skipped, str(a)
    (d,), (dp,) = pair(num_rows=100)
    (a,) = audit_releases(lambda: pyro_dp.DPBarker(model, 20, 0.3, **KW), d, dp, num_draws=4, row=0)
    assert a.skipped is not None and "amplified" in a.skipped, str(a)
    (d,), (dp,) = pair()
    (a,) = audit_releases(lambda: pyro_dp.DPFastMH(model, 0.3, lipschitz=1.0, lam=5.0, max_batch_size=20,
                                                   step_epsilon=0.99, step_delta=0.9, **KW), d, dp, num_draws=4, row=0)
    assert a.skipped is not None and "does not pin" in a.skipped, str(a)


def test_replay_refuses_normals_not_drawn_from_the_stream():
    """The tap replays a release only if the normals it added are a draw of a secret stream, bit
    for bit: normals rescaled after the draw (a kernel-side weakening) are refused."""
    from pyro_dp.mechanisms import GaussianStdReleaseSpec, StopTap

    spec = GaussianStdReleaseSpec(GaussianEvent(1.0))
    v, std = torch.tensor(1.0, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    for scale, replayable in ((1.0, True), (0.2, False)):
        with tap_releases(stop_after=0, replay=5) as seen:
            try:
                spec.release(v, std, scale * spec.draw(NoiseSource(warn=False)))
            except StopTap:
                pass
        assert (seen[0].replays is not None) == replayable
        if replayable:
            assert len(seen[0].replays) == 5 and len({float(x) for x in seen[0].replays}) == 5


def test_tap_pins_batches_and_puts_the_row_in():
    from pyro_dp.mechanisms import batch_without_replacement, poisson_batch

    src = NoiseSource(warn=False)
    with tap_releases(include=3) as seen:
        a = poisson_batch(src, 50, 0.02)
        b = batch_without_replacement(src, 50, 4)
    assert 3 in a.tolist() and 3 in b.tolist() and len(b) == 4 and len(set(b.tolist())) == 4
    assert [x.tolist() for x in seen.batches] == [a.tolist(), b.tolist()]
    with tap_releases(batches={0: a, 1: b}, include=7):
        assert poisson_batch(src, 50, 0.02).tolist() == a.tolist()
        assert batch_without_replacement(src, 50, 4).tolist() == b.tolist()
