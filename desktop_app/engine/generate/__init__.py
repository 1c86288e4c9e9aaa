"""Generation: streaming decode with a KV cache, sampling, beam search, text deltas, thread tuning."""
