"""The fork server: torch, the checks and a run's workload modules imported once, and
every claim still a fresh process, forked from it.

What belongs here: the server process (`forkserver`), the parent's handles on it
(`forkparent`: launch, wait, the client's command line, stop; torch-free), the client
a claim starts (`forkclient`: no torch), the document a server prints once ready
(`forkready`), when it may fork and who made it unsafe to (`forksafety`), what
confines one forked claim beside the run's sandbox (`confine`) and what claims really
import, kept for the next server of the same tree (`preload`). Nothing that runs a
claim's check: that is `runners.claim` and `runners.checks`.

Imports nothing: the client starts without torch, and `ledger qualify` launches its
servers before it imports torch itself.
"""
