#!/usr/bin/env bash
# The GPU check (#17, "the same path on CUDA"): run on a machine with CUDA, from the repository
# root. It runs the device tests (tests/test_device.py: every kernel's golden case with the data
# on the GPU, eager and compiled), the demo on the GPU, and the compiled-path benchmark on the
# GPU (ratios against baselines measured in the same run). Logs go to $OUT (default: ./device_out).
#
#   bash benchmarks/device_check.sh            # everything
#   STEPS="tests demo" bash benchmarks/device_check.sh
#
# Each step has its own time limit so that one slow step cannot starve the others.
set -u -o pipefail
OUT=${OUT:-device_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
STEPS=${STEPS:-"tests demo bench"}
python3 - <<'EOF' 2>&1 | tee "$OUT/env.log"
import torch, pyro, opacus
print("torch", torch.__version__, "pyro", pyro.__version__, "opacus", opacus.__version__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
EOF
status=0
for step in $STEPS; do
  echo "=== $step"
  case $step in
    tests) timeout "${TESTS_S:-200}" python3 -m pytest tests/test_device.py -q -p no:cacheprovider \
             -o addopts="--strict-markers" -n "${WORKERS:-8}" -rs 2>&1 | tee "$OUT/tests.log" | tail -60 ;;
    demo)  timeout "${DEMO_S:-180}" python3 -m pyro_dp demo --device cuda 2>&1 | tee "$OUT/demo.log" | tail -25 ;;
    bench) timeout "${BENCH_S:-200}" python3 benchmarks/compiled.py --quick --device cuda 2>&1 | tee "$OUT/bench.log" ;;
    *) echo "unknown step $step"; false ;;
  esac
  rc=$?; echo "=== $step rc=$rc"; [ $rc -eq 0 ] || status=$rc
done
exit $status
