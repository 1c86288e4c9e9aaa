"""A sweep as asked (stdlib only): the run config every trial starts from, what varies, the metric, how many trials, the
sampler, the pruner and how many at once. Written as SWEEP/sweep.json when the sweep starts; a resume reads it back.
The window's form, the CLI's flags and the server's body all fill this one spec."""

from __future__ import annotations

from dataclasses import dataclass

from desktop_app.engine.spec_base import SpecMixin, check_choice, check_count, check_positive, spec_field

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "hyperband", "halving", "none")
DIRECTIONS = ("auto", "minimize", "maximize")
MAX_TRIALS = 10_000

f = spec_field


@dataclass
class SweepSpec(SpecMixin):
    """A hyperparameter search over trials of one run config."""

    base: dict = f({}, "The run config every trial starts from (a whole run.json, as planned for this machine).",
                   label="Run config", hidden=True)
    vary: list = f([], "What varies, one setting per line: NAME=LOW..HIGH (a range), NAME=LOW..HIGH:log (a log scale, "
                   "for learning rates) or NAME=A,B,C (values to choose from), e.g. lr=1e-5..1e-3:log or "
                   "lora_rank=8,16,32. Empty: the method's usual settings.", label="Settings that vary",
                   widget="lines")
    trials: int = f(20, "Trials in all, counting those a resumed sweep already ran.", minimum=1, maximum=MAX_TRIALS,
                    label="Trials", unit="trials")
    metric: str = f("val_loss", "The figure each trial is judged by, at each evaluation: val_loss (every method), or "
                    "one the method reports (val_ppl, val_bpb, val_preference_accuracy, eval_reward, "
                    "heldout_solve_rate, ...).", label="Judged by")
    direction: str = f("auto", "Whether lower or higher is better (auto: as the metric says).", choices=DIRECTIONS,
                       label="Better is", advanced=True)
    sampler: str = f("tpe", "How settings are proposed: tpe (learns from the trials so far; Optuna's default), random, "
                     "or grid (every combination; a range becomes 5 values).", choices=SAMPLERS, label="Sampler")
    pruner: str = f("median", "Stopping hopeless trials early, at an evaluation: median (worse than the median of the "
                    "trials before at the same step), hyperband or halving (successive halving), or none.",
                    choices=PRUNERS, label="Stop hopeless trials")
    parallel: int = f(1, "Trials at once (0 = as many as fit: one per GPU, or as many as this CPU's cores and memory "
                      "allow, each with its share of the cores). Never more than fit.", minimum=0,
                      label="Trials at once", zero="as many as fit", advanced=True)
    seed: int = f(0, "Seed of the sampler: the same seed proposes the same settings.", minimum=0, label="Sampler seed",
                  advanced=True)
    name: str = f("", "The sweep's name in the trackers (MLflow's parent run, W&B's group); default: its folder's.",
                  label="Name", advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        if not isinstance(self.base, dict) or not self.base:
            p.append("base must be a run config (a JSON object)")
        if not isinstance(self.vary, list) or not all(isinstance(v, str) for v in self.vary):
            p.append("vary must be a list of NAME=... specs")
        check_positive(p, "trials", self.trials)
        if isinstance(self.trials, int) and self.trials > MAX_TRIALS:
            p.append(f"trials must be at most {MAX_TRIALS}, got {self.trials}")
        if not isinstance(self.metric, str) or not self.metric:
            p.append("metric must name a figure the method reports, e.g. val_loss")
        check_choice(p, "direction", self.direction, DIRECTIONS)
        check_choice(p, "sampler", self.sampler, SAMPLERS)
        check_choice(p, "pruner", self.pruner, PRUNERS)
        check_count(p, "parallel", self.parallel)
        check_count(p, "seed", self.seed)
        if not isinstance(self.name, str):
            p.append("name must be text")
        return p
