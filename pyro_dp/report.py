r"""One privacy statement for a run, to publish with its results.

:func:`privacy_report` reads the ledger of a pyro_dp kernel (every chain of every
``mcmc.run`` of the kernel object, chains in worker processes included) and returns a
frozen :class:`PrivacyReport`: the ε at the user's δ (and the δ at a given ε), the
neighbouring relation and the accountant, the mechanisms grouped by what they were for
(their ledger labels: tuning, private start, sampling), each chain and the total, the budget
and the planned ε where the kernel had a budget, and ε over the iterations of the run.
``str(report)`` is a paragraph to paste into a paper; :meth:`PrivacyReport.to_json` /
:meth:`PrivacyReport.from_json` round-trip it; :meth:`PrivacyReport.plot` draws ε against
iterations with the budget line.

**Nothing here spends privacy or changes a ledger.** The report composes the ledger the
kernel already holds (as :func:`pyro_dp.get_epsilon` does: its total is that function's
value, by the same accountant on the same ledger), and reads the kernel's plan. It holds
released quantities and public settings only: counts, events, noise multipliers and ε values
(post-processing, Räisä 2021 thesis, Thm 3); no data, no statistic of the data.

**The ε-over-iterations curve.** Each chain's ledger marks where its iterations end
(:attr:`~pyro_dp.kernels.chain_ledger.ChainLedger.iteration_marks`, public counts). The point at
iteration ``t`` composes, for every chain, the releases it made in its first ``t``
iterations (warmup included; iterations after a budget stop release nothing) — the ε of the
run had every chain stopped after ``t`` iterations. Releases not tied to an iteration (a
ledger restored without marks) count from where they were recorded, which can only raise the
curve: it never under-states what was spent by iteration ``t``. It is evaluated on a grid of
``curve_points`` iterations (one accountant evaluation each); its last point is the total.

Example
-------
>>> import torch, pyro_dp
>>> from pyro.infer import MCMC
>>> from pyro_dp.models.examples import normal_mean_model as model
>>> y = torch.zeros(200, dtype=torch.float64)
>>> kernel = pyro_dp.DPPenalty(model, 0.1, llr_clip=1.0, noise_multiplier=20.0, seed=0)
>>> mcmc = MCMC(kernel, num_samples=60, warmup_steps=40, disable_progbar=True)
>>> mcmc.run(y)
>>> report = pyro_dp.privacy_report(mcmc, delta=1e-5)
>>> report.epsilon == pyro_dp.get_epsilon(mcmc, 1e-5), report.curve_epsilon[-1] == report.epsilon
(True, True)
>>> [(g.purpose, g.releases) for g in report.mechanisms]
[('sampling', 100)]
>>> pyro_dp.PrivacyReport.from_json(report.to_json()) == report
True
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from . import mechanisms as _mechanisms
from .accounting import DEFAULT_ACCOUNTANT, get_accountant, planned_epsilon
from .kernels.base import DPKernel
from .mechanisms import PrivacyEvent, PrivacyLedger
from .run import get_ledger
from .version import __version__

__all__ = ["privacy_report", "PrivacyReport", "MechanismGroup", "ChainSummary", "PlanSummary"]

#: schema of :meth:`PrivacyReport.to_dict`
FORMAT = "pyro_dp.privacy_report/1"

#: one line per accountant, for the report's paragraph (docs/privacy.md, "Accountants")
ACCOUNTANT_DESCRIPTIONS = {
    "gdp": "Gaussian differential privacy, the exact composition of Gaussian mechanisms; Dong, Roth & Su 2022",
    "zcdp": "zero-concentrated differential privacy; Bun & Steinke 2016",
    "rdp": "Rényi differential privacy, Mironov 2017, with the conversion of Balle et al. 2020, Thm 21",
    "pld": "privacy loss distributions, pessimistic estimate, Google's dp_accounting; Koskela et al. 2020",
    "prv": "privacy random variables, upper bound; Gopi, Lee & Wutschitz 2021",
    "dp_rdp": "Rényi differential privacy, Google's dp_accounting; Mironov 2017",
    "advanced": "advanced composition; Dwork, Rothblum & Vadhan 2010; Kairouz, Oh & Viswanath 2015, Thm 3.5",
    "optimal": "optimal composition; Kairouz, Oh & Viswanath 2015, Thm 3.3",
}

#: the neighbouring relations, in words (docs/privacy.md, "Neighbouring relation")
RELATION_DESCRIPTIONS = {
    "substitute": "substitute-one neighbouring relation: two data sets are neighbours when they differ in the "
                  "value of one row",
    "add_remove": "add/remove-one neighbouring relation: two data sets are neighbours when one holds one row "
                  "more than the other",
}

_PURPOSES = {"": "sampling", "tune": "tuning", "init": "start"}
_EVENT_TYPES = {
    cls.__name__: cls
    for cls in (_mechanisms.GaussianEvent, _mechanisms.SubsampledGaussianEvent, _mechanisms.PureDPEvent,
                _mechanisms.ApproxDPEvent, _mechanisms.RDPCurveEvent, _mechanisms.NonPrivateEvent)
}


def _purpose(label: str) -> str:
    """``"sampling"`` for the kernel's own iterations (label ``""``), ``"tuning"`` for ``tune:*``,
    ``"start"`` for ``init:*`` (a private initialisation), else the label's prefix."""
    head = label.split(":", 1)[0]
    return _PURPOSES.get(head, head)


