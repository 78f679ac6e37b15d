"""Verifiers: pure functions from (completion, reference, options) to a score with a status.

Nothing here imports FastAPI, routers or settings; parameters come in as arguments.
"""
