"""Hyperparameter sweeps on Optuna (the optional sweep extra): trials of one run config, each an ordinary run.

space.py (what may vary, `--vary` specs), goal.py (the metric and its direction), spec.py (a sweep as asked:
sweep.json), study.py (the Optuna study in the sweep's SQLite file), events.py (what a sweep yields), trials.py (one
trial: its run, its reports, its verdict), parallel.py (several trials at once as child processes), runner.py
(`open_sweep` and the generator every front end runs). The folder layout is engine/sweep_folder.py.
"""
