"""The centred clip ball of DP-SGLD's default path (:mod:`pyro_dp.default_path.centring`): where the
per-example gradients are skewed (the score of a Normal's scale, bounded below, long above) the
released centre lies along the tail and the ball shrinks; where they are symmetric none is used;
noisy or gainless counts use none; each row's term stays in the ball around the centre, so the
clipped sum's sensitivity is 2C for any adversarial row; the compiled centred gradient is the
eager one; the centre is refused where its sensitivity argument fails (add/remove) and by
kernels that have no centred ball; and the default path records its two releases."""
import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.default_path.centring import (CENTRE_OFFSETS, RADIUS_EDGES, REFERENCE_EDGE, centre_from_counts,
                                      private_centre)
from pyro_dp.kernels.sg_gradient import private_gradient
from pyro_dp.default_path.tuning import DPAutoTune
from pyro_dp.likelihood import PrivateLikelihood
from pyro_dp.mechanisms import NoiseSource


def _rows(n=20_000, skewed=True, seed=0):
    """A scale-score-like column ((x² − 1)/√2, bounded below by −0.71) and a symmetric one."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, generator=g, dtype=torch.float64)
    a = (a * a - 1.0) / math.sqrt(2.0) if skewed else a
    return torch.stack([a, torch.randn(n, generator=g, dtype=torch.float64)], 1)


def _outside(rows, centre, radius):
    return int(((rows - centre).norm(dim=1) > radius).sum())


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_a_skewed_column_gets_a_centre_along_its_tail_and_a_smaller_ball():
    rows = _rows()
    R = float(torch.quantile(rows.norm(dim=1), 0.99))
    got = private_centre(lambda: [rows], R, (0.0, 0.0), NoiseSource())  # noise-free: the releases' values
    assert got.centre is not None and float(got.centre[0]) > 5 * abs(float(got.centre[1]))
    assert got.ratio < 0.9
    # as many rows outside the ratio's radius around the centre as outside the reference radius
    # around the origin (to the log-linear interpolation between the histogram's edges)
    before = _outside(rows, torch.zeros(2, dtype=rows.dtype), REFERENCE_EDGE * R)
    after = _outside(rows, got.centre, got.ratio * REFERENCE_EDGE * R)
    assert abs(after - before) <= 0.15 * before


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_symmetric_rows_get_no_centre():
    rows = _rows(skewed=False)
    got = private_centre(lambda: [rows], float(torch.quantile(rows.norm(dim=1), 0.99)), (0.0, 0.0), NoiseSource())
    assert got.centre is None and got.ratio == 1.0


def _hist(tails, n=10_000):
    """Bin counts from tail counts at RADIUS_EDGES (``n`` rows)."""
    return torch.cat([n - tails[:1], tails[:-1] - tails[1:], tails[-1:]])


def test_noisy_or_gainless_counts_use_no_centre():
    edges = torch.tensor(RADIUS_EDGES, dtype=torch.float64)
    origin = 400 * torch.exp(-8 * (edges - 1))
    better = 400 * torch.exp(-8 * (edges - 0.85))
    counts = torch.stack([_hist(origin), _hist(better)])
    assert centre_from_counts(counts, 10.0)[0] == 1
    assert centre_from_counts(counts, 200.0) == (0, 1.0)  # the origin's tail count is within the noise
    barely = 400 * torch.exp(-8 * (edges - 0.99))  # a ratio of about 0.99: not worth it
    assert centre_from_counts(torch.stack([_hist(origin), _hist(barely)]), 10.0) == (0, 1.0)
    worse = 400 * torch.exp(-8 * (edges - 1.2))  # more rows outside everywhere: no crossing below
    assert centre_from_counts(torch.stack([_hist(origin), _hist(worse)]), 10.0) == (0, 1.0)
    assert len(CENTRE_OFFSETS) >= 2 and CENTRE_OFFSETS[0] == 0.0


def _scale_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.zeros((), dtype=y.dtype), 10.0))
    s = pyro.sample("s", dist.HalfNormal(torch.tensor(2.0, dtype=y.dtype)))
    with pyro.plate("data", y.shape[0]) as idx:
        pyro.sample("obs", dist.Normal(mu, s), obs=y[idx])


def _data(n=300, seed=5):
    y = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 0.8 + 0.7
    y[3], y[7], y[11] = 1e200, -1e200, 1e308  # finite rows whose terms overflow: the per-row rule
    return y


@pytest.mark.parametrize("row", [1e308, -1e200, 0.7, 3.0])
@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_the_centred_sum_moves_by_at_most_2c_when_one_row_is_substituted(row):
    """Every row, T = 1, the same noise draw on both data sets: the private gradient is the
    prior's plus N m + Σ clip(g_i − m) plus the draw, so substituting one row by an adversarial
    value moves it by the change of the clipped sum, at most 2C."""
    y = _data()
    z, clip = torch.tensor([0.3, -0.2], dtype=torch.float64), 1.5
    centre = torch.tensor([0.9, 2.5], dtype=torch.float64)  # ||m|| > C: the origin is outside the ball
    grads = []
    for data in (y, torch.cat([y[:20], torch.tensor([row], dtype=y.dtype), y[21:]])):
        lik = PrivateLikelihood(_scale_model, (data,), seed=0)
        grads.append(private_gradient(NoiseSource(seed=1, warn=False), lik, z, sample_rate=1.0, grad_clip=clip,
                                      noise_multiplier=1.0, relation="substitute", centre=centre).grad)
    assert torch.isfinite(grads[0]).all()
    assert float((grads[0] - grads[1]).norm()) <= 2 * clip * (1 + 1e-12)


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_without_clipping_the_centred_gradient_is_the_uncentred_one():
    """N m + Σ (g_i − m) = Σ g_i: a clip above every row's distance from the centre leaves the
    released gradient as it is (the same noise draw; finite rows only). A centre left out of
    the sum (Σ clip(g_i − m) alone) would be off by N m."""
    y = _data()[20:]  # no overflowing rows
    lik = PrivateLikelihood(_scale_model, (y,), seed=0)
    z = torch.tensor([0.3, -0.2], dtype=torch.float64)
    kw = dict(sample_rate=1.0, grad_clip=1e6, noise_multiplier=1e-3, relation="substitute")
    plain = private_gradient(NoiseSource(seed=4, warn=False), lik, z, **kw).grad
    centred = private_gradient(NoiseSource(seed=4, warn=False), lik, z, centre=torch.tensor([0.4, 1.3],
                                                                                             dtype=torch.float64), **kw)
    torch.testing.assert_close(centred.grad, plain, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("rate", [1.0, 0.3])
@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_the_compiled_centred_gradient_is_the_eager_one(rate):
    """Rows whose gradients overflow included, every row or a Poisson batch (a plate's
    ``subsample_size``: the compiled graph pads the batch to its bucket and masks the padding,
    whose rows must not add ``m``); the compiled path runs it as one graph."""
    y = _data()
    z, centre = torch.tensor([0.3, -0.2], dtype=torch.float64), torch.tensor([0.2, 1.1], dtype=torch.float64)
    out = {}
    for jit in (False, True):
        cache = {}
        lik = PrivateLikelihood(_scale_model, (y,), seed=0, jit_compile=jit, jit_cache=cache)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[jit] = private_gradient(NoiseSource(seed=3, warn=False), lik, z, sample_rate=rate, grad_clip=1.5,
                                        noise_multiplier=2.0, relation="substitute", centre=centre)
        if jit:
            assert any("centred" in key[0] for key, fn in cache.items() if fn is not None)
    torch.testing.assert_close(out[True].grad, out[False].grad, rtol=1e-10, atol=1e-12)
    assert out[True].noise_std == out[False].noise_std


def test_a_centre_is_refused_where_its_sensitivity_fails_and_where_no_kernel_uses_it():
    y = _data()
    lik = PrivateLikelihood(_scale_model, (y,), seed=0)
    with pytest.raises(ValueError, match="substitute"):
        private_gradient(NoiseSource(seed=1, warn=False), lik, torch.zeros(2, dtype=torch.float64), sample_rate=1.0,
                         grad_clip=1.0, noise_multiplier=1.0, relation="add_remove",
                         centre=torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="substitute"):
        private_centre(lambda: [torch.zeros(3, 2)], 1.0, (1.0, 1.0), NoiseSource(), relation="add_remove")
    with pytest.raises(TypeError, match="centre"):
        DPAutoTune(centre="yes")
    k = pyro_dp.DPPenalty(_scale_model, epsilon=2.0, init=DPAutoTune(centre=True), inference="iterative")
    with pytest.raises(ValueError, match="no centred clip ball"):
        k.setup(0, y)
    # DPSGLD's default path under add/remove (a batch size given) plans no centre
    k = pyro_dp.DPSGLD(_scale_model, batch_size=50, epsilon=2.0, relation="add_remove", public_num_rows=300)
    assert k.init.centre is False


def test_the_default_path_records_the_centre_and_plans_it():
    """Two releases under ``tune:centre``, planned before any data is read (the planned and
    recorded ledgers agree: the kernel contract's check), and the budget holds."""
    g = torch.Generator().manual_seed(0)
    y = (torch.randn(4000, generator=g, dtype=torch.float64) * 0.8 + 0.7)
    k = pyro_dp.DPSGLD(_scale_model, epsilon=8.0, seed=0)
    assert k.init.centre is True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(k, num_samples=30, warmup_steps=10, disable_progbar=True)
        mcmc.run(y)
    assert k.ledger.by_label()["tune:centre"] == 2
    assert pyro_dp.get_epsilon(mcmc, delta=k.delta) <= 8.0 * (1 + 1e-9)
    r = k.init.result
    assert (r.centre is None) == (r.centre_ratio == 1.0)
