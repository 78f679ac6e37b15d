"""The scoring engine: everything that turns reward items into results, with no HTTP in it.

The routers (:mod:`reward_server.routers`) and ``python -m reward_server score FILE`` both call into this
package; nothing here imports FastAPI or Starlette. One batch's path, module by module:

* :mod:`~reward_server.engine.resolve`: the components each item names (weights, parameters, presets),
  validated before any work starts (``validate_request``, ``validate_batch``);
* :mod:`~reward_server.engine.batch`: ``score_batch``, the entry point: the components and the step rewards;
* :mod:`~reward_server.engine.dispatch`: each component sent where it runs (the worker pool, a thread, the
  sandbox, the model workers), under the batch's budget; ``run_math`` for one math item;
* :mod:`~reward_server.engine.offload`: what a worker process runs for an item;
* :mod:`~reward_server.engine.compose`: each item's scores weighed into its reward and status;
* :mod:`~reward_server.engine.steps`: step rewards (process supervision).

Beside them: :mod:`~reward_server.engine.components` (the component table), :mod:`~reward_server.engine.context`
(``ScoringContext``: what scoring needs from the service), :mod:`~reward_server.engine.runtime` (starting and
stopping it), :mod:`~reward_server.engine.reward_models` (the model workers and their batcher) and
:mod:`~reward_server.engine.code_sandbox` (the code sandbox's start).
"""
