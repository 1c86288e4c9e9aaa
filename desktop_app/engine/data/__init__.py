"""Data: find and judge input files, tokenizers, prepared token stores, seeded batch sources."""
