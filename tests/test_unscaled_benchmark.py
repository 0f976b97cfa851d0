"""``benchmarks/unscaled_glms.py``'s exact reference: NUTS runs the suite model on the unit-ball
columns with the coefficients' prior widened to N(0, (5 s_j)²), and its draws of ``beta`` are
divided by the column scales. That is the posterior of the model on the unscaled columns exactly
when, for every point, the two joint log densities differ by the Jacobian constant
-Σ_j log s_j (β = s β′): checked here at random points for the three GLMs, with a mutant that
forgets to widen the prior."""
import math

import pyro.poutine as poutine
import pytest
import torch

from tests.benchmark_scripts import load_benchmark


def _log_joint(model, args, values):
    conditioned = poutine.condition(model, data=values)
    trace = poutine.trace(conditioned).get_trace(*args)
    return trace.log_prob_sum()


@pytest.mark.parametrize("name", ["linear", "logistic", "poisson"])
def test_the_unit_coordinate_reference_is_the_unscaled_posterior(name):
    bench = load_benchmark("unscaled_glms")
    sm = bench.ds.get_suite_model(name)
    unit = sm.make_data(400, 0)
    s = torch.as_tensor(bench.SCALES, dtype=torch.float64)
    unscaled = (unit[0] * s,) + tuple(unit[1:])
    g = torch.Generator().manual_seed(1)
    jacobian = -float(torch.log(s).sum())
    diffs, mutant = [], []
    for _ in range(5):
        values = {"b0": torch.randn((), generator=g, dtype=torch.float64) * 0.3,
                  "beta": torch.randn(3, generator=g, dtype=torch.float64)}
        if name == "linear":
            values["sigma"] = torch.rand((), generator=g, dtype=torch.float64) + 0.5
        with bench._PriorScale(s):
            lu = _log_joint(sm.model, unit, values)
        lo = _log_joint(sm.model, unscaled, dict(values, beta=values["beta"] / s))
        diffs.append(float(lu - lo))
        mutant.append(float(_log_joint(sm.model, unit, values) - lo))  # the prior not widened
    assert diffs == pytest.approx([jacobian] * 5, abs=1e-8)
    assert max(abs(m - jacobian) for m in mutant) > 1.0
    assert math.isfinite(jacobian)
