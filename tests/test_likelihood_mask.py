"""The likelihood's coordinates (``PrivateLikelihood.likelihood_mask``): which latent sites the
per-example log-likelihood depends on, found from the model's code and shapes only; the ratio
clip measures moves in those coordinates (``jump_norm``) and released gradients are restricted
to them (``project``). Privacy never rests on the mask being right: a wrong mask biases, it
cannot leak (the last test)."""
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro_dp.private import reveal
from pyro.infer import MCMC

import pyro_dp
from pyro_dp.default_path.driver import move_scales
from pyro_dp.kernels.diagnostics import ess_advice
from pyro_dp.kernels.hmc import release_gradient
from pyro_dp.kernels.penalty import penalty_release
from pyro_dp.likelihood import PrivateLikelihood

G = 3


def two_level(group, y):
    """mu and tau enter only the prior of the group intercepts u (outside the data plate)."""
    mu = pyro.sample("mu", dist.Normal(torch.zeros((), dtype=y.dtype), 5.0))
    tau = pyro.sample("tau", dist.HalfNormal(torch.ones((), dtype=y.dtype)))
    with pyro.plate("groups", G):
        u = pyro.sample("u", dist.Normal(mu, tau))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(u[group[i]], 1.0), obs=y[i])


def flat(y):
    mu = pyro.sample("mu", dist.Normal(torch.zeros((), dtype=y.dtype), 5.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y[i])


def data(n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    group = torch.arange(n) % G
    y = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64)[group] + torch.randn(n, generator=g, dtype=torch.float64)
    return group, y


def test_sites_of_the_likelihood():
    lik = PrivateLikelihood(two_level, data(), seed=0)
    assert lik.latent_names == ("mu", "tau", "u")
    assert lik.likelihood_sites() == ("u",)
    assert lik.likelihood_mask.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0] and lik.likelihood_mask.dtype == torch.float64
    # the per-example gradients vanish exactly outside the mask (so clipping sees the same rows)
    _, g = lik.per_example_grad(lik.flatten(lik.prototype_params))
    g = reveal(g, reason="the test reads the per-example gradients")
    assert torch.equal(g[:, :2], torch.zeros_like(g[:, :2])) and bool((g[:, 2:] != 0).any())
    flat_lik = PrivateLikelihood(flat, (data()[1],), seed=0)
    assert flat_lik.likelihood_sites() == ("mu",) and flat_lik.likelihood_mask is None  # nothing changes


