"""Ledger: signed, append-only qualification receipts for GPU training code.

The core (models, signing, store, log, queries, CLI) imports without torch;
only `ledger qualify` and the `runners` package load it.

The modules that moved from this level into the packages named for their
concepts (docs/architecture.md) still import under their old names for a
deprecation period: `_MOVED` names each one's package, and a finder at the
front of `sys.meta_path` hands back the very module object it moved to
(`sys.modules[old] is sys.modules[new]`), with one DeprecationWarning per
name. Nothing is imported for it until an old name is asked for.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not `typing`'s: `import ledger` imports nothing it did not before
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType

__version__ = "0.1.0"

__all__ = ["__version__"]

# `ledger.<name>` (old) -> `ledger.<package>.<name>` (where it lives now), by package.
_MOVED: dict[str, str] = {
    **dict.fromkeys(
        (
            "canonical",
            "dsse",
            "entry",
            "errors",
            "keys",
            "kinds",
            "limits",
            "models",
            "schemas",
            "shape",
            "statement",
        ),
        "evidence",
    ),
    **dict.fromkeys(
        (
            "environment",
            "environment_identity",
            "interpreter",
            "repoid",
            "revision",
            "source",
        ),
        "identity",
    ),
    **dict.fromkeys(("client", "outbox"), "remote"),
    **dict.fromkeys(
        ("artifacts", "attest", "ingest", "record", "run", "service_local", "supersede"),
        "write",
    ),
    **dict.fromkeys(
        (
            "calibration",
            "formats",
            "humanize",
            "inert",
            "query",
            "render",
            "render_verification",
            "standard",
        ),
        "read",
    ),
    "qualify": "execution",
    "files": "cli",
}


def _moved_to(fullname: str) -> str | None:
    """The module `ledger.<name>` moved to, or None for any other name."""
    parent, _, name = fullname.rpartition(".")
    package = _MOVED.get(name) if parent == __name__ else None
    return f"{__name__}.{package}.{name}" if package else None


def _outside_the_import_system() -> int:
    """The `stacklevel` that names the frame whose import asked for an old name.

    `warnings` skips importlib's bootstrap frames by itself; `import_module` and
    `runpy` are counted here too, so the warning names the importing line."""
    level, up = 1, sys._getframe(2)
    while True:
        name = up.f_code.co_filename
        if not ("importlib" in name and "_bootstrap" in name):
            level += 1
            if not name.endswith(("importlib/__init__.py", "runpy.py")):
                return level
        if up.f_back is None:
            return level
        up = up.f_back


class _MovedModules:
    """A meta-path finder and loader: an old module name is the module it moved to."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        new = _moved_to(fullname)
        if new is None:
            return None
        from importlib.machinery import ModuleSpec
        from importlib.util import find_spec

        found = find_spec(new)
        # The new file as its origin, so that `python -m ledger.<old>` runs it as itself.
        return ModuleSpec(fullname, self, origin=found.origin if found else None)  # type: ignore[arg-type]

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        import importlib
        import warnings

        new = _moved_to(spec.name)
        assert new is not None
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there",
            DeprecationWarning,
            stacklevel=_outside_the_import_system(),
        )
        # The module itself, not a copy: its attributes (__name__, __spec__) stay its own.
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: `create_module` returned the module, already executed."""

    def get_code(self, fullname: str) -> CodeType | None:
        """The moved module's code (what `python -m ledger.<old>` runs)."""
        from importlib.abc import InspectLoader
        from importlib.util import find_spec

        new = _moved_to(fullname)
        found = find_spec(new) if new else None
        if new is None or found is None or not isinstance(found.loader, InspectLoader):
            return None
        return found.loader.get_code(new)


if not any(type(f).__qualname__ == "_MovedModules" for f in sys.meta_path):
    # At the front: an editable install's finder would find a stale old file otherwise.
    sys.meta_path.insert(0, _MovedModules())
