"""The per-release white-box audit (:mod:`pyro_dp.release_audit`, issue 58): every release of
every kernel family passes two-sided (sound and powerful) with the honest kernel, and fails
against its mutants.

Two sets of cases (``tests/release_audit_cases.py``), on the Gaussian-mean model on 20 rows
(DP Barker: 100; the grouped kernel: a three-group model on 30), neighbours at the clip for
each release, two-sided intervals at confidence 0.999, power at 0.8 of the ledger's mu:

* ``CASES`` with a fresh kernel per draw (``draws="kernel"``): the first release of each kind
  of every family's first iteration (``KERNEL_CASES``, ``DRAWS = 60`` draws per data set), and
  the weak-noise mutants of DP penalty and of the default path's ``tune:rows`` (``MUTANT_DRAWS
  = 40``);
* ``REPLAY_CASES`` with ``draws="replay"`` (one pinned run per data set, the audited releases
  replayed 1000 times, DP Barker 2000; confidence ``REPLAY_CONFIDENCE = 0.99999``, as there are
  some 50 checks): every release of every family's first two iterations,
  the subsampled releases given a batch that contains the row (DP-SGLD and the minibatch
  penalty, 5 of 20 rows; DP Barker, 20 of 100, against Thm 2's un-amplified curve; DP-Fast MH's
  minibatch release on 100 rows, its batch size, batch and thinning pinned by the audit's
  selection stream, against the per-slot bound its ledger's (eps, delta) rests on; both also
  with a fresh kernel per draw, 60 draws, honest only), the default path's tuning
  releases (``tune:rows``, both ``tune:clip`` kinds and their last occurrence, ``tune:start``
  and its last occurrence, ``tune:scale``, ``tune:metric``, both ``tune:centre``) and its own
  iterations' releases (control variates of DPPenalty's and DPHMC's default paths, DP-SGLD's
  gradient), each with its mutant: a fifth of the noise (``weak_noise``) or, for the tuning
  releases, a fifth of the noise in the private start and tuning only (``tuning_weak_noise``).

**How often these tests are wrong.** The secret noise is fresh (OS entropy) in every draw, so
every audit is random; the probabilities below are exact for Gaussian releases
(``release_audit_cases.prob_not_sound`` / ``prob_powerful``: the noncentral-t law of the
statistic), computed at the mu's of the design column of docs/audit.md's tables.

* An honest release fails *sound* with probability at most 5e-4 (fresh-kernel cases) or 5e-6
  (replayed; the interval's upper tail, whatever its mu below the ledger's), and fails
  *powerful* with at most the same when its mu is at least 0.8 of the ledger's. Fresh-kernel
  cases (60 draws): at mu = mu_ledger = 2 (most cases) 4e-8; at the smallest ledger mu audited
  for power (0.5, DP-SGLD) 6e-5. Replayed cases (1000 draws): at the smallest (0.375, the
  control-variate residual) 6e-10. About 20 fresh-kernel and 50 replayed checks: a false alarm
  somewhere in the file with probability about 1e-2, nearly all of it the fresh-kernel layer's. Where the
  design mu is below the ledger's (the neighbours not quite at the clip), the test says so
  first (``mu_design >= 0.8 mu_ledger``, from the noise-free runs).
* Where the ledger is looser than the release's noise at its true sensitivity, the power check
  is against ``mu_design`` (``ReleaseAudit.powerful_at``) and the looseness is asserted: DP
  Barker (its RDP curve, Heikkilä et al. 2019 Thm 2, equivalent to mu = 0.404, against its
  noise's 0.142 and 0.172: ``mu_design < 0.8 mu_ledger``; power at design missed with
  probability 5e-8 at 2000 draws) and the default path's ``tune:scale`` and ``tune:metric``
  (``mu_design = mu_ledger / sqrt 2`` exactly: docs/audit.md says why). The fresh-kernel test
  asserts their soundness and the looseness only (60 draws cannot resolve the power).
* A weak-noise mutant (a fifth of the noise: mu five times the design's) misses (is reported
  sound) with probability below 1e-6 for every case: fresh-kernel DP penalty (10 against 2,
  40 draws) below 1e-12; replayed, the closest is DP Barker (0.71 against 0.404, 2000 draws)
  at 2e-7, the others below 1e-15.
* DP Barker's and DP-Fast MH's subsampled releases given their batch: their ledger is loose
  (mu 1.104 against the noise's 0.32 to 0.45; DP-Fast MH about 1.0 to 1.2 against 0.497), so
  power is checked against the design mu, which is asserted in closed form (the noise-free
  shift is the sensitivity: 2/sqrt(b); 1/sigma_1): missed with probability 2e-9 and 2e-11
  replayed (1000 draws), 1.4e-4 and 6e-5 with fresh kernels (60 draws), where they are also
  checked sound against the design mu (false alarm 5e-4 each). Their mutants (mu 1.62 against
  1.104; 2.48 against 0.985 to 1.17) miss with probability 1.5e-9 and below 1e-15 replayed;
  DP-Fast MH's with fresh kernels (40 draws, against the design's 0.497) with 1e-6.
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
from pyro_dp.accounting.gdp import gdp_delta
from pyro_dp.release_audit import audit_releases, gaussian_mu_of_event, mu_confidence_interval
from pyro_dp.testing import weak_noise

from .release_audit_cases import (AT_CLIP, CASES, CONFIDENCE, DRAWS, FACTOR, KERNEL_CASES, MUTANT_DRAWS, KW, NM,
                                  REPLAY_CASES, REPLAY_CONFIDENCE, SUBSAMPLED, model, pair, prob_not_sound, prob_powerful,
                                  tuning_weak_noise)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: DP Barker's ledger is looser than its noise (module doc): with a fresh kernel per draw (60
#: draws) its honest release is audited for soundness and the looseness only; the replayed
#: audit (2000 draws) checks its power against the noise drawn
SOUNDNESS_ONLY = {"DPBarker"}


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
            if case in SOUNDNESS_ONLY:
                assert a.mu_design < 0.8 * a.mu_ledger, str(a)  # the ledger is looser than the noise
            else:
                assert a.mu_design >= 0.8 * a.mu_ledger, str(a)  # the neighbours are at the clip ...
                assert a.powerful, str(a)  # ... and the audit sees it


@pytest.mark.parametrize("case", ["DPPenalty"])
def test_weak_noise_mutant_is_not_sound(case):
    """With a fresh kernel per draw (``draws="kernel"``). Every other family's and release's
    mutant: the replayed audits below, which see the same releases at the cost of one run."""
    factory, factor = CASES[case][0], FACTOR
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
    # (eps, delta): the largest Gaussian mu inside the region (exact for a Gaussian release)
    mu = gaussian_mu_of_event(pyro_dp.mechanisms.ApproxDPEvent(1.0, 1e-5))[0]
    assert gdp_delta(1.0, mu) <= 1e-5 < gdp_delta(1.0, mu * (1 + 1e-9))


def test_given_batch_bounds():
    """The un-amplified bounds of :mod:`pyro_dp.audit_batches`. DP-Fast MH's: the kernel's own
    per-slot Gaussian (1/sigma_1), whose amplification over K - 1 slots its ledger certifies, is
    within the bound at K - 1 (and the bound is the supremum: 1 % more breaks the ledger's delta
    at every eps_0 of a finer grid, 1 % less does not); it shrinks as the batch grows. DP Barker's: Thm 2's curve on
    the batch, recognised only for the batch and data sizes of the event."""
    from pyro_dp.accounting.algorithms import fastmh_step_privacy
    from pyro_dp.accounting.composition import with_replacement_amplification
    from pyro_dp.accounting.subsampled import barker_batch_rdp, dp_barker_event
    from pyro_dp.audit_batches import barker_given_batch_mu, with_replacement_mu

    sp = fastmh_step_privacy(0.99, 1e-3, 10, 0.01)
    ev = sp.event
    mu = with_replacement_mu(ev.epsilon, ev.delta, 9, 0.01)
    assert 1.0 / sp.sigma1 <= mu
    e0 = np.geomspace(1e-4, 20.0, 2000)

    def within(m):  # some eps_0 of the grid amplifies (eps_0, delta_m(eps_0)) to within the ledger's
        amp = [with_replacement_amplification(e, gdp_delta(e, m), 9, 0.01) for e in e0 if gdp_delta(e, m) < 1]
        return any(x <= ev.epsilon and y <= ev.delta for x, y in amp)

    assert within(0.99 * mu) and not within(1.01 * mu)
    assert with_replacement_mu(ev.epsilon, ev.delta, 5, 0.01) > mu > with_replacement_mu(ev.epsilon, ev.delta, 20, 0.01)
    e = dp_barker_event(20, 100)
    orders = [int(a) for a in e.orders]
    expected = min(np.sqrt(2 * x / a) for a, x in zip(orders, barker_batch_rdp(20, orders)))
    assert barker_given_batch_mu(e, 20, 100) == pytest.approx(expected, rel=1e-12)
    assert barker_given_batch_mu(e, 20, 200) is None and barker_given_batch_mu(GaussianEvent(1.0), 20, 100) is None


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
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
    out = audit_releases(factory or c.factory, *c.data, num_draws=c.num_draws, confidence=REPLAY_CONFIDENCE,
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
                if c.design is not None:  # ... and the neighbours are at the clip
                    assert a.mu_design == pytest.approx(c.design(a), rel=1e-6), str(a)
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
    skipped, with the reason — DP-SGLD's Poisson batch, DP Barker's batch without replacement,
    and DP-Fast MH's minibatch release (its batch size, indices and thinning are secret draws the
    tap does not see; with ``row=`` the audit pins them: the replayed cases
    ``DPBarker:subsampled`` and ``DPFastMH:minibatch``)."""
    c = REPLAY_CASES["DPSGLD:poisson"]
    (a,) = audit_releases(c.factory, *c.data, num_draws=4, draws="replay")
    assert a.skipped is not None and "row=" in a.skipped and "rate 0.25" in a.skipped, str(a)
    for name in ("DPBarker:subsampled", "DPFastMH:minibatch"):
        c = REPLAY_CASES[name]
        (a,) = audit_releases(c.factory, *c.data, num_draws=4, draws="replay")
        assert a.skipped is not None and "row=" in a.skipped and not a.conditional, str(a)


