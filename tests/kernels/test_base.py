"""The kernel base stays small (issues 39 and 63): ``DPKernel`` is one class — Pyro's lifecycle,
the subclass API and the budget's names — that holds its parts (the privacy engine, the chain's
record, the processes, the ranks, the randomness, the likelihood settings, the start, the
checkpoints) as objects, and ``__init__`` calls no hook a subclass
overrides (no hook runs on a half-built object)."""
import inspect
import warnings

import pytest

import pyro_dp
from pyro_dp.kernels import chain_record, chain_start, checkpoint, likelihood_settings, privacy_engine, seeds, workers
from pyro_dp.kernels.base import DPKernel

from .helpers import gauss_model, make_data


def test_the_kernel_base_is_one_class_holding_its_parts():
    assert [c for c in DPKernel.__mro__ if c.__module__.startswith("pyro_dp")] == [DPKernel]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=3.0, seed=0)
        k.setup(0, make_data(20))
    for name, part in (("privacy", privacy_engine.PrivacyEngine), ("chain", chain_record.ChainRecord),
                       ("processes", workers.ChainProcesses), ("ranks", workers.Ranks),
                       ("randomness", seeds.ChainRandomness), ("likelihood_settings", likelihood_settings.LikelihoodSettings),
                       ("start", chain_start.ChainStart), ("checkpoints", checkpoint.ChainCheckpoints)):
        assert isinstance(getattr(k, name), part)
    # each part keeps its own state: none of it is on the kernel
    assert not {"_iteration", "_num_accepted", "_draws", "_owner_pid", "_worker_releases", "_budget_exhausted",
                "_shards", "seed", "noise_seed", "secure_mode", "_rng", "_noise", "_chain_index", "model", "temperature",
                "data_plate", "jit_compile", "jit_options", "public", "_initial_params", "_user_initial_params",
                "pending_checkpoint", "last_checkpoint"} & set(vars(k))
    # ... and the kernel's names for them read and write the part (one copy)
    assert k._noise is k.randomness.noise and k._rng is k.randomness.rng and k.seed == k.randomness.seed == 0
    assert k.model is k.likelihood_settings.model is gauss_model and k.initial_params is k.start.chain
    k.sample(k.initial_params)
    assert k.chain.iteration == 1 and k.processes.slot() == -1


def test_the_privacy_engine_is_an_object_the_kernel_reports_to():
    """Issue 39: the ledgers, plan, budget, stop and ε live in one object (``kernel.privacy``),
    not in the kernel's class; the kernel's public surface reads through to it."""
    assert not issubclass(DPKernel, privacy_engine.PrivacyEngine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=3.0, epsilon=5.0, seed=0)
        k.setup(0, make_data(50))
    engine = k.privacy
    assert isinstance(engine, privacy_engine.PrivacyEngine) and engine.kernel_id == k.processes.id
    # the engine's state is not duplicated on the kernel
    assert not {"_ledger", "_chains", "_filed_counts", "_plan", "epsilon", "delta", "_budget_exhausted"} & set(vars(k))
    k.sample(k.initial_params)
    assert engine.live.num_releases == 1 and k.ledger == engine.ledger and k.privacy.chain_ledgers() == engine.chain_ledgers()
    assert k.get_epsilon(1e-5) == engine.get_epsilon(1e-5) and k.epsilon == engine.epsilon == 5.0
    k.epsilon = 4.0  # written through
    assert engine.epsilon == 4.0 and engine.plan.steps_allowed == engine.steps_allowed


#: methods of DPKernel that subclasses override
HOOKS = ("_calibrate", "releases", "_init_state", "_step", "_state_z", "_reset_chain_stats", "_nonprivate")


def _recording(calls):
    """A DPPenalty whose every hook records that it ran, and whether the object was fully built then."""

    def wrap(name):
        base = getattr(pyro_dp.DPPenalty, name)

        def hook(self, *a, **k):
            calls.append((name, self.__dict__.get("_built", False)))
            return base(self, *a, **k)
        return hook

    class Recording(pyro_dp.DPPenalty):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._built = True

    for name in HOOKS:
        setattr(Recording, name, wrap(name))
    return Recording