def _branching_on_data(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    nu = pyro.sample("nu", dist.Normal(0.0, 5.0))
    loc = mu if bool(y.sum() > 0) else nu  # which latent the likelihood reads depends on the data
    with pyro.plate("data", len(y)) as i:
        pyro.sample("obs", dist.Normal(loc, 1.0), obs=y[i])


@pytest.mark.filterwarnings("ignore:The model does not index")
def test_the_mask_never_depends_on_data_values(monkeypatch):
    """A model whose likelihood reads ``mu`` or ``nu`` depending on the data: the trace has no
    data values (fake tensors), so it cannot take the branch and the answer is "undetermined"
    (every site counts) for any data; so is data read from the model's closure, whose values a
    trace would see. (Set-up refuses both models since #38 — a Python value of the data, data
    that are not arguments — and that check is switched off here to test the mask on its own.)"""
    y = torch.ones(10)
    with pytest.raises(ValueError, match="needs a Python value of its data"):
        PrivateLikelihood(_branching_on_data, (y,), seed=0)
    monkeypatch.setattr(PrivateLikelihood, "_check_isolation", lambda self, cache: None)
    monkeypatch.setattr(PrivateLikelihood, "_check_cross_rows", lambda self, cache: None)
    # and since #58 data outside the arguments are refused (pyro_dp.reach): switched off too
    import pyro_dp.likelihood
    import pyro_dp.reach

    monkeypatch.setattr(pyro_dp.likelihood, "outside_data", lambda *a, **k: [])
    monkeypatch.setattr(pyro_dp.reach.CallGuard, "_outside", lambda self, t: False)
    for d in (y, -y):
        lik = PrivateLikelihood(_branching_on_data, (d,), seed=0)
        assert lik.likelihood_sites() is None and lik.likelihood_mask is None
    conditioned = pyro.condition(lambda n: flat(torch.zeros(n)), data={"obs": y})
    lik = PrivateLikelihood(conditioned, (10,), seed=0)
    assert lik.likelihood_sites() is None and lik.likelihood_mask is None
    for sign in (1.0, -1.0):  # a branch on a tensor read from the closure cannot be traced either
        x = sign * torch.ones(10)

        def closure_branch(y):
            mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
            nu = pyro.sample("nu", dist.Normal(0.0, 5.0))
            with pyro.plate("data", len(y)) as i:
                pyro.sample("obs", dist.Normal(mu if bool(x.sum() > 0) else nu, 1.0), obs=y[i])

        assert PrivateLikelihood(closure_branch, (y,), seed=0).likelihood_sites() is None


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_a_move_outside_the_likelihood_costs_no_noise():
    """Räisä 2021 thesis §3.1 with ‖m ⊙ (θ'−θ)‖: a move of mu and tau alone changes no row's
    likelihood, so its ratio clip, noise and released sum are exactly zero (the ledger still
    records the release), and a move of u is clipped by its own length only."""
    k = pyro_dp.DPPenalty(two_level, 0.1, llr_clip=1.0, noise_multiplier=2.0, seed=0)
    k.setup(0, *data())
    z = k.lik.flatten(k.lik.prototype_params)
    state = k._init_state(z)
    prior_move = z + torch.tensor([0.3, -0.2, 0.0, 0.0, 0.0], dtype=z.dtype)
    rel = penalty_release(k.lik, k._noise, state, prior_move, llr_clip=1.0, noise_multiplier=2.0)
    assert float(rel.log_ratio) == 0.0 and rel.noise_var == 0.0 and len(rel.events) == 1
    move = z + torch.tensor([0.3, -0.2, 0.1, 0.0, 0.0], dtype=z.dtype)
    rel = penalty_release(k.lik, k._noise, state, move, llr_clip=1.0, noise_multiplier=2.0)
    assert float(rel.noise_std) == pytest.approx(2.0 * 2 * 1.0 * 0.1)  # nm * 2 b * ||m (θ'−θ)||


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_released_gradients_are_exact_outside_the_likelihood():
    """DP-HMC's G = T m ⊙ (Σ clip(∇ℓ_i) + ξ) + ∇log p: in mu and tau it is the prior's gradient
    exactly, with no noise; in u it is noisy."""
    k = pyro_dp.DPHMC(two_level, step_size=0.01, num_steps=3, grad_clip=1.0, llr_clip=1.0,
                      grad_noise_multiplier=5.0, llr_noise_multiplier=5.0, seed=0)
    k.setup(0, *data())
    z = k.lik.flatten(k.lik.prototype_params)
    g, _ = release_gradient(k._noise, k.lik, z, grad_clip=1.0, noise_multiplier=5.0)
    prior = k.lik.grad_log_prior(z)
    assert torch.equal(g[:2], prior[:2]) and bool((g[2:] != prior[2:]).all())


@pytest.mark.parametrize("make", [
    lambda **kw: pyro_dp.DPHMC(two_level, step_size=0.05, num_steps=3, grad_clip=1.0, llr_clip=1.0,
                               grad_noise_multiplier=1.0, llr_noise_multiplier=1.0, seed=1, noise_seed=2, **kw),
    lambda **kw: pyro_dp.DPPenalty(two_level, 0.05, llr_clip=1.0, noise_multiplier=1.0, seed=1, noise_seed=2, **kw),
], ids=["DPHMC", "DPPenalty"])
def test_compiled_and_eager_chains_agree_on_a_masked_model(make):
    """The fused graphs restrict gradients and measure moves as the eager path does: one chain,
    one ledger (``tests/test_compiled.py``'s tolerance for inductor)."""
    chains = []
    for kw in ({}, {"jit_compile": True}):
        k = make(**kw)
        k.setup(0, *data())
        p, out = k.initial_params, []
        for _ in range(6):
            p = k.sample(p)
            out.append(k.lik.flatten(p))
        chains.append((torch.stack(out), [[repr(e.event), e.count] for e in k.ledger.entries]))
    assert chains[0][1] == chains[1][1]
    torch.testing.assert_close(chains[0][0], chains[1][0], rtol=1e-10, atol=1e-15)
    assert bool((chains[0][0][1:] != chains[0][0][:-1]).any())  # the chain moved


@pytest.mark.usefixtures("release_recorder")  # calls release functions directly (issue 58)
def test_a_wrong_mask_biases_but_cannot_leak():
    """With the mask forced to leave out u (which the likelihood does read), a move of u gets
    the clip ‖m ⊙ (θ'−θ)‖ = 0: every row's ratio is clipped to 0 and the release is exactly 0
    whatever the data -- the chain is wrong, the release carries nothing."""
    values = []
    for seed in (0, 1):
        k = pyro_dp.DPPenalty(two_level, 0.1, llr_clip=1.0, noise_multiplier=2.0, seed=0)
        k.setup(0, *data(seed=seed))
        k.lik._likelihood_mask = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
        z = k.lik.flatten(k.lik.prototype_params)
        move = z + torch.tensor([0.0, 0.0, 0.5, -0.5, 0.5], dtype=z.dtype)
        rel = penalty_release(k.lik, k._noise, k._init_state(z), move, llr_clip=1.0, noise_multiplier=2.0)
        values.append((float(rel.log_ratio), rel.noise_var))
    assert values == [(0.0, 0.0), (0.0, 0.0)]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_default_penalty_walk_holds_prior_only_sites_and_sweeps_them_data_free():
    """DPPenalty's default path: mu and tau enter only the prior, so the private walk holds them
    fixed (scale 0) and data-free sweeps move them (module prior_sweeps) from the noise-free
    random-walk scale 2.38/sqrt(d_lik) x the guessed posterior sd (Roberts, Gelman & Gilks 1997);
    u takes the smaller noise-limited scale (the plain test, ``control_variate=False``) or the
    noise-free one (the default control variate). A model with every latent in the likelihood
    keeps one scalar scale and no sweeps; a given proposal_scale keeps the joint walk."""
    import math

    k = pyro_dp.DPPenalty(two_level, epsilon=2.0, num_iterations=500, seed=0, control_variate=False, inference="iterative")
    k.setup(0, *data(n=5000))
    z0 = k.initial_params
    k.sample(z0)
    jump, sd = move_scales(k, k.init.result, k.noise_multiplier)
    free = 2.38 / math.sqrt(3) * sd
    lik_scale = min(jump / math.sqrt(3), free)
    assert jump < sd  # noise-limited here, so the two scales differ
    torch.testing.assert_close(k.proposal_scale, torch.tensor([0.0, 0.0, lik_scale, lik_scale, lik_scale],
                                                              dtype=torch.float64))
    assert k.prior_sweeps.log_scale == pytest.approx(math.log(free), abs=0.5)  # its warmup adaptation has begun
    z = k.initial_params
    for _ in range(5):
        z = k.sample(z)
    assert not torch.equal(z["mu"], z0["mu"])  # the sweeps moved it (5 steps per iteration)
    k = pyro_dp.DPPenalty(flat, epsilon=2.0, num_iterations=500, seed=0, control_variate=False, inference="iterative")
    k.setup(0, data(n=5000)[1])
    k.sample(k.initial_params)
    assert isinstance(k.proposal_scale, float) and k.sweep_mask is None
    k = pyro_dp.DPPenalty(two_level, epsilon=2.0, num_iterations=500, seed=0, inference="iterative")  # the default: control variate
    k.setup(0, *data(n=5000))
    k.sample(k.initial_params)
    free = 2.38 / math.sqrt(3) * k.reference.scale_guess
    assert k.control_variate
    torch.testing.assert_close(k.proposal_scale, torch.tensor([0.0, 0.0, free, free, free], dtype=torch.float64))
    k = pyro_dp.DPPenalty(two_level, 0.05, epsilon=2.0, num_iterations=500, seed=0)  # a given scale
    k.setup(0, *data(n=5000))
    assert k.sweep_mask is None


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_default_dphmc_trajectory_holds_prior_only_sites_and_sweeps_them_data_free():
    """DPHMC's default path: the step size is set by the noise over the likelihood's d_lik
    coordinates (a trajectory moves them about L eta sqrt(d_lik)); mu and tau, which enter only
    the prior, get inverse mass 0 in the trajectory and move in data-free sweeps (module
    prior_sweeps), which also carry the released gradient's prior part to their new point. A
    model with every latent in the likelihood keeps unit mass. (The plain kernel,
    ``control_variate=False``; with the default control variate every coordinate starts at the
    noise-free step sd/d_lik^(1/4), or, where the gradients do not pay, L eta = 2.38 sd/sqrt(d_lik).)"""
    import math

    k = pyro_dp.DPHMC(two_level, epsilon=2.0, num_iterations=500, seed=0, control_variate=False, inference="iterative")
    k.setup(0, *data(n=5000))
    k.sample(k.initial_params)
    jump, sd = move_scales(k, k.init.result, k.llr_noise_multiplier)
    eta = min(jump / (k.num_steps * math.sqrt(3)), sd)
    assert k.step_size == pytest.approx(eta, rel=1e-12) and eta * k.num_steps < sd
    torch.testing.assert_close(k._inv_mass, torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0], dtype=torch.float64))
    k = pyro_dp.DPHMC(flat, epsilon=2.0, num_iterations=500, seed=0, control_variate=False, inference="iterative")
    k.setup(0, data(n=5000)[1])
    k.sample(k.initial_params)
    assert torch.equal(k._inv_mass, torch.ones(1, dtype=torch.float64))
    for gradients in (True, None):  # the default: control variate (gradients where they pay: not here, a walk)
        k = pyro_dp.DPHMC(two_level, epsilon=2.0, num_iterations=500, seed=0, gradients=gradients, inference="iterative")
        k.setup(0, *data(n=5000))
        k.sample(k.initial_params)
        step = (k.reference.scale_guess / 3 ** 0.25 if k.uses_gradients
                else 2.38 * k.reference.scale_guess / (k.num_steps * math.sqrt(3)))  # the walk's L eta: 2.38 sd / sqrt(d_lik)
        assert k.control_variate and k.uses_gradients == bool(gradients) and k.step_size == pytest.approx(step, rel=1e-12)
        torch.testing.assert_close(k._inv_mass, torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0], dtype=torch.float64))