def _describe_label(label: str) -> str:
    """What a label's releases were for, in words: ``"sampling"``, ``"the private tuning of
    the clip"`` (``tune:clip``), ``"the private start by DPGradientInit"`` (``init:DPGradientInit``)."""
    head, _, detail = label.partition(":")
    if label == "":
        return "sampling"
    if head == "tune":
        return f"the private tuning of the {detail}" if detail else "private tuning"
    if head == "init":
        return f"the private start by {detail}" if detail else "the private start"
    return f"{head} ({detail})" if detail else head


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class MechanismGroup:
    """The releases of one ledger label, over all chains.

    :ivar label: the ledger label (``""``: the kernel's own iterations; ``"tune:clip"``,
        ``"init:DPGradientInit"``, ...).
    :ivar purpose: ``"sampling"``, ``"tuning"``, ``"start"`` (or the label's prefix).
    :ivar releases: number of releases.
    :ivar events: ``(event, count)`` of each distinct mechanism, in ledger order.
    :ivar epsilon: ε of these releases alone, at the report's δ (groups do not add up: the
        total composes them all).
    """

    label: str
    purpose: str
    releases: int
    events: Tuple[Tuple[PrivacyEvent, int], ...]
    epsilon: float


@dataclass(frozen=True)
class ChainSummary:
    """One chain of the kernel object (in the order its ledger merges them).

    :ivar chain: position in the kernel's ledger.
    :ivar chain_id: the chain ledger's random id.
    :ivar iterations: iterations the chain ran (warmup included; after a budget stop too).
    :ivar releases: its releases.
    :ivar epsilon: ε of this chain alone at the report's δ.
    :ivar by_label: ``(label, releases)`` pairs.
    :ivar run_chain: its index in the last ``mcmc.run`` (``"chain i"`` of ``mcmc.diagnostics()``),
        ``None`` when it is from an earlier run or the report was made from a kernel.
    :ivar private_iterations: iterations that read data (``diagnostics()``), when known.
    :ivar budget_exhausted: whether the budget stopped it, when known.
    """

    chain: int
    chain_id: str
    iterations: int
    releases: int
    epsilon: float
    by_label: Tuple[Tuple[str, int], ...]
    run_chain: Optional[int] = None
    private_iterations: Optional[int] = None
    budget_exhausted: Optional[bool] = None


@dataclass(frozen=True)
class PlanSummary:
    """The budget a kernel was given and its plan (data-free).

    :ivar epsilon: the budget's ε, over all ``num_chains`` chains.
    :ivar delta: the budget's δ.
    :ivar num_chains: chains the budget was planned for.
    :ivar num_iterations: iterations per chain the kernel was asked for (warmup included).
    :ivar iterations_allowed: iterations per chain that fit the budget.
    :ivar planned_epsilon: ε at the report's δ of the whole plan (``num_chains`` chains of
        ``iterations_allowed`` iterations); at most the budget when the δ are equal.
    :ivar default_budget: whether it was the default budget (nothing given).
    :ivar curve_iterations, curve_epsilon: the planned ε at the report's δ after ``t``
        iterations of every planned chain.
    """

    epsilon: float
    delta: float
    num_chains: int
    num_iterations: Optional[int]
    iterations_allowed: int
    planned_epsilon: float
    default_budget: bool
    curve_iterations: Tuple[int, ...]
    curve_epsilon: Tuple[float, ...]


