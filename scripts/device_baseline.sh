#!/usr/bin/env bash
# On a GPU host (the device tool): whose failure it is, on real GPUs. Two example
# repositories (scripts/baseline_repos.py) whose PR 1 fails admission; for each,
# `ledger qualify --pr 1` twice (the first judges the base on the same GPU, the
# second reuses that receipt), then status in text and JSON. Writes the ledger and
# the outputs to $OUT/gpu-baseline/ (committed as evidence/h100-baseline/, checked offline
# by tests/ledger/gpu_evidence/test_evidence_baseline.py).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
F=$OUT/gpu-baseline
rm -rf "$F" /tmp/bl /tmp/keys-bl && mkdir -p "$F"
export LEDGER_KEYS=/tmp/keys-bl LEDGER_CACHE=/tmp/cache-bl LEDGER_DB=$F/ledger.db
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$F/nvidia-smi.csv"
python3 -m ledger init > /dev/null
python3 -m ledger keys new runner --role runner > /dev/null
python3 scripts/baseline_repos.py /tmp/bl > /dev/null
for CASE in introduced base-too; do
  R=/tmp/bl/$CASE
  for RUN in 1 2; do
    T0=$(date +%s%N)
    RC=0
    timeout 200 python3 -m ledger qualify --pr 1 --offline --repo "$R" --device cuda --gpus all \
      --claim admission.no-oom-after-admit --json > "$F/$CASE-qualify-$RUN.json" \
      2> "$F/$CASE-qualify-$RUN.log" || RC=$?
    echo "{\"exit\": $RC, \"wall_ns\": $(( $(date +%s%N) - T0 ))}" > "$F/$CASE-qualify-$RUN-wall.json"
    grep -E "baseline|whole plan" "$F/$CASE-qualify-$RUN.log" || true
  done
  python3 -m ledger status --pr 1 --offline --repo "$R" --json > "$F/$CASE-status.json" || true
  python3 -m ledger status --pr 1 --offline --repo "$R" > "$F/$CASE-status.txt" || true
  git -C "$R" rev-parse main refs/pull/1/head > "$F/$CASE-commits.txt"
done
python3 -m ledger audit > "$F/audit.txt" || true
tail -3 "$F/audit.txt"
