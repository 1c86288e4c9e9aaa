"""The options of each training method (RunConfig.method_options), as typed specs (stdlib only).

One dataclass per method that has options: SFT, DPO, GRPO, self-play. Their defaults, help, units and limits are
written here once; the window's forms, the CLI's `--option key=value` and the objectives all read them from here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from desktop_app.engine.spec_base import (
    SpecError,
    SpecMixin,
    check_bool,
    check_choice,
    check_count,
    check_files,
    check_positive,
    check_range,
    default_of,
    spec_field,
)

LOSS_ON = ("assistant", "last", "all")
OVERLONG = ("truncate", "drop")
DPO_LOSSES = ("sigmoid", "ipo")
REFERENCE_MODES = ("auto", "precompute", "live")
TASK_TYPES = ("deduction", "abduction", "induction")
WORLDS = ("mini", "python")
WORLD_CHOICES = ("auto", *WORLDS)  # auto: python for a chat model, mini for one trained on mini's corpus
PROMPT_STYLES = ("auto", "plain", "chat")
SOLVER_BASELINES = ("type", "task")
# Where self-play's first tasks come from: the world's generator (seed_tasks_per_type of them), nothing but the
# identity program (Absolute Zero's start), or the generator's seed_tasks_per_type simplest (shortest) programs.
TASKS_FROM = ("generator", "minimal", "simplest")
BUILTIN_REWARDS = ("answer", "format", "length", "repetition", "distinct", "likelihood")
REWARD_NAMES = (*BUILTIN_REWARDS, "user")  # "user": the reward file's function
WORLD_OPTION_KEYS = ("depth", "pairs", "shown", "references")  # the task worlds' options (tasks/mini_world.py)

f = spec_field  # short: the declarations below read as a table


def _max_len_problem(p: list[str], value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value == 1:
        p.append(f"max_len must be 0 (the model's context) or at least 2 tokens, got {value!r}")


@dataclass
class SFTOptions(SpecMixin):
    """Options of supervised fine-tuning (objective "sft": SFT, LoRA, QLoRA)."""

    loss_on: str = f("assistant", "Which tokens carry loss: assistant (every assistant turn, the usual), last (only "
                     "the final assistant turn) or all (every token, like pretraining).", choices=LOSS_ON,
                     label="Learn from")
    max_len: int = f(0, "Longest example in tokens (0 = the model's context length).", minimum=0,
                     label="Longest example", unit="tokens", zero="the model's context")
    overlong: str = f("truncate", "An example longer than the longest example is truncated or dropped (each one is "
                      "reported).", choices=OVERLONG, label="Longer examples", advanced=True)
    packing: bool = f(False, "Pack several short examples into each window (faster on short records); examples "
                      "never attend to each other.", label="Pack short examples")
    val_fraction: float = f(0.1, "Share of the examples held out to measure validation loss (ignored when "
                            "validation files are given).", minimum=0.0, maximum=0.5, label="Held out for validation",
                            unit="share", advanced=True)
    val_data: list = f([], "Files of held-out examples for validation (instead of splitting off a share).",
                       widget="files", label="Validation files", advanced=True)
    sample_count: int = f(2, "Held-out prompts answered at each evaluation (through the chat template).", minimum=0,
                          label="Sample answers per evaluation", advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        check_choice(p, "loss_on", self.loss_on, LOSS_ON)
        check_choice(p, "overlong", self.overlong, OVERLONG)
        _max_len_problem(p, self.max_len)
        check_bool(p, "packing", self.packing)
        check_range(p, "val_fraction", self.val_fraction, 0.0, 0.5)
        check_files(p, "val_data", self.val_data)
        check_count(p, "sample_count", self.sample_count)
        return p


@dataclass
class DPOOptions(SpecMixin):
    """Options of direct preference optimisation (objective "dpo")."""

    beta: float = f(0.1, "How far the model may move from the reference: higher keeps it closer (0.1 is usual).",
                    minimum=0.0, label="Beta (closeness to the reference)")
    loss: str = f("sigmoid", "sigmoid: the DPO paper's loss. ipo: the IPO loss (squared, on length-averaged "
                  "log-probabilities; less prone to overfitting).", choices=DPO_LOSSES, label="Loss")
    reference: str = f("auto", "Reference log-probabilities: precompute (once, before training; no reference model "
                       "kept in memory), live (computed each step) or auto (precompute when the data is no larger "
                       "than what training visits).", choices=REFERENCE_MODES, label="Reference", advanced=True)
    max_len: int = f(0, "Longest prompt + answer in tokens (0 = the model's context length).", minimum=0,
                     label="Longest pair", unit="tokens", zero="the model's context")
    overlong: str = f("truncate", "A pair longer than that is truncated (prompt cut from the left first) or dropped "
                      "(each one is reported).", choices=OVERLONG, label="Longer pairs", advanced=True)
    val_fraction: float = f(0.1, "Share of the pairs held out to measure validation loss and preference accuracy "
                            "(ignored when validation files are given).", minimum=0.0, maximum=0.5,
                            label="Held out for validation", unit="share", advanced=True)
    val_data: list = f([], "Files of held-out preference pairs for validation.", widget="files",
                       label="Validation files", advanced=True)
    sample_count: int = f(2, "Held-out prompts answered at each evaluation (through the chat template).", minimum=0,
                          label="Sample answers per evaluation", advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        check_range(p, "beta", self.beta, 1e-6, 100.0)
        check_choice(p, "loss", self.loss, DPO_LOSSES)
        check_choice(p, "reference", self.reference, REFERENCE_MODES)
        _max_len_problem(p, self.max_len)
        check_choice(p, "overlong", self.overlong, OVERLONG)
        check_range(p, "val_fraction", self.val_fraction, 0.0, 0.5)
        check_files(p, "val_data", self.val_data)
        check_count(p, "sample_count", self.sample_count)
        return p


def _rollout_problems(p: list[str], options: Any) -> None:
    """Checks shared by the two reinforcement methods."""
    check_range(p, "temperature", options.temperature, 0.0, 5.0)
    check_range(p, "top_p", options.top_p, 0.0, 1.0)
    check_positive(p, "max_new_tokens", options.max_new_tokens)
    check_range(p, "kl_coef", options.kl_coef, 0.0, 100.0)
    check_range(p, "clip", options.clip, 0.0, 10.0)


@dataclass
class GRPOOptions(SpecMixin):
    """Options of GRPO with reward functions (objective "grpo")."""

    prompts: list = f([], "JSONL files of prompts ({\"prompt\": ..., \"answer\": ...}); in the window and the CLI "
                      "these are the run's data files.", widget="files", hidden=True, label="Prompt files")
    group_size: int = f(4, "Completions sampled per prompt (G). Advantages compare the completions of one prompt, "
                        "so at least 2; 4-16 is usual.", minimum=2, label="Completions per prompt")
    prompts_per_step: int = f(4, "Prompts drawn from the data files each step (the batch is prompts x completions "
                              "per prompt).", minimum=1, label="Prompts per step")
    temperature: float = f(1.0, "Sampling temperature of the rollouts (above 0: greedy rollouts cannot explore).",
                           minimum=0.0, maximum=5.0, label="Temperature")
    top_p: float = f(1.0, "Sample among the most likely tokens whose probabilities add up to P (1 = off).",
                     minimum=0.0, maximum=1.0, label="Top-p", advanced=True)
    max_new_tokens: int = f(48, "Longest completion.", minimum=1, label="Longest completion", unit="tokens")
    max_lines: int = f(0, "Stop a completion after this many lines (0 = no limit).", minimum=0,
                       label="Longest completion", unit="lines", zero="no limit", advanced=True)
    kl_coef: float = f(0.0, "Weight of the KL penalty that keeps the model near the reference (0 = none; above 0 "
                       "keeps a frozen copy of the base, or uses the base with adapters off for LoRA/QLoRA).",
                       minimum=0.0, label="KL penalty", zero="off", advanced=True)
    clip: float = f(0.2, "PPO clip range of the policy ratio (0.2 is usual).", minimum=0.0, label="Clip range",
                    advanced=True)
    weights: dict = f({"answer": 1.0}, "Weight of each reward function in the total reward (0 = off): answer "
                      "(matches the record's answer, exactly or as a number), format (matches the format pattern), "
                      "length (near the length target), repetition (penalises repeated n-grams), distinct "
                      "(distinct-n diversity), likelihood (under the reference model), user (your reward file).",
                      widget="weights", keys=REWARD_NAMES, label="Reward weights")
    length_target: int = f(32, "Completion length, in words, that the length reward aims at.", minimum=1,
                           label="Length target", unit="words", advanced=True)
    format_pattern: str = f(r".+", "Regular expression a well-formatted completion matches (the format reward).",
                            label="Format pattern", advanced=True)
    reward_file: str = f("", "Your Python file defining reward(prompt, completion) -> float. It is your own code and "
                         "runs as such inside the app, with your permissions: not sandboxed.", widget="file",
                         label="Reward file (Python)")
    eval_prompts: int = f(16, "Prompts answered greedily at each evaluation to measure the mean reward.", minimum=1,
                          label="Prompts per evaluation", advanced=True)
    prompt_style: str = f("auto", "How prompts are put to the model: plain (as text) or chat (one user turn through "
                          "the model's chat template; the reply ends with its turn, and the answer reward reads the "
                          "answer from <answer> tags, code blocks or the prose around it); auto: chat for a model that "
                          "brings its own chat template (an instruct model), plain for the app's own models.",
                          choices=PROMPT_STYLES, label="Prompts", advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        check_files(p, "prompts", self.prompts)
        if not isinstance(self.group_size, int) or isinstance(self.group_size, bool) or self.group_size < 2:
            p.append(f"group_size must be at least 2 (advantages compare completions of one prompt), got "
                     f"{self.group_size!r}")
        check_positive(p, "prompts_per_step", self.prompts_per_step)
        _rollout_problems(p, self)
        check_count(p, "max_lines", self.max_lines)
        if not isinstance(self.weights, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                         for v in self.weights.values()):
            p.append("weights must map reward names to numbers")
        else:
            unknown = [k for k in self.weights if k not in REWARD_NAMES]
            if unknown:
                p.append(f"unknown reward function(s) {', '.join(map(str, unknown))}; built-in ones: "
                         f"{', '.join(BUILTIN_REWARDS)}, and 'user' for your reward file")
        check_positive(p, "length_target", self.length_target)
        if not isinstance(self.format_pattern, str):
            p.append("format_pattern must be a regular expression (text)")
        if not isinstance(self.reward_file, str):
            p.append("reward_file must be a file path")
        check_positive(p, "eval_prompts", self.eval_prompts)
        check_choice(p, "prompt_style", self.prompt_style, PROMPT_STYLES)
        return p


@dataclass
class SelfPlayOptions(SpecMixin):
    """Options of Absolute Zero self-play (objective "selfplay")."""

    world: str = f("auto", "Task world the proposer writes tasks in: mini (a tiny built-in language; fast, for models "
                   "trained on its corpus) or python (real Python programs, run in the sandboxed executor); auto: "
                   "python for a chat model (one that brings its own chat template), else mini.", choices=WORLD_CHOICES,
                   label="Task world")
    prompt_style: str = f("auto", "How tasks are put to the model: plain (the world's prompts as text, for a model "
                          "trained on its corpus), chat (one user turn through the model's chat template; answers "
                          "are read from <answer> tags, code blocks or the prose around them); auto: chat for a model "
                          "that brings its own chat template (an instruct model), plain for the app's own models.",
                          choices=PROMPT_STYLES, label="Prompts", advanced=True)
    task_types: list = f(list(TASK_TYPES), "Task types to play: deduction (program + input -> predict the output), "
                         "abduction (program + output -> find an input), induction (input/output pairs -> write the "
                         "program).", widget="checklist", choices=TASK_TYPES, label="Task types")
    proposals_per_type: int = f(2, "Tasks the proposer writes per task type each step.", minimum=1,
                                label="New tasks per type and step")
    solver_tasks_per_type: int = f(4, "Tasks the solver answers per type each step (new valid proposals first, then "
                                   "tasks from the buffer).", minimum=1, label="Tasks solved per type and step")
    solver_samples: int = f(4, "Answers sampled per task (N). Their solve rate sets the proposer's learnability "
                            "reward (1 - solve rate, 0 when always or never solved); at least 2.", minimum=2,
                            label="Answers per task")
    references: int = f(3, "Tasks from the buffer shown to the proposer as examples in each prompt (K).", minimum=0,
                        label="Example tasks in each proposal", advanced=True)
    temperature: float = f(1.0, "Sampling temperature of the rollouts (above 0: greedy rollouts cannot explore).",
                           minimum=0.0, maximum=5.0, label="Temperature")
    top_p: float = f(1.0, "Sample among the most likely tokens whose probabilities add up to P (1 = off).",
                     minimum=0.0, maximum=1.0, label="Top-p", advanced=True)
    max_new_tokens: int = f(48, "Longest answer or proposal.", minimum=1, label="Longest answer", unit="tokens")
    kl_coef: float = f(0.0, "Weight of the KL penalty that keeps the model near its base (0 = none; above 0 keeps a "
                       "frozen copy of the base, or uses the base with adapters off for LoRA/QLoRA).", minimum=0.0,
                       label="KL penalty", zero="off", advanced=True)
    clip: float = f(0.2, "PPO clip range of the policy ratio (0.2 is usual).", minimum=0.0, label="Clip range",
                    advanced=True)
    heldout_per_type: int = f(32, "Held-out tasks per type whose solve rate is measured at each evaluation (set the "
                              "cadence with Evaluate every); the run keeps its best checkpoint by it.", minimum=1,
                              label="Held-out tasks per type")
    heldout_seed: int = f(9001, "Seed of the held-out tasks (the same seed gives the same held-out set).",
                          minimum=0, label="Held-out seed", advanced=True)
    seed_tasks_per_type: int = f(16, "Tasks the world generates per type to seed each buffer (besides the identity "
                                 "program).", minimum=0, label="Seed tasks per type", advanced=True)
    tasks_from: str = f("generator", "Where the first tasks come from. generator: the world generates Seed tasks "
                        "per type, which the solver also practises (Solver tasks from the seeds). minimal: only the "
                        "identity program, as Absolute Zero starts: the proposer builds the whole curriculum, and its "
                        "example tasks come only from what it has built. simplest: the generator's Seed tasks per "
                        "type shortest programs, a step between the two.", choices=TASKS_FROM,
                        label="First tasks from")
    seeds: list = f([], "Your own seed tasks: task objects (type, program, inputs, outputs), loaded from a JSON Lines "
                    "file as the `tasks` command writes them.", widget="records", label="Your seed tasks",
                    advanced=True)
    exclude_heldout: list = f([], "Seeds of more held-out sets kept out of every task the run trains on (the "
                              "`eval` verb's set, seed 9002, and this run's own held-out set always are): figures "
                              "on them measure programs self-play never trained on.",
                              label="Held-out sets kept out of the seeds", widget="json", advanced=True)
    proposer: bool = f(True, "Self-play: the model also writes the tasks it practises (Absolute Zero). Off: "
                       "solver-only RL on the world's generated seed tasks, with the same reward and update (the "
                       "control that shows what the proposer adds).", label="The model proposes tasks",
                       advanced=True)
    max_tasks_per_shape: int = f(4, "A proposal is a duplicate (no reward, not added) when its program is one the "
                                 "run has seen, or when this many buffer tasks already share its shape: programs "
                                 "equal up to their constants (0 = no limit on shapes). Repeating one easy program "
                                 "then stops paying, which keeps the proposer from collapsing.", minimum=0,
                                 label="Most buffer tasks of one shape", zero="no limit", advanced=True)
    duplicate_reward: float = f(0.0, "The proposer's reward for a duplicate proposal (0: none, as for a new task the "
                                "solver always or never solves; -0.5: as bad as an invalid one). Below 0, copying a "
                                "reference stops being the safe choice, which is how a proposer collapses onto "
                                "duplicates (docs/selfplay.md).", minimum=-1.0, maximum=0.0,
                                label="Reward of a duplicate proposal", advanced=True)
    seed_share: float = f(0.0, "Share of the solver's tasks drawn from the seed tasks (the world's own generator, the "
                          "kind of the seed corpus) rather than from the whole buffer, which the proposer's tasks fill "
                          "as play goes on (0 = the whole buffer, as Absolute Zero samples).", minimum=0.0,
                          maximum=1.0, label="Solver tasks from the seeds", unit="share", advanced=True)
    solver_baseline: str = f("type", "What a solver's reward is compared with: the other answers of its task type this "
                             "step (type: Absolute Zero's TRR++), or the other answers to the same task (task: GRPO's "
                             "group baseline; only tasks solved sometimes but not always teach).",
                             choices=SOLVER_BASELINES, label="Solver baseline", advanced=True)
    strict_sandbox: bool = f(False, "Refuse to run when any isolation layer of the sandbox is missing (matters for "
                             "the python world, whose programs are model-written code).",
                             label="Refuse a partial sandbox", advanced=True)
    world_options: dict = f({}, "Extra options of the task world, each a whole number; unset = the world's default. "
                            "mini: depth (nesting of the generated programs, 2), pairs (input/output pairs per "
                            "induction task, 6), shown (pairs shown to the solver, 3), references (example tasks in a "
                            "proposal prompt, 3); python: references.", widget="numbers", keys=WORLD_OPTION_KEYS,
                            label="Task world options", advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        check_choice(p, "world", self.world, WORLD_CHOICES)
        check_choice(p, "prompt_style", self.prompt_style, PROMPT_STYLES)
        types = self.task_types
        if not isinstance(types, list) or not types or any(t not in TASK_TYPES for t in types):
            p.append(f"task_types must be some of {', '.join(TASK_TYPES)} (got {types!r})")
        for name in ("proposals_per_type", "solver_tasks_per_type", "heldout_per_type"):
            check_positive(p, name, getattr(self, name))
        if not isinstance(self.solver_samples, int) or isinstance(self.solver_samples, bool) \
                or self.solver_samples < 2:
            p.append(f"solver_samples must be at least 2 (learnability needs a solve rate), got "
                     f"{self.solver_samples!r}")
        check_count(p, "references", self.references)
        check_count(p, "seed_tasks_per_type", self.seed_tasks_per_type)
        check_count(p, "max_tasks_per_shape", self.max_tasks_per_shape)
        check_range(p, "duplicate_reward", self.duplicate_reward, -1.0, 0.0)
        _rollout_problems(p, self)
        if isinstance(self.temperature, (int, float)) and self.temperature <= 0:
            p.append("temperature must be above 0 for self-play (greedy rollouts cannot explore)")
        if not isinstance(self.seeds, list) or not all(isinstance(s, dict) for s in self.seeds):
            p.append("seeds must be a list of task objects")
        check_bool(p, "strict_sandbox", self.strict_sandbox)
        check_bool(p, "proposer", self.proposer)
        check_choice(p, "tasks_from", self.tasks_from, TASKS_FROM)
        if not self.proposer and not self.seed_tasks_per_type and not self.seeds and self.tasks_from != "minimal":
            p.append("without a proposer the solver practises the seed tasks: set seed_tasks_per_type above 0 (or "
                     "tasks_from minimal, the identity alone)")
        if not isinstance(self.exclude_heldout, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                 for x in self.exclude_heldout):
            p.append("exclude_heldout must be a list of held-out seeds (whole numbers)")
        check_range(p, "seed_share", self.seed_share, 0.0, 1.0)
        check_choice(p, "solver_baseline", self.solver_baseline, SOLVER_BASELINES)
        if not isinstance(self.world_options, dict):
            p.append("world_options must be a JSON object")
        return p


# objective -> the spec of its options (causal_lm has none).
METHOD_OPTIONS: dict[str, type] = {"sft": SFTOptions, "dpo": DPOOptions, "grpo": GRPOOptions,
                                   "selfplay": SelfPlayOptions}


def method_options(objective: str, options: dict[str, Any]) -> Any:
    """The typed options of `objective`, unknown keys refused by name; None for a method without options."""
    cls = METHOD_OPTIONS.get(objective)
    if cls is None:
        return None
    if not isinstance(options, dict):
        raise SpecError([f"method_options must be a JSON object, got {type(options).__name__}"])
    return cls.from_dict(options)


def typed_options(cls: type, options: Any, method: str) -> Any:
    """A method's options given as their spec or as a dict (unknown keys named, with the method's name), checked."""
    if isinstance(options, cls):
        return options.check()
    data = dict(options or {})
    names = [fl.name for fl in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise SpecError([f"unknown {method} option(s): {', '.join(unknown)}; known: {', '.join(names)}"])
    return cls.from_dict(data).check()


def parse_option(objective: str, assignment: str) -> tuple[str, Any]:
    """'key=value' (the CLI's --option) -> (key, typed value) by the option's type; SpecError if unknown."""
    if "=" not in assignment:
        raise SpecError([f"--option {assignment!r} must look like key=value"])
    key, text = (part.strip() for part in assignment.split("=", 1))
    cls = METHOD_OPTIONS.get(objective)
    names = {fl.name: fl for fl in dataclasses.fields(cls)} if cls else {}
    if key not in names:
        known = ", ".join(names) if names else "none"
        raise SpecError([f"unknown option {key!r} for the {objective} method (options: {known})"])
    default = default_of(names[key])
    if isinstance(default, str):
        return key, text
    if isinstance(default, list):
        if text.startswith("["):
            return key, _json_value(key, text)
        return key, [t for t in (x.strip() for x in text.split(",")) if t]
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return key, True
        if text.lower() in ("0", "false", "no", "off"):
            return key, False
        raise SpecError([f"option {key} must be true or false, got {text!r}"])
    if isinstance(default, dict):
        return key, _json_value(key, text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise SpecError([f"option {key} must be a number, got {text!r}"]) from None
    return key, value


def _json_value(key: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError([f"option {key} must be JSON ({exc.msg}), got {text!r}"]) from None
