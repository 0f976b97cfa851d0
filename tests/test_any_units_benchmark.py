"""``benchmarks/any_units.py`` (issue 59, acceptance 2): its unscaled model is the standardised one in
other units, so its posterior is the standardised posterior mapped by b0 s_y, beta_j s_y / s_j,
sigma s_y: the log joint densities differ by a constant (the map's Jacobian) at every point."""
import pyro
import pyro.poutine as poutine
import torch

from tests.benchmark_scripts import load_benchmark


def _log_joint(model, args, values):
    tr = poutine.trace(poutine.condition(model, values)).get_trace(*args)
    return float(tr.log_prob_sum())



def _gaps(std, other, X, y, sx, sy):
    """log joint of ``std`` on the standardised data minus ``other``'s on the data in units, at three
    random points mapped into the units (a constant when the two are the same posterior)."""
    gaps = []
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        b0, beta = torch.randn((), generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)
        sigma = torch.rand((), generator=g, dtype=torch.float64) + 0.5
        a = _log_joint(std, (X, y), {"b0": b0, "beta": beta, "sigma": sigma})
        b = _log_joint(other, (X * sx, y * sy), {"b0": b0 * sy, "beta": beta * sy / sx, "sigma": sigma * sy})
        gaps.append(a - b)
    return gaps

def test_the_unscaled_model_is_the_standardised_one_in_other_units():
    bench = load_benchmark("any_units", "_any_units_benchmark")
    from pyro_dp.models.default_suite import make_linear_data

    X, y = make_linear_data(200, 0)
    sx, sy = bench.scales("linear", True)
    assert sy == bench.OUTCOME_SCALE and sx.tolist() == list(bench.COLUMN_SCALES)
    std, uns = bench.units_model("linear", torch.ones(3, dtype=torch.float64), 1.0), bench.units_model("linear", sx, sy)
    gaps = _gaps(std, uns, X, y, sx, sy)
    assert max(gaps) - min(gaps) < 1e-8, gaps  # a constant: the same posterior
    # mutant: the coefficients' prior not carried over (the suite's N(0, 5^2) in the new units) is another posterior
    def mutant(X, y):
        b0 = pyro.sample("b0", pyro.distributions.Normal(torch.zeros((), dtype=torch.float64), 5.0 * sy))
        beta = pyro.sample("beta", pyro.distributions.Normal(torch.zeros(3, dtype=torch.float64), 5.0).to_event(1))
        sigma = pyro.sample("sigma", pyro.distributions.HalfNormal(torch.zeros((), dtype=torch.float64) + 2.0 * sy))
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", pyro.distributions.Normal(b0 + X @ beta, sigma), obs=y)
    gaps = _gaps(std, mutant, X, y, sx, sy)
    assert max(gaps) - min(gaps) > 1.0, gaps
