"""What one self-play round collects: the decodes, the proposals and their fate, the solver's attempts, the episodes
with their rewards, and the round's statistics (objectives/selfplay.py plays the round in named steps and fills
these)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from desktop_app.engine.selfplay.policy import Episode, EpisodeBatch, teaching_episodes
from desktop_app.engine.tasks.base import Check, Task, Validation


@dataclass
class Decoded:
    """One decode's prompts and replies: prompt ids, completion ids and texts (prompt-major, `samples` each)."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    texts: list[str]

    def part(self, start: int, count: int, samples: int) -> Decoded:
        """Prompts start..start+count and their replies."""
        replies = slice(start * samples, (start + count) * samples)
        return Decoded(self.prompt_ids[start:start + count], self.completion_ids[replies], self.texts[replies])


@dataclass
class Played:
    """One task type's decode in a round's step and the world's verdict on each reply, as plain JSON values (the form
    in which processes that share a round send them to each other)."""

    decoded: Decoded
    verdicts: list[Any]


# The world's verdicts on the replies to some of a type's prompts: judge(type, prompt indices, replies) -> one
# JSON verdict per reply (samples per prompt, prompt-major).
Judge = Callable[[str, list[int], list[str]], list[Any]]


# What becomes of a proposal (the task browser's verdicts): refused by the world, or valid and then new (to the
# solver and the buffer), a held-out program (no reward, in no update, never solved), or a repeat (no reward).
INVALID, TRIVIAL, NEW, HELD_OUT, DUPLICATE = "invalid", "trivial", "valid", "held-out", "duplicate"


@dataclass
class Proposals:
    """One task type's proposals of a round: the prompts, the decode, the world's verdicts, and each one's fate
    (`fates[i]`, with `reasons[i]`): NEW tasks go to the solver and the buffer; a HELD_OUT one (a program of a
    held-out set) teaches nothing: no reward, no episode in the proposer's update, never solved; a DUPLICATE (a
    program the run has seen, or one more of a shape the buffer holds enough of) earns nothing and is not solved."""

    prompts: list[str]
    decoded: Decoded
    verdicts: list[Validation]
    fates: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # the score step's, one per proposal
    rates: list[float | None] = field(default_factory=list)  # the solve rate each reward came from (None: none)

    def tasks(self, fate: str) -> list[Task]:
        return [v.task for v, f in zip(self.verdicts, self.fates, strict=True) if f == fate and v.task is not None]

    @property
    def fresh(self) -> list[Task]:
        return self.tasks(NEW)


@dataclass
class Attempts:
    """One task type's solver tasks of a round (its new proposals first, `fresh` of them, then buffer tasks) and the
    world's checks of their answers (`samples` each, task-major)."""

    tasks: list[Task]
    fresh: int
    samples: int
    replies: Decoded | None = None
    checks: list[Check] = field(default_factory=list)

    def rates(self) -> list[float]:
        """Each task's solve rate."""
        n = self.samples
        return [sum(c.correct for c in self.checks[j * n:(j + 1) * n]) / n for j in range(len(self.tasks))]

    def rate_by_task(self) -> dict[int, float]:
        """Solve rates by the task object's id: a proposal's task is found as the very object that was solved."""
        return {id(t): r for t, r in zip(self.tasks, self.rates(), strict=True)}


@dataclass
class RoundStats:
    """Counts and clocks of one round."""

    proposals: int = 0
    valid: int = 0
    trivial: int = 0
    heldout_hits: int = 0
    duplicates: int = 0
    answers: int = 0
    format_errors: int = 0
    generated_tokens: int = 0
    lengths: list[int] = field(default_factory=list)
    decode_s: float = 0.0
    check_s: float = 0.0
    by_type: dict[str, float] = field(default_factory=dict)

    def summary(self, rewards: list[float], episodes: int) -> dict[str, float]:
        busy = self.decode_s + self.check_s
        return {**self.by_type,
                "reward": sum(rewards) / max(1, len(rewards)),
                "proposal_validity": self.valid / max(1, self.proposals),
                "proposals_trivial": self.trivial / max(1, self.proposals),
                "proposals_heldout": self.heldout_hits / max(1, self.proposals),
                "proposals_duplicate": self.duplicates / max(1, self.proposals),
                "format_errors": self.format_errors / max(1, self.answers),
                "response_length": sum(self.lengths) / max(1, len(self.lengths)),
                "rollout_tokens_per_s": self.generated_tokens / max(self.decode_s, 1e-9),
                "checks_per_s": (self.answers + self.proposals) / max(self.check_s, 1e-9),
                "check_share": self.check_s / max(busy, 1e-9), "episodes": float(episodes)}


@dataclass
class Round:
    """The episodes of a round with their rewards and advantage groups, and the rollouts shown in the window."""

    index: int
    episodes: list[Episode] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    groups: list[tuple[str, ...]] = field(default_factory=list)
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    stats: RoundStats = field(default_factory=RoundStats)

    def add(self, episode: Episode, reward: float, group: tuple[str, ...]) -> None:
        self.episodes.append(episode)
        self.rewards.append(reward)
        self.groups.append(group)
        self.stats.lengths.append(len(episode.completion))
        self.stats.generated_tokens += len(episode.completion)

    def batch(self) -> EpisodeBatch:
        """The episodes that teach (advantage normalised per group, not 0, a completion), at least one."""
        kept = teaching_episodes(self.episodes, self.rewards, self.groups)
        return EpisodeBatch(kept, self.stats.summary(self.rewards, len(kept)))