def test_the_prior_sweeps_carry_a_released_gradient_to_the_new_point():
    """PriorSweeps.run: after the sweeps moved the prior-only coordinates, the state's released
    gradient is the same release's at the new point: its prior part taken there (data-free)."""
    from pyro_dp.kernels.hmc import hmc_init

    k = pyro_dp.DPHMC(two_level, epsilon=2.0, num_iterations=500, seed=0, inference="iterative")
    k.setup(0, *data(n=5000))
    k.sample(k.initial_params)
    state = hmc_init(k.lik, torch.zeros(5, dtype=torch.float64))
    released_lik = torch.tensor([0.0, 0.0, 1.0, -2.0, 0.5], dtype=torch.float64)  # a stand-in release
    state = state._replace(grad=released_lik + k.lik.grad_log_prior(state.z))
    k.prior_sweeps.log_scale = 0.0
    moved = False
    for _ in range(20):
        new, ok = k.prior_sweeps.run(k.lik, k._rng, state, k.sweep_mask, iteration=0, target_accept_prob=0.5, warmup=False)
        moved = moved or ok
        if ok:
            assert not torch.equal(new.z[:2], state.z[:2]) and torch.equal(new.z[2:], state.z[2:])
            torch.testing.assert_close(new.grad, released_lik + k.lik.grad_log_prior(new.z))
            torch.testing.assert_close(new.log_prior, k.lik.log_prior(new.z))
            break
    assert moved


