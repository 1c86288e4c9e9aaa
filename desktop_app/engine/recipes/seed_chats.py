"""A task world's seed tasks as chat records (prompt -> the reference answer), for supervised fine-tuning: the
self-play demo's control on a base model (the same wall time spent imitating solved tasks instead of playing). The
held-out protocol's programs (the reported sets and the run's selection set) are left out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.method_options import SelfPlayOptions
from desktop_app.engine.model.folders import resolve_model_folder
from desktop_app.engine.model.loading import load_tokenizer
from desktop_app.engine.selfplay.prompting import ASK, default_world
from desktop_app.engine.tasks.base import TaskWorld, get_world
from desktop_app.engine.tasks.heldout_protocol import HeldoutProtocol

TASKS_PER_TYPE = 300


def chat_record(world: TaskWorld, task: Any) -> dict[str, Any]:
    """One task as the chat prompts of self-play ask it, answered as they ask for the answer."""
    kind = world.answer_kind(task.type)
    answer = world.reference_answer(task)
    if kind == "program":
        code = answer.strip().strip("`").removeprefix("python").strip() if answer.startswith("```") else answer
        reply = f"```python\n{code}\n```"
    else:
        reply = f"<answer>{answer}</answer>"
    return {"messages": [{"role": "user", "content": f"{world.solve_prompt(task)}\n\n{ASK[kind]}"},
                         {"role": "assistant", "content": reply}]}


def write_seed_chats(path: Path, base: str, options: dict[str, Any], seed: int,
                     per_type: int = TASKS_PER_TYPE) -> Path:
    """Write `per_type` seed tasks of each of the options' task types as chat JSONL; returns the file."""

    o = SelfPlayOptions.from_dict(options)
    name = o.world
    if name == "auto":
        name = default_world(load_tokenizer(resolve_model_folder(base)[0]))
    world = get_world(name, **dict(o.world_options))
    try:
        reserved = HeldoutProtocol.of_run(world, o).reserved
        lines = [json.dumps(chat_record(world, task)) for kind in o.task_types
                 for task in world.generate(kind, per_type, seed, exclude=reserved)]
    finally:
        world.close()
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return path
