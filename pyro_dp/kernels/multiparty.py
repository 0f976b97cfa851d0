r"""Multi-party (data-sharing) DP penalty MH (Yıldırım & Ermiş 2019, §3.2.2, Algorithm 2).

The rows of the data plate are split among :math:`N_p` parties by a **public** assignment
``party[i]``. Each iteration, after a data-free random-walk proposal :math:`\theta'`, every
party :math:`j` releases its own noisy share of the log-likelihood ratio (paper eq. 6)

.. math::
    \hat d^{(j)} = \sum_{i:\,\mathrm{party}(i)=j}
        \mathrm{clip}_{\pm b\|\theta'-\theta\|}\big(\ell_i(\theta') - \ell_i(\theta)\big)
        + \mathcal N(0, \sigma_j^2), \qquad \sigma_j = \mathrm{nm}_j\cdot 2b\|\theta'-\theta\|,

(the same clipped Gaussian mechanism as :mod:`~pyro_dp.kernels.penalty`, applied to the
party's rows), and the chain accepts with (Alg. 2, step 2)

.. math::
    \min\Big\{1, \frac{\eta(\theta')q(\theta|\theta')}{\eta(\theta)q(\theta'|\theta)}
    \exp\Big(T\sum_j \hat d^{(j)} - T^2\sum_j\sigma_j^2/2\Big)\Big\},

i.e. :math:`N_p\sigma^2/2` for equal noise: the total noise variance on the log ratio is
:math:`N_p` times one party's, the price of the parties' privacy against each other
(§3.2.2). The chain is exact (penalty method) when clipping does not bind.

Privacy (parallel composition). A row belongs to exactly one party, and the assignment
is public, so substituting one row changes only its own party's release: per iteration, a
row's privacy loss against everyone else (the other parties included: they see every
release) is **one** Gaussian mechanism with its party's noise multiplier. Party ``j``'s
guarantee is therefore the composition of its own releases only —
``get_epsilon(delta, party=j)`` — and equals that of a single-party DP penalty run on
party ``j``'s rows with the same noise. The run's overall guarantee (the kernel's main
ledger, :func:`pyro_dp.get_epsilon`) is the worst party's: one Gaussian event with
:math:`\min_j \mathrm{nm}_j` per iteration.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

import torch

from ..accounting import DEFAULT_ACCOUNTANT, get_accountant
from ..mechanisms import NonPrivateEvent, PrivacyLedger, clipped_sum_with_noise, gaussian_event, parallel
from .base import check_positive
from .mh import MHState, RandomWalkKernel, RatioRelease
from .proposals import penalty_accept, pop_target_accept_prob
from .releases import Budget, ReleasePlan, calibrated_scale, noise_setting, penalty_releases
from .workers import owned_kernel

__all__ = ["PartyReleases", "PartyLedgers", "multiparty_release", "DPMultiPartyPenalty", "party_ledger",
           "party_epsilon"]


class PartyLedgers(tuple):
    """One chain's per-party ledgers (``diagnostics()["party privacy ledgers"]``): a tuple of
    :class:`~pyro_dp.mechanisms.PrivacyLedger`, one per party, tagged with the kernel object and
    the chain. Like :class:`~pyro_dp.kernels.chain_ledger.ChainLedger`, when it is unpickled in the
    process that owns the kernel (a chain run in an ``MCMC`` worker process comes back this
    way) it files itself with that kernel (idempotently, by chain), so per-party ε counts
    every chain of every run.

    >>> from pyro_dp.mechanisms import GaussianEvent
    >>> a = PrivacyLedger(); a.record(GaussianEvent(2.0), 3)
    >>> p = PartyLedgers((a, PrivacyLedger()), kernel_id="k", chain_id="c")
    >>> p[0].num_releases, p.chain_id, len(p)
    (3, 'c', 2)
    """

    def __new__(cls, ledgers, kernel_id: str = "", chain_id: str = ""):
        out = super().__new__(cls, tuple(ledgers))
        out.kernel_id, out.chain_id = kernel_id, chain_id
        return out

    def __getnewargs__(self):
        return (tuple(self),)

    def __setstate__(self, state):
        self.__dict__.update(state)
        kernel = owned_kernel(self.kernel_id)
        if isinstance(kernel, DPMultiPartyPenalty):
            kernel._file_party_chain(self.chain_id, self)


class PartyReleases(NamedTuple):
    r"""The public facts of one iteration's party releases (``MHInfo.extra``).

    :ivar party_events: each party's own released event.
    :ivar party_noise_std: :math:`\sigma_j` of each party's release.
    :ivar log_ratio_hat: the released :math:`T\sum_j\hat d^{(j)}`.
    """

    party_events: Tuple
    party_noise_std: Tuple
    log_ratio_hat: torch.Tensor


def _worst_event(events):
    if any(isinstance(e, NonPrivateEvent) for e in events):
        return NonPrivateEvent()
    return min(events, key=lambda e: e.noise_multiplier)


def multiparty_release(lik, noise, state: MHState, z_new: torch.Tensor, parties: Sequence[torch.Tensor], *,
                       llr_clip: float, noise_multipliers: Sequence[float]) -> RatioRelease:
    """The releases of one iteration of Algorithm 2 (Yıldırım & Ermiş 2019, §3.2.2).

    ``parties[j]`` holds party ``j``'s row indices (public); ``noise_multipliers[j]`` its noise.
    The recorded (row-level) event is the worst party's: parallel composition over disjoint
    parties; each party's own event is in ``extra``.
    """
    loglik = state.cache
    if loglik is None:
        loglik = lik.per_example_loglik(state.z)  # enters only this step's releases
    ll_new, lp_new = lik.loglik_and_prior(z_new)
    ratios = ll_new - loglik
    clip = llr_clip * lik.jump_norm(z_new, state.z)  # b‖θ'−θ‖, likelihood coordinates
    # Alg. 2, step 1 / eq. (6): each party releases its clipped share in its own Gaussian noise
    # (sensitivity 2b‖θ'−θ‖ as in the single-party penalty, §3.2.2: "the same as in Section 3.2").
    with parallel():  # disjoint parties: the recorder records the worst party's release, once
        rels = [clipped_sum_with_noise(ratios[idx], clip, nm, noise) for idx, nm in zip(parties, noise_multipliers)]
    T = lik.temperature
    d_hat = T * sum(r.value for r in rels)
    noise_var = T**2 * sum(r.noise_std**2 for r in rels)  # Alg. 2, step 2: N σ² for equal noise
    sizes = [int(idx.numel()) for idx in parties]
    frac = sum(r.clipped_fraction * s for r, s in zip(rels, sizes)) / sum(sizes)
    party_events = tuple(r.event for r in rels)
    extra = PartyReleases(party_events, tuple(float(r.noise_std) for r in rels), d_hat)
    # accept w.p. min{1, prior/proposal ratio · exp(Σ_j d̂^(j) − Nσ²/2)}
    return RatioRelease(d_hat, noise_var, lp_new, (_worst_event(party_events),), frac,
                        float(torch.sqrt(torch.as_tensor(noise_var))), ll_new, loglik, extra)


def _as_party_index(party) -> torch.Tensor:
    if party is None:
        raise ValueError("party must be given: a public party index for every row of the data plate")
    p = torch.as_tensor(party)
    if p.dim() != 1 or p.numel() == 0:
        raise ValueError(f"party must be a non-empty 1-d sequence of party indices, got shape {tuple(p.shape)}")
    if p.is_floating_point() or p.is_complex() or p.dtype == torch.bool:
        raise TypeError(f"party must hold integer party indices, got dtype {p.dtype}")
    if bool((p < 0).any()):
        raise ValueError("party indices must be >= 0")
    return p.long()


class DPMultiPartyPenalty(RandomWalkKernel):
    r"""DP penalty MH with the data shared among parties (Yıldırım & Ermiş 2019, Alg. 2).

    :param model: Pyro model with its observed sites in a data plate.
    :param party: public party index (``0 .. num_parties-1``) of every row of the data plate.
    :param proposal_scale: random-walk standard deviation in unconstrained space.
    :param float llr_clip: :math:`b`: per-example log-likelihood ratios are clipped to
        :math:`\pm b\|\theta'-\theta\|` (as :class:`~pyro_dp.kernels.penalty.DPPenalty`).
    :param noise_multiplier: one ``nm`` for every party, or one per party. Omit it and give
        ``epsilon``, ``delta`` and ``num_iterations`` to calibrate one ``nm`` for all
        parties (each party then gets the budget against the others).
    :param int num_parties: default ``max(party) + 1``; every party must own a row.
    :param one_component, guided_walk, adapt_proposal, target_accept_prob: the random walk, as for
        :class:`~pyro_dp.kernels.penalty.DPPenalty` (:class:`~pyro_dp.kernels.mh.RandomWalkKernel`).

    :meth:`get_epsilon` with ``party=j`` reports party ``j``'s privacy against all others;
    without it, the worst party's. Other keyword arguments are those of
    :class:`~pyro_dp.kernels.base.DPKernel`.

    Example
    -------
    >>> import torch; from pyro.infer import MCMC; from pyro.infer.autoguide.initialization import init_to_mean
    >>> from pyro_dp.models.examples import normal_mean_model as model  # y_i ~ N(mu, 1), mu ~ N(0, 10^2)
    >>> y = torch.randn(300, generator=torch.Generator().manual_seed(0)) + 1.0
    >>> party = torch.arange(300) % 3  # three data owners
    >>> kernel = DPMultiPartyPenalty(model, party, proposal_scale=0.05, llr_clip=4.0,
    ...                              noise_multiplier=[5.0, 10.0, 10.0], init_strategy=init_to_mean, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=200, warmup_steps=100, disable_progbar=True)
    >>> mcmc.run(y)
    >>> [round(kernel.get_epsilon(1e-5, party=j), 3) for j in range(3)]
    [20.125, 8.385, 8.385]
    >>> kernel.get_epsilon(1e-5) == kernel.get_epsilon(1e-5, party=0)  # the worst party
    True
    """

    def __init__(
        self,
        model,
        party,
        proposal_scale,
        llr_clip: float,
        noise_multiplier=None,
        *,
        num_parties: Optional[int] = None,
        one_component: bool = False,
        guided_walk: bool = False,
        adapt_proposal: bool = False,
        target_accept_prob: Optional[float] = None,
        **kwargs,
    ):
        target_accept_prob = pop_target_accept_prob(kwargs, target_accept_prob)  # before DPKernel sees kwargs
        if kwargs.get("init") is not None:
            raise ValueError("DPMultiPartyPenalty does not support a private init: each party's rows "
                             "would need their own initialisation releases")
        super().__init__(model, **kwargs)
        self.party = _as_party_index(party)
        present = int(self.party.max()) + 1
        if num_parties is None:
            num_parties = present
        num_parties = check_positive("num_parties", num_parties, integer=True)
        if present > num_parties:
            raise ValueError(f"party index {present - 1} is out of range for num_parties={num_parties}")
        counts = torch.bincount(self.party, minlength=num_parties)
        empty = [j for j in range(num_parties) if int(counts[j]) == 0]
        if empty:
            raise ValueError(f"parties {empty} have no rows: every party must own at least one row")
        self.num_parties = num_parties
        self._party_rows = [torch.nonzero(self.party == j).reshape(-1) for j in range(num_parties)]
        self._setup_walk(proposal_scale, one_component=one_component, guided_walk=guided_walk,
                         adapt_proposal=adapt_proposal,
                         target_accept_prob=target_accept_prob)
        self.llr_clip = check_positive("llr_clip", llr_clip)
        if noise_multiplier is None or _is_scalar(noise_multiplier):
            nm = noise_setting(self, "noise_multiplier", noise_multiplier)
            self.noise_multipliers = None if nm is None else (nm,) * num_parties
        else:
            nms = list(noise_multiplier)
            if len(nms) != num_parties:
                raise ValueError(f"noise_multiplier has {len(nms)} entries for {num_parties} parties")
            self.noise_multipliers = tuple(noise_setting(self, "noise_multiplier", v) for v in nms)
        self._party_ledgers = [PrivacyLedger() for _ in range(num_parties)]
        #: finished chains' party ledgers by chain id (this process's and worker processes')
        self._party_chains = {}

    @property
    def noise_multiplier(self) -> Optional[float]:
        """The smallest party noise multiplier (the worst party's)."""
        return None if self.noise_multipliers is None else min(self.noise_multipliers)

    _chain_attrs = RandomWalkKernel._chain_attrs + ("_party_ledgers", "_party_chains")

    def _calibrate(self):
        if self.noise_multipliers is None:  # no private init here (refused in __init__)
            self.noise_multipliers = (calibrated_scale(penalty_releases, Budget.of(self), self.num_iterations),
                                      ) * self.num_parties

    def releases(self, state=None):
        # Parallel composition: per row and iteration, one Gaussian mechanism (its party's);
        # the worst case over rows is the smallest noise multiplier.
        return ReleasePlan((gaussian_event(float(min(self.noise_multipliers))),))

    def _check_data(self):
        super()._check_data()
        if int(self.party.numel()) != self.lik.num_rows:
            raise ValueError(
                f"party assigns {self.party.numel()} rows but the data plate {self.lik.data_plate!r} "
                f"has {self.lik.num_rows}"
            )
        self._party_rows = [r.to(self.lik.device) for r in self._party_rows]

    def _release(self, noise, state, z_new):
        return multiparty_release(self.lik, noise, state, z_new, self._party_rows, llr_clip=self.llr_clip,
                                  noise_multipliers=self.noise_multipliers)

    def _accept(self, rng, lambda_hat, noise_var):
        return penalty_accept(rng, lambda_hat, noise_var)

    def _step(self, state):
        new, info = super()._step(state)
        for led, ev in zip(self._party_ledgers, info.extra.party_events):
            led.record(ev)
        return new, info

    # ------------------------------------------------------------------ per-party ledgers
    def cleanup(self):
        if self.privacy.live:  # file this chain's party ledgers with its main ledger
            self._file_party_chain(self.privacy.live.chain_id, self._party_ledgers)
            self._party_ledgers = [PrivacyLedger() for _ in range(self.num_parties)]
        super().cleanup()

    def _file_party_chain(self, chain_id: str, ledgers) -> None:
        """File a finished chain's party ledgers (idempotent by chain id; the longer copy wins,
        as :meth:`~pyro_dp.kernels.privacy_engine.PrivacyEngine.file_chain`). The live chain is never
        filed from a copy of itself."""
        if not chain_id or chain_id == self.privacy.live.chain_id and ledgers is not self._party_ledgers:
            return
        old = self._party_chains.get(chain_id)
        if old is None or sum(x.num_releases for x in old) < sum(x.num_releases for x in ledgers):
            self._party_chains[chain_id] = tuple(x.copy() for x in ledgers)

    def party_ledger(self, party: int) -> PrivacyLedger:
        """Every release of party ``party``'s data: every chain of every run, in this process
        and (once their diagnostics came back) in worker processes."""
        j = self._check_party(party)
        return PrivacyLedger.merged([c[j] for c in self._party_chains.values()] + [self._party_ledgers[j]])

    def _check_party(self, party) -> int:
        if isinstance(party, bool) or not isinstance(party, int) or not (0 <= party < self.num_parties):
            raise ValueError(f"party must be an integer in [0, {self.num_parties}), got {party!r}")
        return party

    def get_epsilon(self, delta: Optional[float] = None, accountant: Optional[str] = None, party: Optional[int] = None):
        r"""ε at ``delta``: of party ``party`` against all the others, or (``party=None``) of
        the whole run, i.e. the worst party (parallel composition, module docstring)."""
        if party is None:
            return super().get_epsilon(delta, accountant)
        self.privacy.require_complete()
        ledger = self.party_ledger(party)
        if not ledger and self.num_setups > 0:
            raise RuntimeError(
                "this kernel object recorded no data access in this process; for chains run in worker "
                "processes use pyro_dp.kernels.multiparty.party_epsilon(mcmc, delta, party)"
            )
        delta = self.reference_delta if delta is None else delta
        return get_accountant(accountant or self.accountant, ledger).get_epsilon(delta)

    def diagnostics(self) -> dict:
        out = super().diagnostics()
        out["party privacy ledgers"] = PartyLedgers((led.copy() for led in self._party_ledgers), self.processes.id,
                                                    self.privacy.live.chain_id)
        return out


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float)) or (torch.is_tensor(x) and x.numel() == 1)


