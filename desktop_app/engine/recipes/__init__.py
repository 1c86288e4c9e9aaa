"""Recipes: work made of several training runs (pipelines, the self-play demonstration)."""
