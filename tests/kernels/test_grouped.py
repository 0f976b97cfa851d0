"""DPGroupedPenalty (#40): parallel per-group penalty updates of a group site.

(a) privacy: the kernel contract (2 Gaussian events per iteration, planned = recorded; on the
    default path also the group clip's histogram, once per chain), and the grouped release's
    sensitivity: one adversarial row (NaN, +-inf, huge, a group index out of range) moves the
    released vector (ratios per unit move, each row clipped to L2 norm b) by at most 2b (noise
    multiplier 0, the documented test mode); a mutant without the clip fails;
(b) correctness: the grouped step leaves the exact conjugate posterior of
    y_i ~ N(a[g_i], 1), a_g ~ N(0, 1) invariant (K chains started at exact posterior draws; per-group
    mean and variance within 4 exact Monte Carlo standard errors), with and without privacy noise;
    mutants that drop the prior ratio, or accept all groups jointly on the summed ratio with one
    group's noise correction, fail (without noise a joint decision is a valid MH step: no test can
    fail it there);
(c) bad inputs: refused at set-up, before any data access;
(d) the data-free step on prior-only sites leaves their conditional invariant (a mutant that
    accepts every move fails) and releases nothing.
"""
import math

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_dp.kernels.grouped as grouped_mod
from pyro_dp import DPAutoTune, DPGroupedPenalty, DPPenalty
from pyro_dp.kernels.grouped import grouped_accept, grouped_ratio_release, grouped_step, prior_only_step
from pyro_dp.kernels.mh import MHState
from pyro_dp.kernels.proposals import penalty_log_accept_threshold
from pyro_dp.likelihood import PrivateLikelihood
from pyro_dp.mechanisms import GaussianEvent, NoiseSource, gaussian_release_spec
from pyro_dp.testing import check_kernel

from .helpers import mean_var_within_mcse

G = 3


