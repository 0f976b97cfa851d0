"""Issue 40: the data plate's ``subsample_size`` is honoured as the batch size by the kernels that
read a batch per iteration, and refused with a reason by the others — never silently ignored
(pyro_dp/kernels/declared_batch.py)."""
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.kernels import base as kernel_base
from pyro_dp.kernels.expfam import gaussian_known_variance

F64 = torch.float64
N, B = 400, 40


def _svi(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 3.0))
    with pyro.plate("data", len(y), subsample_size=B) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])


def _plain(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 3.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])


def _full_plate(y):  # subsample_size = N: no subsampling, accepted by every kernel
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 3.0))
    with pyro.plate("data", len(y), subsample_size=len(y)) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])


Y = torch.randn(N, dtype=F64, generator=torch.Generator().manual_seed(0)).clamp(-4, 4) + 0.5
START = {"mu": torch.tensor(0.5, dtype=F64)}

# the kernels that read a batch per iteration, built with a given batch size b (None: the plate's)
TAKERS = {
    "DPMinibatchPenalty": lambda m, b: pyro_dp.DPMinibatchPenalty(m, b, 0.1, 5.0, noise_multiplier=1.0, seed=0,
                                                                 noise_seed=1),
    "DPBarker": lambda m, b: pyro_dp.DPBarker(m, b, 0.1, temperature=0.1, seed=0, noise_seed=1),
    "DPSGLD": lambda m, b: pyro_dp.DPSGLD(m, b, 1e-3, 1.0, noise_multiplier=1.0, seed=0, noise_seed=1),
    "DPSGNHT": lambda m, b: pyro_dp.DPSGNHT(m, b, 1e-3, 1.0, noise_multiplier=1.0, seed=0, noise_seed=1),
}

# every other kernel: reads every row per release (or, DP-Fast MH, a batch the algorithm sizes)
REFUSERS = {
    "DPPenalty": lambda m: pyro_dp.DPPenalty(m, 0.1, 1.0, noise_multiplier=1.0, seed=0),
    "DPPenalty default path": lambda m: pyro_dp.DPPenalty(m, epsilon=2.0, seed=0, inference="iterative"),
    "DPHMC": lambda m: pyro_dp.DPHMC(m, 0.01, 3, 1.0, 1.0, 1.0, 1.0, seed=0),
    "DPFastMH": lambda m: pyro_dp.DPFastMH(m, 0.1, 5.0, 10.0, 40, 0.5, 1e-9, seed=0),
    "DPFastMH full batch": lambda m: pyro_dp.DPFastMH(m, 0.1, 5.0, step_epsilon=0.5, step_delta=1e-9,
                                                      full_batch=True, seed=0),
    "DPExpFamPenalty": lambda m: pyro_dp.DPExpFamPenalty(
        m, gaussian_known_variance("mu", scale=1.0, low=-4.0, high=4.0), 0.1, noise_multiplier=5.0, seed=0),
    "DPMultiPartyPenalty": lambda m: pyro_dp.DPMultiPartyPenalty(m, torch.arange(N) % 2, 0.1, 1.0, 1.0, seed=0),
}


def _run(kernel, model, n=8):
    mcmc = MCMC(kernel, num_samples=n, warmup_steps=0, initial_params=dict(START), disable_progbar=True)
    mcmc.run(Y)
    return mcmc


@pytest.mark.parametrize("name", sorted(TAKERS))
def test_batch_size_none_takes_the_plates_subsample_size_with_its_accounting(name):
    taken, given = TAKERS[name](_svi, None), TAKERS[name](_plain, B)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no mismatch warning: the plate's b is used
        warnings.filterwarnings("ignore", category=pyro_dp.mechanisms.ReproducibleNoiseWarning)
        warnings.filterwarnings("ignore", category=pyro_dp.SamplingWarning)  # 8 draws: too few to judge
        m_taken = _run(taken, _svi)
    m_given = _run(given, _plain)
    assert taken.batch_size == B
    # the same batch size, accounted the same way, and (same seeds) the same chain
    assert taken.ledger.entries == given.ledger.entries and len(taken.ledger.entries) == 1
    assert torch.equal(m_taken.get_samples()["mu"], m_given.get_samples()["mu"])
    assert taken.get_epsilon(1e-5) == given.get_epsilon(1e-5)


@pytest.mark.parametrize("name", sorted(TAKERS))
def test_batch_size_none_without_a_declared_subsample_size_is_refused(name):
    with pytest.raises(ValueError, match="declares none"):
        _run(TAKERS[name](_plain, None), _plain)


def test_an_explicit_batch_size_wins_and_says_so():
    k = TAKERS["DPMinibatchPenalty"](_svi, 80)
    with pytest.warns(UserWarning, match="batch_size=80 is used .* subsample_size=40"):
        _run(k, _svi)
    assert k.batch_size == 80 and k.ledger.entries[0].event.sample_rate == 80 / N


def test_an_unusable_plate_batch_size_is_refused_like_an_argument():
    def tiny(y):  # DP Barker needs b > 10 (an RDP order 2 <= alpha < b/5)
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=F64), 3.0))
        with pyro.plate("data", len(y), subsample_size=8) as i:
            pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])

    k = TAKERS["DPBarker"](tiny, None)
    with pytest.raises(ValueError):
        _run(k, tiny)
    assert not k.ledger.entries


@pytest.mark.parametrize("name", sorted(REFUSERS))
def test_kernels_that_read_every_row_refuse_a_declared_subsample_size_before_reading(name):
    k = REFUSERS[name](_svi)
    with pytest.raises(ValueError, match=r"subsample_size=40 .*Remove subsample_size .*DPMinibatchPenalty"):
        _run(k, _svi)
    assert not k.ledger.entries and not any(l.entries for l in k.privacy.chain_ledgers())


@pytest.mark.parametrize("name", ["DPPenalty", "DPFastMH full batch"])
def test_a_subsample_size_of_n_is_no_subsampling_and_is_accepted(name):
    k = REFUSERS[name](_full_plate)
    _run(k, _full_plate, n=3)
    assert k.ledger.entries


def test_mutant_that_ignores_the_plate_passes_silently(monkeypatch):
    """The refusal test has power: with the rule disabled (the behaviour before issue 40), DPPenalty
    runs on a subsampling plate without a word."""
    monkeypatch.setattr(kernel_base, "take_declared_subsample", lambda kernel, first_setup: None)
    k = REFUSERS["DPPenalty"](_svi)
    _run(k, _svi, n=3)  # no ValueError: the refusal test above would fail
    assert k.ledger.entries
