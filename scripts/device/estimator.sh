#!/usr/bin/env bash
# Run on a GPU host (through the device tool): the built-in memory estimator's
# predicted-against-measured table (benchmarks/estimator_accuracy.py, --size gpu, bf16),
# then the Qwen3-MoE + LoRA adapter example (examples/qwen3_adapter, --profile h200)
# with its estimator line and file removed, qualifying admission and full-prefix
# backward on the built-in estimator. Writes into $OUT: estimator_accuracy.{json,md},
# bench.log, qualify.log, receipts.json, nvidia-smi.csv, and run.tgz (qualify.json,
# history.json and the calibration records the run kept, with their grid points).
# Needs .whl carried (scripts/fetch_device_wheels.sh) for the ledger's own packages.
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 LEDGER_CALIBRATION_DIR=/tmp/calibration
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$OUT/nvidia-smi.csv"
[ "${SKIP_BENCH:-0}" = 1 ] || timeout "${BENCH_TIMEOUT:-330}" python3 -m benchmarks.estimator_accuracy \
  --device cuda --size gpu --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench exit $?"
R=/tmp/qwen3-builtin
rm -rf "$R" && cp -r examples/qwen3_adapter "$R" && rm -f "$R/mem.py"
# No estimator: the built-in one, fit up to 1/8 of the h200 profile's largest step
# (4 x 2048 tokens) and validated at it.
sed -i 's/^estimator = "mem:estimate"$/calibration = { max_tokens = 1024, validate_tokens = 8192 }/' \
  "$R/qualification.toml"
grep -n "estimator\|calibration" "$R/qualification.toml"
git -C "$R" init -q && git -C "$R" add -A
git -C "$R" -c user.name=Example -c user.email=example@example.invalid commit -q -m plan
git -C "$R" remote add origin https://example.invalid/qwen3-builtin.git
export LEDGER_DB=/tmp/builtin.db LEDGER_KEYS=/tmp/keys-builtin
python3 -m ledger init > /dev/null
python3 -m ledger keys new gpu-builtin --role runner > /dev/null
timeout "${QUALIFY_TIMEOUT:-200}" python3 -m ledger qualify --rev HEAD --repo "$R" --profile h200 \
  --device cuda --sandbox none --key gpu-builtin \
  --claim admission.no-oom-after-admit --claim backward.full-prefix \
  --json > "$OUT/qualify.json" 2> "$OUT/qualify.log"
echo "qualify exit $?"
python3 -m ledger history --rev HEAD --repo "$R" --json > "$OUT/history.json"
python3 - "$OUT" <<'PY'
import json, subprocess, sys
out = sys.argv[1]
doc = json.load(open(f"{out}/history.json"))
shown = []
for e in doc["entries"]:
    got = subprocess.run(
        ["python3", "-m", "ledger", "show", e["id"], "--json"], capture_output=True, text=True
    )
    shown.append(json.loads(got.stdout)["statement"]["predicate"])
json.dump(shown, open(f"{out}/receipts.json", "w"), indent=1)
for p in shown:
    print(p["claim"], p["outcome"], p.get("reason"))
PY
tail -5 "$OUT/qualify.log"
# The device tool brings back a few files only: the rest as one archive.
mkdir -p "$OUT/run" && mv "$OUT/qualify.json" "$OUT/history.json" "$OUT/run/"
cp -r /tmp/calibration "$OUT/run/calibration" 2>/dev/null
tar czf "$OUT/run.tgz" -C "$OUT" run && rm -rf "$OUT/run"
