"""Events, ledger, noise source and the audited clip-sum-noise release."""
import math
import pickle

import pytest
import torch

from pyro_dp.mechanisms import (
    ApproxDPEvent,
    GaussianEvent,
    NoiseSource,
    NonPrivateEvent,
    PrivacyLedger,
    PureDPEvent,
    RDPCurveEvent,
    SubsampledGaussianEvent,
    clip_rows,
    clip_scalars,
    clipped_sum_with_noise,
)

pytestmark = pytest.mark.usefixtures("release_recorder")  # release functions called directly (issue 58)


def test_clip_rows_zero_and_large():
    x = torch.tensor([[0.0, 0.0], [3.0, 4.0], [0.3, 0.4]], dtype=torch.float64)
    c, mask = clip_rows(x, 1.0)
    assert torch.allclose(c, torch.tensor([[0.0, 0.0], [0.6, 0.8], [0.3, 0.4]], dtype=torch.float64))
    assert mask.tolist() == [False, True, False]
    assert torch.isfinite(c).all()


def test_clip_scalars_handles_infinities():
    v, mask = clip_scalars(torch.tensor([-math.inf, 0.5, 7.0]), 2.0)
    assert v.tolist() == [-2.0, 0.5, 2.0] and mask.tolist() == [True, False, True]


@pytest.mark.parametrize("relation, factor", [("substitute", 2.0), ("add_remove", 1.0)])
def test_noise_std_is_multiplier_times_sensitivity(relation, factor):
    """Empirical std of the release over many draws = nm * (2 or 1) * clip (4 MCSE)."""
    noise = NoiseSource(seed=0)
    vals = torch.ones(5, dtype=torch.float64)
    draws = torch.stack(
        [clipped_sum_with_noise(vals, 0.5, 3.0, noise, relation=relation).value for _ in range(4000)]
    )
    sd = 3.0 * factor * 0.5
    assert abs(float(draws.mean()) - 2.5) < 4 * sd / math.sqrt(4000)
    assert abs(float(draws.std()) - sd) < 4 * sd / math.sqrt(2 * 3999)
    rel = clipped_sum_with_noise(vals, 0.5, 3.0, noise, relation=relation)
    assert rel.event == GaussianEvent(3.0) and float(rel.noise_std) == pytest.approx(sd)


def test_non_private_mode_records_non_private_event():
    rel = clipped_sum_with_noise(torch.ones(3), 1.0, 0.0, NoiseSource(seed=0))
    assert isinstance(rel.event, NonPrivateEvent) and float(rel.value) == 3.0


def test_secure_noise_is_gaussian_and_unseedable():
    with pytest.raises(ValueError, match="seed"):
        NoiseSource(seed=1, secure_mode=True)
    a = NoiseSource(secure_mode=True).normal(1.0, (20000,), like=torch.zeros((), dtype=torch.float64))
    b = NoiseSource(secure_mode=True).normal(1.0, (20000,), like=torch.zeros((), dtype=torch.float64))
    assert not torch.equal(a, b)
    assert abs(float(a.mean())) < 4 / math.sqrt(20000)
    assert abs(float(a.std()) - 1.0) < 4 / math.sqrt(2 * 20000)


def test_noise_source_pickles_with_its_state():
    n = NoiseSource(seed=3)
    n.normal(1.0, (3,))
    m = pickle.loads(pickle.dumps(n))
    assert torch.equal(n.normal(1.0, (4,)), m.normal(1.0, (4,)))


