"""The claim tables of docs/results.md are what the shipped CSVs give (benchmarks/claims.py, issue #41).

About a second: the CSVs are read with the csv module, no torch.
"""
import doctest
import math
import random

import pytest

from tests.benchmark_scripts import load_benchmark

claims = load_benchmark("claims")


def test_results_page_tables_match_the_shipped_csvs():
    assert claims.check() == []


def test_an_edited_table_is_caught(tmp_path):
    """Mutant: one z changed on the page must fail the check."""
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    table = claims.table("fig65")
    assert "**+3.3**" in table
    md = tmp_path / "results.md"
    md.write_text(text.replace(table, table.replace("**+3.3**", "**+3.4**", 1)), encoding="utf-8")
    assert claims.check(md) == ["fig65"]


def test_paired_t_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(0)
    a = {str(i): rng.gauss(0, 1) for i in range(20)}
    b = {k: v + 0.3 + rng.gauss(0, 0.5) for k, v in a.items()}
    t = claims.paired_from_values(a, b)
    ref = stats.ttest_rel([b[k] for k in sorted(a, key=int)], [a[k] for k in sorted(a, key=int)])
    assert t.n == 20
    assert math.isclose(t.z, ref.statistic, rel_tol=1e-12)
    assert math.isclose(t.p, ref.pvalue, rel_tol=1e-9)


def _shared_effect(seed=1, n=20):
    """Repeats that share a large effect (the same data and seed): only pairing sees the small shift."""
    rng = random.Random(seed)
    common = [rng.gauss(0, 1) for _ in range(n)]
    a = {str(i): c for i, c in enumerate(common)}
    b = {str(i): c + 0.1 + rng.gauss(0, 0.05) for i, c in enumerate(common)}
    return a, b


def test_pairing_is_by_repeat():
    """Mutant: pairing repeat i of A with repeat i+1 of B (a shifted key) loses the detection."""
    a, b = _shared_effect()
    assert claims.paired_from_values(a, b).p < 1e-6
    shifted = {str((int(k) + 1) % 20): v for k, v in b.items()}
    assert claims.paired_from_values(a, shifted).p > 0.05


def test_verdict_words_follow_the_test():
    P = claims.Paired
    yes, no, rev = P(20, 1, 0.4, 2.5, 0.02), P(20, 1, 0.5, 2.0, 0.06), P(20, -1, 0.4, -2.5, 0.02)
    assert claims.verdict((1, 2), (yes, yes)) == "supported"
    assert claims.verdict((1, 2), (yes, no)) == "supported at ε = 1 only"
    assert claims.verdict((1, 2), (no, no)) == "not detected"
    assert claims.verdict((1, 2), (yes, rev)) == "supported at ε = 1; reversed at ε = 2"
    assert claims.verdict((1, 2), (no, no), equality=True) == "no difference detected"
    assert claims.verdict((1, 2), (no, rev), equality=True) == "differ at ε = 2"
    # z = 2.0 at 20 repeats is p = 0.06: not a detection, whatever "two standard errors" suggests
    assert claims.t_two_sided_p(2.0, 19) > 0.05
    small = P(2, 1, 0.1, 10.0, 0.06)
    assert claims.verdict((1,), (small,)).endswith("(2 repeats: descriptive only)")


def test_sign_test():
    assert claims.sign_test([1.0] * 6) == (6, 6, 0.03125)
    assert claims.sign_test([-1.0] * 8)[2] == pytest.approx(2 / 256)
    k, m, p = claims.sign_test([1.0, -1.0, 0.0, 1.0])
    assert (k, m) == (2, 3) and p == 1.0


def test_issue_41_numbers():
    """The cells issue #41 quotes: DP-HMC against OCU+GWMH on the correlated Gaussian (unpaired
    z 1.9, 2.1, 1.2 there; paired here), and plain DP penalty against DP-HMC on the flat 2-d banana."""
    rows = claims.load("fig65")
    z = [claims.paired(rows, problem="correlated-gauss", a="dp_hmc", b="dp_penalty_ocu_gwmh", metric="mmd",
                       level=e).z for e in (4.0, 5.0, 6.0)]
    assert [round(x, 1) for x in z] == [2.3, 2.2, 1.3]
    rows = claims.load("fig64")
    t = [claims.paired(rows, problem="flat-banana-2d", a="dp_penalty", b="dp_hmc", metric="mmd", level=e)
         for e in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)]
    assert all(x.p >= 0.05 for x in t)


