#!/usr/bin/env bash
# On a GPU host (the device tool): the 24-view regression judged against the base on a
# real GPU. Three repositories whose PR 1 changes only the model's definition in the
# plan (scripts/device/against_base.py): a benign kernel swap on the Qwen3-MoE + LoRA
# adapter plan at --profile h200 (whole plan), a real change of what it computes
# (RMSNorm epsilon; the regression claim only), and GPT-2 with its dropout defaults
# (eager -> SDPA; the regression and its observer-off control). Each: `ledger qualify
# --pr 1` (first run, fresh ledger), then status in text and JSON. Writes the ledger
# and the outputs to $OUT/against-base/ (committed as evidence/, checked offline by
# tests/ledger/gpu_evidence/test_evidence_against_base.py).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
F=$OUT/against-base
rm -rf "$F" /tmp/ab /tmp/keys-ab && mkdir -p "$F"
export LEDGER_KEYS=/tmp/keys-ab LEDGER_CACHE=/tmp/cache-ab LEDGER_DB=$F/ledger.db
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$F/nvidia-smi.csv"
python3 -m ledger init > /dev/null
python3 -m ledger keys new runner --role runner > /dev/null
python3 -m scripts.device.against_base /tmp/ab > /dev/null
for CASE in ${AB_CASES:-qwen3-eager qwen3-eps gpt2-sdpa}; do
  R=/tmp/ab/$CASE
  ARGS=(--profile h200)
  [ "$CASE" = qwen3-eps ] && ARGS+=(--claim regression.24view-nograd)
  [ "$CASE" = gpt2-sdpa ] && ARGS=()
  T0=$(date +%s%N)
  RC=0
  timeout 420 python3 -m ledger qualify --pr 1 --offline --repo "$R" --device cuda --gpus all \
    "${ARGS[@]}" --json > "$F/$CASE-qualify.json" 2> "$F/$CASE-qualify.log" || RC=$?
  echo "{\"exit\": $RC, \"wall_ns\": $(( $(date +%s%N) - T0 ))}" > "$F/$CASE-qualify-wall.json"
  echo "$CASE: qualify exit $RC in $(( ($(date +%s%N) - T0) / 1000000 )) ms"
  ASK=()
  [ "$CASE" = qwen3-eps ] && ASK=(--claim regression.24view-nograd)
  python3 -m ledger status --pr 1 --offline --repo "$R" "${ASK[@]}" --json > "$F/$CASE-status.json" || true
  python3 -m ledger status --pr 1 --offline --repo "$R" "${ASK[@]}" > "$F/$CASE-status.txt" || true
  git -C "$R" rev-parse main "$(git -C "$R" rev-parse refs/pull/1/head)" > "$F/$CASE-commits.txt"
  tail -4 "$F/$CASE-status.txt"
done
python3 -m ledger audit > "$F/audit.txt" || true
tail -3 "$F/audit.txt"
