"""The test kit :mod:`pyro_dp.testing`: the weak-noise mutant releases exactly ``factor`` times
the noise of the honest kernel (same secret draws, same ledger), and the aiming helpers."""
import pickle
import pyro
import pytest
import torch
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
from pyro_dp.mechanisms import NoiseSource
from pyro_dp.private import PrivateReadError, reveal
from pyro_dp.testing import ScaledNoiseSource, noise_free_scores, separating_seed, weak_noise

from .audit_cases import FAMILIES, model, neighbours


def test_scaled_noise_source_scales_the_noise_and_keeps_the_batches():
    base, ref = NoiseSource(seed=3, warn=False), NoiseSource(seed=3, warn=False)
    src = ScaledNoiseSource(base, 0.25)
    assert torch.equal(src.standard_normal((4,)), 0.25 * ref.standard_normal((4,)))
    like = torch.zeros(3, dtype=torch.float32)
    assert torch.allclose(src.normal(2.0, (3,), like=like), 0.25 * ref.normal(2.0, (3,), like=like))
    # batch selection: the same draws as the honest source (it shares the generator)
    assert torch.equal(src.poisson_subsample(50, 0.3), ref.poisson_subsample(50, 0.3))
    assert torch.equal(src.sample_without_replacement(50, 7), ref.sample_without_replacement(50, 7))
    clone = pickle.loads(pickle.dumps(src))
    assert isinstance(clone, ScaledNoiseSource) and clone.noise_factor == 0.25
    assert torch.equal(clone.standard_normal((2,)), src.standard_normal((2,)))


def _sgld():  # the Langevin noise is the privacy noise: the step is linear in it
    return pyro_dp.DPSGLD(model, 20, 1e-2, grad_clip=4.0, noise_multiplier=2.0, relation="substitute",
                          init_strategy=init_to_mean, seed=1, noise_seed=2)


def _step(kernel, data):
    kernel.setup(0, data)
    z = kernel.lik.flatten(kernel.sample(kernel.initial_params))
    return z, kernel


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_weak_noise_releases_a_fraction_of_the_noise_with_the_same_ledger():
    d, _ = neighbours()
    honest, k = _step(_sgld(), d)
    quiet, _ = _step(weak_noise(_sgld(), 0.0), d)
    fifth, m = _step(weak_noise(_sgld(), 0.2), d)
    # the same secret draws (noise_seed), scaled: z(f) - z(0) = f (z(1) - z(0))
    assert not torch.equal(honest, quiet)
    assert torch.allclose(fifth - quiet, 0.2 * (honest - quiet), rtol=1e-9, atol=1e-12)
    assert m.ledger == k.ledger and m.get_epsilon(1e-5) == k.get_epsilon(1e-5)
    assert type(m).__name__ == "WeakNoise[DPSGLD]" and isinstance(m, pyro_dp.DPSGLD)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_weak_noise_copies_pickles_and_refuses_bad_input():
    k = _sgld()
    m = weak_noise(k, 0.5)
    assert m is not k and type(k) is pyro_dp.DPSGLD and not hasattr(k, "noise_factor")
    mm = weak_noise(m, 0.1)  # a mutant of a mutant: the base class, the new factor
    assert type(mm) is type(m) and mm.noise_factor == 0.1
    d, _ = neighbours()
    m.setup(0, d)
    params = m.sample(m.initial_params)
    clone = pickle.loads(pickle.dumps(m))  # MCMC's worker processes pickle kernels
    assert type(clone) is type(m) and clone.noise_factor == 0.5 and isinstance(clone._noise, ScaledNoiseSource)
    a, b = m.sample(params), clone.sample(params)
    assert torch.equal(a["mu"], b["mu"])  # noise_seed: the same (scaled) stream
    with pytest.raises(ValueError, match="not set up"):
        weak_noise(m, 0.5)
    with pytest.raises(TypeError, match="DPKernel"):
        weak_noise(pyro.infer.HMC(model), 0.5)
    for bad in (-0.1, float("nan"), float("inf"), True, "0.5"):
        with pytest.raises(ValueError, match="factor"):
            weak_noise(_sgld(), bad)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_noise_free_scores_and_separating_seed():
    factory = FAMILIES["DPPenalty"][0]
    d, dprime = neighbours()
    seed = separating_seed(factory, d, dprime)
    a, b = noise_free_scores(factory, d, dprime, seed=seed)
    assert {a, b} == {0.0, 1.0}  # accepts on one data set only
    assert noise_free_scores(factory, d, dprime, seed=seed) == (a, b)  # no secret randomness left
    with pytest.raises(ValueError, match="no public seed"):
        separating_seed(factory, d, d.clone(), seeds=range(3))  # D = D': nothing to separate