def test_doctests():
    assert doctest.testmod(claims).failed == 0


def test_welch_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(3)
    a = [rng.gauss(0, 1) for _ in range(5)]
    b = [rng.gauss(0.5, 0.1) for _ in range(7)]
    t = claims.welch(a, b)
    ref = stats.ttest_ind(b, a, equal_var=False)
    assert math.isclose(t.z, ref.statistic, rel_tol=1e-12)
    assert abs(t.p - ref.pvalue) < 0.03  # integer degrees of freedom here, fractional in scipy


def test_a_prose_z_that_is_not_in_its_tables_is_caught(tmp_path):
    """Mutant (issue #60): a z quoted in a section's prose, changed, must fail the check."""
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    quote = "Barker's: 0.050 ± 0.009 against 0.12 ± 0.02, z = −3.6"
    assert quote in text
    md = tmp_path / "results.md"
    md.write_text(text.replace(quote, quote.replace("−3.6", "−3.9")), encoding="utf-8")
    bad = claims.check(md)
    assert len(bad) == 1 and bad[0].startswith("prose: Heikkilä et al. 2019, Figs. 2–3") and "−3.9" in bad[0]


def test_replicated_verdict_needs_both_seed_sets():
    P = claims.Paired
    hit, miss, rev = P(10, 1, .3, 3.0, .01), P(10, .1, .3, .4, .7), P(10, -1, .3, -3.0, .01)
    # detected in both sets, same direction: the verdict word stands
    assert claims.replicated_verdict((2,), (hit,), {2.0: hit}).startswith("supported (replicated at ε = 2")
    # detected in the first set only, or in opposite directions: not detected
    assert claims.replicated_verdict((2,), (hit,), {2.0: miss}).startswith("not detected")
    assert claims.replicated_verdict((2,), (hit,), {2.0: rev}).startswith("not detected")
    # no second set at that level: not detected, the first set's words kept after "alone"
    v = claims.replicated_verdict((2, 4), (miss, hit), {2.0: miss})
    assert v.startswith("not detected") and v.endswith("seeds 0–9 alone: supported at ε = 4 only")
    assert claims.replicated_verdict((2,), (hit,), {2.0: miss}, equality=True).startswith("no difference detected")


def test_the_replication_seeds_are_new_seeds():
    """The second set is repeats 10–19 of the same grid (run_chain seeds by repeat): no repeat
    index, hence no seed, of the shipped set is reused."""
    first = {r["repeat"] for r in claims.load("dphmc_fig1")}
    second = {r["repeat"] for r in claims.load("dphmc_fig1_replication")}
    assert first == {str(i) for i in range(10)} and second and not (first & second)


def test_an_edited_value_cell_or_prose_mean_is_caught(tmp_path):
    """Mutants (issue #60): one cell of the hand-written Fig. 6.4 MMD table, and one mean ± s.e.
    quoted in the Heikkilä prose, changed, must each fail the check."""
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    md = tmp_path / "results.md"
    cell = "| flat-banana-2d | 2 | 0.33 ± 0.04 [201]"
    assert cell in text
    md.write_text(text.replace(cell, cell.replace("0.33", "0.34")), encoding="utf-8")
    assert [b for b in claims.check(md) if b.startswith("value table: Thesis Figs 6.4")] == claims.check(md)
    quote = "variance error 0.51 ± 0.12 for the authors' update"
    assert quote in text
    md.write_text(text.replace(quote, quote.replace("0.51", "0.48")), encoding="utf-8")
    assert claims.check(md) == ["prose: Heikkilä et al. 2019, Figs. 2–3: DP Barker vs DP-SGLD on the: 0.48 ± 0.12"]


