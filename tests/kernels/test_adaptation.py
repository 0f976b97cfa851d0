"""Warmup adaptation of the random-walk scale (ProposalScaleAdaptation) in the three penalty
kernels: it moves the scale towards the target acceptance during warmup, freezes it after,
costs no extra releases, and restarts from the user's scale in every chain."""
import warnings

import pytest
import torch
from pyro.infer import MCMC

import pyro_dp
from pyro_dp import DPExpFamPenalty, DPMultiPartyPenalty, DPPenalty
from pyro_dp.kernels.expfam import gaussian_known_variance
from tests.kernels.helpers import S, gauss_model, make_data

N = 300


def _make(kind, **kw):
    common = dict(noise_multiplier=2.0, seed=3, adapt_proposal=True, target_accept_prob=0.3, **kw)
    if kind == "penalty":
        return DPPenalty(gauss_model, 1e-3, llr_clip=4.0, **common)
    if kind == "expfam":
        fam = gaussian_known_variance("mu", scale=S, low=-3.0, high=3.0)
        return DPExpFamPenalty(gauss_model, fam, 1e-3, **common)
    return DPMultiPartyPenalty(gauss_model, torch.arange(N) % 2, 1e-3, llr_clip=4.0, **common)


@pytest.mark.parametrize("kind", ["penalty", "expfam", "multiparty"])
def test_scale_adapts_in_warmup_and_freezes_after(kind):
    y = make_data(N, seed=2)
    k = _make(kind)
    scales = []
    mcmc = MCMC(k, num_samples=50, warmup_steps=200, disable_progbar=True,
                hook_fn=lambda kern, params, stage, i: scales.append(float(kern.adapted_proposal_scale)))
    mcmc.run(y)
    warm, samp = scales[:200], scales[200:]
    # posterior sd is ~1/sqrt(N) ~ 0.06: a start at 1e-3 accepts almost everything, so the
    # Robbins-Monro recursion must grow the scale by orders of magnitude
    assert warm[-1] > 10 * 1e-3
    assert len(set(samp)) == 1 and samp[0] == warm[-1]  # frozen for sampling
    assert pyro_dp.get_ledger(mcmc).num_releases == 250  # one release per iteration, nothing extra


def test_each_chain_starts_from_the_users_scale():
    y = make_data(N, seed=2)
    k = _make("penalty")
    firsts = []

    def hook(kern, params, stage, i):
        if i == 0 and stage.startswith("Warmup"):
            firsts.append(float(kern.adapted_proposal_scale))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sequential chains on a small machine
        MCMC(k, num_samples=5, warmup_steps=50, num_chains=2, disable_progbar=True, hook_fn=hook).run(y)
    assert len(firsts) == 2
    # after one warmup step the scale moved by at most one Robbins-Monro gain (|gain| <= 1)
    for f in firsts:
        assert abs(torch.log(torch.tensor(f / 1e-3))) <= 1.0


def _build(kind, **k):
    k = dict(noise_multiplier=2.0, seed=3, adapt_proposal=True, **k)
    if kind == "penalty":
        return DPPenalty(gauss_model, 0.1, llr_clip=4.0, **k)
    if kind == "expfam":
        return DPExpFamPenalty(gauss_model, gaussian_known_variance("mu", scale=S, low=-3.0, high=3.0), 0.1, **k)
    return DPMultiPartyPenalty(gauss_model, torch.arange(N) % 2, 0.1, llr_clip=4.0, **k)


@pytest.mark.parametrize("kind", ["penalty", "expfam", "multiparty"])
def test_bad_target_accept_prob(kind):
    with pytest.raises(ValueError, match="target_accept_prob"):
        _build(kind, target_accept_prob=1.5)


@pytest.mark.parametrize("kind", ["penalty", "expfam", "multiparty"])
def test_target_accept_is_the_old_name(kind):
    """Pyro's name is target_accept_prob (RandomWalkKernel, HMC); the old name still works, warns, and
    cannot be given together with the new one."""
    assert _build(kind).target_accept_prob == 0.3  # the documented default
    with pytest.warns(FutureWarning, match="target_accept_prob"):
        assert _build(kind, target_accept=0.4).target_accept_prob == 0.4
    with pytest.raises(TypeError, match="target_accept_prob only"):
        _build(kind, target_accept=0.4, target_accept_prob=0.4)
