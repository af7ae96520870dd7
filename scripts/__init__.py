"""What stays in the checkout and is never installed: `pip install` ships `ledger` and
`runners` only (pyproject's package discovery; tests/ledger/test_wheel_contents.py).

What belongs here: the example generators the tests, the demo (`demo.sh`) and the
benchmarks use (`example_repo`, `example_plans`, `numerics_cases`), the runs on a GPU
host (`device/`, the sandbox attack among them; `gpu_evidence.sh` runs them) and the
evidence and wheel helpers.

Imports nothing.
"""
