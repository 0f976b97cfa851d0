"""Every kernel on an accelerator (#17: "the same path on CUDA"): the golden cases
(``tests/kernels/golden_cases.py``) with the data on the device, eager and compiled.

These tests run where CUDA is available and are skipped elsewhere (CI has no GPU). Set
``PYRO_DP_TEST_DEVICE=cpu`` to run their logic on the CPU: there the device's chains must also
equal the recorded ones, which is how the tests themselves are checked.

What is checked on the device, per kernel:

* the eager path runs with the data on the device, keeps every latent on it, and writes the
  recorded ledger (the ledger depends on the kernel's settings, never on the device);
* the compiled path (``"graph"`` and inductor backends) runs without falling back and gives the
  device's eager chain and ledger. Chains are compared to 1e-10 relative: CUDA's atomic
  additions (``index_add``/``scatter_add``) may reorder sums in the last bits; a flipped accept
  decision would be an O(1) difference.

and DP-HMC's data-free rejection of a diverged trajectory (its accept uniform drawn from the
device's stream) on every backend.

The device's noise stream is not the CPU's (``torch.Generator`` on CUDA is a different
generator, as in torch itself), so chains on the device differ from the CPU's recorded ones.
"""
import json
import math
import os
import warnings

import pytest
import torch

import pyro_dp
from pyro_dp.compiled import CompileFallbackWarning

from .kernels.golden_cases import GOLDEN, cases, run

DEVICE = os.environ.get("PYRO_DP_TEST_DEVICE") or ("cuda" if torch.cuda.is_available() else None)
pytestmark = pytest.mark.skipif(
    DEVICE is None, reason="no CUDA device (PYRO_DP_TEST_DEVICE=cpu runs these tests' logic on the CPU)")

RECORDED = json.loads(GOLDEN.read_text())
BACKENDS = {"graph": dict(jit_compile=True, jit_options={"backend": "graph"}), "inductor": dict(jit_compile=True)}


