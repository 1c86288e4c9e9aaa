"""Prompts for generation: a plain-text prompt or a conversation as token ids, fitted to the model's context.

Conversations are read by data/chat.py's `check_messages` (the one reading of chat messages) and rendered by
the tokenizer's own chat template (`encode_messages`): the Generate tab's chat, `generate --chat` and the
server's /v1/chat/completions all come here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from desktop_app.engine.data.chat import check_messages, render_text
from desktop_app.engine.errors import UserError


def context_length(model: Any) -> int | None:
    """The most tokens the model attends over (max_position_embeddings / n_positions), or None when unknown."""
    cfg = model.config
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class NoChatTemplateError(UserError):
    """The tokenizer has no chat template, so a conversation cannot be rendered (callers may word it their way)."""


def encode_messages(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Token ids of a conversation (system/user/assistant messages, in order) rendered by the tokenizer's chat
    template with the assistant's turn opened (add_generation_prompt), ready for the model's reply.

    The one renderer of conversations: the Generate tab's chat, `generate --chat` and the server's
    /v1/chat/completions all come here. It renders what it is given; fitting a long conversation into the
    model's context is fit_messages' job. The rendered text already holds the template's special tokens,
    so the tokenizer adds none (as apply_chat_template(tokenize=True) does).
    """
    conversation = check_messages(messages, "conversation")
    if not getattr(tokenizer, "chat_template", None):
        raise NoChatTemplateError("this model's tokenizer has no chat template, so chat mode cannot be used; "
                                  "turn chat mode off to continue the prompt as plain text")
    try:
        text = render_text(tokenizer, conversation, add_generation_prompt=True)
    except Exception as exc:  # the template itself refused (e.g. roles must alternate)
        raise UserError(f"the model's chat template refused this conversation: {exc}") from None
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise UserError("the conversation renders to no tokens")
    return [int(i) for i in ids]


def fit_messages(tokenizer: Any, messages: Sequence[Mapping[str, str]], context: int | None, *,
                 reply_tokens: int = 0) -> tuple[list[dict[str, str]], int]:
    """The newest part of a conversation whose rendering fits the model's context with room for the reply.

    Over-long conversations lose their OLDEST non-system turns (a user message with the replies after it, so
    what is kept still starts with a user turn) until the rendered ids leave min(reply_tokens, context // 2)
    tokens free (at least 1). Cutting the ids instead, as plain prompts are cut, would cut the system prompt
    and the template's markup. System messages and the newest message are always kept: a UserError says so
    when even they do not fit. Returns (kept messages, how many were dropped) so the caller can say so.
    """
    kept = check_messages(messages, "conversation")
    if not context:
        return kept, 0
    room = max(1, min(reply_tokens, context // 2))
    dropped = 0
    # One render per dropped message: conversations that fit a context are short, so linear is fine.
    while (length := len(encode_messages(tokenizer, kept))) > context - room:
        turns = [i for i, m in enumerate(kept) if m["role"] != "system"]
        if len(turns) <= 1:
            raise UserError(f"the conversation does not fit the model's context: the system prompt and the last "
                            f"message take {length} tokens, the context holds {context} and {room} are kept for "
                            "the reply; shorten them (or lower the new-token limit)")
        # The oldest turn with its replies up to the next user message (never the newest message), so the
        # kept part opens with a user message as templates expect.
        end = 1
        while end < len(turns) - 1 and kept[turns[end]]["role"] != "user":
            end += 1
        for i in reversed(turns[:end]):
            del kept[i]
        dropped += end
    return kept, dropped


def encode_prompt(tokenizer: Any, prompt: str | Sequence[Mapping[str, str]], *, chat: bool = False) -> list[int]:
    """Token ids of the prompt. Chat mode renders it with the chat template (encode_messages): a string as one
    user turn, or a whole conversation (a list of {"role", "content"} messages; stream_text takes one as a
    one-item list of prompts, `[messages]`). Plain mode takes a string only."""
    if chat:
        return encode_messages(tokenizer, [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt)
    if not isinstance(prompt, str):
        raise UserError("a conversation (a list of messages) needs chat mode: turn chat mode on")
    ids = tokenizer(prompt)["input_ids"]
    if not ids:
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if start is None:
            raise UserError("the prompt is empty and the tokenizer has no start token: type a prompt")
        ids = [int(start)]
    return [int(i) for i in ids]
