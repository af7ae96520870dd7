"""The one error hierarchy. The CLI turns these into a one-line reason and an exit code."""

from __future__ import annotations

__all__ = [
    "Error",
    "InputError",
    "NotFoundError",
    "RefusedError",
    "UsageError",
    "VerificationError",
]


class Error(Exception):
    """Base of every error the ledger reports to a person."""

    exit_code = 1

    def reason(self) -> str:
        """One line: what went wrong, without a traceback."""
        return " ".join(str(self).split()) or type(self).__name__


class VerificationError(Error):
    """A signature, hash, key, proof or checkpoint does not hold."""


class RefusedError(Error):
    """An input was refused on ingest; nothing of it was written."""


class NotFoundError(Error):
    """No receipt, key or revision matches what was asked for."""


class InputError(Error):
    """A malformed file, plan or argument value (a definite negative about the input)."""


class UsageError(Error):
    """The command cannot run as asked: bad usage or environment (exit 2)."""

    exit_code = 2