def group_model(g, y):
    """y_i ~ N(a[g_i] + b, 1), a_g ~ N(0, 1) (a plate), b ~ N(0, 1)."""
    b = pyro.sample("b", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
    with pyro.plate("groups", G):
        a = pyro.sample("a", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(a[g] + b, 1.0), obs=y)


def group_data(n=30, seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = torch.arange(n) % G
    y = torch.tensor([0.5, 1.5, -1.0], dtype=torch.float64)[g] + torch.randn(n, generator=gen, dtype=torch.float64)
    return g, y


def make_kernel(**kw):
    kw = {"proposal_scale": 0.1, "llr_clip": 5.0, "noise_multiplier": 2.0, "group_site": "a", **kw}
    return DPGroupedPenalty(group_model, **kw)


# ----------------------------------------------------------------------------- (a) privacy


def test_contract_two_gaussian_events_per_iteration():
    g, y = group_data()
    report = check_kernel(lambda: make_kernel(), (g, y), checks=["planned_equals_recorded", "setup_is_data_free"],
                          steps=4)
    assert report["planned_equals_recorded"] == "8 releases recorded, as planned"
    k = make_kernel(seed=0)
    k.setup(0, g, y)
    assert k.planned_events() == ([], [GaussianEvent(2.0)] * 2)


@pytest.mark.filterwarnings("ignore::pyro_dp.SamplingWarning")  # a tiny N: the tuner's reliability notice
def test_default_path_plans_the_private_group_clip():
    """Only a budget: the tuner's releases, one histogram for the group clip per chain, then 2
    releases per iteration; planned = recorded, within the budget."""
    g, y = group_data(n=60)
    report = check_kernel(lambda: DPGroupedPenalty(group_model, group_site="a", epsilon=4.0, delta=1e-4,
                                                   num_iterations=8), (g, y), checks=["planned_equals_recorded"],
                          steps=3)
    assert "as planned" in report["planned_equals_recorded"]
    k = DPGroupedPenalty(group_model, group_site="a", epsilon=4.0, delta=1e-4, num_iterations=8, seed=0)
    k.setup(0, g, y)
    fixed, per_iteration = k.planned_events()
    assert fixed[-1] == GaussianEvent(k.noise_multiplier / 4) and per_iteration == [GaussianEvent(k.noise_multiplier)] * 2
    params = k.initial_params
    for _ in range(3):
        params = k.sample(params)
    assert k.group_walk.clip is not None and k._group_clip() == k.group_walk.clip <= k.llr_clip
    assert k.get_epsilon(1e-4) <= 4.0 + 1e-9


def test_budget_calibrates_two_releases_per_iteration():
    """With a budget, 50 iterations get the noise multiplier of DPPenalty's 100 (one release each):
    two Gaussian releases per iteration, as planned."""
    g, y = group_data()
    k = make_kernel(noise_multiplier=None, epsilon=4.0, delta=1e-5, num_iterations=50, seed=0)
    k.setup(0, g, y)
    one = DPPenalty(group_model, proposal_scale=0.1, llr_clip=5.0, epsilon=4.0, delta=1e-5, num_iterations=100, seed=0)
    one.setup(0, g, y)
    assert k.noise_multiplier == pytest.approx(one.noise_multiplier, rel=1e-6)  # 2 x 50 releases = 100


def _release_of(lik, z, deltas, coords, llr_clip):
    spec = gaussian_release_spec(0.0)  # the non-private test mode: the clipped sum itself
    ll_old = lik.per_example_loglik(z)
    _, rel, _ = grouped_ratio_release(lik, spec, z, deltas, coords, ll_old, torch.zeros(len(coords),
                                      dtype=torch.float64), llr_clip)
    return rel.value


BAD_ROWS = [("y", float("nan")), ("y", float("inf")), ("y", -float("inf")), ("y", 1e3), ("g", 99)]


def _max_shift(llr_clip=2.0):
    g, y = group_data()
    lik = PrivateLikelihood(group_model, (g, y), seed=0)
    coords = grouped_mod.group_coordinates(lik, "a")
    z = torch.tensor([0.2, 0.4, 1.1, -0.8], dtype=torch.float64)
    deltas = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    base = _release_of(lik, z, deltas, coords, llr_clip)
    bound = 2 * llr_clip  # the release is per unit move: each row's vector clipped to L2 norm b
    shifts = []
    for arg, value in BAD_ROWS:
        g2, y2 = g.clone(), y.clone()
        (y2 if arg == "y" else g2)[0] = value
        lik2 = PrivateLikelihood(group_model, (g2, y2), seed=0)
        shifts.append(float(torch.linalg.vector_norm(_release_of(lik2, z, deltas, coords, llr_clip) - base)))
    return shifts, bound


def test_one_adversarial_row_moves_the_release_by_at_most_2C():
    shifts, bound = _max_shift()
    assert all(s <= bound * (1 + 1e-12) for s in shifts), (shifts, bound)
    assert max(shifts) > 0.5 * bound  # the bound is nearly reached (the test has teeth)


def test_mutant_without_the_clip_exceeds_2C(monkeypatch):
    from pyro_dp.mechanisms import clip_and_sum

    monkeypatch.setattr(grouped_mod, "clip_and_sum", lambda r, clip: clip_and_sum(r, float("inf")))
    shifts, bound = _max_shift()
    assert not all(s <= bound * (1 + 1e-12) for s in shifts)


# ----------------------------------------------------------------------------- (b) correctness


class GroupLik:
    """Closed-form stand-in of PrivateLikelihood for y_i ~ N(a[g_i], 1), a_g ~ N(0, 1) (no other
    latent): the grouped step needs per_example_loglik, loglik_and_prior, log_prior, temperature."""

    temperature = 1.0

    def __init__(self, g, y):
        self.g, self.y = g, y

    def per_example_loglik(self, z):
        return -0.5 * (self.y - z[self.g]) ** 2

    def log_prior(self, z):
        return -0.5 * (z ** 2).sum()

    def loglik_and_prior(self, z):
        return self.per_example_loglik(z), self.log_prior(z)


def conjugate_case(n_per_group=10, n_groups=4, seed=3):
    gen = torch.Generator().manual_seed(seed)
    g = torch.arange(n_per_group * n_groups) % n_groups
    means = torch.tensor([3.0, 2.0, -2.5, 1.0], dtype=torch.float64)[:n_groups]
    y = means[g] + torch.randn(len(g), generator=gen, dtype=torch.float64).clamp(-3, 3)
    prec = 1.0 + torch.bincount(g, minlength=n_groups).to(torch.float64)
    post_mean = torch.zeros(n_groups, dtype=torch.float64).index_add(0, g, y) / prec
    return g, y, post_mean, 1.0 / prec


def invariance_ends(accept, noise_multiplier, k=400, steps=15, scale=0.2, llr_clip=6.0, seed=0):
    """K chains started at exact posterior draws, ``steps`` grouped steps each: their ends are iid
    posterior draws if the step leaves the posterior invariant."""
    g, y, m, v = conjugate_case()
    lik = GroupLik(g, y)
    coords = torch.arange(len(m))
    gen = torch.Generator().manual_seed(seed)
    rng = torch.Generator().manual_seed(seed + 1)
    noise = NoiseSource(seed=seed + 2, warn=False)
    starts = m + v.sqrt() * torch.randn(k, len(m), generator=gen, dtype=torch.float64)
    ends = []
    for z in starts:
        state = MHState(z, lik.log_prior(z), None, None)
        for _ in range(steps):
            state, _ = grouped_step(lik, noise, rng, state, coords=coords, scale=scale, llr_clip=llr_clip,
                                    noise_multiplier=noise_multiplier, accept=accept)
        ends.append(state.z)
    return torch.stack(ends), m, v


def no_prior_ratio(log_u, log_ratio, prior_ratio, noise_var):
    return grouped_accept(log_u, log_ratio, torch.zeros_like(prior_ratio), noise_var)


def joint_with_one_correction(log_u, log_ratio, prior_ratio, noise_var):
    """One decision for all groups on the summed ratio, corrected for one coordinate's noise."""
    lam = (log_ratio + prior_ratio).sum()
    return (log_u[0] < penalty_log_accept_threshold(lam, noise_var.mean())).expand_as(log_ratio)


@pytest.mark.parametrize("noise_multiplier", [0.0, 0.5])
@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_grouped_step_leaves_the_conjugate_posterior_invariant(noise_multiplier):
    ends, m, v = invariance_ends(grouped_accept, noise_multiplier)
    ok, (m_hat, v_hat) = mean_var_within_mcse(ends, m, v)
    assert ok, f"nm={noise_multiplier}: mean {m_hat} vs {m}, var {v_hat} vs {v}"


@pytest.mark.parametrize("mutant, noise_multiplier", [(no_prior_ratio, 0.0),
                                                      (joint_with_one_correction, 0.5)])
@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_mutants_fail_the_invariance_test(mutant, noise_multiplier):
    ends, m, v = invariance_ends(mutant, noise_multiplier)
    ok, (m_hat, v_hat) = mean_var_within_mcse(ends, m, v)
    assert not ok, f"{mutant.__name__} passed: mean {m_hat} vs {m}, var {v_hat} vs {v}"


class PriorOnlyLik:
    """Stand-in: coordinate 0 enters only the prior, N(1, 0.5^2); coordinate 1 is held fixed."""

    def log_prior(self, z):
        return -0.5 * ((z[0] - 1.0) / 0.5) ** 2 - 0.5 * z[1] ** 2


def _prior_only_ends(broken, k=400, steps=10):
    lik, rng, gen = PriorOnlyLik(), torch.Generator().manual_seed(4), torch.Generator().manual_seed(5)
    scale = torch.tensor([0.6, 0.0], dtype=torch.float64)
    ends = []
    for x in 1.0 + 0.5 * torch.randn(k, generator=gen, dtype=torch.float64):
        z = torch.stack([x, torch.tensor(0.3, dtype=torch.float64)])
        state = MHState(z, lik.log_prior(z), None, "cache")
        for _ in range(steps):
            if broken:  # mutant: every proposal accepted (a random walk, no target)
                state = state._replace(z=state.z + scale * torch.randn(2, generator=rng, dtype=torch.float64))
            else:
                state, _ = prior_only_step(lik, rng, state, scale)
        assert state.cache == "cache" and float(state.z[1]) == 0.3  # the cache and the other coordinates kept
        ends.append(state.z[:1])
    return torch.stack(ends)


@pytest.mark.parametrize("broken", [False, True])
def test_prior_only_step_leaves_the_prior_conditional_invariant(broken):
    ok, stats = mean_var_within_mcse(_prior_only_ends(broken), torch.tensor([1.0], dtype=torch.float64), 0.25)
    assert ok != broken, stats


def hier_model(g, y):
    """A prior-only population mean: mu ~ N(0, 1), a_g ~ N(mu, 1), y_i ~ N(a[g_i] + b, 1)."""
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
    b = pyro.sample("b", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
    with pyro.plate("groups", G):
        a = pyro.sample("a", dist.Normal(mu, 1.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(a[g] + b, 1.0), obs=y)


def test_prior_only_sites_move_without_releases():
    """mu enters only the prior: it moves by the data-free step, and the plan stays 2 releases."""
    g, y = group_data()
    report = check_kernel(lambda: DPGroupedPenalty(hier_model, 0.1, 5.0, 2.0, group_site="a"), (g, y),
                          checks=["planned_equals_recorded"], steps=4)
    assert report["planned_equals_recorded"] == "8 releases recorded, as planned"
    k = DPGroupedPenalty(hier_model, 0.1, 5.0, 2.0, group_site="a", seed=0)
    k.setup(0, g, y)
    params = k.initial_params
    mus = [float(params["mu"])]
    for _ in range(3):
        params = k.sample(params)
        mus.append(float(params["mu"]))
    assert len(set(mus)) > 1


def test_kernel_chain_moves_groups_and_counts_acceptance():
    """The kernel's iteration on a Pyro model (non-private mode): both moves run, the groups' own
    acceptance is reported after warmup."""
    from pyro.infer import MCMC

    g, y = group_data()
    k = make_kernel(noise_multiplier=0.0, non_private=True, group_scale=0.2, seed=1)
    mcmc = MCMC(k, num_samples=20, warmup_steps=5, disable_progbar=True)
    mcmc.run(g, y)
    a = mcmc.get_samples()["a"]
    assert bool((a[1:] != a[:-1]).any(0).all())  # every group moved
    assert 0.0 < k.diagnostics()["group acceptance rate"] <= 1.0


# ----------------------------------------------------------------------------- (c) bad inputs


def correlated_model(g, y):
    cov = torch.tensor([[1.0, 0.9, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=y.dtype)
    a = pyro.sample("a", dist.MultivariateNormal(torch.zeros(G, dtype=y.dtype), cov))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(a[g], 1.0), obs=y)


def prior_only_model(g, y):
    mu = pyro.sample("mu", dist.Normal(torch.zeros(G, dtype=y.dtype), 1.0).to_event(1))
    with pyro.plate("groups", G):
        a = pyro.sample("a", dist.Normal(mu, 1.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(a[g], 1.0), obs=y)


@pytest.mark.parametrize("model, site, match", [
    (group_model, "zz", "not a latent site"),
    (group_model, "b", "at least 2"),
    (prior_only_model, "mu", "does not enter the likelihood"),
    (correlated_model, "a", "does not factorise"),
])
def test_bad_group_sites_are_refused_at_setup_before_data(model, site, match):
    g, y = group_data()
    y = torch.full_like(y, float("nan"))  # nothing may be read: a NaN data set gives the same refusal
    k = DPGroupedPenalty(model, 0.1, llr_clip=5.0, noise_multiplier=2.0, group_site=site, seed=0)
    with pytest.raises(ValueError, match=match):
        k.setup(0, g, y)
    assert len(k.ledger) == 0


def test_whitening_and_one_component_are_refused():
    with pytest.raises(ValueError, match="whiten"):
        DPGroupedPenalty(group_model, group_site="a", init=DPAutoTune(whiten=True))
    with pytest.raises(ValueError, match="one_component"):
        DPGroupedPenalty(group_model, 0.1, 5.0, 2.0, group_site="a", one_component=True)
    with pytest.raises(ValueError, match="group_scale"):
        DPGroupedPenalty(group_model, 0.1, 5.0, 2.0, group_site="a", group_scale=-1.0)
    assert DPGroupedPenalty.whiten_by_default is False


@pytest.mark.parametrize("check", ["setup_is_data_free", "budget_stops", "planned_equals_recorded", "copies",
                                   "per_row_rule", "audit_hooks"])
def test_the_kernel_kit_contract(check):
    """The package's kernel contract (pyro_dp.testing.check_kernel), as for every other kernel in
    tests/kernels/test_contract.py (whose cases are golden-recorded; eager = compiled does not
    apply: the grouped step has no compiled graph)."""
    check_kernel(lambda: make_kernel(seed=0), group_data(), checks=[check], name="grouped")
