"""What an evaluation measures (torch-free): one spec for the `eval` verb, the window's Evaluate view and the
results file (each result records the spec it was measured with)."""

from __future__ import annotations

from dataclasses import dataclass

from desktop_app.engine.method_options import PROMPT_STYLES, TASK_TYPES, WORLD_CHOICES
from desktop_app.engine.spec_base import (
    SpecMixin,
    check_choice,
    check_count,
    check_files,
    check_positive,
    check_range,
    spec_field,
)

f = spec_field
EVAL_WORLDS = ("none", *WORLD_CHOICES)
QA_MATCHES = ("auto", "exact", "contains")
EVAL_DEVICES = ("auto", "cpu", "cuda", "mps")
EVAL_PRECISIONS = ("auto", "fp32", "bf16")


@dataclass
class EvalSpec(SpecMixin):
    """The evaluations to run on each model; those left empty are skipped."""

    world: str = f("none", "Held-out tasks of a task world, solved per type (none: skip). auto: python for a chat "
                   "model, mini otherwise.", choices=EVAL_WORLDS, label="Task world")
    task_types: list = f(list(TASK_TYPES), "Task types of the held-out set.", widget="checklist", choices=TASK_TYPES,
                         label="Task types")
    per_type: int = f(0, "Held-out tasks per type (0 = the world's default: 400 mini, 100 python; 400 tasks make "
                      "a change of 0.05 stand out of the noise).", minimum=0, label="Tasks per type",
                      zero="the world's default")
    heldout_seed: int = f(9002, "Seed of the held-out set (the same seed, the same tasks). Not 9001, the set "
                          "self-play picks its best checkpoint on by default: figures on a set a run chose by would "
                          "flatter it.", label="Held-out seed", advanced=True)
    world_options: dict = f({}, "Options of the task world (mini: depth); they change the tasks.", widget="json",
                            label="Task world options", advanced=True)
    samples: int = f(0, "Sampled answers per task for pass@k (0 or 1 = greedy pass@1 only).", minimum=0,
                     label="Samples for pass@k", zero="greedy only")
    temperature: float = f(0.8, "Sampling temperature of the pass@k answers.", minimum=0.01, maximum=5.0,
                           label="Temperature", advanced=True)
    max_new_tokens: int = f(0, "Longest answer (0 = 40 tokens for plain prompts, 160 for chat replies).", minimum=0,
                            label="Longest answer", unit="tokens", zero="automatic", advanced=True)
    prompt_style: str = f("auto", "How tasks and questions are put to the model: plain text, or chat (the model's "
                          "chat template; answers read from <answer> tags, code blocks or prose); auto: chat when "
                          "the model brings its own chat template.", choices=PROMPT_STYLES, label="Prompts",
                          advanced=True)
    qa: str = f("", "A JSONL file of questions and answers ({\"question\": ..., \"answer\": ...} per line), asked "
                "through the chat template (empty: skip).", widget="file", label="Questions and answers")
    qa_match: str = f("auto", "How a reply counts as right. contains: the reply contains the expected answer (a chat "
                      "model answers in a sentence: \"The capital of France is Paris.\"); exact: the answer (from "
                      "<answer> tags or the reply's first line) equals the expected one, ignoring case, spaces and "
                      "end punctuation; auto: contains for a model asked through its chat template, exact "
                      "otherwise.", choices=QA_MATCHES, label="Answer match")
    text: list = f([], "Text files, folders or a prepared dataset (its validation split) to measure perplexity and "
                   "bits per byte on (empty: skip).", widget="files", label="Text for perplexity")
    max_text_bytes: int = f(400_000, "Most bytes of text scored (the start of the text, cut on a character "
                            "boundary before tokenizing, so models with different tokenizers meet the same text).",
                            minimum=1, label="Text scored", unit="bytes", advanced=True)
    benchmarks: list = f([], "Standard benchmarks of EleutherAI's lm-evaluation-harness (its task or group names: "
                         "mmlu, arc_easy, arc_challenge, hellaswag, gsm8k, truthfulqa_mc2, ...; or the tasks of the "
                         "benchmark folder), scored by the harness's own metrics with standard errors (empty: skip). "
                         "Needs the [benchmarks] extra and the tasks' data fetched once.", widget="benchmarks",
                         label="Standard benchmarks")
    benchmark_limit: int = f(0, "Items per benchmark task (0 = all; a limit gives a quicker, noisier figure that is "
                             "not comparable with published ones).", minimum=0, label="Items per benchmark",
                             zero="all", advanced=True)
    benchmark_fewshot: int = f(-1, "Worked examples put before each question (-1 = each task's own setting; 0 = none).",
                               minimum=-1, label="Few-shot examples", advanced=True)
    benchmark_dir: str = f("", "A folder of the harness's task YAML files (your own private tasks; they are found by "
                           "name like the built-in ones).", widget="folder", label="Benchmark task folder",
                           advanced=True)
    batch: int = f(0, "Prompts decoded together (0 = automatic: about 100 on a CPU, where larger batches pad and "
                   "prefill slower, 256 on a GPU; evened out over the batches).", minimum=0, label="Batch",
                   unit="prompts", zero="automatic", advanced=True)
    device: str = f("auto", "Where to run: auto picks CUDA, then MPS, then the CPU.", choices=EVAL_DEVICES,
                    label="Device", advanced=True)
    precision: str = f("auto", "Numbers the model computes in: fp32, or bf16 (about half the memory traffic; on a "
                        "GPU or a CPU with bf16 matrix instructions several times faster). auto: bf16 there for models "
                        "of 20M parameters or more, fp32 otherwise.", choices=EVAL_PRECISIONS, label="Precision",
                        advanced=True)
    threads: int = f(0, "CPU threads (0 = automatic: one while the machine is busy, where a second one only waits for "
                     "the other programs, else all cores).", minimum=0, label="CPU threads", zero="automatic",
                     advanced=True)
    seed: int = f(0, "Seed of the sampled answers.", label="Seed", advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        check_choice(p, "world", self.world, EVAL_WORLDS)
        if not isinstance(self.task_types, list) or not self.task_types or any(t not in TASK_TYPES
                                                                               for t in self.task_types):
            p.append(f"task_types must be some of {', '.join(TASK_TYPES)} (got {self.task_types!r})")
        check_count(p, "per_type", self.per_type)
        check_count(p, "samples", self.samples)
        if isinstance(self.samples, int) and self.samples > 64:
            p.append(f"samples {self.samples} is too many: at most 64 per task")
        check_range(p, "temperature", self.temperature, 0.01, 5.0)
        check_count(p, "max_new_tokens", self.max_new_tokens)
        check_choice(p, "prompt_style", self.prompt_style, PROMPT_STYLES)
        if not isinstance(self.qa, str):
            p.append("qa must be a file path")
        check_choice(p, "qa_match", self.qa_match, QA_MATCHES)
        check_files(p, "text", self.text)
        check_positive(p, "max_text_bytes", self.max_text_bytes)
        check_count(p, "batch", self.batch)
        check_choice(p, "device", self.device, EVAL_DEVICES)
        check_count(p, "threads", self.threads)
        check_choice(p, "precision", self.precision, EVAL_PRECISIONS)
        if not isinstance(self.world_options, dict):
            p.append("world_options must be a JSON object")
        if not isinstance(self.benchmarks, list) or any(not isinstance(b, str) or not b.strip()
                                                         for b in self.benchmarks):
            p.append(f"benchmarks must be a list of task names (got {self.benchmarks!r})")
        check_count(p, "benchmark_limit", self.benchmark_limit)
        if not isinstance(self.benchmark_fewshot, int) or self.benchmark_fewshot < -1:
            p.append(f"benchmark_fewshot must be -1 (each task's own) or a count (got {self.benchmark_fewshot!r})")
        if not isinstance(self.benchmark_dir, str):
            p.append("benchmark_dir must be a folder path")
        if self.world == "none" and not self.qa and not self.text and not self.benchmarks:
            p.append("nothing to evaluate: choose a task world, a question file, text or a benchmark")
        return p
