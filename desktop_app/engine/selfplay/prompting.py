"""How a model is asked a task world's questions, and how its replies become the world's answers.

Two styles (`PROMPT_STYLES`; "auto" picks chat for a model that brings its own chat template, an instruct model
from elsewhere, and plain for the app's own models, whose tokenizers carry the app's default template whether or
not they ever saw a chat):

    plain  the world's own prompts as text, as the seed corpus shows them (a model pretrained on the corpus, like
           the demo's); a reply ends at EOS or after the world's line budget and is the answer as written
    chat   the world's prompt as one user turn through the model's chat template, with an instruction to answer
           inside <answer> tags (a program: in a code block); the reply ends at the template's end-of-turn token,
           and its answer is extracted (tasks/answers.py: tags, code fences, surrounding prose)

Self-play's rollouts, its held-out evaluation and the `eval` verb all ask through a `TaskPrompter`, so a model is
measured exactly as it is trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from desktop_app.engine.data.chat import CHATML_TEMPLATE, stop_token_ids
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate.prompts import encode_messages
from desktop_app.engine.method_options import PROMPT_STYLES
from desktop_app.engine.selfplay.rollout import TextCodec
from desktop_app.engine.tasks.answers import answer_block, extract_answer
from desktop_app.engine.tasks.base import Task, TaskWorld

ASK = {
    "value": "Reply with the answer only, as a Python value, inside <answer></answer> tags.",
    "call": "Reply with the input only, written as a call f(...), inside <answer></answer> tags.",
    "program": "Reply with the function f only, in a ```python code block.",
}
ASK_PROPOSAL = "Reply with the new task only, written exactly like the examples."


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def is_chat_model(tokenizer: Any) -> bool:
    """A model that brings its own chat template (not one of the app's defaults, which every tokenizer the app
    trains carries): an instruct model, asked through its template when the prompt style is auto."""
    from desktop_app.engine.data.tokenization import CHAT_TEMPLATE  # lazy: tokenizers

    template = getattr(tokenizer, "chat_template", None)
    return isinstance(template, str) and bool(template.strip()) and template not in (CHAT_TEMPLATE, CHATML_TEMPLATE)


def resolve_style(style: str, tokenizer: Any) -> str:
    """plain or chat: what "auto" means for this tokenizer (UserError for chat without a template)."""
    if style not in PROMPT_STYLES:
        raise UserError(f"unknown prompt style {style!r}; choose one of: {', '.join(PROMPT_STYLES)}")
    if style == "auto":
        return "chat" if is_chat_model(tokenizer) else "plain"
    if style == "chat" and not has_chat_template(tokenizer):
        raise UserError("this model's tokenizer has no chat template, so tasks cannot be asked as a chat: use the "
                        "plain prompt style")
    return style


def default_world(tokenizer: Any) -> str:
    """The task world a model plays when none is chosen: python for a chat model, mini for one trained on mini."""
    return "python" if is_chat_model(tokenizer) else "mini"


@dataclass
class TaskPrompter:
    """One model's way of being asked: prompt ids, where a reply stops, and the answer in a reply."""

    codec: TextCodec
    chat: bool
    stop_ids: set[int] = field(default_factory=set)

    @property
    def style(self) -> str:
        return "chat" if self.chat else "plain"

    def _ids(self, text: str) -> list[int]:
        if not self.chat:
            return self.codec.encode(text)

        return encode_messages(self.codec.tokenizer, [{"role": "user", "content": text}])

    def solve_ids(self, world: TaskWorld, task: Task) -> list[int]:
        prompt = world.solve_prompt(task)
        return self._ids(f"{prompt}\n\n{ASK[world.answer_kind(task.type)]}" if self.chat else prompt)

    def propose_ids(self, prompt: str) -> list[int]:
        return self._ids(f"{prompt}\n\n{ASK_PROPOSAL}" if self.chat else prompt)

    def question_ids(self, question: str) -> list[int]:
        """A free question: one user turn (chat), or the text and a line break (plain)."""
        return self._ids(question if self.chat else question.rstrip("\n") + "\n")

    def answer_lines(self, world: TaskWorld, task_type: str) -> int:
        """Lines after which a reply is cut (0: no cut; a chat reply ends with its turn)."""
        return 0 if self.chat else int(getattr(world, "answer_lines", lambda t: 1)(task_type))

    def proposal_lines(self, world: TaskWorld, task_type: str) -> int:
        return 0 if self.chat else int(getattr(world, "proposal_lines", lambda t: 2)(task_type))

    def answer(self, world: TaskWorld, task: Task, reply: str) -> str:
        """What the world checks: the reply itself (plain), or the answer found in it (chat; the whole reply when
        none is found, which the world then calls unparseable)."""
        if not self.chat:
            return reply
        found = extract_answer(reply, world.answer_kind(task.type))
        return found if found is not None else reply

    def finished(self, kind: str) -> Any:
        """For chat replies: a check that a reply's answer is complete (its </answer> tag, or for a program its
        code block closed), so decoding stops there instead of running on in prose; None for plain prompts."""
        if not self.chat:
            return None
        decode = self.codec.decode

        def done(ids: list[int]) -> bool:
            tail = decode(ids[-8:])
            if "</answer>" in tail.lower():
                return True
            return kind == "program" and "```" in tail and decode(ids).count("```") >= 2

        return done

    def proposal(self, reply: str) -> str:
        """What the world validates: a chat reply's <answer> block when it wrote one, else the reply (worlds skip
        code-fence lines and prose they do not need)."""
        block = answer_block(reply) if self.chat else None
        return block if block is not None else reply


def make_prompter(tokenizer: Any, style: str = "auto", model: Any = None) -> TaskPrompter:
    """The prompter of a model: its tokenizer, the style (auto|plain|chat) and the ids that end a reply."""
    chat = resolve_style(style, tokenizer) == "chat"
    codec = TextCodec(tokenizer)
    if chat:

        stops = set(stop_token_ids(tokenizer, model, chat=True))
    else:
        eos = getattr(getattr(model, "config", None), "eos_token_id", None) if model is not None else None
        if eos is None:
            eos = getattr(tokenizer, "eos_token_id", None)
        stops = {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if isinstance(e, int)}
    return TaskPrompter(codec, chat, stops)
