"""AZR Model Trainer: design, train, fine-tune and chat with language models on your own machine."""

__version__ = "0.1.0"