def test_a_used_compiled_likelihood_still_pickles_with_its_mask():
    """The likelihood keeps the kernel object's shared cache (where its sites are kept, beside
    compiled graphs, which cannot be pickled) only in its own process: a copy keeps the mask."""
    import copy
    import pickle

    k = pyro_dp.DPPenalty(two_level, 0.05, llr_clip=1.0, noise_multiplier=1.0, seed=1, jit_compile=True)
    k.setup(0, *data())
    k.sample(k.initial_params)
    lik = pickle.loads(pickle.dumps(k.lik))
    assert torch.equal(lik.likelihood_mask, k.lik.likelihood_mask)
    assert torch.equal(copy.deepcopy(k).lik.likelihood_mask, k.lik.likelihood_mask)


def test_a_graph_traced_before_the_mask_is_known_reads_it_correctly():
    """A fused graph that measures a move (jump_norm), built on a fresh likelihood whose mask is
    not determined yet (CompiledLikelihood._compile determines it before tracing), measures it in
    the likelihood's coordinates only."""
    lik = PrivateLikelihood(two_level, data(), seed=0, jit_compile=True, jit_options={"backend": "graph"})
    assert "_likelihood_mask" not in lik.__dict__
    z = lik.flatten(lik.prototype_params)
    move = z + torch.tensor([3.0, 4.0, 0.0, 0.0, 0.5], dtype=z.dtype)
    graph = lik.compiled.fused_graph("jump", lambda a, b: lik.jump_norm(b, a), (z, move), full_data=False)
    assert float(graph(z, move)) == pytest.approx(0.5)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_ess_advice_names_the_grouped_kernel_for_a_model_with_latents_outside_the_likelihood():
    """A model whose latents include some outside the likelihood (a hierarchical model) gets,
    in the effective-sample-size advice, the kernel built for group effects in the likelihood;
    a model with every latent in the likelihood, and DPGroupedPenalty itself, do not (structure
    only: the mask). The advice names the group site where the structure shows one (``u``: a
    latent inside the groups plate that enters the likelihood; not ``mu``), and leaves it ``...``
    where it shows none (a mutant likelihood without the plated latents)."""
    from pyro_dp.kernels.diagnostics import GROUP_ADVICE

    k = pyro_dp.DPPenalty(two_level, 0.05, llr_clip=1.0, noise_multiplier=1.0, seed=1)
    k.setup(0, *data())
    assert ess_advice(k).endswith(GROUP_ADVICE.format(site="'u'"))
    assert "DPGroupedPenalty(model, group_site='u', epsilon=...)" in ess_advice(k)
    k.lik.plated_latents = ()  # mutant: no structure read
    assert ess_advice(k).endswith(GROUP_ADVICE.format(site="..."))
    k = pyro_dp.DPPenalty(flat, 0.05, llr_clip=1.0, noise_multiplier=1.0, seed=1)
    k.setup(0, data()[1])
    assert "DPGroupedPenalty" not in ess_advice(k)
    k = pyro_dp.DPGroupedPenalty(two_level, group_site="u", epsilon=2.0, num_iterations=50, seed=0)
    k.setup(0, *data())
    assert "DPGroupedPenalty" not in ess_advice(k)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kernel_cls", [pyro_dp.DPPenalty, pyro_dp.DPHMC])
