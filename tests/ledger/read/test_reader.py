"""One reader for every command that reads: opening it costs nothing (the store is
opened, the server asked, at the first question), a server is asked only where one
is named, and a command that always refused both still does."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.evidence.errors import UsageError
from ledger.read.reader import LocalReader, RemoteReader, open_reader


def test_a_local_reader_opens_its_ledger_at_the_first_question(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    reader = open_reader(f"sqlite:///{missing}", None)
    assert isinstance(reader, LocalReader) and reader.verified == "verified"
    with pytest.raises(UsageError, match="ledger init"):
        reader.show("ab" * 32)
    reader.close()


def test_a_server_is_asked_only_where_one_is_named() -> None:
    reader = open_reader(None, "http://127.0.0.1:9", "token")
    assert isinstance(reader, RemoteReader) and reader.token == "token"
    assert reader.verified == "verified by the server"
    # Where a command read the server over --db, it still does; where it refused
    # both, it still refuses.
    assert isinstance(open_reader("x.db", "http://127.0.0.1:9"), RemoteReader)
    with pytest.raises(UsageError, match="give --db or --server, not both"):
        open_reader("x.db", "http://127.0.0.1:9", one=True)


def test_a_local_reader_takes_no_anchors_for_the_log() -> None:
    with pytest.raises(UsageError, match="--trust and --policy go with --server"):
        LocalReader("unused.db").log_view([object()], None)  # type: ignore[list-item]
