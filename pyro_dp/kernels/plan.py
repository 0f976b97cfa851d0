r"""The privacy plan of a budgeted kernel, and its enforcement on ledgers.

From a budget :math:`(\varepsilon, \delta)`, a kernel's once-per-chain releases (the private
initialisation, DP-HMC's first gradient) and its per-iteration releases, :class:`PrivacyPlan`
finds how many iterations per chain fit ``num_chains`` chains
(:func:`~pyro_dp.accounting.max_iterations`) and holds one chain's planned releases as event
counts. The kernel asks :meth:`PrivacyPlan.fits` **before** every iteration; the check reads
only event counts (public), and composition is commutative for every accountant here, so a
ledger whose counts stay within ``num_chains`` chain plans never exceeds the budget, whatever
the control flow.

>>> from collections import Counter
>>> from pyro_dp.mechanisms import GaussianEvent, PrivacyLedger
>>> plan = PrivacyPlan(1.0, 1e-5, fixed=[], per_iteration=[GaussianEvent(10.0)])
>>> plan.steps_allowed
7
>>> ledger = PrivacyLedger(); ledger.record(GaussianEvent(10.0), 7)
>>> plan.fits(ledger, Counter(), counts([GaussianEvent(10.0)]))  # an eighth release would not fit
False
"""
from __future__ import annotations

from collections import Counter
from typing import Optional

from ..accounting import DEFAULT_ACCOUNTANT, max_iterations

__all__ = ["PrivacyPlan", "counts", "within", "plan_cap", "PLAN_CAP_FACTOR", "PLAN_CAP_MIN"]

#: the plan of a run of ``num_iterations`` covers at most ``max(PLAN_CAP_FACTOR * num_iterations,
#: PLAN_CAP_MIN)`` iterations per chain (:func:`plan_cap`)
PLAN_CAP_FACTOR = 64
PLAN_CAP_MIN = 100_000


def plan_cap(num_iterations: Optional[int]) -> Optional[int]:
    """How many iterations per chain the plan of a run of ``num_iterations`` covers at most
    (``None``: no cap). Far beyond the run, so the cap never stops a run the budget allows, and
    the search for the plan's length never composes more releases than that (at ε = 200 a
    subsampled Gaussian with noise multiplier 16 at rate 0.1 fits tens of millions of iterations;
    certifying that with the PLD accountant took over a minute at set-up, 2026-11-29).

    >>> plan_cap(1500), plan_cap(10_000), plan_cap(None)
    (100000, 640000, None)
    """
    if num_iterations is None:
        return None
    return max(PLAN_CAP_FACTOR * int(num_iterations), PLAN_CAP_MIN)


def counts(events) -> Counter:
    """``Counter({event: count})`` of a list of events or ``(event, count)`` pairs.

    >>> from pyro_dp.mechanisms import GaussianEvent
    >>> counts([GaussianEvent(2.0), (GaussianEvent(2.0), 3)])
    Counter({GaussianEvent(noise_multiplier=2.0): 4})
    """
    out: Counter = Counter()
    for e in events:
        ev, c = e if isinstance(e, tuple) else (e, 1)
        out[ev] += int(c)
    return out


def within(have: Counter, plan: Counter) -> bool:
    """Every event's count within the plan's (a release the plan lacks never fits)."""
    return all(c <= plan.get(ev, 0) for ev, c in have.items() if c > 0)


class PrivacyPlan:
    r"""One chain's planned releases under a budget (data-free).

    :param epsilon, delta: the total budget over ``num_chains`` chains.
    :param fixed: once-per-chain releases (events or ``(event, count)`` pairs).
    :param per_iteration: one iteration's releases.
    :param accountant, num_chains, relation: as for :func:`~pyro_dp.accounting.max_iterations`.
    :param int cap: plan at most this many iterations per chain (``None``: as many as fit). The
        kernels pass :func:`plan_cap` of the run's length: the exact maximum of a generous budget
        can be millions of iterations, which a numerical accountant takes minutes to certify.

    :ivar steps_allowed: iterations per chain that fit.
    :ivar capped: whether :attr:`steps_allowed` is the cap (the budget may allow more).
    :ivar chain: one chain's planned event counts.
    :ivar total: ``num_chains`` chains' planned event counts (the budget, as counts).
    """
    def __init__(self, epsilon: float, delta: float, *, fixed, per_iteration, accountant: str = DEFAULT_ACCOUNTANT,
                 num_chains: int = 1, relation: str = "substitute", cap: Optional[int] = None):
        self.num_chains = int(num_chains)
        #: the plan's releases as given (``fixed`` once per chain, ``per_iteration`` each iteration), e.g.
        #: for the planned ε-over-iterations curve of :func:`pyro_dp.privacy_report`
        self.fixed, self.per_iteration = list(fixed), list(per_iteration)
        self.epsilon, self.delta, self.accountant, self.relation = epsilon, delta, accountant, relation
        self.steps_allowed = max_iterations(epsilon, delta, list(per_iteration), fixed=list(fixed),
                                            accountant=accountant, num_chains=self.num_chains, relation=relation,
                                            cap=cap)
        self.capped = cap is not None and self.steps_allowed == int(cap)
        chain = counts(fixed)
        for ev, c in counts(per_iteration).items():
            chain[ev] += c * self.steps_allowed
        self.chain = chain
        self.total = Counter({ev: c * self.num_chains for ev, c in chain.items()})

    def fits(self, chain_ledger, filed: Counter, step: Counter, concurrent: int = 1) -> bool:
        """Would releasing ``step`` now keep this chain (``chain_ledger``) within one chain's
        plan, and the ``filed`` chains' event counts + this chain (+ ``concurrent - 1`` sibling
        chains at a full plan each, for chains running in parallel processes) within the budget?"""
        chain = counts(chain_ledger.aggregate().items()) + step
        if not within(chain, self.chain):
            return False
        total = Counter(filed)
        total.update(chain)
        for ev, c in self.chain.items():
            total[ev] += (concurrent - 1) * c
        return within(total, self.total)

    def stop_cause(self, chain_ledger, step: Counter, num_filed: int) -> str:
        """Why :meth:`fits` said no, in words for the budget warning."""
        if not within(counts(chain_ledger.aggregate().items()) + step, self.chain):
            if self.__dict__.get("capped"):
                return (f"this chain reached the {self.steps_allowed} iterations the plan covers (the budget may "
                        f"allow more; the plan covers at most {PLAN_CAP_FACTOR} times the run's num_iterations "
                        f"and at least {PLAN_CAP_MIN}: pass a larger num_iterations to plan more)")
            return (f"this chain used its share of the budget (num_chains={self.num_chains} chains of "
                    f"{self.steps_allowed} iterations; warmup counts)")
        return (f"the chains already run by this kernel object ({num_filed} filed, from this or earlier "
                f"mcmc.run calls) leave no room for this one: the budget was planned for "
                f"num_chains={self.num_chains}; pass the same num_chains to the kernel and to MCMC")
