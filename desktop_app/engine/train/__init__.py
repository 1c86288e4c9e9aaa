"""Training: the one loop, checkpoints, optimizers, distributed (torchrun) support."""
