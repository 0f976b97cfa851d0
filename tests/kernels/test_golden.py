"""#15 acceptance 1: every kernel gives the same chain and the same ledger for a fixed seed
before and after the refactor (golden runs recorded by ``golden_cases.py`` before it)."""
import json

import pytest

from .golden_cases import GOLDEN, cases, run

RECORDED = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_same_chain_and_ledger_as_recorded(name):
    chain, ledger = run(*cases()[name])
    assert ledger == RECORDED[name]["ledger"]
    assert chain == RECORDED[name]["chain"]  # exact: same arithmetic, same random streams
