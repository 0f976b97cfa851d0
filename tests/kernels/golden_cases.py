"""Fixed-seed runs of every kernel, recorded before the #15 refactor (tests/kernels/golden/):
``test_golden.py`` checks that each kernel still gives the same chain and the same ledger.
Regenerate only for an intended change of behaviour: ``python -m tests.kernels.golden_cases``."""
import json
import pathlib

import torch
from pyro.infer.autoguide.initialization import init_to_mean

import pyro_dp
from pyro_dp.kernels.expfam import gaussian_known_variance

from .helpers import gauss_model, gauss_model_2d, make_data

GOLDEN = pathlib.Path(__file__).parent / "golden" / "chains.json"
STEPS = 25
GOLDEN_KW = dict(seed=11, noise_seed=12, init_strategy=init_to_mean)


def cases(**extra):
    """name -> (kernel factory, data); ``extra`` keyword arguments go to every kernel (e.g. the
    compiled path, ``tests/test_compiled.py``)."""
    KW = dict(GOLDEN_KW, **extra)
    y, y2 = make_data(300, seed=3), make_data(300, d=2, seed=4)
    init = pyro_dp.DPGradientInit(num_steps=3, step_size=0.5, grad_clip=2.0, noise_multiplier=5.0)
    return {
        "penalty": (lambda: pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=3.0, **KW), y),
        "penalty_gwmh_adapt": (lambda: pyro_dp.DPPenalty(gauss_model_2d, 0.1, llr_clip=2.0, noise_multiplier=3.0,
                                                         guided_walk=True, adapt_proposal=True, **KW), y2),
        "penalty_init": (lambda: pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=2.0, noise_multiplier=3.0, init=init,
                                                   **KW), y),
        "expfam": (lambda: pyro_dp.DPExpFamPenalty(gauss_model, gaussian_known_variance("mu", 1.0, -3.0, 3.0),
                                                   proposal_scale=0.1, noise_multiplier=3.0, **KW), y),
        "multiparty": (lambda: pyro_dp.DPMultiPartyPenalty(gauss_model, torch.arange(300) % 3, 0.1, llr_clip=2.0,
                                                           noise_multiplier=[3.0, 4.0, 5.0], **KW), y),
        "hmc": (lambda: pyro_dp.DPHMC(gauss_model, 0.02, 3, 2.0, 2.0, 5.0, 3.0, adapt_step_size=True, **KW), y),
        "barker": (lambda: pyro_dp.DPBarker(gauss_model, 100, 0.1, temperature=0.3, **KW), y),
        "minibatch_poisson": (lambda: pyro_dp.DPMinibatchPenalty(gauss_model, 100, 0.1, llr_clip=2.0,
                                                                 noise_multiplier=1.0, temperature=0.3, **KW), y),
        "minibatch_wor": (lambda: pyro_dp.DPMinibatchPenalty(gauss_model_2d, 100, 0.1, llr_clip=2.0,
                                                             noise_multiplier=1.0, temperature=0.3,
                                                             subsampling="without_replacement", one_component=True,
                                                             **KW), y2),
        "fastmh": (lambda: pyro_dp.DPFastMH(gauss_model, 0.01, lipschitz=4.0, lam=20.0, max_batch_size=150,
                                            step_epsilon=0.9, step_delta=1e-6, **KW), y),
        "fastmh_full": (lambda: pyro_dp.DPFastMH(gauss_model, 0.01, lipschitz=4.0, full_batch=True, step_epsilon=0.9,
                                                 step_delta=1e-6, **KW), y),
        # add/remove with N = 300 stated public: the relation this golden chain was recorded under (#38)
        "sgld": (lambda: pyro_dp.DPSGLD(gauss_model, 50, 1e-3, 2.0, relation="add_remove", public_num_rows=300,
                                        **KW), y),
        "sgnht": (lambda: pyro_dp.DPSGNHT(gauss_model, 50, 1e-3, 2.0, relation="substitute", **KW), y),
    }


def run(factory, data):
    """``(flat unconstrained chain as lists, ledger entries as reprs)`` of STEPS iterations."""
    k = factory()
    k.setup(STEPS // 2, data)
    params, chain = k.initial_params, []
    for _ in range(STEPS):
        params = k.sample(params)
        chain.append(k.lik.flatten(params).tolist())
    return chain, [[repr(e.event), e.count] for e in k.ledger.entries]


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    out = {name: dict(zip(("chain", "ledger"), run(*c))) for name, c in cases().items()}
    GOLDEN.write_text(json.dumps(out, indent=1))
    print(f"wrote {GOLDEN}: {len(out)} kernels")
