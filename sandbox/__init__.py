"""Untrusted code execution with hard limits and no network. Knows nothing of HTTP or the reward server."""
