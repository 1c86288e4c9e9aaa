"""Data: find and judge input files, tokenizers, chat messages and templates, prepared token stores, seeded
batch sources."""
