"""The scoring engine: everything that turns reward items into results, with no HTTP in it.

The routers (:mod:`reward_server.routers`) and ``python -m reward_server score FILE`` both call into this
package; nothing here imports FastAPI or Starlette.
"""