@dataclass(frozen=True)
class PrivacyReport:
    r"""What a run released and what it cost: see :func:`privacy_report`.

    :ivar kernel: the kernel's class name.
    :ivar accountant: the accountant's name (:data:`ACCOUNTANT_DESCRIPTIONS`).
    :ivar relation: the neighbouring relation (``"substitute"`` or ``"add_remove"``).
    :ivar delta: δ of :attr:`epsilon`.
    :ivar epsilon: total ε at :attr:`delta` of every release of the kernel object (every chain,
        every run): :func:`pyro_dp.get_epsilon`'s value.
    :ivar num_releases, num_chains: totals.
    :ivar mechanisms: :class:`MechanismGroup` per ledger label.
    :ivar chains: :class:`ChainSummary` per chain.
    :ivar curve_iterations, curve_epsilon: ε at :attr:`delta` after ``t`` iterations of every
        chain (module docstring); the last value is :attr:`epsilon`.
    :ivar plan: :class:`PlanSummary` when the kernel had a budget, else ``None``.
    :ivar at_epsilon, delta_at_epsilon: the δ of the run at a given ε, when asked for.
    :ivar within_budget: whether :attr:`epsilon` is within the budget (``None``: no budget, or
        a budget at another δ).
    :ivar non_private: the documented non-private test mode (ε is infinite).
    :ivar version: the pyro_dp version that made the report.
    :ivar num_rows: the public row count: N, the data plate's size, under the substitute-one
        relation (neighbours share it); under add/remove-one the ``public_num_rows`` stated in its
        place (N itself is not public there); ``None`` when unknown.
    :ivar clips: ``(name, bound)`` of the kernel's per-row clip bounds at the end of the run
        (``llr_clip``, ``grad_clip``, ...): public settings, or released by the private tuning
        of its last chain (each chain of the default path tunes its own; a chain run in a worker
        process leaves its tuned clips there, and then only the settings given are reported).
    :ivar approximation: what the draws approximate where the run was the one-release mode (issue 62:
        ``kernel.one_release``, an approximation of the posterior, and why it ran), else ``""``.
    """

    kernel: str
    accountant: str
    relation: str
    delta: float
    epsilon: float
    num_releases: int
    num_chains: int
    mechanisms: Tuple[MechanismGroup, ...]
    chains: Tuple[ChainSummary, ...]
    curve_iterations: Tuple[int, ...]
    curve_epsilon: Tuple[float, ...]
    plan: Optional[PlanSummary] = None
    at_epsilon: Optional[float] = None
    delta_at_epsilon: Optional[float] = None
    within_budget: Optional[bool] = None
    non_private: bool = False
    version: str = ""
    num_rows: Optional[int] = None
    clips: Tuple[Tuple[str, float], ...] = ()
    approximation: str = ""

    # ------------------------------------------------------------------ reading
    def ledger(self) -> PrivacyLedger:
        """A ledger of the report's mechanisms (every label, aggregated) under its relation: a
        reader can recompute :attr:`epsilon` from a published report with
        ``pyro_dp.accounting.get_accountant(report.accountant, report.ledger()).get_epsilon(report.delta)``."""
        out = PrivacyLedger(self.relation)
        for group in self.mechanisms:
            for event, count in group.events:
                out.record(event, count, label=group.label)
        return out

    def __str__(self) -> str:
        return _paragraph(self)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        """Plain values only (str, int, float, bool, None, lists, dicts), for JSON; non-finite
        floats as the strings ``"inf"``/``"-inf"``/``"nan"``; events as ``{"type": ..., fields}``."""
        return {"format": FORMAT, **_encode(self)}

    def to_json(self, **kwargs) -> str:
        """:meth:`to_dict` as strict JSON (``json.dumps`` keyword arguments, e.g. ``indent=2``)."""
        return json.dumps(self.to_dict(), allow_nan=False, **kwargs)

    @classmethod
    def from_dict(cls, data: dict) -> "PrivacyReport":
        """The report of :meth:`to_dict` (``from_dict(r.to_dict()) == r``). Events are rebuilt
        from a fixed list of pyro_dp's event types; nothing else is evaluated."""
        if data.get("format") != FORMAT:
            raise ValueError(f"not a pyro_dp privacy report (format {data.get('format')!r}, expected {FORMAT!r})")
        data = {k: v for k, v in data.items() if k != "format"}
        return _decode(cls, data)

    @classmethod
    def from_json(cls, text: str) -> "PrivacyReport":
        """The report of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    # ------------------------------------------------------------------ plot
    def plot(self, ax=None):
        """ε at :attr:`delta` against the iterations of every chain (spent), the plan's curve
        (dashed) and the budget line (dotted; drawn when the budget's δ is the report's). Needs
        matplotlib (an optional dependency, imported here). Returns the axes."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as e:  # pragma: no cover - exercised only without matplotlib
            raise ImportError("PrivacyReport.plot needs matplotlib: pip install matplotlib") from e
        new = ax is None
        if new:
            _, ax = plt.subplots(figsize=(5.5, 3.5))
        chains = f"{self.num_chains} chain{'s' if self.num_chains != 1 else ''}"
        # steps drawn at the value reached by the end of each step: never below the curve between points
        if self.plan is not None:
            p = self.plan
            ax.plot(p.curve_iterations, p.curve_epsilon, drawstyle="steps-pre", lw=4, alpha=0.35, color="C1",
                    label=f"planned ({p.num_chains} chain{'s' if p.num_chains != 1 else ''})")
        ax.plot(self.curve_iterations, self.curve_epsilon, drawstyle="steps-pre", color="C0", label=f"spent ({chains})")
        if self.plan is not None and self.plan.delta == self.delta:
            ax.axhline(self.plan.epsilon, ls=":", color="k", label=f"budget ε = {self.plan.epsilon:g}")
        ax.set_xlabel("iterations of each chain (warmup included)")
        ax.set_ylabel(f"ε at δ = {self.delta:g}")
        ax.set_title(f"{self.kernel}: privacy spent ({self.accountant} accountant)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="lower right")
        if new:
            ax.figure.tight_layout()
        return ax


# ----------------------------------------------------------------------------- building


def _epsilon(accountant: str, ledger: PrivacyLedger, delta: float) -> float:
    return get_accountant(accountant, ledger).get_epsilon(delta) if ledger else 0.0


def _grid(last: int, points: int) -> Tuple[int, ...]:
    """About ``points`` iterations from 0 to ``last``, with 0, 1 (the first iteration, which
    also makes a chain's once-only releases: a private start, tuning) and ``last``."""
    if last <= 0:
        return (0,)
    return tuple(sorted({int(round(x)) for x in np.linspace(0, last, max(int(points), 2))} | {0, 1, last}))


def _prefix_counts(ledger: PrivacyLedger, positions) -> list:
    """``{event: count}`` (ledger order) of the first ``p`` releases, for each increasing ``p``."""
    out, counts, done = [], {}, 0
    entries, event, left = iter(ledger.entries), None, 0
    for p in positions:
        while done < p:
            if left == 0:
                event, left = next(entries)
            take = min(left, p - done)
            counts[event] = counts.get(event, 0) + take
            left, done = left - take, done + take
        out.append(dict(counts))
    return out


def _curve(chains, relation: str, accountant: str, delta: float, points: int, total: float):
    """``(iterations, ε)`` of the spent curve (module docstring); the last ε is ``total``."""
    last = max((getattr(led, "num_iterations", 0) for led in chains), default=0)
    grid = _grid(last, points)
    per_chain = []
    for led in chains:
        positions = led.release_positions(grid) if hasattr(led, "release_positions") else [led.num_releases] * len(grid)
        per_chain.append((positions, _prefix_counts(led, positions), led.num_releases))
    eps = []
    for i in range(len(grid)):
        if all(pos[i] == n for pos, _, n in per_chain):  # every chain complete: the total itself
            eps.append(total)
            continue
        merged = PrivacyLedger(relation)
        for _, snapshots, _ in per_chain:
            for event, count in snapshots[i].items():
                merged.record(event, count)
        eps.append(_epsilon(accountant, merged, delta))
    return grid, tuple(eps)


def _plan_summary(kernel: DPKernel, accountant: str, delta: float, last: int, points: int) -> Optional[PlanSummary]:
    plan = kernel.privacy.plan
    if plan is None or kernel.epsilon is None or not hasattr(plan, "per_iteration"):
        return None
    steps = int(plan.steps_allowed)

    def planned(t: int) -> float:
        if t == 0:  # nothing is released before the first iteration
            return 0.0
        # the plan releases nothing after its last iteration (the kernel stops reading data)
        return planned_epsilon(delta, min(t, steps), plan.per_iteration, fixed=plan.fixed, accountant=accountant,
                               num_chains=plan.num_chains, relation=plan.relation)

    grid = _grid(max(last, steps), points)
    return PlanSummary(
        epsilon=float(kernel.epsilon), delta=float(kernel.delta), num_chains=int(plan.num_chains),
        num_iterations=None if kernel.num_iterations is None else int(kernel.num_iterations),
        iterations_allowed=steps, planned_epsilon=planned(steps), default_budget=bool(kernel.default_budget),
        curve_iterations=grid, curve_epsilon=tuple(planned(t) for t in grid),
    )


#: the kernel attributes that hold per-row clip bounds (public settings or privately tuned releases)
CLIP_ATTRIBUTES = ("llr_clip", "grad_clip", "curvature_clip", "group_llr_clip")


def _clips(kernel) -> Tuple[Tuple[str, float], ...]:
    """``(name, bound)`` of the kernel's finite positive clip bounds (:data:`CLIP_ATTRIBUTES`)."""
    out = []
    for name in CLIP_ATTRIBUTES:
        v = kernel.__dict__.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out.append((name, float(v)))
    return tuple(out)


def _public_rows(kernel, relation: str) -> Optional[int]:
    """The row count the report may state: N under substitution (public: neighbours share it),
    the stated ``public_num_rows`` under add/remove (where N itself is not public), else ``None``."""
    if relation == "add_remove":
        m = getattr(kernel, "public_num_rows", None)
        return None if m is None else int(m)
    lik = getattr(kernel, "lik", None)
    n = getattr(lik, "num_rows", None) if lik is not None else None
    return None if n is None else int(n)


def privacy_report(run, *, delta: Optional[float] = None, epsilon: Optional[float] = None,
                   accountant: Optional[str] = None, curve_points: int = 50) -> PrivacyReport:
    r"""The privacy statement of a pyro_dp run: a frozen, serialisable :class:`PrivacyReport`.

    :param run: a :class:`pyro.infer.MCMC` run with a pyro_dp kernel, or the kernel
        (:class:`~pyro_dp.kernels.base.DPKernel`) itself. Either way the report covers every
        release of the kernel object: every chain of every ``mcmc.run``, chains run in worker
        processes included (as :func:`pyro_dp.get_epsilon`).
    :param float delta: δ of the reported ε (default: the kernel's ``reference_delta``, its
        budget's δ when it has one).
    :param float epsilon: also report the run's δ at this ε (:attr:`PrivacyReport.delta_at_epsilon`).
    :param str accountant: accountant name (default: the kernel's).
    :param int curve_points: iterations at which the ε curve is evaluated (about; one
        accountant evaluation each, 0.1 s for the numerical ``"dp_rdp"``, microseconds for
        ``"gdp"``).
    :raises ValueError: nothing released yet, or not a pyro_dp run.
    :raises RuntimeError: the ledger may miss releases of worker processes (as ``get_epsilon``).

    Read-only: it spends nothing and changes no ledger (it files chains that came back from
    worker processes with the kernel object, as ``get_epsilon`` does, idempotently). The total
    is :func:`pyro_dp.get_epsilon`'s value: the same accountant on the same ledger. For
    :class:`~pyro_dp.DPFastMH` that is the accountant's ε; the kernel's own
    :meth:`~pyro_dp.DPFastMH.get_epsilon` may report the smaller of it and the paper's
    compositions (:meth:`~pyro_dp.DPFastMH.privacy_report`).
    """
    if isinstance(run, DPKernel):
        kernel, per_run = run, ()
        kernel.privacy.require_complete()
        ledger = kernel.ledger
        if not ledger:
            raise ValueError("this kernel has released nothing yet: no privacy report")
    else:
        ledger = get_ledger(run)  # refuses a non-pyro_dp or incomplete run; files worker chains
        # pyro's MCMC keeps each chain's kernel.diagnostics() privately (pyro-ppl 1.9), as pyro_dp.arviz reads it
        per_chain = run._diagnostics  # architecture: private-read (pyro's MCMC, third-party)
        kernel, per_run = run.kernel, tuple(d for d in (per_chain or ()) if d is not None)
    delta = kernel.reference_delta if delta is None else float(delta)
    name = accountant or getattr(kernel, "accountant", None) or DEFAULT_ACCOUNTANT
    total = _epsilon(name, ledger, delta)  # pyro_dp.get_epsilon's computation
    chains = [led for led in kernel.privacy.chain_ledgers() if led]

    groups, order = {}, []
    for led in chains:
        for event, count, label in led.labelled_entries():
            if label not in groups:
                groups[label] = {}
                order.append(label)
            groups[label][event] = groups[label].get(event, 0) + count
    mechanisms = []
    for label in order:
        alone = PrivacyLedger(ledger.relation)
        for event, count in groups[label].items():
            alone.record(event, count)
        mechanisms.append(MechanismGroup(label=label, purpose=_purpose(label), releases=alone.num_releases,
                                         events=tuple(groups[label].items()), epsilon=_epsilon(name, alone, delta)))

    in_run = {}
    for i, d in enumerate(per_run):
        cid = getattr(d.get("privacy ledger"), "chain_id", None)
        if cid:
            in_run[cid] = (i, d)
    summaries = []
    for c, led in enumerate(chains):
        cid = getattr(led, "chain_id", "")
        i, d = in_run.get(cid, (None, None))
        if d is None and led is kernel.privacy.live:  # the chain in progress of this kernel
            d = {"private iterations": kernel.chain.iteration, "budget exhausted": kernel.privacy.stopped}
        summaries.append(ChainSummary(
            chain=c, chain_id=cid, iterations=int(getattr(led, "num_iterations", 0)), releases=led.num_releases,
            epsilon=_epsilon(name, led, delta), by_label=tuple(led.by_label().items()), run_chain=i,
            private_iterations=None if d is None else int(d["private iterations"]),
            budget_exhausted=None if d is None else bool(d["budget exhausted"]),
        ))

    grid, curve = _curve(chains, ledger.relation, name, delta, curve_points, total)
    plan = _plan_summary(kernel, name, delta, grid[-1], curve_points)
    at_eps = delta_at = None
    if epsilon is not None:
        at_eps = float(epsilon)
        delta_at = get_accountant(name, ledger).get_delta(at_eps)
    within = None
    if plan is not None and plan.delta == delta:
        within = bool(total <= plan.epsilon * (1 + 1e-9))
    return PrivacyReport(
        num_rows=_public_rows(kernel, ledger.relation), clips=_clips(kernel),
        kernel=type(kernel).__name__, accountant=str(name), relation=ledger.relation, delta=delta, epsilon=total,
        num_releases=ledger.num_releases, num_chains=len(chains), mechanisms=tuple(mechanisms),
        chains=tuple(summaries), curve_iterations=grid, curve_epsilon=curve, plan=plan, at_epsilon=at_eps,
        delta_at_epsilon=delta_at, within_budget=within, non_private=bool(getattr(kernel, "non_private", False)),
        version=__version__, approximation=_approximation(kernel),
    )


def _approximation(kernel) -> str:
    mode = getattr(kernel, "one_release", None)  # the one-release mode (pyro_dp.default_path.noise_aware)
    return "" if mode is None else f"one-release mode: {mode.approximation}" + (f" ({mode.reason})" if mode.reason else "")


# ----------------------------------------------------------------------------- text


def _up(x: float, digits: int = 3) -> str:
    """``x`` rounded **up** to ``digits`` significant digits (a published ε or δ is never
    rounded down)."""
    if not math.isfinite(x):
        return "∞" if x > 0 else str(x)
    if x == 0:
        return "0"
    e = math.floor(math.log10(abs(x))) - digits + 1
    y = math.ceil(x / 10.0**e - 1e-9) * 10.0**e
    if y < x:  # floating point: never below x
        y = math.ceil(x / 10.0**e) * 10.0**e
    return f"{y:.{digits}g}"


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}".replace(",", " ")


