"""The checks a plan can name: one module per check, the table in `catalog`.

Each check module has ``NAME``, ``VERSION``, ``Params`` (its parameters: a
`runners.checks.params.CheckParams` dataclass) and
``run(ctx, params, recorded) -> list[CheckResult]``.
"""
