#!/usr/bin/env bash
# The main job end to end on the embedded default (SQLite; CUDA when a GPU is
# present, else CPU): set up, make an example repository with a pull request,
# qualify the PR, review a receipt, export it and verify it offline, audit.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x .venv/bin/ledger ]; then
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  # torch first, from pip's configured index: on PyPI, Linux x86_64 wheels are the
  # CUDA build (+cu130, about 3 GB), which also runs on CPU; a local wheel folder
  # (pip's find-links) may hold the CPU build instead. For the CPU build (about
  # 200 MB) name PyTorch's CPU index: TORCH_INDEX=https://download.pytorch.org/whl/cpu
  TORCH_FROM=(${TORCH_INDEX:+--index-url "$TORCH_INDEX"})
  .venv/bin/python -m pip install -q "${TORCH_FROM[@]}" "torch==2.13.0" ||
    .venv/bin/python -m pip install -q "${TORCH_FROM[@]}" "torch>=2.4,<2.15"
  # `sandbox`: a static bwrap, for machines without Debian's bubblewrap (the pull
  # request's code runs sandboxed; qualify refuses rather than run it unsandboxed).
  .venv/bin/python -m pip install -q -e '.[runners,postgres,sandbox]'
fi
# shellcheck disable=SC1091
. .venv/bin/activate

DEMO=${DEMO:-$PWD/.ledger-demo}
rm -rf "$DEMO"
mkdir -p "$DEMO"
export LEDGER_DB="$DEMO/ledger.db" LEDGER_KEYS="$DEMO/keys"

step() { printf '\n== %s\n' "$*"; }

step "example repository with PR 1 (fetched from its remote on demand)"
python -m scripts.example_repo "$DEMO/repo"

step "ledger init; runner and reviewer keys"
ledger init
ledger keys new runner --role runner
ledger keys new reviewer --role reviewer

step "ledger qualify --pr 1"
set +e
ledger qualify --pr 1 --repo "$DEMO/repo" --json > "$DEMO/qualify.json"
qualified=$?
set -e
python - "$DEMO/qualify.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc["receipts"]:
    print(f"{r['id'][:19]}  {r['claim']:<32} {r['outcome']}")
PY
# Every receipt says how its sandbox proved itself before the pull request's code ran
# (docs/security.md, "The self-test"): none may lack it.
for id in $(python -c "import json,sys; print(' '.join(r['id'] for r in json.load(open(sys.argv[1]))['receipts']))" "$DEMO/qualify.json"); do
  ledger show "$id" --json | python -c '
import json, sys
env = json.load(sys.stdin)["statement"]["predicate"]["runner"]["environment"]
said = env.get("sandbox_selftest", "")
assert said.startswith("bwrap, self-test ") and " refused, " in said, f"no self-test: {said!r}"
uid = env.get("sandbox_host_uid")
print(f"{sys.argv[1][:19]}  sandbox: {said} (host uid {uid})")
' "$id"
done

step "ledger status --pr 1"
ledger status --pr 1 --repo "$DEMO/repo" || true

first=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['receipts'][0]['id'])" "$DEMO/qualify.json")
step "review, export and offline verification of ${first:0:19}"
ledger review "$first" --concur --note "numbers checked against the snapshot" --key reviewer
ledger export "$first" -o "$DEMO/receipt.bundle.json"
LEDGER_DB=/nonexistent ledger verify "$DEMO/receipt.bundle.json" --trust "$LEDGER_KEYS/ledger.pem"

step "ledger audit"
ledger audit
exit $qualified