def _chain_iterations(c: ChainSummary) -> int:
    """A chain's iterations: its ledger's marks, or the private iterations its diagnostics count
    when those are more (a chain resumed from a checkpoint written without marks)."""
    return max(int(c.iterations), int(c.private_iterations or 0))


def _per_chain(r: PrivacyReport) -> str:
    """The sentence on each chain's own ε (at the report's δ)."""
    if r.num_chains == 1:
        return f"Its one chain alone spent all of it (ε = {_up(r.chains[0].epsilon)} at δ = {r.delta:g})."
    values = [_up(c.epsilon) for c in r.chains]
    if len(set(values)) == 1:
        return (f"Each of its {r.num_chains} chains alone spent ε = {values[0]} at δ = {r.delta:g}; the total "
                "composes them all.")
    shown = ", ".join(f"{v} (chain {c.chain})" for v, c in zip(values[:8], r.chains[:8]))
    more = f" and {r.num_chains - 8} more chains" if r.num_chains > 8 else ""
    return f"Each chain alone, at δ = {r.delta:g}, spent ε = {shown}{more}; the total composes them all."


def _number(x: float) -> str:
    return f"{x:.3g}"


def _rows_and_clips(r: PrivacyReport) -> str:
    """The sentences on N, the clip bounds and what the sampling releases' noise multipliers mean."""
    out = []
    if r.num_rows is not None:
        if r.relation == "add_remove":
            out.append(f"The sampling rates use M = {r.num_rows:,} rows, the public count stated in place of the "
                       "data's row count (which add/remove-one neighbours differ in).".replace(",", " "))
        else:
            out.append(f"The data have N = {r.num_rows:,} rows (public: neighbouring data sets share it)."
                       .replace(",", " "))
    if r.clips:
        bounds = ", ".join(f"{name} = {_number(v)}" for name, v in r.clips)
        out.append(f"Each row's contribution to a release is clipped (the clip bounds of the kernel's last chain, set "
                   f"by the user or released by its private tuning: {bounds}).")
    nms = sorted({float(e.noise_multiplier) for g in r.mechanisms if g.purpose == "sampling"
                  for e, _ in g.events if hasattr(e, "noise_multiplier")})
    if nms:
        shown = ", ".join(_number(v) for v in nms[:4]) + (", ..." if len(nms) > 4 else "")
        half = "twice the clip bound" if r.relation == "substitute" else "the clip bound"
        relation = r.relation.replace("_", "/")
        out.append(f"The sampling releases carry Gaussian noise with noise multiplier{'s' if len(nms) > 1 else ''} "
                   f"{shown}: a noise multiplier is the noise's standard deviation divided by the release's "
                   f"sensitivity, the most one row can change the released sum ({half} under the {relation}-one "
                   "relation).")
    return " ".join(out)


