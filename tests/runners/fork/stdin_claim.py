"""A claim process for a test: says it started, then runs until its stdin closes."""

import sys

print("started", flush=True)
sys.stdin.read()