def test_subsampled_release_given_its_batch_with_fresh_kernels():
    """``row=`` with a fresh kernel per draw: every draw's batch is the reference run's, with the
    row in it, so DP-SGLD's subsampled release (rate 1/4) is a Gaussian of mu 1/nm given it."""
    c = REPLAY_CASES["DPSGLD:poisson"]
    (a,) = audit_releases(c.factory, *c.data, num_draws=DRAWS, confidence=CONFIDENCE, row=0)
    assert a.conditional and a.recorded_event.sample_rate == 0.25, str(a)
    assert a.sound and a.powerful and a.mu_design >= 0.8 * a.mu_ledger, str(a)


@pytest.mark.parametrize("case", ["DPBarker:subsampled", "DPFastMH:minibatch"])
def test_barker_and_fastmh_subsampled_releases_given_their_batch_with_fresh_kernels(case):
    """``row=`` with a fresh kernel per draw (``DRAWS`` = 60): DP Barker's batch (20 of 100, the
    tap's pin) and DP-Fast MH's (its size, indices with the row once, and thinning: the audit's
    selection stream, the same in every fresh kernel) are the reference run's in every draw, so
    the release is a Gaussian given its batch: sound against the un-amplified bound, at the clip
    (the closed-form design mu), and powerful against the mu its noise allows (the ledger is
    looser). The weak-noise mutants: the replayed cases (60 draws cannot separate DP Barker's
    mutant, 1.6 against 1.10)."""
    c = REPLAY_CASES[case]
    (a,) = audit_releases(c.factory, *c.data, num_draws=DRAWS, confidence=CONFIDENCE, row=0)
    assert a.conditional and a.sound, str(a)
    assert a.mu_design == pytest.approx(c.design(a), rel=1e-6) and a.mu_design < 0.8 * a.mu_ledger, str(a)
    assert a.powerful_at(a.mu_design), str(a)
    assert a.mu_low <= a.mu_design, str(a)  # sound against the noise the release states, too
    assert (a.selection_seed is not None) == (case == "DPFastMH:minibatch"), str(a)


