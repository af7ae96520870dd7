"""Generic routes for capabilities a workload does not implement itself.

A workload written against an earlier protocol (or not written at all: a ready
adapter around a library model) keeps every claim: where it offers no ``dtype``
keyword, no routing declaration or no replay, the harness reaches into the
``torch.nn.Module`` objects it holds and does the work there, and the receipt
names the route it took.
"""
