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

from .release_audit_cases import (AT_CLIP, CASES, CONFIDENCE, DRAWS, FACTOR, MUTANT_DRAWS, KW, NM, model, pair,
                                  prob_not_sound, prob_powerful, tuning_weak_noise)

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


@pytest.mark.parametrize("case", sorted(CASES))
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


@pytest.mark.parametrize("case", sorted(c for c in CASES if not c.startswith("default")))
def test_weak_noise_mutant_is_not_sound(case):
    """(The default path's releases: the tuning-only mutant below, which weakens them alone.)"""
    factory, factor = CASES[case][0], MUTANT_FACTOR.get(case, FACTOR)
    for a in _audit(lambda: weak_noise(factory(), factor), case, MUTANT_DRAWS):
        if AT_CLIP.get(case, lambda _: True)(a):
            assert not a.sound, str(a)


@pytest.mark.parametrize("case", ["default:sum", "default:count", "default:rule", "default2d:scale"])
def test_tuning_releases_with_weak_noise_are_not_sound(case):
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

