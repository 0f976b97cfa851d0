"""Issue 62: the default path's one-release mode (``pyro_dp/default_path/inference.py``,
``OneReleaseMode`` in ``pyro_dp/default_path/noise_aware.py``)."""
import json

import pytest

from tests.kernels import golden_noise_aware as golden

GOLDEN = json.loads(golden.GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(golden.cases()))
def test_dpnoiseaware_same_chains_ledger_and_warnings_as_recorded(name):
    """DPNoiseAware as a kernel holding the part: the chains, labelled ledger and warnings of
    ``golden_noise_aware.record`` (recorded before the refactor), bit for bit."""
    chains, ledger, warned = golden.run(*golden.cases()[name])
    rec = GOLDEN[name]
    assert chains == rec["chains"]
    assert ledger == rec["ledger"]
    assert warned == rec["warnings"]