def _paragraph(r: PrivacyReport) -> str:
    if r.non_private:
        return (f"This run of {r.kernel} (pyro_dp {r.version}) used the non-private test mode: its "
                f"{_count(r.num_releases, 'release')} of the data carry no noise, and it is NOT differentially "
                "private (ε = ∞).")
    iters = sorted({_chain_iterations(c) for c in r.chains})
    each = " each" if r.num_chains > 1 else ""
    per_chain = (f"of {_count(iters[0], 'iteration')}{each}" if len(iters) == 1
                 else f"of {iters[0]:,} to {iters[-1]:,} iterations".replace(",", " "))
    parts = [f"{g.releases:,}".replace(",", " ") + f" for {_describe_label(g.label)}" for g in r.mechanisms]
    if len(parts) == 1:
        groups = f" for {_describe_label(r.mechanisms[0].label)}"
    else:
        groups = " — " + ", ".join(parts[:-1]) + " and " + parts[-1] + " —"
    acc = ACCOUNTANT_DESCRIPTIONS.get(r.accountant, f"the {r.accountant!r} accountant")
    rel = RELATION_DESCRIPTIONS.get(r.relation, f"the {r.relation!r} neighbouring relation")
    text = (
        f"Posterior samples were drawn with the differentially private MCMC kernel {r.kernel} (pyro_dp "
        f"{r.version}). Everything the sampler read from the data is {_count(r.num_releases, 'noisy release')}"
        f"{groups} over {_count(r.num_chains, 'chain')} {per_chain} (warmup included). Composed with the "
        f"{r.accountant} accountant ({acc}), the whole run satisfies (ε = {_up(r.epsilon)}, δ = {r.delta:g})-"
        f"differential privacy under the {rel}."
    )
    if r.at_epsilon is not None and r.delta_at_epsilon is not None:
        text += f" Equivalently, it is (ε = {r.at_epsilon:g}, δ = {_up(r.delta_at_epsilon)})-differentially private."
    text += " " + _per_chain(r)
    if r.approximation:
        text += f" The draws are an APPROXIMATION of the posterior, not exact samples: {r.approximation}."
    rows = _rows_and_clips(r)
    if rows:
        text += " " + rows
    if r.plan is not None:
        p = r.plan
        budget = f"The budget was (ε = {p.epsilon:g}, δ = {p.delta:g})"
        if p.default_budget:
            budget += " (pyro_dp's default)"
        budget += (f" for {_count(p.num_chains, 'chain')} of up to {p.iterations_allowed:,} iterations"
                   .replace(",", " "))
        if p.delta == r.delta and p.epsilon > 0:
            budget += f"; the run spent {100 * r.epsilon / p.epsilon:.1f} % of its ε"
        text += " " + budget + "."
    text += (" The posterior samples and the statistics reported from the run (acceptance rates, ε) are "
             "post-processing of these releases and cost no further privacy. Reported ε and δ are rounded up.")
    return text