def test_a_resumed_default_path_chain_keeps_its_sweeps_scale(kernel_cls):
    """The sweeps' adapted scale is a chain attribute: a chain checkpointed during sampling and
    resumed in a fresh kernel continues exactly (same draws, same ledger); a checkpoint that
    lost the scale would move mu and tau at another one."""
    import pickle

    saved = {}

    def hook(kernel, samples, stage, i):
        if stage == "Sample" and i == 4:
            saved["state"] = kernel.state_dict()

    def kernel():
        return kernel_cls(two_level, epsilon=4.0, seed=0, noise_seed=1)

    group, y = data(n=600)
    whole = kernel()
    full = MCMC(whole, num_samples=12, warmup_steps=20, hook_fn=hook, disable_progbar=True)
    full.run(group, y)
    assert whole.sweep_mask is not None
    resumed = kernel()
    resumed.load_state_dict(pickle.loads(pickle.dumps(saved["state"])))
    rest = MCMC(resumed, num_samples=7, warmup_steps=0, disable_progbar=True)
    rest.run(group, y)
    for site in ("mu", "tau", "u"):
        assert torch.equal(rest.get_samples()[site], full.get_samples()[site][5:]), site
    assert resumed.ledger == whole.ledger and "prior_sweeps" in saved["state"]["chain"]