def test_edited_zhang_zhang_value_cells_are_caught():
    """Mutants (issue #60): a Fig. 3 accuracy, a Fig. 3 rows-read count and a Fig. 1 sym. KL,
    each changed on the page, are each reported against the CSVs."""
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    assert claims.fig3_value_table_problems(text) == [] and claims.fig1_value_table_problems(text) == []
    for old, new, where in (("| 0.588 ± 0.048 | 0.614 ± 0.046 |", "| 0.588 ± 0.048 | 0.615 ± 0.046 |",
                             "dp_penalty, accuracy at ε = 0.05"),
                            ("12214, 12214, 12214, 7602 |", "12214, 12214, 12214, 7603 |", "rows read at ε = 0.5"),
                            ("| | 0.05 | 0.76 / 0.99 |", "| | 0.05 | 0.77 / 0.99 |", "dp_penalty, ε = 0.05"),
                            ("| 0.75 | – | (0.05, 10⁻⁵) | 8.4 |", "| 0.75 | – | (0.05, 10⁻⁵) | 8.5 |",
                             "dp_penalty, ε = 0.05: total ε: 8.5"),
                            ("| 83.6 | 0.82 | 0.70 /", "| 83.6 | 0.83 | 0.70 /", "dp_fast_mh_pff_k60, ε = 0.05: acc.")):
        assert old in text
        bad = claims.fig3_value_table_problems(text.replace(old, new)) + claims.fig1_value_table_problems(
            text.replace(old, new))
        assert len(bad) == 1 and where in bad[0]


def _mutated_check(tmp_path, old, new):
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    md = tmp_path / "results.md"
    md.write_text(text.replace(old, new), encoding="utf-8")
    return claims.check(md)


def test_every_number_on_the_page_is_sorted_and_the_exempt_rules_are_the_table():
    """Issue #60: every number outside the generated tables is checked, exempt by a rule of
    PROSE_EXEMPT (the one table of exemptions) or on the untraced list, and the page's numbers are
    all seen (none silently skipped: the count is the page's)."""
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    nums = claims.prose_numbers(text, claims.all_tables())
    rules = {name for name, _, _ in claims.PROSE_EXEMPT}
    kinds = {p.kind for p in nums}
    assert {k.split(": ", 1)[1] for k in kinds if k.startswith("exempt")} <= rules
    assert {k.split(":")[0] for k in kinds} == {"checked", "exempt", "untraced"}
    assert claims.prose_quote_problems(text) == []
    by_line = {(p.line, p.number) for p in nums}
    at = text[:text.index("65 cell-hours**")].count("\n") + 1
    assert (at, "65") in by_line and any(p.line == at and p.kind.startswith("checked: a sentence") for p in nums)


def test_an_edited_prose_number_is_caught(tmp_path):
    """Mutants (issue #60): a single prose number quoting a recomputed table (Heikkilä's DP-SGLD ε
    under substitution), one in a sentence computed from a CSV (DP-HMC's iterations per chain;
    the cell-hours at the top), and an untraced one (a timing of the Performance section), each
    changed, must each fail the check."""
    quote = "Then DP-SGLD has spent ε 0.49 (t = 5·10⁵)"
    bad = _mutated_check(tmp_path, quote, quote.replace("0.49", "0.59"))
    assert any(b.startswith("prose number: Heikkilä") and "0.59 (untraced, not listed)" in b for b in bad)
    assert any(b.startswith("prose quote: Heikkilä") for b in bad)  # the sentence is computed too
    bad = _mutated_check(tmp_path, "banana DP-HMC 27 / 94 /", "banana DP-HMC 27 / 95 /")
    assert bad[0].startswith("prose quote: DP-HMC paper") and "27 / 94" in bad[0]
    bad = _mutated_check(tmp_path, "the DP-HMC paper's Fig. 1 5.5,", "the DP-HMC paper's Fig. 1 5.6,")
    assert bad[0].startswith("prose quote: (top of the page)")
    quote = "- **Met.** DPPenalty 0.54 ms per iteration"
    assert claims.RESULTS_MD.read_text(encoding="utf-8").count(quote) == 1
    bad = _mutated_check(tmp_path, quote, quote.replace("0.54", "0.45"))
    assert sorted(b.rsplit(": ", 1)[1] for b in bad) == ["0.45 (untraced, not listed)", "0.54 (listed, gone)"]


