"""What a sandboxed process leaves behind, read as data and never followed.

`beneath` opens a file below a folder one component at a time without following
any link (the primitive every reader of a sandboxed process's outputs uses);
`match` expands an --artifact glob the same way; `declared` turns what a run
declared (artifact globs, a result file) into files to digest and outputs
refused, each with why. A refused output is named in the receipt, never read.
"""
