"""Evaluation of any model the app opens (run, checkpoint, export, Hugging Face folder): a task world's held-out
set (pass@1 greedy, pass@k sampled, with confidence intervals), perplexity and bits per byte on text, and
exact / contains match on questions and answers through the chat template.

spec.py (what to measure, torch-free), defaults.py (what fits a model when nobody says: perplexity on a
pretraining run's validation split, a self-play run's task world, a chat model's questions; torch-free),
heldout.py, perplexity.py, qa.py (the measurements), runner.py (the generator the `eval` verb and the window's
Evaluate view both drive), results.py (the results file kept in each model's folder, torch-free). Self-play's own
held-out evaluation during training is heldout.py's.
Stage: above selfplay/ (its rollouts and prompts), below objectives/.
"""
