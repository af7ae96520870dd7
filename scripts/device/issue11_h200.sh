#!/usr/bin/env bash
# Issue 11 evidence on one H200, from the repository root, in under 9 minutes:
# cold/warm estimates (admission rows), estimator attribution (`ledger profile
# --device cuda`), the bf16 noise floor of gradient-compare, per-claim overhead
# (fresh interpreter vs fork server) and the observer-off harness step overhead.
# Signs the receipts there; writes under $OUT, one folder per evidence/ entry:
#   h200-issue11-moe/     reference MoE (bf16) qualified on the example repository
#   h200-issue11-qwen3/   Qwen3-MoE + PEFT LoRA example, --profile h200 (skipped
#                         when transformers/peft are not installed there)
#   h200-issue11-figures/ profile_*.json, qualify_overhead_*.json, step_overhead.json
# Private keys stay in /tmp on the host. Needs the ledger's wheels in ./.whl
# (scripts/fetch_device_wheels.sh, run where pip reaches an index).
#   usage: bash scripts/device/issue11_h200.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
left() { echo $(( 520 - ($(date +%s) - T0) )); }
say() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -c 'import ledger.cli, runners.api' || { echo "ledger/runners do not import"; exit 2; }
OUT=${OUT:-/tmp/out}
FIG=$OUT/h200-issue11-figures
mkdir -p "$FIG"
L() { python3 -m ledger "$@"; }
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv > "$FIG/nvidia-smi.csv"
python3 - > "$FIG/environment.json" <<'PY'
import json, importlib.metadata as m, torch, sys
def v(d):
    try: return m.version(d)
    except m.PackageNotFoundError: return None
print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__,
  "cuda": torch.version.cuda, "transformers": v("transformers"), "peft": v("peft")}, indent=2))
PY
QWEN=1
python3 -c 'import transformers, peft, transformers.models.qwen3_moe' 2>/dev/null || QWEN=0
say "transformers+peft available: $QWEN"

MOE_PARAMS='vocab = 32000
d_model = 1024
n_layers = 4
n_heads = 16
n_experts = 16
top_k = 2
d_ff = 2048
lora_rank = 16
dtype = "bfloat16"'

# One signed run: ledger, keys, qualify, bundles, status, audit, calibrate.
qualify_run() {  # NAME REPO LIMIT_S REV PLAN-ARGS QUALIFY-ARGS...
  local name=$1 repo=$2 limit=$3 rev=$4 plan=$5; shift 5
  local E=$OUT/$name
  rm -rf "$E" "/tmp/keys-$name" && mkdir -p "$E/bundles"
  export LEDGER_DB=$E/ledger.db LEDGER_KEYS=/tmp/keys-$name
  L init > /dev/null && L keys new h200 --role runner > /dev/null || { echo "no keys"; return; }
  say "$name: qualify (limit ${limit}s)"
  timeout "$limit" python3 -m ledger qualify --repo "$repo" --rev "$rev" $plan --device cuda \
    --key h200 "$@" \
    --json > "$E/qualify.json" 2> "$E/qualify.log"
  echo "qualify exit $?" >> "$E/qualify.log"
  tail -3 "$E/qualify.log"
  python3 - "$E" <<'PY'
import json, subprocess, sys
from ledger.store.store import Store, resolve_url
e = sys.argv[1]
try:
    doc = json.load(open(f"{e}/qualify.json"))
except ValueError:
    # qualify was stopped by its time limit: every finished claim is already a
    # receipt in the ledger (recorded one by one); list those instead.
    rows = []
    for entry in Store.open(resolve_url(f"{e}/ledger.db")).entries(kinds=["receipt"]):
        p = entry.receipt.predicate
        rows.append({"id": entry.entry_id, "claim": p.claim, "outcome": p.outcome})
    doc = {"receipts": rows, "status": None, "note": "qualify stopped by its time limit"}
    json.dump(doc, open(f"{e}/qualify.json", "w"), indent=2)
for r in doc["receipts"]:
    subprocess.run([sys.executable, "-m", "ledger", "export", r["id"], "-o",
                    f"{e}/bundles/{r['id'][7:19]}.json"], check=True)
PY
  L keys export ledger > "$E/ledger.pub.pem"
  L keys export h200 > "$E/runner.pub.pem"
  L status --repo "$repo" --rev "$rev" $plan > "$E/status.txt" 2>&1 || true
  L audit > "$E/audit.txt" 2>&1 || true
  L calibrate --claim admission.no-oom-after-admit --repo "$repo" --rev "$rev" \
    --json > "$E/calibrate.json" 2>> "$E/qualify.log" || true
}

