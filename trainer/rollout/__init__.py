"""Rollouts: the ``GenerationBackend`` seam, its transformers and vLLM backends, and the sampler correction."""
