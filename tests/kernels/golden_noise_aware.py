"""Seeded runs of :class:`~pyro_dp.default_path.noise_aware.DPNoiseAware`, recorded before its
computation became a part (``OneReleaseMode``, issue 62) that the default path can attach to
``DPPenalty`` and ``DPHMC`` (tests/kernels/golden/noise_aware.json): ``test_one_release_mode.py``
checks that each gives the same chain, the same labelled ledger and the same warnings (as a
multiset: the mixture check moved within set-up), bit for bit. Regenerate only for an intended
change of behaviour: ``python3 -c "from tests.kernels.golden_noise_aware import record; record()"``."""
import json
import pathlib
import warnings

import torch

import pyro_dp

from .helpers import gauss_model, gauss_model_2d, make_data

GOLDEN = pathlib.Path(__file__).parent / "golden" / "noise_aware.json"
WARMUP, STEPS = 10, 20
KW = dict(seed=3, noise_seed=4, epsilon=2.0, delta=1e-5, num_chains=2)


def cases():
    """name -> (kernel factory, data arguments)."""
    y, y2 = make_data(300, seed=7), make_data(300, d=2, seed=8)
    return {
        "normal_mean": (lambda: pyro_dp.DPNoiseAware(gauss_model, **KW), (y,)),
        "normal_mean_2d": (lambda: pyro_dp.DPNoiseAware(gauss_model_2d, **KW), (y2,)),
        "clips_given": (lambda: pyro_dp.DPNoiseAware(gauss_model, grad_clip=2.0, curvature_clip=1.5, **KW), (y,)),
    }


def run(factory, data, chains=2):
    """``(flat unconstrained chains, labelled ledger entries, sorted warning texts)`` of ``chains``
    chains of STEPS iterations on one kernel object (set-up, samples, diagnostics, cleanup)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = factory()
        out = []
        for _ in range(chains):
            k.setup(WARMUP, *data)
            params, chain = k.initial_params, []
            for _ in range(STEPS):
                params = k.sample(params)
                chain.append(k.lik.flatten(params).tolist())
            d = k.diagnostics()
            chain.append([d["approximation"], list(d["approximation problems"])])
            k.cleanup()
            out.append(chain)
    ledger = [[repr(e), int(c), str(lab)] for e, c, lab in k.ledger.labelled_entries()]
    return out, ledger, sorted(f"{w.category.__name__}: {w.message}" for w in caught
                               if w.category.__module__.startswith("pyro_dp"))


def record():
    out = {name: dict(zip(("chains", "ledger", "warnings"), run(*c))) for name, c in cases().items()}
    GOLDEN.write_text(json.dumps(out, indent=1))
    print(f"wrote {GOLDEN}: {len(out)} kernels")