# ============================================================================ the kernel test kit
# Every check of pyro_dp.testing.check_kernel passes an honest kernel (tests/kernels/test_contract.py
# runs it over every kernel; tests/examples/test_dp_mala.py over the docs' example) and fails a
# mutant that breaks exactly what it checks, with a message naming the kernel and the failure.

from collections import Counter  # noqa: E402

from pyro_dp.examples.dp_mala import DPMALA  # noqa: E402
from pyro_dp.mechanisms import gaussian_event  # noqa: E402
from pyro_dp.kernels.releases import ReleasePlan  # noqa: E402
from pyro_dp.models.examples import normal_mean_model  # noqa: E402
from pyro_dp.testing import KERNEL_CHECKS, check_kernel  # noqa: E402

Y = torch.randn(40, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1.0


def _penalty(cls=pyro_dp.DPPenalty):
    return lambda: cls(normal_mean_model, 0.2, llr_clip=4.0, noise_multiplier=2.0, init_strategy=init_to_mean)


class ReadsDataAtSetup(pyro_dp.DPPenalty):
    """Caches the per-example log-likelihoods at the start: data read outside the ledger."""

    def _initial_cache(self, z):
        return self.lik.per_example_loglik(z)


class IgnoresTheBudget(pyro_dp.DPPenalty):
    """Declares its releases but never checks them against the plan."""

    def _declare(self, pending_init):
        return Counter(self.releases(self._state).step_events)


class PlansTwoReleases(pyro_dp.DPPenalty):
    """Plans (and declares) two releases an iteration, makes one."""

    def releases(self, state=None):
        return ReleasePlan((gaussian_event(self.noise_multiplier),) * 2)


class _LeakyNoiseSource(NoiseSource):
    def __getstate__(self):  # carries the secret generator's state into every copy
        return {**super().__getstate__(), "seeded": True, "state": self.generator.get_state()}


class CopiesItsSecretStream(pyro_dp.DPPenalty):
    def setup(self, *args, **kwargs):
        super().setup(*args, **kwargs)
        self._noise.__class__ = _LeakyNoiseSource


class RefusesBadRows(pyro_dp.DPPenalty):
    """Raises on a non-finite per-example term: the exception reveals the row. (The terms are
    private, pyro_dp.private: the read needs the escape hatch, which only a mutant uses here.)"""

    def _release_accept(self, noise, rng, state, z_new, log_q_ratio):
        rel, accepted = super()._release_accept(noise, rng, state, z_new, log_q_ratio)
        if not bool(torch.isfinite(reveal(rel.cache_new, reason="a mutant")).all()):
            raise ValueError("the data have non-finite values")
        return rel, accepted


class GlobalNoise(pyro_dp.DPPenalty):
    """Adds noise of its own from torch's global generator (noise weak_noise cannot reach)."""

    def _release_accept(self, noise, rng, state, z_new, log_q_ratio):
        return super()._release_accept(noise, rng, state, z_new, log_q_ratio + 0.1 * torch.randn(()))


class SilentRead(pyro_dp.DPPenalty):
    """Issue 58's silent-read kernel: rejects whenever the raw log-likelihood sum at the current
    point exceeds a threshold, a data-dependent decision with no release. The terms are private
    (pyro_dp.private): the read raises by construction (tests/test_private.py)."""

    def sample(self, params):
        if self.lik is not None and bool(self.lik.per_example_loglik(self.lik.flatten(params)).sum() > -100.0):
            return params
        return super().sample(params)


class SilentReveal(pyro_dp.DPPenalty):
    """The silent-read kernel through the escape hatch (pyro_dp.private.reveal, which only the
    non-private diagnostics and audits may call): what the kit's check still catches."""

    def sample(self, params):
        if self.lik is not None:
            ll = reveal(self.lik.per_example_loglik(self.lik.flatten(params)), reason="a mutant")
            if bool(ll.sum() > -100.0):
                return params
        return super().sample(params)


class CompiledDiffers(DPMALA):
    """Moves the proposal by a relative 1e-6 on the compiled path only."""

    def _proposal(self):
        propose, moved = super()._proposal(), 1 + 1e-6 if self.lik.compiled is not None else 1.0

        def mutant(rng, noise, state):
            prop = propose(rng, noise, state)
            return prop._replace(z=prop.z * moved)

        return mutant


def _mala():
    return DPMALA(normal_mean_model, 0.01, 6.0, 6.0, 0.5, init_strategy=init_to_mean)


MUTANTS = {
    "setup_is_data_free": (_penalty(ReadsDataAtSetup), "state after setup"),
    "budget_stops": (_penalty(IgnoresTheBudget), "did not exhaust the budget"),
    "planned_equals_recorded": (_penalty(PlansTwoReleases), "planned"),
    "copies": (_penalty(CopiesItsSecretStream), "copy continues the secret noise stream"),
    "per_row_rule": (_penalty(RefusesBadRows), "raised ValueError"),
    "reads_only_through_releases": (_penalty(SilentReveal), "reads the data other than through a release"),
    "audit_hooks": (_penalty(GlobalNoise), "global generator"),
    "eager_equals_compiled": (lambda: CompiledDiffers(normal_mean_model, 0.01, 6.0, 6.0, 0.5,
                                                      init_strategy=init_to_mean), "compiled chain differs"),
}


@pytest.mark.parametrize("check", list(KERNEL_CHECKS))
def test_each_kit_check_fails_its_mutant_and_passes_the_honest_kernel(check):
    mutant, message = MUTANTS[check]
    honest = _mala if check == "eager_equals_compiled" else _penalty()
    out = check_kernel(honest, Y, checks=[check])
    assert list(out) == [check] and "skipped" not in out[check]
    with pytest.raises(AssertionError, match=message) as err:
        check_kernel(mutant, Y, checks=[check], name="the mutant")
    assert str(err.value).startswith("the mutant: ")


def test_kit_refuses_bad_input():
    with pytest.raises(ValueError, match="unknown checks"):
        check_kernel(_penalty(), Y, checks=["nope"])
    with pytest.raises(TypeError, match="unknown options"):
        check_kernel(_penalty(), Y, rows=3)
    with pytest.raises(TypeError, match="DPKernel"):
        check_kernel(lambda: pyro.infer.HMC(normal_mean_model), Y)
    k = _penalty()()
    k.setup(0, Y)
    with pytest.raises(ValueError, match="already set up"):
        check_kernel(lambda: k, Y, checks=["copies"])
    with pytest.raises(TypeError, match="callable"):
        check_kernel(k, Y)


class DeclaresNothing(pyro_dp.DPPenalty):
    """A contributor's mistake: its step releases one ratio but declares none."""

    def releases(self, state=None):
        return super().releases() if state is None else ReleasePlan(super().releases().per_iteration, step=())


def test_a_release_beyond_the_declared_ones_names_the_contributors_mistake():
    """Issue 63: the error says what the kernel did wrong (and that the release was recorded),
    not 'internal error ... please report'."""
    k = _penalty(DeclaresNothing)()
    k.setup(0, Y)
    with pytest.raises(RuntimeError, match=r"DeclaresNothing's step released \[GaussianEvent.*declared \{\} before it "
                                           r"ran: a kernel must declare every release"):
        k.sample(k.initial_params)
    assert k.ledger  # recorded: the epsilon reported includes it


def test_the_silent_read_kernel_raises_at_the_read_by_construction():
    """Issue 58: the silent-read kernel fails at its read (the per-row terms are private,
    pyro_dp.private), before the kit's reads_only_through_releases check runs a single chain
    comparison; the error names the fix."""
    with pytest.raises(PrivateReadError, match="bool\\(\\) of a private value.*\\n.*pyro_dp.mechanisms"):
        check_kernel(_penalty(SilentRead), Y, checks=["reads_only_through_releases"], name="the mutant")
