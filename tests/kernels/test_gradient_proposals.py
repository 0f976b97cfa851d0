"""The gradient-proposal shell and the Barker proposal (``pyro_dp/kernels/gradient_proposals.py``):
the move samples the density the ratio is computed from (Livingstone & Zanella 2022 §3), the
ratio is that density's, and the shell with MALA's move is the core's Langevin proposal. Each
statistical check is paired with a mutant that must fail it."""
import math

import pytest
import torch
from pyro.infer.autoguide.initialization import init_to_mean

from pyro_dp.examples.dp_mala import DPMALA
from pyro_dp.kernels.gradient_proposals import barker_log_q_ratio, barker_move, barker_proposal, gradient_proposal
from pyro_dp.kernels.proposals import sample_momentum
from pyro_dp.models.examples import normal_mean_model

GRAD, SCALE = 1.5, 0.8


def _log_density_terms(w, grad, scale):
    """Per coordinate, log of the Barker proposal's density of the move w from a point with gradient
    grad, stated directly: 2 phi_s(w) / (1 + exp(-w g)) (Livingstone & Zanella 2022 §3)."""
    log_phi = -0.5 * (w / scale) ** 2 - math.log(scale * math.sqrt(2 * math.pi))
    return math.log(2.0) + log_phi - torch.log1p(torch.exp(-w * grad))


def _barker_log_density(a, b, grad_b, scale):
    """log q(a | b)."""
    return _log_density_terms(a - b, grad_b, scale).sum()


def _flipped_move(rng, z, grad, scale):
    """Mutant: the sign kept with probability 1/(1 + exp(xi g)) — moves against the gradient."""
    xi = sample_momentum(rng, scale, z)
    u = torch.rand(z.shape, generator=rng, dtype=z.dtype, device=z.device)
    return z + torch.where(u < torch.sigmoid(-xi * grad), xi, -xi)


@pytest.mark.parametrize("move, honest", [(barker_move, True), (_flipped_move, False)], ids=["barker", "mutant_flipped"])
def test_the_move_samples_the_barker_density(move, honest):
    """Empirical CDF of 200k moves at five points against the CDF of 2 phi_s(w) / (1 + exp(-w g)) by
    quadrature: within 5 binomial standard errors (measured: at most 1.7; the mutant: 150 to 470)."""
    n = 200_000
    w = move(torch.Generator().manual_seed(0), torch.zeros(n, dtype=torch.float64),
             torch.full((n,), GRAD, dtype=torch.float64), SCALE)
    grid = torch.linspace(-12 * SCALE, 12 * SCALE, 200_001, dtype=torch.float64)
    dens = torch.exp(_log_density_terms(grid, GRAD, SCALE))
    cdf = torch.cumulative_trapezoid(dens, grid)
    assert abs(float(cdf[-1]) - 1.0) < 1e-9  # the density integrates to one
    z_scores = []
    for t in (-SCALE, -0.3 * SCALE, 0.0, 0.5 * SCALE, 1.5 * SCALE):
        f = float(cdf[int(torch.searchsorted(grid, torch.tensor(t, dtype=torch.float64))) - 1])
        z_scores.append((float((w <= t).double().mean()) - f) / math.sqrt(f * (1 - f) / n))
    assert (max(map(abs, z_scores)) <= 5) == honest, z_scores


@pytest.mark.parametrize("denominator_sign, honest", [(1.0, True), (-1.0, False)], ids=["barker", "mutant_sign"])
def test_the_ratio_is_the_densitys(denominator_sign, honest):
    """barker_log_q_ratio = log q(z|z') - log q(z'|z) of the stated density, whatever the scale; the
    ratio with the denominator's sign swapped, (1 + exp((z - z')_i g_i(z'))), is not."""
    g = torch.Generator().manual_seed(1)
    z, z_new, grad, grad_new = (torch.randn(5, generator=g, dtype=torch.float64) * 2 for _ in range(4))
    exact = torch.nn.functional.softplus(-(z_new - z) * grad) - torch.nn.functional.softplus(
        denominator_sign * (z_new - z) * grad_new)
    ratio = barker_log_q_ratio(z, grad, z_new, grad_new) if honest else exact.sum()
    for scale in (0.3, 2.0):
        direct = _barker_log_density(z, z_new, grad_new, scale) - _barker_log_density(z_new, z, grad, scale)
        assert torch.isclose(ratio, direct, rtol=1e-12, atol=1e-12) == honest


def test_stable_for_large_gradients():
    z, z_new = torch.zeros(2, dtype=torch.float64), torch.tensor([1.0, -1.0], dtype=torch.float64)
    big = torch.full((2,), 1e4, dtype=torch.float64)
    assert torch.isfinite(barker_log_q_ratio(z, big, z_new, big))


class ShellMALA(DPMALA):
    """DP-MALA with its proposal rebuilt on the shell: MALA's move and q-ratio."""

    def _proposal(self):
        h = self.step_size

        def move(rng, z, g):
            return z + h / 2 * g + math.sqrt(h) * sample_momentum(rng, 1.0, z)

        def log_q(z, g, z_new, g_new):
            return (((z_new - z - h / 2 * g) ** 2).sum() - ((z - z_new - h / 2 * g_new) ** 2).sum()) / (2 * h)

        return gradient_proposal(self.lik, self.grad_clip, self.nm, move, log_q)


def test_the_shell_with_malas_move_is_the_langevin_proposal():
    y = torch.randn(30, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1.0
    chains = []
    for cls in (DPMALA, ShellMALA):
        k = cls(normal_mean_model, 0.01, 6.0, 6.0, noise_multiplier=0.5, init_strategy=init_to_mean, seed=3,
                noise_seed=4)
        k.setup(0, y)
        params, draws = k.initial_params, []
        for _ in range(15):
            params = k.sample(params)
            draws.append(params["mu"])
        chains.append((torch.stack(draws), k.ledger.aggregate()))
    assert torch.equal(chains[0][0], chains[1][0]) and chains[0][1] == chains[1][1]
    assert len(set(chains[0][0].tolist())) > 3  # the chain moved


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), None])
def test_barker_proposal_refuses_a_bad_scale(scale):
    with pytest.raises((ValueError, TypeError), match="scale"):
        barker_proposal(None, scale, 1.0, 1.0)
