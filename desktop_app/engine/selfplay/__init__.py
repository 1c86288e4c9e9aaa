"""Self-play with verified rewards (Absolute Zero) and GRPO with reward functions: rewards, task buffers,
batched rollouts. The objectives that plug these into the one training loop live in `objectives/`."""
