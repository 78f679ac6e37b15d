"""Rollouts: the ``GenerationBackend`` seam, its transformers and vLLM backends, and the sampler correction.

- :mod:`trainer.rollout.base`: the ``GenerationBackend`` protocol, ``SamplingParams``, ``RolloutBatch``,
  ``PromptEncoder`` and the EOS/decoding helpers every backend shares.
- :mod:`trainer.rollout.transformers_backend`: ``TransformersBackend`` (the policy in transformers), the default;
  :mod:`trainer.rollout.decode`, its decode loop.
- :mod:`trainer.rollout.vllm`: ``VLLMBackend``, a colocated vLLM engine; imported only when ``use_vllm`` is set.
- :mod:`trainer.rollout.weights`: LoRA and the policy's weights as an engine takes them (merged adapters).
- :mod:`trainer.rollout.forward`: ``completion_log_probs``, the trainer's own forward over a batch.
- :mod:`trainer.rollout.correction`: the sampler correction (TIS/MIS) for a sampler that is not that forward.

Nothing is re-exported here: importing one module (the config imports ``correction``) loads neither
``transformers`` nor vLLM.
"""
