"""``python -m runners.rank REQUEST.json RESULT.json``: one rank of a claim (`serve`)."""

from __future__ import annotations

import sys

from runners.harness import child
from runners.rank.serve import serve

if __name__ == "__main__":
    sys.exit(child.serve(serve))