def party_ledger(mcmc, party: int) -> PrivacyLedger:
    """Party ``party``'s merged ledger over every chain of every run of the ``MCMC`` object's
    kernel (worker processes included). Until 2026-11-26 this read only the last run's chains
    (Pyro keeps only those in ``MCMC._diagnostics``) and under-reported a re-run's ε."""
    kernel = getattr(mcmc, "kernel", None)
    per_chain = getattr(mcmc, "_diagnostics", None)
    if not isinstance(kernel, DPMultiPartyPenalty) or per_chain is None:
        raise ValueError("this MCMC object does not use a DPMultiPartyPenalty kernel")
    for d in per_chain:  # idempotent: files any chain the kernel has not seen (e.g. an unpickled MCMC)
        ledgers = None if d is None else d.get("party privacy ledgers")
        main = None if d is None else d.get("privacy ledger")
        if ledgers is not None and main is not None:
            kernel._file_party_chain(getattr(ledgers, "chain_id", "") or main.chain_id, ledgers)
    kernel.privacy.require_complete()
    ledger = kernel.party_ledger(party)
    if not ledger:
        raise ValueError("this MCMC object's kernel has released nothing yet")
    return ledger


def party_epsilon(mcmc, delta: float, party: int, accountant: Optional[str] = None) -> float:
    """Party ``party``'s ε at ``delta`` against the others, over every chain of an ``MCMC`` run."""
    name = accountant or getattr(mcmc.kernel, "accountant", None) or DEFAULT_ACCOUNTANT
    return get_accountant(name, party_ledger(mcmc, party)).get_epsilon(delta)
