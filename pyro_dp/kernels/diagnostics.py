r"""What a chain reports (a kernel's ``diagnostics()`` is :func:`chain_diagnostics`): ``diagnostics()``
— acceptance, this chain's ε, its ledger, and the checks of its own draws that warn when it is
likely wrong (:func:`~pyro_dp.checks.chain_problems`) — and ``logging()``, Pyro's progress-bar
postfix. All post-processing of released values, except the keys starting with
:data:`NONPRIVATE_PREFIX`, which are opt-in (``nonprivate_diagnostics=True``) and not covered by ε.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..checks import ESS_ADVICE, SamplingWarning, chain_problems
from ..warn import warn_user
from .privacy_engine import PrivacyNotice

__all__ = ["chain_diagnostics", "NONPRIVATE_PREFIX", "ALTERNATIVE_GAIN", "NOISE_LIMITED_ALTERNATIVE", "too_few_draws"]

#: A chain checks its own draws after warmup (:func:`~pyro_dp.checks.chain_problems`) when it has
#: at least this many; it keeps at most ``MAX_CHECKED_DRAWS`` of them (the first ones).
_MIN_CHECKED_DRAWS, MAX_CHECKED_DRAWS = 100, 20_000

def too_few_draws(num_draws: int, min_draws: int = _MIN_CHECKED_DRAWS) -> str:
    """The end-of-chain warning of a chain with fewer draws after warmup than its checks need
    (:func:`~pyro_dp.checks.chain_problems`, calibrated on chains of 100 draws and more): a DP
    chain that short can be far off, a sign flipped, with nothing else to say so.

    >>> too_few_draws(30).split(":")[0]
    'only 30 draws after warmup'
    """
    return (f"only {num_draws} draw{'s' if num_draws != 1 else ''} after warmup: too few for the end-of-chain checks "
            f"(they need {min_draws}) to judge whether this chain represents the posterior. Its mean and spread may "
            f"be far off, a sign flipped included, with no other warning: draw at least {min_draws} samples "
            "(num_samples), and compare chains with pyro_dp.check_run(mcmc)")


#: Prefix of every ``diagnostics()`` key computed from the raw data and **not covered by ε**
#: (e.g. ``"non-private clipped fraction"``); such keys appear only with
#: ``nonprivate_diagnostics=True``.
NONPRIVATE_PREFIX = "non-private "


#: the effective-sample-size advice of a DPHMC chain names DPPenalty where DPPenalty's default path
#: is forecast to give at least this many times its effective samples (same budget, run and clips:
#: e.g. 29.6 against 11.9 on the default suite's linear model at epsilon = 2, measured 18.2 against 5.9)
ALTERNATIVE_GAIN = 2.0

#: what the effective-sample-size advice adds for a model with latents outside the likelihood
#: (measured on the two-level model: docs/tuning.md, "Control variates", acceptance 2)
GROUP_ADVICE = ("; if group effects enter the likelihood (a[g[i]] + ...), DPGroupedPenalty(model, group_site={site}, "
                "epsilon=...) moves each group paying noise for its own move only (docs/kernels/grouped.md)")


def group_advice(lik) -> str:
    """:data:`GROUP_ADVICE` with the group site named where the model's structure shows one
    candidate: a latent site of two or more coordinates inside a plate other than the data plate
    that enters the likelihood (data-free: the trace's plates and
    :meth:`~pyro_dp.likelihood.PrivateLikelihood.likelihood_sites`); ``...`` otherwise."""
    sites = lik.likelihood_sites() or ()
    named = [n for n in getattr(lik, "plated_latents", ()) if n in sites and lik.site_sizes.get(n, 0) >= 2]
    return GROUP_ADVICE.format(site=repr(named[0]) if len(named) == 1 else "...")


#: what the noise-limited advice adds by default (the accept-test kernels: the kernel without a test);
#: a kernel's ``noise_limited_alternative``
NOISE_LIMITED_ALTERNATIVE = (", or use DPPenalty(model, epsilon=...) with its default control variate, whose "
                             "test noise does not grow with the move (docs/tuning.md, 'Control variates'), or "
                             "DPSGLD(model, epsilon=...), which has no accept test: its noise costs step length, "
                             "not rejected moves (docs/tuning.md, 'Without an accept test')")


def chain_diagnostics(kernel, nonprivate: Optional[dict] = None) -> dict:
    """A kernel's per-chain diagnostics (merged by ``MCMC.diagnostics()`` as ``{key: {"chain i": v}}``).
    It describes the chain **in progress** (``kernel.chain``): Pyro calls it at the end of each
    chain, before ``cleanup()``. After ``mcmc.run`` the kernel holds no chain (a fresh, empty one:
    ``"epsilon"`` 0.0, ``"private iterations"`` 0, with a :class:`PrivacyNotice` that gives the
    total so far); read a run's chains from ``mcmc.diagnostics()`` and the total from
    ``kernel.get_epsilon``.

    ``"epsilon"`` is this chain's own ε at ``"delta"`` under ``"relation"`` (the neighbouring
    relation: ``"substitute"`` unless the kernel was built with ``relation="add_remove"``); the
    total over all chains and runs is ``kernel.get_epsilon`` / :func:`pyro_dp.get_epsilon`.
    ``"privacy ledger"`` is this chain's :class:`~pyro_dp.kernels.chain_ledger.ChainLedger`.
    ``"divergences"`` is empty (these kernels do not detect divergences; ArviZ and Pyro's summary
    expect the key). Everything here is post-processing of released values, except the keys
    starting with :data:`NONPRIVATE_PREFIX` (``nonprivate``: present only with
    ``nonprivate_diagnostics=True``): they are computed from the raw data and are **not covered by ε**.
    A chain with enough draws after warmup checks them (:func:`~pyro_dp.checks.chain_problems`)
    and warns, once per chain state, when it is likely wrong.
    """
    chain, engine, name = kernel.chain, kernel.privacy, type(kernel).__name__
    out = {
        "acceptance rate": chain.acceptance_rate,
        "epsilon": engine.epsilon_now(chain_only=True),
        "delta": engine.reference_delta,
        "relation": engine.relation,  # the neighbouring relation epsilon is stated under
        "private iterations": chain.iteration,
        "budget exhausted": engine.stopped,
        "budget exhausted cause": engine.stop_cause,
        "privacy ledger": engine.live.copy(),
        "divergences": [],
    }
    if nonprivate is not None:
        out.update({NONPRIVATE_PREFIX + k: v for k, v in nonprivate.items()})

    def warn(message: str, category) -> None:  # once per chain state: asking again repeats nothing
        if (chain.iteration, message) not in chain.warned:
            chain.warned.add((chain.iteration, message))
            warn_user(message, category)

    if chain.iteration == 0 and engine.chains:  # asked between runs: "epsilon" 0.0 is no run's
        warn(f"{name}.diagnostics() describes the chain in progress and there is none (a run "
             "has ended): its 'epsilon' 0.0 is an empty chain's, not the run's. Each chain's is in "
             "mcmc.diagnostics(), the total in pyro_dp.get_epsilon(mcmc, delta): this kernel's chains so far "
             f"spent epsilon={engine.epsilon_now():.4g} at delta={engine.reference_delta:g}", PrivacyNotice)
    if engine.default_budget and chain.iteration > 0:  # Pyro asks once a chain
        warn(engine.default_budget_spent(name, out["epsilon"]), PrivacyNotice)
    if chain.iteration >= 10 and chain.accepted == 0:  # Pyro asks at the end of each chain
        warn(f"this chain accepted none of its {chain.iteration} proposals: its samples are its starting "
             "point, not posterior draws. Lower llr_clip or the noise, shrink the proposal, or start closer "
             "(pyro_dp.check_run(mcmc) checks a whole run)", SamplingWarning)
    elif not engine.stopped and 0 < len(chain.draws) < _MIN_CHECKED_DRAWS:
        # too few to judge: say so instead of saying nothing (issue 61: eight runs of 30 draws,
        # three far off, two with a sign flipped, none warned)
        problem = too_few_draws(len(chain.draws))
        out["sampling problems"] = (problem,)
        warn(f"{name} chain: {problem}", SamplingWarning)
    elif not engine.stopped and len(chain.draws) >= _MIN_CHECKED_DRAWS:
        # never silently wrong: this chain's own draws, checked at its end (post-processing)
        lik = kernel.lik
        problems = chain_problems(lik.to_unconstrained(torch.stack(chain.draws)).cpu(),
                                  names=lik.coordinate_names(), advice=ess_advice(kernel),
                                  expected_sd=chain.metric_sd)
        out["sampling problems"] = tuple(problems)
        for p in problems:
            warn(f"{name} chain: {p} (pyro_dp.check_run(mcmc) also compares chains)", SamplingWarning)
    return out


def ess_advice(kernel) -> str:
    """What the effective-sample-size warning advises: where the default path found the
    privacy noise to limit each move (before the chain ran, public), running longer does
    not help at the same ε: the noise per iteration grows with the number of iterations."""
    chain = kernel.chain
    if kernel.forecast.noise_limited:
        advice = ("at this epsilon more iterations will not help (the privacy noise per iteration grows with their "
                  "number, see the warning before the chain ran): spend more epsilon, use more rows"
                  + kernel.noise_limited_alternative)
    elif kernel.forecast.longer_helps is False:
        advice = ("the forecast for this chain (pyro_dp.feasibility, with its private clips) gives a run twice as "
                  "long at this epsilon few more effective samples (the privacy noise per iteration grows with the "
                  "run's length): spend more epsilon or use more rows")
    else:
        advice = ESS_ADVICE
    alt = kernel.forecast.alternative_ess  # (kernel, its forecast, this chain's): post-processing
    if alt is not None and alt[1] >= ALTERNATIVE_GAIN * alt[2]:
        advice += (f"; {alt[0]}(model, epsilon=...) is forecast to give about {alt[1]:.2g} effective samples here, "
                   f"against {alt[2]:.2g} for this kernel (docs/choosing.md)")
    mask = getattr(kernel.lik, "likelihood_mask", None)  # latents outside the likelihood (structure): hierarchical
    if kernel.advises_grouped and mask is not None and not bool(mask.all()):
        advice += group_advice(kernel.lik)
    return advice