def test_an_edited_na_cell_is_caught(tmp_path):
    """Mutant (issue #60): the iteration count of an "n/a" cell of the Fig. 6.4 MMD table."""
    row = "| flat-banana-2d | 2 | 0.33 ± 0.04 [201] | 0.25 ± 0.03 [201] | 0.42 ± 0.06 [119] | 0.69 ± 0.04 [573] | n/a (4 it.)"
    bad = _mutated_check(tmp_path, row, row.replace("n/a (4 it.)", "n/a (5 it.)"))
    assert len(bad) == 1 and bad[0].startswith("value table: Thesis Figs 6.4") and "n/a (5 it.) ≠ 4" in bad[0]


def test_an_edited_panel_c_cell_is_caught():
    """Mutant (issue #60): a rows-read count of Zhang & Zhang Fig. 3(c)'s K table (subset)."""
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    assert claims.fig3_k_value_table_problems(text) == []
    old = "(K = 67) 0.588 ± 0.040; 687; 0.5"
    assert text.count(old) == 1
    bad = claims.fig3_k_value_table_problems(text.replace(old, old.replace("687", "688")))
    assert len(bad) == 1 and "K = 67, ε = 0.5" in bad[0]


def test_an_edited_superseded_cell_is_caught():
    """Mutant (issue #60): a clipped share in the superseded n = 10⁴ table of Fig. 6.4."""
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    assert claims.n1e4_table_problems(text) == []
    old = "| tempered-banana-2d | 3 | **0.47 ± 0.05** (1 %)"
    assert text.count(old) == 1
    bad = claims.n1e4_table_problems(text.replace(old, old.replace("(1 %)", "(3 %)")))
    assert len(bad) == 1 and "tempered-banana-2d, ε = 3, dp_penalty" in bad[0]
    row = "| 2 | 0.206 | 3.0 % | 0.097 | 6.4 % |"
    assert claims.fig63_n1e4_problems(text) == [] and text.count(row) == 1
    assert len(claims.fig63_n1e4_problems(text.replace(row, row.replace("6.4 %", "6.5 %")))) == 1


def test_every_epsilon_table_states_its_relation(tmp_path):
    """Acceptance 2 of issue #60, with mutants: a section whose tables print ε without a stated
    neighbouring relation, a table header that mixes add/remove and substitution without saying
    so, and the Heikkilä Fig. 3 verdict's one-relation sentence removed, each fail the check."""
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    assert claims.relation_problems(text, claims.all_tables()) == []
    stmt = "**Relation: substitution for every kernel** (issue #60)"
    bad = _mutated_check(tmp_path, stmt, "Every kernel (issue #60)")
    assert any(b.startswith("relation: Thesis Figs 6.4") and "no neighbouring relation" in b for b in bad)
    bad = _mutated_check(tmp_path, "**This figure mixes two relations, as the paper's Fig. 3 does**",
                         "**As the paper's Fig. 3 does**")
    assert any(b.startswith("relation: Heikkilä et al. 2019, Figs") and "two relations" in b for b in bad)
    bad = _mutated_check(tmp_path, "All ε below are under **substitution**", "All ε below are as run")
    assert any(b.startswith("relation: Heikkilä") and "missing" in b for b in bad)


def test_an_edited_computed_clipping_sentence_is_caught(tmp_path):
    """Mutants (issue #60): a clipped share of Fig. 6.4's prose and one of Fig. 6.3's, each
    computed from its CSV, changed on the page."""
    bad = _mutated_check(tmp_path, "91 % (flat 10-d; 90.5–90.6 % per ε)", "91 % (flat 10-d; 90.5–90.8 % per ε)")
    assert any(b.startswith("prose quote: Thesis Figs 6.4") and "90.5–90.6" in b for b in bad)
    bad = _mutated_check(tmp_path, "where 22 % are clipped", "where 23 % are clipped")
    assert any(b.startswith("prose quote: Thesis Fig. 6.3") for b in bad)


