"""Tool-integrated rollouts: the policy writes code, the reward server's sandbox runs it, the output goes back into
the context and the policy continues (ToRL arXiv 2503.23383, ReTool arXiv 2504.11536).

- :mod:`trainer.tools.formats`: what a tool call looks like in generated text (a fenced ```` ```python ```` block or
  Qwen's ``<tool_call>`` JSON) and how its result is written back.
- :mod:`trainer.tools.client`: :class:`~trainer.tools.client.HttpToolClient`, batched ``POST /v1/tools/python``.
- :mod:`trainer.tools.rollout`: :class:`~trainer.tools.rollout.ToolBackend`, the multi-turn loop, a
  :class:`~trainer.rollout.base.GenerationBackend` wrapped around the transformers or vLLM backend.

See ``docs/trainer/tools.md``.
"""
