"""The example MoE workload, from a module that starts a thread when imported (as a
library's background poller would): a fork server that imports it must refuse to fork."""

from __future__ import annotations

import threading
from typing import Any

from runners.workloads.moe import MoEConfig, MoEWorkload

threading.Thread(target=threading.Event().wait, name="poller", daemon=True).start()


def make_workload(**params: Any) -> MoEWorkload:
    return MoEWorkload(MoEConfig(**params))
