"""rlvr reward server: verifiable rewards for RL on reasoning models over HTTP.

Build the app with :func:`reward_server.app.create_app`; run it with ``python -m reward_server``.
"""

__version__ = "0.1.0"
