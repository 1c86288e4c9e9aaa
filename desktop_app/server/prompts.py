"""Request -> token ids, the way `generate` does it (so the same settings give the same text).

Completions: a string goes through the engine's `encode_prompt` (plain text); token-id arrays are taken
as they are. Chat: the messages are read by the engine's `check_messages` (data/chat.py, the one reading of
chat messages) and the whole conversation goes through `encode_messages` (the tokenizer's chat template with
the assistant's turn opened), the one renderer the Generate tab's chat and `generate --chat` use too.
Prompts longer than the model's context keep their end (the model cannot attend further back), as in the
engine's plain-text path.
"""

from __future__ import annotations

from typing import Any

from desktop_app.engine.data.chat import ChatError, check_messages
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate.prompts import NoChatTemplateError, encode_messages, encode_prompt
from desktop_app.server.errors import ApiError


def _fit(ids: list[int], context: int | None, vocab: int) -> list[int]:
    if vocab and any(i < 0 or i >= vocab for i in ids):
        raise ApiError(400, f"the prompt holds token ids outside this model's vocabulary (0..{vocab - 1})",
                       param="prompt")
    if context and len(ids) > context - 1:
        ids = ids[-(context - 1):]
    return ids


def completion_prompts(tokenizer: Any, prompt: Any, context: int | None, vocab: int) -> list[list[int]]:
    """Token ids of each prompt of a /v1/completions request (a string, strings, ids, or lists of ids)."""
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        items = [prompt]
    elif isinstance(prompt, list):
        items = prompt
    else:
        raise ApiError(400, "prompt must be a string, a list of strings, or token ids", param="prompt")
    if not items:
        raise ApiError(400, "prompt is an empty list: give at least one prompt", param="prompt")
    out = []
    for item in items:
        if isinstance(item, str):
            ids = encode_prompt(tokenizer, item)
        elif isinstance(item, list) and item:
            ids = [int(i) for i in item]
        else:
            raise ApiError(400, "a token-id prompt must not be empty", param="prompt")
        out.append(_fit(ids, context, vocab))
    return out


def chat_prompt(tokenizer: Any, messages: list[Any], context: int | None, vocab: int) -> list[int]:
    """Token ids of a conversation rendered by the model's chat template, ready for the assistant's reply."""
    if not messages:
        raise ApiError(400, "messages is empty: give at least one message", param="messages")
    try:  # OpenAI allows a null content (read as no text, as is an empty list of parts)
        conversation = check_messages([{"role": m.role, "content": m.content or ""} for m in messages])
    except ChatError as exc:
        where = "messages" if exc.index is None else f"messages[{exc.index}]" + (f".{exc.key}" if exc.key else "")
        raise ApiError(400, exc.reason, param=where) from None
    try:
        ids = encode_messages(tokenizer, conversation)
    except NoChatTemplateError:
        raise ApiError(400, "this model's tokenizer has no chat template, so /v1/chat/completions cannot be used; "
                            "use /v1/completions with a plain-text prompt", param="messages",
                       code="no_chat_template") from None
    except UserError as exc:  # the template refused the messages, or they render to nothing
        raise ApiError(400, str(exc), param="messages") from None
    return _fit(ids, context, vocab)
