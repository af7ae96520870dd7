"""The one error hierarchy. Each type carries its exit code and HTTP status, so
the CLI and the server map errors the same way, in one place each."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic stays out of the import path of the HTTP client
    from pydantic import ValidationError

__all__ = [
    "EXIT_INFRA",
    "EXIT_NEGATIVE",
    "EXIT_OK",
    "EXIT_USAGE",
    "CheckpointError",
    "Error",
    "ForbiddenError",
    "InputError",
    "MerkleError",
    "NotFoundError",
    "RefusedError",
    "UnreachableError",
    "UsageError",
    "VerificationError",
    "first_validation_error",
]

EXIT_OK, EXIT_NEGATIVE, EXIT_USAGE = 0, 1, 2
EXIT_INFRA = 3
"""Not passed only because of infrastructure (every receipt that did not pass is an
infra-error): the one status a CI retry policy may retry; the code was not judged."""


class Error(Exception):
    """Base of every error the ledger reports to a person."""

    exit_code = EXIT_NEGATIVE
    http_status = 400

    def reason(self) -> str:
        """One line: what went wrong, without a traceback."""
        return " ".join(str(self).split()) or type(self).__name__


class VerificationError(Error):
    """A signature, hash, key, proof or checkpoint does not hold."""


class CheckpointError(VerificationError):
    """A checkpoint note is malformed or its signature does not hold."""


class MerkleError(VerificationError):
    """An inclusion or consistency proof does not hold, or its arguments are invalid."""


class RefusedError(Error):
    """An input was refused on ingest; nothing of it was written."""


class ForbiddenError(Error):
    """A known token whose roles do not allow the request (a server's answer, raised
    too by the rooms below it that decide what a role may record)."""

    http_status = 403


class NotFoundError(Error):
    """No receipt, key or revision matches what was asked for."""

    http_status = 404


class InputError(Error):
    """A malformed file, plan or argument value (a definite negative about the input)."""


class UsageError(Error):
    """The command cannot run as asked: bad usage or environment (exit 2)."""

    exit_code = EXIT_USAGE
    # Configuration trouble on a server is the operator's, not the client's.
    http_status = 500


class UnreachableError(Error):
    """A server or service could not be reached at all (the connection failed after the
    client's retries): the host's or network's trouble, never the code's, so a CI retry
    policy may retry it (exit 3). A server that answered with an error keeps its code."""

    exit_code = EXIT_INFRA
    http_status = 502


def first_validation_error(e: ValidationError, default_loc: str = "") -> str:
    """`field.path: message` of pydantic's first error: one line for a person."""
    first = e.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or default_loc
    return f"{loc}: {first['msg']}" if loc else str(first["msg"])
