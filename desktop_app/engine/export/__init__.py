"""Export: Hugging Face folders, zips and GGUF."""