def test_fastmh_minibatch_weak_noise_with_fresh_kernels_is_caught():
    """DP-Fast MH's weak-noise mutant (a fifth of the noise) with a fresh kernel per draw, its batch
    pinned in each by the selection stream: louder than the noise its release states (mu 2.5
    against the design's 0.497: missed with probability 1e-6 at 40 draws). Against the ledger's
    bound (1.17) 40 draws would miss it with probability 0.08: the replayed case checks that."""
    c = REPLAY_CASES["DPFastMH:minibatch"]
    (a,) = audit_releases(lambda: weak_noise(c.factory(), FACTOR), *c.data, num_draws=MUTANT_DRAWS,
                          confidence=CONFIDENCE, row=0)
    assert a.conditional and a.selection_seed is not None, str(a)
    assert a.mu_low > a.mu_design, str(a)


def test_selection_stream_pins_fastmh_batch_and_not_its_noise():
    """The audit's selection stream (``audit_batches.PinnedSelection``) gives two fresh DP-Fast MH
    kernels the same batch size, batch (with the row in it exactly once) and thinning, and fresh
    release noise; the kernel's own stream would draw a new batch in each."""
    from pyro_dp.release_audit import _draw

    c = REPLAY_CASES["DPFastMH:minibatch"]
    runs = [_draw(c.factory, c.data[0], 0, {}, 1, include=0, selection=s) for s in (3, 3, None)]
    (b0,), (b1,), (b2,) = (r.batches for r in runs)
    assert torch.equal(b0, b1) and int((b0 == 0).sum()) == 1, (b0, b1)
    assert not torch.equal(b0, b2) or len(b0) != len(b2)
    assert runs[0][0].value != runs[1][0].value  # fresh noise
    free = [_draw(lambda: weak_noise(c.factory(), 0.0), c.data[0], 0, {}, 1, include=0, selection=3) for _ in range(2)]
    assert torch.equal(free[0][0].value, free[1][0].value)  # same batch, size and thinning: same noise-free value


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
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


@pytest.mark.slow
@pytest.mark.parametrize("kind, labels", [("far", ("tune:start", "")), ("count", ("tune:clip",))])
def test_every_default_path_release_replayed_is_sound(kind, labels):
    """Every occurrence of the default path's repeated releases (its 60 private-start steps and
    120 clip adaptations, its own iterations' control variates), replayed: all sound, and
    powerful where the pair is at the clip for them (``tune:start`` and the own releases for the
    row at +-1e6, ``tune:clip`` for 1e6 against 0)."""
    (d,), (dp,) = pair(kind)
    out = audit_releases(CASES["default:sum"][0], d, dp, num_draws=1000, confidence=1 - 1e-7, labels=labels,
                         occurrence="all", num_iterations=2, row=0, draws="replay")  # 190 checks: 2e-5 in all
    assert len(out) >= (63 if kind == "far" else 121), len(out)
    for a in out:
        assert a.sound and a.powerful, str(a)