def _run_on_device(name, **extra):
    factory, data = cases(**extra)[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        chain, ledger = run(factory, data.to(DEVICE))
    return torch.tensor(chain, dtype=torch.float64), ledger


def test_device_is_usable():
    x = torch.ones(3, device=DEVICE)
    assert x.device.type == torch.device(DEVICE).type


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_eager_kernel_runs_on_the_device_with_the_recorded_ledger(name):
    factory, data = cases()[name]
    kernel = factory()
    kernel.setup(2, data.to(DEVICE))
    params = kernel.sample(kernel.initial_params)
    assert all(v.device.type == torch.device(DEVICE).type for v in params.values()), name
    chain, ledger = _run_on_device(name)
    assert ledger == RECORDED[name]["ledger"]
    assert torch.isfinite(chain).all()
    if torch.device(DEVICE).type == "cpu":  # the tests' own check: on the CPU, the recorded chain
        torch.testing.assert_close(chain, torch.tensor(RECORDED[name]["chain"], dtype=torch.float64),
                                   rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("name", sorted(RECORDED))
def test_compiled_kernel_on_the_device_gives_the_eager_chain_and_ledger(name, backend):
    eager_chain, eager_ledger = _run_on_device(name)
    chain, ledger = _run_on_device(name, **BACKENDS[backend])
    assert ledger == eager_ledger
    torch.testing.assert_close(chain, eager_chain, rtol=1e-10, atol=1e-15)


def _experiment_cells():
    """Every algorithm on one problem of each model family of Table 6.1 (banana, diagonal
    Gaussian, correlated Gaussian, circle): the 10-d and tempered bananas and the narrow banana
    run the same model code with other constants."""
    from experiments._sampling import THESIS_PARAMS

    return [(p, a) for p in ("flat-banana-2d", "gauss-30d", "correlated-gauss", "circle")
            for a in sorted(THESIS_PARAMS[p])]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("problem,algorithm", _experiment_cells())
def test_experiment_cell_runs_on_the_device(problem, algorithm, jit):
    """Each Table 6.1 problem and algorithm of the experiments (``python3 -m experiments NAME
    --device cuda``) runs a short chain with its data on the device, within its budget."""
    from experiments._sampling import MIN_ITERATIONS, THESIS_PARAMS, run_chain, to_device
    from pyro_dp.models import get_problem

    n = 400
    p = to_device(get_problem(problem, n=n), torch.device(DEVICE))
    row = run_chain(algorithm, p, get_problem(problem, n=n).reference_sample(50), epsilon=4.0, n=n,
                    num_iterations=8, repeat=0, params=THESIS_PARAMS[problem][algorithm], jit_compile=jit)
    assert row["epsilon_ok"]
    assert row["iterations"] < MIN_ITERATIONS or math.isfinite(row["mmd"])  # DP Barker may lower the count


@pytest.mark.parametrize("jit", [None, "graph", "inductor"])
def test_dphmc_rejects_a_diverged_trajectory_on_the_device(jit):
    """The data-free rejection of a trajectory that left the finite numbers (its accept uniform
    still drawn, from the device's stream) and a mass given as a list, on the device."""
    from .kernels.helpers import gauss_model, make_data

    kw = {} if jit is None else BACKENDS[jit]
    y = make_data(100, seed=0).to(DEVICE)
    k = pyro_dp.DPHMC(gauss_model, step_size=1e300, num_steps=3, grad_clip=2.0, llr_clip=2.0,
                      grad_noise_multiplier=1.0, llr_noise_multiplier=1.0, mass=[2.0], seed=0, **kw)
    k.setup(0, y)
    start = k.initial_params
    params = start
    for _ in range(3):
        params = k.sample(params)
    assert torch.equal(params["mu"], start["mu"]) and params["mu"].device == y.device
    assert k.diagnostics()["acceptance rate"] == 0.0
    # the gradients were released (the first, and L = 3 per iteration), no ratio: the branch ran
    assert sum(e.count for e in k.ledger.entries) == 1 + 3 * 3


def _on_device(args):
    return tuple(a.to(DEVICE) if torch.is_tensor(a) else a for a in args)


@pytest.mark.parametrize("kernel", ["DPHMC", "DPPenalty"])
@pytest.mark.parametrize("name", ["linear", "logistic", "poisson", "hierarchical"])
def test_the_card_s_line_runs_on_the_device(name, kernel):
    """The card's line with ``epsilon=`` only (the default path: private start, clip, scales
    and metric releases, whitened coordinates, the eager/compiled choice) with the data on the
    device: every draw on it and finite, the ledger within the budget, the tuning in it."""
    from pyro.infer import MCMC

    from pyro_dp.models.default_suite import SUITE

    entry = SUITE[name]
    args = _on_device(entry.make_data(2000, 0))
    k = getattr(pyro_dp, kernel)(entry.model, epsilon=4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the default path's short-run warnings
        mcmc = MCMC(k, num_samples=30, warmup_steps=30, disable_progbar=True)
        mcmc.run(*args)
    for site, v in mcmc.get_samples().items():
        assert v.device.type == torch.device(DEVICE).type and torch.isfinite(v).all(), site
    assert pyro_dp.get_epsilon(mcmc, delta=1e-5) <= 4.0 * (1 + 1e-9)
    assert "tune:clip" in k.ledger.by_label() and "tune:start" in k.ledger.by_label()


def test_the_sgld_runner_is_the_kernel_s_chain_on_the_device():
    """The vectorised DP-SGLD runner (``experiments.sgld_chains``, one compiled graph,
    used by the paper-scale SGLD grids) with ``block=1`` gives DPSGLD's eager chain on the
    device too (the same draws from the device's streams, in the same order) and its ledger."""
    from experiments.grid import run_kernel
    from experiments.sgld_chains import run_sgld_chains
    from pyro_dp.kernels.base import kernel_chain_seed
    from pyro_dp.models import gmm_model, make_gmm_data

    n, b, eta, clip, temp, iters = 2000, 40, 2e-3, 3.0, 0.5, 20
    x = make_gmm_data(n, seed=0).to(DEVICE)
    start = torch.tensor([0.3, -0.2], dtype=torch.float64, device=DEVICE)
    k = pyro_dp.DPSGLD(gmm_model, batch_size=b, step_size=eta, grad_clip=clip, temperature=temp,
                       num_iterations=iters, noise_multiplier=2.0, reference_delta=1e-6, seed=11, noise_seed=11,
                       jit_compile=False, accountant="pld")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, _ = run_kernel(k, (x,), num_samples=iters, initial_params={"theta": start})
    out = run_sgld_chains(gmm_model, (x,), start[None], num_iterations=iters, batch_size=b, step_size=eta,
                          grad_clip=clip, noise_seeds=[kernel_chain_seed(11, 0, "noise")], temperature=temp,
                          noise_multiplier=2.0, block=1)
    assert out.draws.device.type == "cpu"  # by design: the runner keeps its (millions of) draws on the host
    torch.testing.assert_close(out.draws[0].double().cpu(), s.double().cpu(), rtol=1e-8, atol=1e-12)
    assert out.ledgers[0].entries == k.ledger.entries
