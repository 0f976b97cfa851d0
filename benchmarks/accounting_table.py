"""Print the table of ``docs/accounting.md``: ε of pyro_dp's default accountant against
Opacus and ``dp_accounting`` on the same mechanisms.

For every event type a kernel records, on a few settings, the script computes ε(δ) of

* **pyro_dp**: the accountant the kernel that records such events uses by default (read from
  the kernel object, so the table shows what users get);
* **Opacus** ``RDPAccountant`` (improved RDP conversion) and ``PRVAccountant`` (its upper
  bound, ``eps_error=0.01``), for Poisson-subsampled Gaussians under add/remove (a
  non-subsampled Gaussian is ``sample_rate=1``); for RDP curves Opacus's
  ``privacy_analysis.get_privacy_spent`` on the same curve;
* ``dp_accounting`` ``RdpAccountant`` (``compute_epsilon`` for RDP curves) and
  ``PLDAccountant`` (``value_discretization_interval=1e-4``, its default; pessimistic);
  for (ε, δ) releases the PLD of ``from_privacy_parameters`` self-composed.

"n/a" marks a library without an analysis of that mechanism (under that relation). Every
number is an upper bound on the true ε. Noise multipliers are pyro_dp's (relative to the
ledger's sensitivity); for ``dp_accounting`` under ``REPLACE_ONE`` they are doubled (its
Gaussian is stated for the add/remove sensitivity), as in :mod:`pyro_dp.accounting.adapters`.

    python benchmarks/accounting_table.py        # ~1 min on one core
"""
import time
import warnings

import numpy as np
import torch

from pyro_dp.kernels import default_accountants

NA = None


def _ledger(relation, *entries):
    from pyro_dp.mechanisms import PrivacyLedger

    led = PrivacyLedger(relation)
    for e, c in entries:
        led.record(e, c)
    return led


def _opacus(history, delta):
    """Opacus's RDP and PRV accountants on ``[(noise_multiplier, sample_rate, steps), ...]``."""
    from opacus.accountants import PRVAccountant, RDPAccountant

    out = []
    for cls in (RDPAccountant, PRVAccountant):
        acc = cls()
        acc.history = list(history)  # what ``step`` builds, one entry per run of identical steps
        out.append(acc.get_epsilon(delta))
    return out


def _dpa(event, delta, relation="add_remove", rdp=True):
    """dp_accounting's RdpAccountant and PLDAccountant on a DpEvent."""
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    rel = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE if relation == "add_remove" else dpa.NeighboringRelation.REPLACE_ONE
    out = []
    if rdp:
        r = rdp_privacy_accountant.RdpAccountant(neighboring_relation=rel)
        r.compose(event)
        out.append(r.get_epsilon(delta))
    else:
        out.append(NA)
    p = pld_privacy_accountant.PLDAccountant(rel, value_discretization_interval=1e-4)
    if p.supports(event):
        p.compose(event)
        out.append(p.get_epsilon(delta))
    else:
        out.append(NA)
    return out


