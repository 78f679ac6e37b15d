"""GRPO trainer that scores its rollouts through the rlvr reward server over HTTP."""