def test_no_subclass_hook_runs_during_construction():
    calls = []
    cls = _recording(calls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = cls(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=3.0, seed=0)
    assert calls == []
    # the recorder has power: set-up and a step run the hooks, on the fully built object
    k.setup(0, make_data(50))
    k.sample(k.initial_params)
    ran = {name for name, _ in calls}
    assert {"_calibrate", "_init_state", "_step", "_reset_chain_stats", "releases"} <= ran
    assert all(built for _, built in calls)


def test_a_base_calling_a_hook_in_init_is_caught(monkeypatch):
    """The mutant: a base ``__init__`` that dispatches a hook through ``self`` fails the test above."""
    original = DPKernel.__init__

    def half_built(self, *a, **k):
        original(self, *a, **k)
        self._reset_chain_stats()  # dispatches to the subclass before its __init__ has finished

    monkeypatch.setattr(DPKernel, "__init__", half_built)
    calls = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _recording(calls)(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=3.0, seed=0)
    assert calls == [("_reset_chain_stats", False)]


def _release(engine, events, declared):
    """A step that draws ``events`` (Gaussian releases) through the mechanisms in the engine's
    recording scope, reports them, and is committed."""
    from pyro_dp.mechanisms import NoiseSource, gaussian_release_spec

    noise = NoiseSource(seed=0, warn=False)
    with engine.recording() as drawn:
        for ev in events:
            gaussian_release_spec(ev.noise_multiplier).draw(noise)
    engine.commit(drawn, events, declared)


def _spend_past_the_plan(engine, event):
    """Declare and release ``event`` once per iteration for one iteration past the plan; the
    declarations (``None``: refused)."""
    out = []
    for i in range(engine.steps_allowed + 1):
        declared = engine.declare([event], iteration=i)
        out.append(declared)
        if declared is not None:
            _release(engine, [event], declared)
            engine.end_iteration()
    return out


@pytest.mark.parametrize("mutant", [False, True])
def test_the_engine_alone_stops_at_its_plan_and_refuses_an_undeclared_release(monkeypatch, mutant):
    """The privacy engine is an accountant that needs no kernel or model: told events, it stops
    the chain (loudly) when the next iteration's declared releases no longer fit the plan, so ε
    stays within the budget; a step that releases more than it declared is refused after it is
    recorded (never an under-reported ledger). The mutant, a plan that lets everything fit, must
    fail the first part."""
    from pyro_dp.kernels.plan import PrivacyPlan
    from pyro_dp.mechanisms import GaussianEvent

    if mutant:
        monkeypatch.setattr(PrivacyPlan, "fits", lambda *a, **k: True)
    ev = GaussianEvent(3.0)
    engine = privacy_engine.PrivacyEngine(epsilon=5.0, delta=1e-5)
    engine.make_plan([], [ev])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        declared = _spend_past_the_plan(engine, ev)
    said = [str(w.message) for w in caught if issubclass(w.category, pyro_dp.BudgetExhaustedWarning)]
    stopped = declared[-1] is None and engine.stopped and any("spent after 11 iterations" in m for m in said)
    assert stopped != mutant
    assert (engine.get_epsilon(1e-5) <= 5.0) != mutant and engine.ledger.num_releases == 11 + mutant
    free = privacy_engine.PrivacyEngine()  # no budget: nothing stops, but what is released is checked
    with pytest.raises(RuntimeError, match="released"):
        _release(free, [ev, ev], free.declare([ev], iteration=0))
    assert free.live.num_releases == 2


def test_diagnostics_between_runs_says_its_epsilon_is_no_runs():
    """After ``mcmc.run`` the kernel holds an empty chain, whose ``"epsilon"`` is 0.0; asked for
    its diagnostics then, it says so with a PrivacyNotice that gives the total so far (a user
    who read the 0.0 as the run's would under-report ε). Pyro's own call at the end of a chain,
    which sees that chain, does not warn."""
    from pyro.infer import MCMC

    y = make_data(200, seed=2)
    k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=5.0, seed=0)
    assert k.diagnostics()["epsilon"] == 0.0  # a kernel that never ran: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error", privacy_engine.PrivacyNotice)
        m = MCMC(k, num_samples=20, warmup_steps=0, disable_progbar=True)
        m.run(y)  # Pyro's diagnostics() at the chain's end: no notice
    assert m.diagnostics()["epsilon"]["chain 0"] > 0
    total = k.get_epsilon(k.reference_delta)
    with pytest.warns(privacy_engine.PrivacyNotice, match=f"spent epsilon={total:.4g}"):
        assert k.diagnostics()["epsilon"] == 0.0
