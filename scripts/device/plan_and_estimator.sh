#!/usr/bin/env bash
# Run on a GPU host (through the device tool), in one call: the example plan qualified
# whole (benchmarks/whole_plan.py), first run, under the code at $BEFORE (a revision,
# checked out beside) and under this tree, on the same card; then the Qwen3-MoE + LoRA
# adapter example on the built-in estimator (scripts/device/estimator.sh, its table
# skipped). Writes into $OUT: nvidia-smi.csv, whole_plan.log, wp.tgz and what
# estimator.sh writes (in est/). Needs .whl carried (scripts/fetch_device_wheels.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$OUT/nvidia-smi.csv"
git worktree add -q --detach /tmp/before "${BEFORE:?a revision}" || exit 1
timeout "${PLAN_TIMEOUT:-330}" python3 -m benchmarks.whole_plan --plans example \
  --runs "${RUNS:-1}" --baseline /tmp/before --timeout 160 --out "$OUT/wp" \
  > "$OUT/whole_plan.log" 2>&1
echo "whole plan exit $?"
head -4 "$OUT/whole_plan.log"
tar czf "$OUT/wp.tgz" -C "$OUT" wp && rm -rf "$OUT/wp"
mkdir -p "$OUT/est"
OUT="$OUT/est" SKIP_BENCH=1 QUALIFY_TIMEOUT="${QUALIFY_TIMEOUT:-220}" \
  bash scripts/device/estimator.sh