# ----------------------------------------------------------------------------- (de)serialisation


def _num(x):
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def _event_to_dict(event: PrivacyEvent) -> dict:
    out = {"type": type(event).__name__}
    for f in dataclasses.fields(event):
        v = getattr(event, f.name)
        out[f.name] = [_num(x) for x in v] if isinstance(v, tuple) else _num(v)
    return out


def _event_from_dict(d: dict) -> PrivacyEvent:
    cls = _EVENT_TYPES.get(d.get("type"))
    if cls is None:
        raise ValueError(f"unknown privacy event type {d.get('type')!r}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        v = d[f.name]
        if isinstance(v, list):
            v = tuple(float(x) for x in v)
        elif isinstance(v, str) and v in ("inf", "-inf", "nan"):
            v = float(v)
        kwargs[f.name] = v
    return cls(**kwargs)


def _encode(obj):
    if isinstance(obj, PrivacyEvent):
        return _event_to_dict(obj)
    if dataclasses.is_dataclass(obj):
        return {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [_encode(x) for x in obj]
    return _num(obj)


def _float(v):
    return None if v is None else float(v)


def _decode(cls, data: dict):
    """Rebuild a report dataclass from :func:`_encode`'s output (field by field, by type)."""
    if cls is MechanismGroup:
        return MechanismGroup(label=data["label"], purpose=data["purpose"], releases=int(data["releases"]),
                              events=tuple((_event_from_dict(e), int(c)) for e, c in data["events"]),
                              epsilon=float(data["epsilon"]))
    if cls is ChainSummary:
        return ChainSummary(**{**data, "epsilon": float(data["epsilon"]),
                               "by_label": tuple((str(lab), int(c)) for lab, c in data["by_label"])})
    if cls is PlanSummary:
        return PlanSummary(**{**data, "epsilon": float(data["epsilon"]), "delta": float(data["delta"]),
                              "planned_epsilon": float(data["planned_epsilon"]),
                              "curve_iterations": tuple(int(t) for t in data["curve_iterations"]),
                              "curve_epsilon": tuple(float(e) for e in data["curve_epsilon"])})
    return PrivacyReport(**{
        **data,
        "delta": float(data["delta"]), "epsilon": float(data["epsilon"]),
        "mechanisms": tuple(_decode(MechanismGroup, g) for g in data["mechanisms"]),
        "chains": tuple(_decode(ChainSummary, c) for c in data["chains"]),
        "curve_iterations": tuple(int(t) for t in data["curve_iterations"]),
        "curve_epsilon": tuple(float(e) for e in data["curve_epsilon"]),
        "plan": None if data.get("plan") is None else _decode(PlanSummary, data["plan"]),
        "at_epsilon": _float(data.get("at_epsilon")), "delta_at_epsilon": _float(data.get("delta_at_epsilon")),
        "num_rows": None if data.get("num_rows") is None else int(data["num_rows"]),
        "clips": tuple((str(name), float(v)) for name, v in data.get("clips", ())),
    })
