"""The demo and the command line (quick settings; the README's full demo is the same code)."""
import subprocess
import sys

import pytest

from pyro_dp.cli import main
from pyro_dp.demo import run_demo


def test_demo_quick_end_to_end():
    lines = []
    res = run_demo(n=3000, epsilon=4.0, num_samples=200, warmup_steps=100, reference=False, out=lines.append)
    assert res["epsilon"] <= 4.0 + 1e-9
    text = "\n".join(lines)
    assert "privacy spent: epsilon" in text and "w[2]" in text
    assert res["privacy_report"].epsilon == res["epsilon"]  # the demo ends with the statement to publish
    assert "differential privacy under the substitute-one" in " ".join(text.split())


def test_cli_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert "pyro_dp" in capsys.readouterr().out
    assert main([]) == 2
    with pytest.raises(SystemExit):
        main(["demo", "--n", "0"])


def test_experiment_subcommand_points_to_the_checkout_command(capsys):
    """Issue #63: the paper reproductions left the installed package; ``pyro-dp experiment`` names
    their command (``python3 -m experiments NAME`` from a checkout) and fails, importing nothing."""
    assert main(["experiment", "fig62", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "python3 -m experiments NAME" in err and "checkout" in err


def test_python_dash_m_runs():
    out = subprocess.run(
        [sys.executable, "-m", "pyro_dp", "demo", "--n", "500", "--num-samples", "20", "--warmup-steps", "10", "--no-reference"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "privacy spent" in out.stdout
