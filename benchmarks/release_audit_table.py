"""The table of docs/audit.md, "Per-release white-box audit": every release kind of every kernel
family audited by :func:`pyro_dp.release_audit.audit_releases` with neighbours at the clip
(the cases of ``tests/release_audit_cases.py``), printed as a Markdown table.

    python benchmarks/release_audit_table.py [CASE,CASE,...] [DRAWS]

(DRAWS per data set, default 200, for the fresh-kernel cases; ``replay:<case>`` for a case of
``REPLAY_CASES``, audited with ``draws="replay"`` and its own 1000 or 2000 draws; a case per
line group, with its time as an HTML comment.)
The audits draw fresh secret noise: the numbers change from run to run within their intervals.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.release_audit_cases import table  # noqa: E402

if __name__ == "__main__":
    table(sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else None,
          int(sys.argv[2]) if len(sys.argv) > 2 else 200)
