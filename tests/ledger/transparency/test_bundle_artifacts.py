"""A bundle's artifacts against a statement that leaves an artifact's media type out
(the model's default holds): checked, not a traceback."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from ledger.evidence.errors import VerificationError
from ledger.write.artifacts import check_bundle_artifacts

CONTENT = b"trace bytes"
DIGEST = hashlib.sha256(CONTENT).hexdigest()
STATEMENT = {
    "predicate": {"artifacts": [{"name": "t.bin", "digest": {"sha256": DIGEST}, "size": 11}]}
}


def bundle(media: str) -> bytes:
    item = {"sha256": DIGEST, "mediaType": media, "content": base64.b64encode(CONTENT).decode()}
    return json.dumps({"artifacts": [item]}).encode()


def test_an_unnamed_media_type_is_the_default() -> None:
    [line] = check_bundle_artifacts(bundle("application/octet-stream"), STATEMENT)
    assert line == "artifact t.bin (application/octet-stream, 11 bytes): digest verified"
    with pytest.raises(VerificationError, match="media type differs"):
        check_bundle_artifacts(bundle("text/plain"), STATEMENT)