def test_an_edited_zhang_zhang_fig1_sentence_is_caught(tmp_path):
    """Mutant (issue #60): DP Barker's sym. KL at ε = 0.5 in Fig. 1's prose (4.4464 in the CSV,
    printed 4.5 before this check rounded it from the CSV instead of from the table's 4.45)."""
    bad = _mutated_check(tmp_path, "(ε = 0.2) and 4.4 / 3.0 (ε = 0.5)", "(ε = 0.2) and 4.5 / 3.0 (ε = 0.5)")
    assert any(b.startswith("prose quote: Zhang & Zhang 2023, Fig. 1") and "4.4 / 3.0" in b for b in bad)


def test_an_edited_fig65_clipping_sentence_is_caught(tmp_path):
    """Mutant (issue #60): the range of the chains above 10 % in Fig. 6.7's prose (the page said
    12–13 %, the largest chain per kernel; the chains above 10 % span 10.3–12.7 %)."""
    bad = _mutated_check(tmp_path, "per kernel and problem pass 10 % (10.3–12.7 %)", "per kernel and problem pass 10 % (12–13 %)")
    assert any(b.startswith("prose quote: Thesis Figs 6.5") for b in bad)


def test_code_settings_are_checked_against_the_code(tmp_path, monkeypatch):
    """Issue #60: a setting exempt as a "code setting" must be printed as CODE_SETTINGS says and
    its snippets must be in the code. Mutants: the narrow banana's clip bound edited on the page,
    and a snippet the code does not hold."""
    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    assert claims.code_setting_problems(text) == []
    bad = _mutated_check(tmp_path, "clip bounds (5.5 and 8.5)", "clip bounds (5.5 and 9.5)")
    assert any(b.startswith("code setting: Thesis Figs 6.4") and "not on the page" in b for b in bad)
    prefix, phrase, path, _ = claims.CODE_SETTINGS[0]
    monkeypatch.setattr(claims, "CODE_SETTINGS", ((prefix, phrase, path, ("var[0], var[1] = 21.0, 2.5",)),))
    bad = claims.code_setting_problems(text)
    assert len(bad) == 1 and "lacks" in bad[0]


def test_the_heikkila_verdict_under_one_relation_is_computed(tmp_path):
    """Acceptance 2 of issue #60: the ε that the Heikkilä Fig. 3 verdict compares under substitution
    (DP-SGLD by PLD, and the issue's RDP estimate, against DP Barker's 0.82) come from the relations
    CSV; mutants: each edited on the page."""
    for old, new in (("spent 1.04–1.88 (1.3–2.3× Barker's", "spent 1.04–1.88 (1.3–2.0× Barker's"),
                     ("Barker's; 3.3–5.1, 4–6×", "Barker's; 2.5–5.1, 3–6×")):
        bad = _mutated_check(tmp_path, old, new)
        assert any(b.startswith("prose quote: Heikkilä et al. 2019, Figs") for b in bad), bad


def test_any_computed_or_code_checked_number_edited_fails_the_check(tmp_path):
    """Mutants (issue #60), a deterministic sample: a number of a sentence computed from the CSVs
    (PROSE_QUOTES) or of a setting checked against the code (CODE_SETTINGS), its last digit
    changed on the page, makes ``--check`` fail."""
    import re

    text = claims.RESULTS_MD.read_text(encoding="utf-8")
    lines = text.split("\n")
    nums = claims.prose_numbers(text, claims.all_tables())
    pool = [p for p in nums if p.kind in ("checked: a sentence computed from the CSVs", "exempt: code setting")
            and re.fullmatch(r"\d+(?:\.\d+)?", p.number)
            and len(re.findall(r"(?<![\d.])" + re.escape(p.number) + r"(?![\d.])", lines[p.line - 1])) == 1]
    assert len(pool) > 100
    rng = random.Random(60)
    md = tmp_path / "results.md"
    for p in rng.sample(pool, 6):
        new = p.number[:-1] + str((int(p.number[-1]) + 1) % 10)
        line = re.sub(r"(?<![\d.])" + re.escape(p.number) + r"(?![\d.])", new, lines[p.line - 1])
        md.write_text("\n".join(lines[:p.line - 1] + [line] + lines[p.line:]), encoding="utf-8")
        assert claims.check(md), (p, new)
