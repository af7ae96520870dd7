"""Numbers as people read them, below every room that shows one: bytes in IEC
units, other figures to three significant digits, and the byte counts and long
floats of a recorded sentence in those forms. Pure text, no imports of the
ledger: the read side's renderers (`read/humanize.py`), the trend's figures and
the orchestration's progress lines all write numbers the same way. Importing
this package imports none of its modules."""