def test_ledger_merges_and_round_trips():
    led = PrivacyLedger()
    led.record(GaussianEvent(2.0), 3)
    led.record(GaussianEvent(2.0))
    led.record(PureDPEvent(0.1))
    assert led.num_releases == 5 and len(led.entries) == 2
    led.record(GaussianEvent(5.0), 2, label="tune:clip")
    other = PrivacyLedger()
    other.load_state_dict(led.state_dict())
    assert other == led and other.labelled_entries() == led.labelled_entries()  # labels kept (2026-11-26)
    led._entries.pop(), led._labels.pop()
    merged = PrivacyLedger.merged([led, led])
    assert merged.aggregate() == {GaussianEvent(2.0): 8, PureDPEvent(0.1): 2}
    with pytest.raises(ValueError, match="cannot merge"):
        led.extend(PrivacyLedger("add_remove"))
    assert pickle.loads(pickle.dumps(led)) == led


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: GaussianEvent(0.0), "noise_multiplier"),
        (lambda: GaussianEvent(float("nan")), "noise_multiplier"),
        (lambda: SubsampledGaussianEvent(1.5, 1.0), "sample_rate"),
        (lambda: SubsampledGaussianEvent(0.1, 1.0, "bogus"), "scheme"),
        (lambda: PureDPEvent(-1.0), "epsilon"),
        (lambda: ApproxDPEvent(1.0, 1.0), "delta"),
        (lambda: RDPCurveEvent((2.0, 1.5), (0.1, 0.2)), "increasing"),
        (lambda: PrivacyLedger("neighbours"), "relation"),
        (lambda: PrivacyLedger().record(GaussianEvent(1.0), -1), "count"),
        (lambda: PrivacyLedger().record("gaussian"), "PrivacyEvent"),
    ],
)
def test_bad_events(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_release_shape_errors():
    with pytest.raises(ValueError, match="shape"):
        clipped_sum_with_noise(torch.ones(2, 2, 2), 1.0, 1.0, NoiseSource(seed=0))


def test_clip_and_sum_columns_is_clip_and_sum_column_by_column():
    """The column form used by the compiled path applies the same per-row rule, clip and sum."""
    from pyro_dp.mechanisms import clip_and_sum, clip_and_sum_columns

    g = torch.Generator().manual_seed(0)
    rows = torch.randn(40, 3, generator=g, dtype=torch.float64) * 2
    rows[3, 1], rows[7, 0], rows[9, 2], rows[11] = float("nan"), float("inf"), -float("inf"), 0.0
    valid = (torch.arange(40) < 33).to(torch.float64)
    for v in (None, valid):
        a = clip_and_sum(rows, 1.5, v)
        b = clip_and_sum_columns(list(rows.T), 1.5, v)
        torch.testing.assert_close(a.total, b.total, rtol=1e-14, atol=1e-14)
        assert int(a.num_clipped) == int(b.num_clipped) and int(a.num_rows) == int(b.num_rows)
        # the count is summed as float64 0/1 (vectorises under inductor) but stays an exact integer
        assert b.num_clipped.dtype == torch.int64
        c = clip_and_sum_columns(list(rows.T.float()), 1.5, v)
        assert c.num_clipped.dtype == torch.int64 and int(c.num_clipped) == int(a.num_clipped)
    # finite rows whose squared norm overflows (an adversary's row): the same treatment as
    # clip_rows' torch.linalg.vector_norm, for one column (|x|: clipped to ±clip) and several
    for d in (1, 2, 3):
        big = torch.randn(6, d, generator=g, dtype=torch.float64)
        big[1], big[4, 0] = 1e200, -1e300
        a = clip_and_sum(big, 1.5)
        b = clip_and_sum_columns(list(big.T), 1.5)
        assert torch.equal(a.total, b.total), d
        assert int(a.num_clipped) == int(b.num_clipped)
    with pytest.raises(ValueError):
        clip_and_sum_columns([], 1.0)


def test_finite_row_mask_is_isfinite_all_for_every_width():
    """The per-row mask adds narrow rows' columns one by one (faster in eager torch) and reduces
    wider ones: the same mask as ``torch.isfinite(values).all(-1)`` either way, on NaN, ±inf and
    the largest finite values, for rows and for a single row."""
    from pyro_dp.mechanisms import finite_row_mask

    g = torch.Generator().manual_seed(3)
    for d in range(0, 8):
        v = torch.randn(40, d, generator=g, dtype=torch.float64)
        if d:
            v[3, 0], v[5, d - 1], v[7, d // 2], v[9, 0], v[11] = math.nan, math.inf, -math.inf, 1.7e308, -1.7e308
        assert torch.equal(finite_row_mask(v), torch.isfinite(v).all(-1)), d
        assert torch.equal(finite_row_mask(v[3]), torch.isfinite(v[3]).all(-1)), d


def test_uncounted_clipped_sums_keep_the_total_and_say_they_did_not_count():
    """``count=False`` (DP-HMC without ``nonprivate_diagnostics``): the same total and rows, the
    clipped count :data:`NOT_COUNTED`, whose fraction is NaN (never a number that looks measured)."""
    from pyro_dp.mechanisms import NOT_COUNTED, clip_and_sum, clip_and_sum_columns, clipped_fraction, sum_clipped

    g = torch.Generator().manual_seed(1)
    rows = torch.randn(30, 2, generator=g, dtype=torch.float64) * 2
    rows[4, 0] = float("nan")
    valid = (torch.arange(30) < 25).to(torch.float64)
    for v in (None, valid):
        for fn, x in ((clip_and_sum, rows), (clip_and_sum, rows[:, 0]), (clip_and_sum_columns, list(rows.T))):
            a, b = fn(x, 1.5, v), fn(x, 1.5, v, count=False)
            assert torch.equal(a.total, b.total) and int(a.num_rows) == int(b.num_rows)
            assert int(a.num_clipped) > 0 and int(b.num_clipped) == NOT_COUNTED
            assert b.num_clipped.dtype == torch.int64
            assert 0 < clipped_fraction(a.num_clipped, a.num_rows) < 1
            assert math.isnan(clipped_fraction(b.num_clipped, b.num_rows))
            assert math.isnan(clipped_fraction(sum_clipped([b, b]).num_clipped, 2))  # chunks stay uncounted
    assert clipped_fraction(0, 0) == 0.0 and clipped_fraction(torch.tensor(3), torch.tensor(4)) == 0.75


# --------------------------------------------------------------------------- issue 39: release spec, batch wrappers


def _seeded():
    return NoiseSource(seed=7, warn=False)


@pytest.mark.parametrize("relation", ["substitute", "add_remove"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("nm", [0.0, 0.7, 3.0])
@pytest.mark.parametrize("shape", [(6,), (6, 3)])
def test_release_spec_is_bit_for_bit_clipped_sum_with_noise(relation, dtype, nm, shape):
    """The spec's draw (before the step) + its pure release = clipped_sum_with_noise on the same
    stream: value, std and event exactly, and the stream left in the same state."""
    from pyro_dp.mechanisms import clip_and_sum, gaussian_release_spec

    values = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=dtype) * 5
    clip = torch.tensor(0.37, dtype=dtype)
    want_src, got_src = _seeded(), _seeded()
    want = clipped_sum_with_noise(values, clip, nm, want_src, relation)
    spec = gaussian_release_spec(nm, relation)
    cs = clip_and_sum(values, clip)
    got = spec.release(cs, clip, spec.draw(got_src, cs.total.shape))
    assert torch.equal(got.value, want.value) and torch.equal(got.noise_std, want.noise_std)
    assert spec.event == want.event and int(got.num_clipped) / int(got.num_rows) == want.clipped_fraction
    assert torch.equal(got_src.standard_normal(()), want_src.standard_normal(()))  # streams aligned


def test_release_spec_mutants_are_caught():
    """Power of the test above: the other relation's sigma, or the noise drawn twice, differ."""
    from pyro_dp.mechanisms import clip_and_sum, gaussian_release_spec

    values = torch.tensor([3.0, -0.2, 0.5], dtype=torch.float64)
    want = clipped_sum_with_noise(values, 1.0, 2.0, _seeded())
    cs = clip_and_sum(values, 1.0)
    wrong_relation = gaussian_release_spec(2.0, "add_remove")
    assert not torch.equal(wrong_relation.release(cs, 1.0, wrong_relation.draw(_seeded())).value, want.value)
    spec, src = gaussian_release_spec(2.0), _seeded()
    src.standard_normal(())  # a stray draw before the release
    assert not torch.equal(spec.release(cs, 1.0, spec.draw(src)).value, want.value)


def test_release_spec_draws_nothing_without_noise():
    from pyro_dp.mechanisms import gaussian_release_spec

    a, b = _seeded(), _seeded()
    assert torch.equal(gaussian_release_spec(0.0).draw(a, (2,)), torch.zeros(2, dtype=torch.float64))
    assert gaussian_release_spec(0.0).event == NonPrivateEvent()
    assert torch.equal(a.standard_normal(()), b.standard_normal(()))
    with pytest.raises(ValueError, match="relation"):
        gaussian_release_spec(1.0, "replace")


def test_batch_wrappers_draw_what_the_noise_source_draws():
    from pyro_dp.mechanisms import (batch_with_replacement, batch_without_replacement, poisson_batch, poisson_count,
                                    thinning_uniforms)

    like = torch.zeros((), dtype=torch.float64)
    calls = [
        (lambda s: poisson_batch(s, 50, 0.2), lambda s: s.poisson_subsample(50, 0.2)),
        (lambda s: batch_without_replacement(s, 50, 7), lambda s: s.sample_without_replacement(50, 7)),
        (lambda s: batch_with_replacement(s, 50, 7), lambda s: s.sample_with_replacement(50, 7)),
        (lambda s: torch.tensor(poisson_count(s, 4.5)), lambda s: torch.tensor(s.poisson(4.5))),
        (lambda s: thinning_uniforms(s, (5,), like), lambda s: s.uniform((5,), like)),
    ]
    for wrapped, direct in calls:
        a, b = _seeded(), _seeded()
        assert torch.equal(wrapped(a), direct(b))
        assert torch.equal(a.standard_normal(()), b.standard_normal(()))


def test_ledger_totals_follow_every_change():
    """The ledger keeps its per-event totals as it records (the plan reads them before every
    iteration: reading them must not cost the number of entries, which grows by two per
    DP-HMC iteration); they always equal the totals recounted from the entries, whatever
    changed them: records, merges, copies, pickles, a loaded state, an entry popped."""
    import random

    def recount(led):
        out = {}
        for e in led.entries:
            out[e.event] = out.get(e.event, 0) + e.count
        return out

    rnd = random.Random(0)
    events = [GaussianEvent(2.0), GaussianEvent(3.0), PureDPEvent(0.1)]
    led = PrivacyLedger()
    for i in range(300):
        led.record(rnd.choice(events), rnd.randint(1, 3), label=rnd.choice(["", "", "tune:clip"]))
        if i % 37 == 0:
            led = pickle.loads(pickle.dumps(led))
        if i % 41 == 0:
            led = led.copy()
        if i % 53 == 0:
            other = PrivacyLedger()
            other.record(GaussianEvent(9.0), 5)  # totals of its own before the load
            other.load_state_dict(led.state_dict())
            led = other
        if i % 61 == 0:
            led._entries.pop(), led._labels.pop()
        assert led.aggregate() == recount(led) and led.num_releases == sum(recount(led).values())
    assert len(led.entries) > 100  # the events alternate: many entries, few distinct events


@pytest.mark.parametrize("shape", [(), (1,), (2,), (3, 5), (4, 4), (20,)])
@pytest.mark.parametrize("count", [0, 1, 7, 10, 16])
def test_standard_normals_are_count_successive_draws(shape, count):
    """``standard_normals(count, shape)`` (DP-HMC's L gradient normals in fewer generator calls)
    draws exactly what ``count`` calls of ``standard_normal(shape)`` draw, and leaves the stream
    where they leave it."""
    from pyro_dp.mechanisms import gaussian_release_spec

    a, b = _seeded(), _seeded()
    many = a.standard_normals(count, shape)
    one_by_one = [b.standard_normal(shape) for _ in range(count)]
    expected = torch.stack(one_by_one) if count else torch.zeros((0,) + shape, dtype=torch.float64)
    assert many.dtype == torch.float64 and torch.equal(many, expected)
    assert torch.equal(a.standard_normal((3,)), b.standard_normal((3,)))  # the same position after
    spec = gaussian_release_spec(1.5)
    assert torch.equal(spec.draw_each(a, count, shape), torch.stack([spec.draw(b, shape) for _ in range(count)])
                       if count else torch.zeros((0,) + shape, dtype=torch.float64))
    c = _seeded()
    assert torch.equal(gaussian_release_spec(0.0).draw_each(c, count, shape), torch.zeros((count,) + shape,
                                                                                          dtype=torch.float64))
    assert torch.equal(c.standard_normal(()), _seeded().standard_normal(()))  # nothing drawn without noise


def test_standard_normals_in_secure_mode_draw_one_release_at_a_time():
    n = NoiseSource(secure_mode=True)
    out = n.standard_normals(5, (2,))
    assert out.shape == (5, 2) and out.dtype == torch.float64 and bool(torch.isfinite(out).all())


def test_standard_normals_go_through_a_subclass_draw():
    """A source whose ``standard_normal`` is its own (the audits' weak-noise mutant,
    ``pyro_dp.testing.ScaledNoiseSource``) scales every normal of ``standard_normals`` too: the
    mutant of the CI audit was not caught when DP-HMC's L gradient normals bypassed it
    (2026-11-29)."""
    from pyro_dp.testing import ScaledNoiseSource

    weak, ref = ScaledNoiseSource(_seeded(), 0.1), _seeded()
    assert torch.equal(weak.standard_normals(10, (2,)), 0.1 * ref.standard_normals(10, (2,)))


def test_several_histograms_released_together_have_the_sensitivity_of_one_count_per_row_each():
    """``noisy_histogram`` with ``[N, k]`` bin indices: substituting one row moves at most two
    counts of each histogram by one (L2 at most √(2k)), and the noise is nm·√(2k) (√k under
    add/remove)."""
    from pyro_dp.mechanisms import NoiseSource, noisy_histogram

    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 6, (500, 3), generator=g)
    base = noisy_histogram(idx, 6, 0.0, NoiseSource()).value
    for row in range(0, 500, 37):
        other = idx.clone()
        other[row] = torch.randint(0, 6, (3,), generator=g)
        moved = noisy_histogram(other, 6, 0.0, NoiseSource()).value - base
        assert float(moved.norm()) <= math.sqrt(2 * 3) + 1e-12 and float(moved.sum()) == 0.0
    assert float(noisy_histogram(idx, 6, 2.0, NoiseSource()).noise_std) == pytest.approx(2.0 * math.sqrt(6))
    assert float(noisy_histogram(idx, 6, 2.0, NoiseSource(), "add_remove").noise_std) == pytest.approx(
        2.0 * math.sqrt(3))
