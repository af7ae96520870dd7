#!/usr/bin/env bash
# Qualify a pull request on this runner through a `ledger serve`, and exit by the
# verdict: 0 qualified, 1 not qualified by the code, 2 usage or input, 3 not
# qualified only because of infrastructure (a CI retries on 3 alone).
#
#   qualify-pr.sh --pr N --base BRANCH --server URL [--key NAME] [--attempts N]
#                 [--check FILE] [--post-check] [-- QUALIFY_OPTION ...]
#
# The repository is the current directory (a checkout with its remote); the runner
# token is $LEDGER_TOKEN and the key folder $LEDGER_KEYS, as for `ledger` itself.
# After qualify: `ledger push` sends what the outbox holds (its count is said; it
# never changes the exit status), and `ledger status --format github-check` writes
# the check-run document to --check, kept only when it is a non-empty JSON object.
# --post-check posts that document with `gh api` (GH_TOKEN, GITHUB_REPOSITORY); no
# document, no post. Under GitHub Actions the outputs go to $GITHUB_OUTPUT (verdict,
# exit-code, check, kept) and the check's summary to $GITHUB_STEP_SUMMARY.
set -uo pipefail

usage() {
  echo "usage: qualify-pr.sh --pr N --base BRANCH --server URL [--key NAME] [--attempts N]" \
    "[--check FILE] [--post-check] [-- QUALIFY_OPTION ...]" >&2
  exit 2
}

pr="" base="" server="" key="runner" attempts=1 check="" post=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --pr | --base | --server | --key | --attempts | --check)
      [ "$#" -ge 2 ] || usage
      case "$1" in
        --pr) pr=$2 ;;
        --base) base=$2 ;;
        --server) server=$2 ;;
        --key) key=$2 ;;
        --attempts) attempts=$2 ;;
        --check) check=$2 ;;
      esac
      shift 2
      ;;
    --post-check) post=1 && shift ;;
    --)
      shift
      break
      ;;
    *)
      echo "qualify-pr.sh: unknown option $1" >&2
      usage
      ;;
  esac
done
# A base left out would let the remote's default branch govern: never guessed here.
for name in pr base server; do
  if [ -z "${!name}" ]; then
    echo "qualify-pr.sh: --$name is required" >&2
    usage
  fi
done
case "$attempts" in
  '' | *[!0-9]* | 0)
    echo "qualify-pr.sh: --attempts takes a count of 1 or more" >&2
    usage
    ;;
esac
if [ -z "$check" ]; then
  check="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/ledger-check-pr$pr.json"
fi

# qualify again only while it says infrastructure alone failed it (exit 3): a retry
# on 1 would run the code until a flaky claim passes once.
attempt=1
while :; do
  status=0
  ledger qualify --pr "$pr" --base "$base" --server "$server" --key "$key" "$@" || status=$?
  if [ "$status" -ne 3 ] || [ "$attempt" -ge "$attempts" ]; then
    break
  fi
  echo "qualify-pr.sh: attempt $attempt of $attempts: not qualified only because of" \
    "infrastructure (exit 3); again" >&2
  attempt=$((attempt + 1))
done

# What the outbox holds, sent now where the server takes it. The verdict stays
# qualify's: receipts left behind are said, and `ledger push` on this host sends them.
push_json=$(ledger push --server "$server" --json) || true
read -r sent kept < <(printf '%s' "$push_json" | python3 -c 'import json, sys
try:
    d = json.load(sys.stdin)
    print(d["sent"], d["kept"])
except Exception:
    print("- ")')
if [ -n "$kept" ]; then
  echo "qualify-pr.sh: ledger push: sent $sent, kept $kept in this host's outbox" >&2
else
  echo "qualify-pr.sh: ledger push: no answer from $server; what the outbox holds stays" >&2
fi

# The check document: written only when `ledger status` produced one (a JSON object
# with fields); an unreachable server leaves none, and nothing empty is ever posted.
tmp=$(mktemp)
ledger status --pr "$pr" --base "$base" --server "$server" --format github-check >"$tmp" || true
if python3 -c 'import json, sys
doc = json.load(open(sys.argv[1]))
sys.exit(0 if isinstance(doc, dict) and doc else 1)' "$tmp" 2>/dev/null; then
  mv "$tmp" "$check"
else
  rm -f "$tmp"
  echo "qualify-pr.sh: no check document (ledger status gave none)" >&2
  check=""
fi

# Posting is a report of the verdict: whatever becomes of it, the exit status stays.
if [ -n "$check" ] && [ "$post" -eq 1 ]; then
  if [ -z "${GITHUB_REPOSITORY:-}" ]; then
    echo "qualify-pr.sh: --post-check needs GITHUB_REPOSITORY (owner/name): not posted" >&2
  elif ! gh api "repos/$GITHUB_REPOSITORY/check-runs" --input "$check" >/dev/null; then
    echo "qualify-pr.sh: the check run was not posted" >&2
  fi
fi

case "$status" in
  0) verdict=qualified ;;
  1) verdict=not-qualified ;;
  3) verdict=infrastructure ;;
  *) verdict=usage-or-input ;;
esac
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  {
    echo "verdict=$verdict"
    echo "exit-code=$status"
    echo "check=$check"
    echo "kept=$kept"
  } >>"$GITHUB_OUTPUT"
fi
if [ -n "$check" ] && [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["output"]["summary"])' "$check" >>"$GITHUB_STEP_SUMMARY" || true
fi
echo "qualify-pr.sh: $verdict (exit $status)" >&2
exit "$status"
