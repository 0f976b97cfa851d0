"""Issue #40, acceptance 3: the peer benchmark against d3p (``benchmarks/peer_d3p.py``).

Needs the ``peer`` extra (``pip install -e .[peer]``: d3p with jax and numpyro); skipped where d3p
is absent (CI installs only ``.[test]``). Checked here, at tiny size:

* the numpyro twins that d3p fits are the Pyro models (same log joint density);
* d3p's noise calibrated for ε under the substitute relation spends at most ε by an independent
  accountant (``prv_accountant``, Gopi et al. 2021) on the worst-case pair of d3p's fixed-size
  batches (a Poisson-subsampled Gaussian of doubled sensitivity, add/remove), and by d3p's own
  Fourier accountant; the mutants — the add/remove calibration without the doubling, and d3p's
  ``approximate_sigma`` (Koskela et al.'s substitute pair) — spend more than ε on that pair;
* the benchmark runs end to end (NUTS, d3p, DPPenalty) and writes its CSV.
"""
import csv
import math

import pytest

pytest.importorskip("d3p")
pytest.importorskip("numpyro")

import pyro  # noqa: E402
from pyro import poutine  # noqa: E402

from tests.benchmark_scripts import load_benchmark  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def peer():
    return load_benchmark("peer_d3p", "_peer_d3p_benchmark")


@pytest.mark.parametrize("name", ["logistic5", "linear", "poisson"])
def test_numpyro_twins_have_the_pyro_models_log_density(peer, name):
    import jax.numpy as jnp
    from numpyro.infer.util import log_density

    pyro_model, make_data, np_model = peer.MODELS[name]
    args = make_data(40, 3)
    pyro.set_rng_seed(0)
    tr = poutine.trace(pyro_model).get_trace(*args)  # latents drawn from the prior
    latents = {k: v["value"] for k, v in tr.nodes.items() if v["type"] == "sample" and not v["is_observed"]}
    want = float(tr.log_prob_sum())
    got, _ = log_density(np_model, tuple(jnp.asarray(a.numpy()) for a in args), {"num_rows": 40},
                         {k: jnp.asarray(v.numpy()) for k, v in latents.items()})
    assert math.isclose(float(got), want, rel_tol=1e-10), (name, float(got), want)
    # mutant: the twin's likelihood scaled as for a minibatch of another N (num_rows) differs
    off, _ = log_density(np_model, tuple(jnp.asarray(a.numpy()) for a in args), {"num_rows": 80},
                         {k: jnp.asarray(v.numpy()) for k, v in latents.items()})
    assert not math.isclose(float(off), want, rel_tol=1e-6)


def test_d3p_noise_calibrated_under_substitution_spends_at_most_epsilon(peer):
    from fourier_accountant.compute_eps import get_epsilon_R
    from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant

    eps, q, steps, delta = 2.0, 0.05, 200, 1e-5

    def prv(noise_multiplier):
        acc = PRVAccountant(prvs=PoissonSubsampledGaussianMechanism(noise_multiplier=noise_multiplier,
                                                                     sampling_probability=q),
                            max_self_compositions=steps, eps_error=0.01, delta_error=1e-10)
        return acc.compute_epsilon(delta=delta, num_self_compositions=[steps])  # (lower, estimate, upper)

    dp_scale, confirmed, sigma_r = peer.calibrate_dp_scale(eps, q, steps, delta)
    assert dp_scale >= 2 * sigma_r and confirmed <= eps
    # independent accountant, same worst-case pair: noise dp_scale*C on a sum whose sensitivity is 2C
    lower, estimate, upper = prv(dp_scale / 2)
    assert estimate <= eps and upper <= eps + 0.01
    # and d3p's own Fourier accountant (add/remove, Poisson) at the doubled sensitivity
    assert get_epsilon_R(delta, dp_scale / 2, q, ncomp=steps, L=20) <= eps

    # mutant 1: the add/remove calibration read as if it held for substitution (no doubling)
    undoubled, _, _ = peer.calibrate_dp_scale(eps, q, steps, delta, double_sensitivity=False)
    assert prv(undoubled / 2)[0] > eps and peer.substitute_epsilon(undoubled, q, steps, delta) > eps
    # mutant 2: d3p's approximate_sigma (Koskela et al.'s substitute pair) under-reports for
    # fixed-size batches: the worst case of the module docstring spends more than eps
    sigma_s, _, _ = peer.load_d3p().dputil.approximate_sigma(eps, delta, q, steps, force_smaller=True)
    assert prv(sigma_s / 2)[0] > eps and peer.substitute_epsilon(sigma_s, q, steps, delta) > eps


def test_peer_benchmark_runs_end_to_end(peer, tmp_path, monkeypatch):
    tiny = {"n": 300, "num_samples": 30, "warmup_steps": 30, "nuts_samples": 60, "nuts_warmup": 30,
            "batch_size": 15, "num_iter": 200}  # q = 0.05 and 200 steps: the calibration above, cached
    monkeypatch.setitem(peer.CONFIGS, "quick", tiny)
    rows = peer.run_benchmark(["linear"], [2.0], [0], ["DPPenalty"], quick=True,
                              nuts_cache=str(tmp_path / "nuts.json"), log=lambda s: None)
    assert [r["method"] for r in rows] == ["d3p", "DPPenalty"]
    for r in rows:
        assert r["epsilon"] <= 2.0 * (1 + 1e-9), r
        assert all(math.isfinite(r[k]) for k in ("max_mean_err", "min_sd_ratio", "max_sd_ratio", "w2"))
        assert set(r["coords"]) == {"b0", "beta[0]", "beta[1]", "beta[2]", "sigma"}
    assert not rows[0]["warned"]  # d3p has no diagnostics
    lines = peer.verdicts(rows, ["DPPenalty"])
    assert len(lines) == 1 and "DPPenalty vs d3p" in lines[0]
    out = tmp_path / "peer.csv"
    peer.write_csv(rows, str(out))
    with open(out) as f:
        got = list(csv.DictReader(f))
    assert [g["method"] for g in got] == ["d3p", "DPPenalty"] and set(got[0]) == set(peer.CSV_FIELDS)
    table = peer.summarize([str(out)])
    assert "| linear | 2 | DPPenalty | 1 |" in table and table.count("\n") == 3
    assert peer.per_seed_table([str(out)]).splitlines()[2].startswith("| linear | 2 | 0 | ")
