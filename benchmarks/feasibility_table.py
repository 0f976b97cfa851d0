"""The feasibility table of ``docs/choosing.md``: :func:`pyro_dp.feasibility` for the built-in
profiles (logistic d = 5, linear and Poisson d = 3) at N = 10³, 10⁴, 10⁵ and ε = 0.5, 2, 8
(1000 samples after 1000 warmup steps, one chain, δ = 10⁻⁵; DPPenalty as its default path runs
it, whitened, with its control variate, and with the plain test (``control_variate=False``); DPHMC
at its default 5 leapfrog steps; DPSGLD's default path, no accept test).
Data-free: prints a Markdown table.

    python benchmarks/feasibility_table.py
"""
import math
import warnings

from pyro_dp import feasibility

SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def sci(x):
    """``6.7·10⁴``-style (``10⁷`` when the mantissa rounds to 1), ``—`` for None."""
    if x is None:
        return "—"
    e = int(math.floor(math.log10(x)))
    m = round(x / 10 ** e, 1)
    if m >= 10:
        m, e = m / 10, e + 1
    power = "10" + str(e).translate(SUPERSCRIPT)
    return power if m == 1 else f"{m:g}·{power}"


def ess(x):
    return "<1" if x < 1 else (f"{x:.2g}" if x < 10 else f"{x:.0f}")


def main():
    print("| model | N | ε | move / sd | ESS, DPPenalty (noise-free) | ESS, plain test | ESS, DPHMC | ESS, DPSGLD "
          "| N needed at this ε | ε needed at this N |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, d in (("logistic", 5), ("linear", 3), ("poisson", 3)):
        for n in (1_000, 10_000, 100_000):
            for eps in (0.5, 2.0, 8.0):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    p = feasibility(model, num_rows=n, epsilon=eps, dim=d)
                    plain = feasibility(model, num_rows=n, epsilon=eps, dim=d, control_variate=False)
                    h = feasibility(model, num_rows=n, epsilon=eps, dim=d, kernel="DPHMC")
                    sg = feasibility(model, num_rows=n, epsilon=eps, dim=d, kernel="DPSGLD")
                need_eps = "—" if p.epsilon_needed is None else f"{float(f'{p.epsilon_needed:.2g}'):g}"
                print(f"| {model}, d = {d} | {sci(n)} | {eps:g} | {p.move_ratio:.2f} | {ess(p.ess)} "
                      f"({p.ess_ceiling:.0f}) | {ess(plain.ess)} | {ess(h.ess)} | {ess(sg.ess)} | {sci(p.rows_needed)} "
                      f"| {need_eps} |")


if __name__ == "__main__":
    main()