# 1. Reference MoE, bf16, on the example repository: cold/warm admission rows,
#    the bf16 gradient noise floor (base twice against the candidate), 24-view.
python3 -m scripts.example_repo /tmp/ex > "$FIG/example_repo.txt"
cat > /tmp/moe-plan.toml <<TOML
workload = "model.workload:make_workload"
[workload_params]
$MOE_PARAMS
[[claims]]
name = "admission.no-oom-after-admit"
check = "admission"
params = { batches = [1, 4], seqs = [512, 2048], warm_runs = 1 }
[[claims]]
name = "numerics.gradient-compare"
check = "gradient-compare"
params = { batch = 2, seq = 256 }
[[claims]]
name = "regression.24view-nograd"
check = "regression-24view"
params = { views = 24, seq = 512 }
TOML
qualify_run h200-issue11-moe /tmp/ex 140 main "--plan /tmp/moe-plan.toml"

# 2. The Qwen3-MoE LoRA example, as its own repository, with the plan's h200 profile.
if [ "$QWEN" = 1 ]; then
  rm -rf /tmp/qwen3 && cp -r examples/qwen3_moe /tmp/qwen3
  git -C /tmp/qwen3 init -q && git -C /tmp/qwen3 add -A
  git -C /tmp/qwen3 -c user.name=Example -c user.email=example@example.invalid \
    commit -q -m "Qwen3-MoE LoRA workload"
  git -C /tmp/qwen3 remote add origin https://example.invalid/qwen3-moe-lora.git
  qualify_run h200-issue11-qwen3 /tmp/qwen3 $(( $(left) > 350 ? 170 : $(left) - 180 )) \
    HEAD "" --profile h200 --claim admission.no-oom-after-admit \
    --claim numerics.gradient-compare --claim regression.24view-nograd
fi

# 3. Estimator attribution on CUDA, cold and warm.
P=(--param vocab=32000 --param d_model=1024 --param n_layers=4 --param n_heads=16
   --param n_experts=16 --param d_ff=2048 --param lora_rank=16 --param dtype=bfloat16)
for w in "" --warm; do
  tag=${w:+warm}; tag=${tag:-cold}
  say "profile moe $tag"
  timeout 30 python3 -m ledger profile --workload model.workload:make_workload --repo /tmp/ex \
    --shape 4x2048 --phase forward_backward --device cuda "${P[@]}" $w --depth 3 --json \
    > "$FIG/profile_moe_$tag.json" 2> "$FIG/profile_moe_$tag.log"
  if [ "$QWEN" = 1 ] && [ "$tag" = warm ]; then
    say "profile qwen3 $tag"
    timeout 45 python3 -m ledger profile --workload qwen3_lora.workload:make_workload \
      --repo /tmp/qwen3 --shape 4x1024 --phase forward_backward --device cuda $w --depth 6 \
      --param vocab=32768 --param hidden=1024 --param layers=8 --param heads=16 \
      --param kv_heads=4 --param head_dim=64 --param experts=32 --param top_k=4 \
      --param moe_ff=512 --param lora_rank=16 --param dtype=bfloat16 --param attention=sdpa \
      --json > "$FIG/profile_qwen3_$tag.json" 2> "$FIG/profile_qwen3_$tag.log"
  fi
done

# 4. Per-claim overhead, fresh interpreters vs the fork server, in one run each.
say "qualify overhead (moe)"
timeout 120 python3 benchmarks/qualify_overhead.py --workload moe --device cuda --claims 3 --json \
  > "$FIG/qualify_overhead_moe.json" 2> "$FIG/qualify_overhead_moe.log"
if [ "$QWEN" = 1 ] && [ "$(left)" -gt 120 ]; then
  say "qualify overhead (qwen3)"
  timeout 75 python3 benchmarks/qualify_overhead.py --workload qwen3 --device cuda --claims 2 \
    --json > "$FIG/qualify_overhead_qwen3.json" 2> "$FIG/qualify_overhead_qwen3.log"
fi

# 5. The harness's step overhead with the observer off (forward+backward 8x1024, bf16).
say "step overhead"
timeout $(( $(left) > 45 ? 45 : $(left) > 20 ? $(left) : 20 )) \
  python3 -m scripts.device.overhead --out "$FIG/step_overhead.json" --device cuda \
  --size medium > "$FIG/step_overhead.log" 2>&1
python3 - "$FIG" <<'PY'
import json, sys, pathlib
f = pathlib.Path(sys.argv[1])
def load(n):
    p = f / n
    try: return json.loads(p.read_text())
    except (OSError, ValueError): return None
o, qm, qq = load("step_overhead.json"), load("qualify_overhead_moe.json"), load("qualify_overhead_qwen3.json")
if o: print(f"step overhead (observer off): median {o['bare_median_ns']} -> {o['harness_median_ns']} ns, total {o['overhead_ppm'] / 1e4:+.2f} %")
for name, q in (("moe", qm), ("qwen3", qq)):
    if q: print(f"per-claim overhead {name}: {q['before_median_overhead_s']:.2f} s -> {q['after_median_overhead_s']:.2f} s (walls {q['before_median_wall_s']:.2f} -> {q['after_median_wall_s']:.2f} s)")
PY
say "done"
