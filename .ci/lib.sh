# Steps of .ci/run, as functions a test can call with stub commands on PATH.

# The reviewer's pages are tested in Debian's headless chromium with its
# driver: install both when either is missing. With CI=true the browser tests
# fail (never skip) when they cannot run.
install_browser() {
  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get: install chromium and chromedriver, or the browser tests will fail"
    return 0
  fi
  apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null; } \
    || echo "chromium and chromium-driver could not be installed: the browser tests will fail"
}

# The pull request's code runs inside bubblewrap (docs/security.md) and
# `--sandbox auto` refuses without it: install Debian's package when missing.
install_bubblewrap() {
  if command -v bwrap >/dev/null 2>&1; then
    return 0
  fi
  if command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q bubblewrap >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null; } \
      || true
  fi
  command -v bwrap >/dev/null 2>&1 || echo "bubblewrap could not be installed: qualify tests will fail"
}

# GPU hosts run Python with jemalloc preloaded (its background purger thread beside
# the fork server's own): the fork server's test of that needs Debian's libjemalloc2.
install_jemalloc() {
  if ldconfig -p 2>/dev/null | grep -q libjemalloc.so.2; then
    return 0
  fi
  if command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q libjemalloc2 >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libjemalloc2 >/dev/null; } \
      || true
  fi
  ldconfig -p 2>/dev/null | grep -q libjemalloc.so.2 \
    || echo "libjemalloc2 could not be installed: its fork server test is skipped"
}

# tests/ledger/transparency/test_second_witness.py runs the ledger against a second
# implementation of the C2SP specs (aics-witness, aics-tlog; pinned as in pyproject's
# test extra). They need Python >= 3.12 and the project's venv is 3.11, so they get
# a venv of their own, made afresh from the first Python 3.12 or newer found.
install_second_c2sp() {
  local venv=${C2SP_VENV:-.c2sp-venv} py="" cand
  for cand in python3.13 python3.12 "$(pyenv root 2>/dev/null)"/versions/3.1[2-9]*/bin/python3; do
    if "$cand" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
      py=$cand
      break
    fi
  done
  if [ -z "$py" ]; then
    echo "no Python 3.12 or newer: the second-implementation tests will fail"
    return 0
  fi
  rm -rf "$venv"
  { "$py" -m venv "$venv" && "$venv/bin/python" -m pip install -q aics-witness==0.1.0 aics-tlog==0.2.1; } \
    || echo "aics-witness could not be installed: the second-implementation tests will fail"
}

# LEDGER_TEST_PG_URL, when set, names the test database and is used as it is;
# otherwise the local server's ledger_test database is made ready and named.
prepare_postgres() {
  if [ -n "${LEDGER_TEST_PG_URL:-}" ]; then
    echo "using LEDGER_TEST_PG_URL as given"
    return 0
  fi
  PGHOST=${PGHOST:-127.0.0.1}
  if ! psql -h "$PGHOST" -U postgres -tAc "select 1" >/dev/null 2>&1; then
    # Services are started before sessions; restart PostgreSQL if it stopped.
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
    sleep 2
  fi
  if [ "$(psql -h "$PGHOST" -U postgres -tAc "select 1 from pg_database where datname='ledger_test'")" != "1" ]; then
    psql -h "$PGHOST" -U postgres -c "CREATE DATABASE ledger_test"
  fi
  LEDGER_TEST_PG_URL="postgresql+psycopg://postgres@${PGHOST}:5432/ledger_test"
}