def rows():
    """``(mechanism, setting, delta, accountant, pyro_dp, opacus_rdp, opacus_prv, dpa_rdp, dpa_pld)``."""
    import dp_accounting as dpa
    from dp_accounting.pld import common, privacy_loss_distribution
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
    from opacus.accountants.analysis.rdp import get_privacy_spent

    from pyro_dp.accounting import dp_barker_rdp, get_accountant
    from pyro_dp.mechanisms import (
        ApproxDPEvent,
        GaussianEvent,
        RDPCurveEvent,
        SubsampledGaussianEvent,
    )

    acct = default_accountants()  # pyro_dp.kernels.default_accountants

    def ours(kind, ledger, delta):
        return acct[kind], get_accountant(acct[kind], ledger).get_epsilon(delta)

    # Gaussian mechanism, no subsampling: (noise multiplier, releases) runs
    for runs, delta in (([(1.0, 1)], 1e-5), ([(10.0, 100)], 1e-5), ([(30.0, 1000)], 1e-6),
                        ([(60.0, 1000), (80.0, 11000)], 1e-5)):
        led = _ledger("substitute", *[(GaussianEvent(nm), k) for nm, k in runs])
        name, eps = ours("gaussian", led, delta)
        o = _opacus([(nm, 1.0, k) for nm, k in runs], delta)
        ev = dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(nm), k) for nm, k in runs])
        label = " + ".join(f"{k} x nm={nm:g}" for nm, k in runs)
        yield ("Gaussian", label, delta, name, eps, *o, *_dpa(ev, delta))

    # Poisson-subsampled Gaussian, add/remove (DP-SGLD's default relation)
    for q, nm, k, delta in ((0.01, 1.0, 300, 1e-5), (0.01, 1.0, 1000, 1e-5), (0.1, 2.0, 100, 1e-5),
                            (0.001, 0.8, 10_000, 1e-6)):
        led = _ledger("add_remove", (SubsampledGaussianEvent(q, nm), k))
        name, eps = ours("poisson/add_remove", led, delta)
        ev = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(nm)), k)
        yield ("Poisson-subsampled Gaussian, add/remove", f"q={q:g}, nm={nm:g}, T={k}", delta, name, eps,
               *_opacus([(nm, q, k)], delta), *_dpa(ev, delta))

    # Poisson-subsampled Gaussian, substitution (DPMinibatchPenalty, DP-SGLD relation="substitute")
    for q, nm, k, delta in ((0.01, 1.0, 1000, 1e-5), (0.1, 2.0, 100, 1e-5), (0.05, 0.7, 200, 1e-6)):
        led = _ledger("substitute", (SubsampledGaussianEvent(q, nm), k))
        name, eps = ours("poisson/substitute", led, delta)
        ev = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(2 * nm)), k)
        yield ("Poisson-subsampled Gaussian, substitute", f"q={q:g}, nm={nm:g}, T={k}", delta, name, eps,
               NA, NA, *_dpa(ev, delta, "substitute", rdp=False))

    # Gaussian on a batch drawn without replacement, substitution (DPMinibatchPenalty's thesis scheme)
    for n, b, nm, k, delta in ((10_000, 100, 1.0, 1000, 1e-5), (1000, 100, 2.0, 100, 1e-5)):
        led = _ledger("substitute", (SubsampledGaussianEvent(b / n, nm, "without_replacement"), k))
        name, eps = ours("without_replacement", led, delta)
        ev = dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, b, dpa.GaussianDpEvent(nm)), k)
        yield ("Subsampled Gaussian, without replacement, substitute", f"b/N={b}/{n}, nm={nm:g}, T={k}", delta,
               name, eps, NA, NA, *_dpa(ev, delta, "substitute"))

    # DP Barker's RDP curve (Heikkilä et al. 2019 Thm 2 + Cor 2): the same curve in each library
    for b, n, k, delta in ((1000, 10**6, 1000, 1e-6), (1000, 10**6, 20_000, 1e-6), (200, 10_000, 400, 1e-5)):
        orders, curve = dp_barker_rdp(b, n)
        led = _ledger("substitute", (RDPCurveEvent(tuple(map(float, orders)), tuple(curve.tolist())), k))
        name, eps = ours("rdp_curve", led, delta)
        o = float(get_privacy_spent(orders=list(orders), rdp=k * curve, delta=delta)[0])
        d = float(compute_epsilon(orders, k * curve, delta)[0])
        yield ("DP Barker RDP curve", f"b={b}, N={n:g}, T={k}", delta, name, eps, o, NA, d, NA)

    # (eps0, delta0)-DP releases (DP-Fast MH's per-step statement)
    for e0, d0, k, delta in ((0.1, 1e-8, 1000, 1e-4), (0.5, 1e-9, 150, 1e-5), (0.05, 1e-10, 500, 1e-6)):
        led = _ledger("substitute", (ApproxDPEvent(e0, d0), k))
        name, eps = ours("approx_dp", led, delta)
        pld = privacy_loss_distribution.from_privacy_parameters(common.DifferentialPrivacyParameters(e0, d0), 1e-4)
        yield ("(ε, δ)-DP releases", f"({e0:g}, {d0:g}) x {k}", delta, name, eps, NA, NA, NA,
               pld.self_compose(k).get_epsilon_for_delta(delta))


def _fmt(x):
    return "n/a" if x is None else f"{x:.4f}"


def main():
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    head = ("| mechanism | setting | δ | pyro_dp default | pyro_dp ε | Opacus RDP | Opacus PRV "
            "| dp_accounting RDP | dp_accounting PLD | pyro_dp / best peer |")
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    with warnings.catch_warnings(), np.errstate(divide="ignore"):
        warnings.simplefilter("ignore")  # Opacus: "optimal order is the largest alpha" etc.
        table = list(rows())
    for mech, setting, delta, name, eps, *peers in table:
        best = min(p for p in peers if p is not None and np.isfinite(p))
        print(f"| {mech} | {setting} | {delta:g} | `{name}` | {_fmt(eps)} | "
              + " | ".join(_fmt(p) for p in peers) + f" | {eps / best:.4f} |", flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
