"""Method options of self-play and GRPO: defaults and help text, stdlib only (the window builds its forms
from these without importing torch). RunConfig.method_options holds the user's values."""

from __future__ import annotations

from typing import Any

SELFPLAY_DEFAULTS: dict[str, Any] = {
    "world": "mini", "task_types": ["deduction", "abduction", "induction"], "proposals_per_type": 2,
    "solver_tasks_per_type": 4, "solver_samples": 4, "references": 3, "temperature": 1.0, "top_p": 1.0,
    "max_new_tokens": 48, "kl_coef": 0.0, "clip": 0.2, "heldout_per_type": 32, "heldout_seed": 9001,
    "seed_tasks_per_type": 16, "seeds": [], "strict_sandbox": False, "world_options": {},
}

GRPO_DEFAULTS: dict[str, Any] = {
    "prompts": [], "group_size": 4, "prompts_per_step": 4, "temperature": 1.0, "top_p": 1.0,
    "max_new_tokens": 48, "max_lines": 0, "kl_coef": 0.0, "clip": 0.2, "weights": {"answer": 1.0},
    "length_target": 32, "format_pattern": r".+", "reward_file": "", "eval_prompts": 16,
}

HELP: dict[str, str] = {
    "world": "Task world: mini (a small Python-like language a tiny model learns in minutes, checked "
             "in-process) or python (real Python functions, run in the sandbox).",
    "task_types": "deduction: program + input -> output; abduction: program + output -> an input; "
                  "induction: input/output pairs -> the program.",
    "proposals_per_type": "New tasks the model proposes per task type each step.",
    "solver_tasks_per_type": "Tasks the model solves per task type each step (new proposals first).",
    "solver_samples": "Answers sampled per task; the solve rate over them gives the proposer's learnability "
                      "reward (1 - rate, 0 when every or no answer is right).",
    "references": "Earlier tasks shown to the proposer as examples.",
    "temperature": "Sampling temperature of rollouts (above 0: the model must explore).",
    "top_p": "Nucleus sampling of rollouts (1 = off).",
    "max_new_tokens": "Longest answer or proposal, in tokens.",
    "kl_coef": "Weight of the KL penalty that keeps the model near its base (needs a base model; 0 = off).",
    "clip": "PPO clipping range of the policy ratio.",
    "heldout_per_type": "Fixed held-out tasks per type, solved greedily at every evaluation.",
    "heldout_seed": "Seed of the held-out tasks (the same seed gives the same evaluation set).",
    "seed_tasks_per_type": "Generated tasks each type's buffer starts with (besides your own seeds).",
    "seeds": "Your own seed tasks (JSON objects as `tasks` writes them).",
    "strict_sandbox": "Refuse to run when an isolation layer of the sandbox is missing.",
    "world_options": "Options of the task world (mini: depth, references, pairs, shown).",
    "prompts": "JSONL files of prompts ({\"prompt\": ..., \"answer\": ...}); the run's data files.",
    "group_size": "Completions per prompt; rewards are compared within each group.",
    "prompts_per_step": "Prompts per optimizer step.",
    "max_lines": "Stop a completion after this many lines (0 = no limit).",
    "weights": "Reward functions and their weights: answer, format, length, repetition, distinct, "
               "likelihood, user.",
    "length_target": "Target length in words of the length reward.",
    "format_pattern": "Regular expression the format reward checks.",
    "reward_file": "Your Python file with reward(prompt, completion) -> float. It runs as your own code, "
                   "in the app's process.",
    "eval_prompts": "Prompts scored greedily at each evaluation.",
}

# Learning rates that suit each method's usual model sizes (the window's default when the user sets none).
DEFAULT_LR = {"selfplay": 2e-4, "grpo": 1e-5}
