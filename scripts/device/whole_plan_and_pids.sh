#!/usr/bin/env bash
# Run on a GPU host (through the device tool): what the host offers a sandbox's process
# limit (cgroup_v2_probe), the process-limit tests on it, then the whole-plan benchmark
# (benchmarks/whole_plan.py: first and second run of each plan named by $PLANS).
# Writes into $OUT: nvidia-smi.csv, cgroup_probe.json, pids_tests.txt, whole_plan.log
# and the benchmark's own files as whole_plan.tgz. Needs .whl carried
# (scripts/fetch_device_wheels.sh) for the ledger's own packages.
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$OUT/nvidia-smi.csv"
python3 -m scripts.device.cgroup_v2_probe > "$OUT/cgroup_probe.json" 2>&1
timeout "${TESTS_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider \
  tests/ledger/sandbox/test_pids_hierarchies.py tests/ledger/sandbox/test_claim_pids.py \
  tests/ledger/sandbox/test_claim_pids_proof.py -rs > "$OUT/pids_tests.txt" 2>&1
echo "pids tests exit $?"
timeout "${BENCH_TIMEOUT:-400}" python3 -m benchmarks.whole_plan --plans "${PLANS:-example,frozen}" \
  --runs 2 --out "$OUT/whole_plan" > "$OUT/whole_plan.log" 2>&1
echo "whole plan exit $?"
# The device tool brings back a few files only: the benchmark's folder as one archive.
tar czf "$OUT/whole_plan.tgz" -C "$OUT" whole_plan && rm -rf "$OUT/whole_plan"
