"""Request -> token ids, the way `generate` does it (so the same settings give the same text).

Completions: a string goes through the engine's `encode_prompt` (plain text); token-id arrays are taken
as they are. Chat: the whole conversation goes through the engine's `encode_messages` (the tokenizer's chat
template with the assistant's turn opened), the one renderer the Generate tab's chat and `generate --chat`
use too. Prompts longer than the model's context keep their end (the model cannot attend further back), as
in the engine's plain-text path.
"""

from __future__ import annotations

from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.generate.prompts import NoChatTemplateError, encode_messages, encode_prompt
from desktop_app.server.errors import ApiError

CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


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


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ApiError(400, f"{where}: only text content is supported, got a {kind!r} part", param=where)
        parts.append(part["text"])
    return "".join(parts)


def chat_prompt(tokenizer: Any, messages: list[Any], context: int | None, vocab: int) -> list[int]:
    """Token ids of a conversation rendered by the model's chat template, ready for the assistant's reply."""
    if not messages:
        raise ApiError(400, "messages is empty: give at least one message", param="messages")
    conversation = []
    for i, m in enumerate(messages):
        role = CHAT_ROLES.get(m.role)
        if role is None:
            raise ApiError(400, f"messages[{i}].role {m.role!r} is not supported (use system, user or assistant; "
                                "tool calls are not supported)", param=f"messages[{i}].role")
        conversation.append({"role": role, "content": _content_text(m.content, f"messages[{i}].content")})
    try:
        ids = encode_messages(tokenizer, conversation)
    except NoChatTemplateError:
        raise ApiError(400, "this model's tokenizer has no chat template, so /v1/chat/completions cannot be used; "
                            "use /v1/completions with a plain-text prompt", param="messages",
                       code="no_chat_template") from None
    except UserError as exc:  # the template refused the messages, or they render to nothing
        raise ApiError(400, str(exc), param="messages") from None
    return _fit(ids, context, vocab)
