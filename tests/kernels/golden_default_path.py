"""Seeded default-path runs of every kernel that has one, recorded before issue 63's move of the
default path out of the kernel base (tests/kernels/golden/default_path.json): ``test_golden.py``
checks that each gives the same chain, the same labelled ledger and the same warnings, bit for
bit. Regenerate only for an intended change of behaviour:
``python3 -c "from tests.kernels.golden_default_path import record; record()"``."""
import json
import pathlib
import warnings

import pyro
import pyro.distributions as dist
import torch
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp

from .helpers import gauss_model, gauss_model_2d, make_data

GOLDEN = pathlib.Path(__file__).parent / "golden" / "default_path.json"
WARMUP, STEPS = 15, 30
KW = dict(seed=5, noise_seed=6, epsilon=4.0, delta=1e-5, num_iterations=STEPS)


def grouped_model(y, g):
    """Two-level model with 4 groups (a group site for DPGroupedPenalty and the prior-only sweeps)."""
    mu = pyro.sample("mu", dist.Normal(torch.zeros((), dtype=y.dtype), 2.0))
    with pyro.plate("groups", 4):
        a = pyro.sample("a", dist.Normal(mu, 1.0))
    with pyro.plate("data", len(y)) as i:
        pyro.sample("y", dist.Normal(a[g[i]], 1.0), obs=y[i])


def cases():
    """name -> (kernel factory, data arguments)."""
    y, y2 = make_data(400, seed=7), make_data(400, d=2, seed=8)
    g = torch.arange(400) % 4
    return {
        "penalty": (lambda: pyro_dp.DPPenalty(gauss_model, **KW, inference="iterative"), (y,)),
        "penalty_2d": (lambda: pyro_dp.DPPenalty(gauss_model_2d, **KW, inference="iterative"), (y2,)),
        "hmc": (lambda: pyro_dp.DPHMC(gauss_model, **KW, inference="iterative"), (y,)),
        "hmc_2d": (lambda: pyro_dp.DPHMC(gauss_model_2d, **KW, inference="iterative"), (y2,)),
        "sgld": (lambda: pyro_dp.DPSGLD(gauss_model, **KW), (y,)),
        "grouped": (lambda: pyro_dp.DPGroupedPenalty(grouped_model, group_site="a", **KW), (y, g)),
        "penalty_grouped_model": (lambda: pyro_dp.DPPenalty(grouped_model, **KW, inference="iterative"), (y, g)),
        "hmc_grouped_model": (lambda: pyro_dp.DPHMC(grouped_model, init_strategy=init_to_mean, **KW, inference="iterative"), (y, g)),
    }


def run(factory, data):
    """``(flat unconstrained chain, labelled ledger entries, warning texts)`` of STEPS iterations
    after WARMUP warmup iterations' worth of set-up (the kernel's own warmup length)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = factory()
        k.setup(WARMUP, *data)
        params, chain = k.initial_params, []
        for _ in range(STEPS):
            params = k.sample(params)
            chain.append(k.lik.flatten(params).tolist())
        k.diagnostics()
    ledger = [[repr(e), int(c), str(lab)] for e, c, lab in k.ledger.labelled_entries()]
    return chain, ledger, [f"{w.category.__name__}: {w.message}" for w in caught
                           if w.category.__module__.startswith("pyro_dp")]  # not torch's deprecations


def record():
    out = {name: dict(zip(("chain", "ledger", "warnings"), run(*c))) for name, c in cases().items()}
    GOLDEN.write_text(json.dumps(out, indent=1))
    print(f"wrote {GOLDEN}: {len(out)} kernels")
