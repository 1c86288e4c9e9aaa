"""Conversations: the one reading of chat messages, the chat template they are rendered with, and where a reply
ends. Torch-free; generation, fine-tuning, the data inspector and the HTTP API all stand on it.

Messages
    `check_messages` reads a conversation as plain {"role": "system"|"user"|"assistant", "content": str} dicts
    ("developer" is read as system, roles in any case; OpenAI text content parts are joined) or raises a
    ChatError naming the first bad message. generate/prompts.py, finetune/formats.py, data/ingest.py and
    server/prompts.py all read messages through it.

Chat template
    The tokenizer's own `chat_template` when it has one, else the ChatML default (CHATML_TEMPLATE; it needs
    CHATML_TOKENS in the vocabulary, which finetune's `ensure_chat_tokens` adds). `ChatRenderer` renders a
    conversation once as text and tokenizes it once with offsets (exactly what `apply_chat_template`
    produces). Where each message's content lies in that text is found by rendering once more with invisible
    markers around every content (checked: the text without the markers must equal the plain rendering), or,
    for templates that change the content (trim and the like), by searching for it after the rendered prefix.
    `ChatRenderer.mask` marks the tokens of chosen assistant messages plus the end-of-turn token right after
    each (any whitespace tokens between included). A special token spelled inside a message (e.g. a literal
    "<|im_end|>") is refused: it would end the turn early. Templates without a system role (Gemma's raise on
    one) get the system text at the start of the first user message, as those models' cards advise
    (`render_text`): the one rendering that generation, fine-tuning and the Modelfile share.

Stop tokens
    One rule, `stop_token_ids`: a reply ends at the tokenizer's (and the model's) end-of-sequence ids and, in
    chat mode, at the chat template's end-of-turn token: the token that closes a rendered assistant turn, which
    is exactly the token fine-tuning teaches a model to end its turn with. Without a template, EOS alone.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from desktop_app.engine.errors import UserError

if TYPE_CHECKING:
    from desktop_app.engine.protocols import CausalLM, ChatTokenizer

CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
TOOL_ROLES = ("tool", "function", "function_call", "observation", "ipython")

CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Invisible markers put around each message's content to find where the template renders it.
_OPEN, _MID, _CLOSE = "\ue000", "\ue001", "\ue002"
_MARK_RE = re.compile(f"{_OPEN}(\\d+){_MID}(.*?){_CLOSE}", re.S)
_TEMPLATE_TOKEN_RE = re.compile(r"<\|[A-Za-z0-9_.\-]{1,64}\|>")


class ChatError(UserError):
    """A conversation that cannot be used; `reason` says why. `index` (0-based) and `key` name the message and
    its field when the fault is in one (the HTTP API reports them as the error's `param`)."""

    def __init__(self, reason: str, index: int | None = None, key: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.index = index
        self.key = key


# ---------------------------------------------------------------------------------------------- messages


def json_kind(value: Any) -> str:
    """A JSON value's kind in words, for messages that say what was found instead."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _content_text(value: Any, what: str, index: int, key: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(p, dict) for p in value):  # OpenAI content parts
        texts = []
        for part in value:
            if part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise ChatError(f"{what} has a {part.get('type', 'non-text')!r} part; only text is supported",
                                index, key)
        return "".join(texts)
    raise ChatError(f"{what} must be a string, not {json_kind(value)}", index, key)


def check_messages(value: Any, what: str = "messages", *, role_key: str = "role", content_key: str = "content",
                   roles: dict[str, str] = CHAT_ROLES) -> list[dict[str, str]]:
    """A conversation (a list or tuple of message objects) as plain {"role", "content"} dicts with the roles
    mapped through `roles` (any case); ChatError naming the first bad message. `what` names the conversation
    in messages; `role_key`/`content_key`/`roles` read other spellings (ShareGPT's "from"/"value")."""
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        raise ChatError(f"'{what}' must be a list of messages, not {json_kind(value)}")
    if not value:
        raise ChatError(f"'{what}' is an empty list: give a non-empty list of messages")
    out = []
    for k, msg in enumerate(value, 1):
        label = f"{what} message {k}"
        if not isinstance(msg, dict):
            raise ChatError(f"{label} must be an object with '{role_key}' and '{content_key}', not {json_kind(msg)}",
                            k - 1)
        if role_key not in msg:
            raise ChatError(f"{label} has no '{role_key}'", k - 1, role_key)
        role = msg[role_key]
        if not isinstance(role, str) or role.lower() not in roles:
            if isinstance(role, str) and role.lower() in TOOL_ROLES:
                raise ChatError(f"{label} has role {role!r}: tool messages are not supported", k - 1, role_key)
            raise ChatError(f"{label} has unknown {role_key} {role!r} (use {', '.join(sorted(set(roles)))})",
                            k - 1, role_key)
        role = roles[role.lower()]
        if msg.get(content_key) is None:
            if msg.get("tool_calls"):
                raise ChatError(f"{label} ({role}) is a tool call: tool calls are not supported", k - 1, "tool_calls")
            raise ChatError(f"{label} ({role}) has no '{content_key}' (no text '{content_key}' given)", k - 1,
                            content_key)
        out.append({"role": role, "content": _content_text(msg[content_key], f"{label} ({role}) '{content_key}'",
                                                           k - 1, content_key)})
    return out


# ------------------------------------------------------------------------------------------ templates


def token_id(tokenizer: ChatTokenizer, token: str) -> int | None:
    """The id of `token` in the tokenizer's vocabulary (added tokens included), or None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.token_to_id(token)
    return tokenizer.get_vocab().get(token)


def own_template(tokenizer: ChatTokenizer) -> str | None:
    """The tokenizer's own chat template (the default one of several), or None."""
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):
        tpl = tpl.get("default") or next(iter(tpl.values()), None)
    return tpl if isinstance(tpl, str) and tpl.strip() else None


def spelled_tokens(template: str) -> list[str]:
    """The <|...|> tokens a template spells out, in order, once each."""
    return list(dict.fromkeys(_TEMPLATE_TOKEN_RE.findall(template)))


def chat_template_of(tokenizer: ChatTokenizer) -> str:
    """The template conversations are rendered with: the tokenizer's own, else the ChatML default (which
    needs <|im_start|>/<|im_end|> in the vocabulary: `ensure_chat_tokens` adds them)."""
    own = own_template(tokenizer)
    if own is not None:
        return own
    missing = [t for t in CHATML_TOKENS if token_id(tokenizer, t) is None]
    if missing:
        raise UserError(f"the tokenizer has no chat template and lacks the ChatML tokens {', '.join(missing)}: "
                        "add them first (ensure_chat_tokens), which also resizes the model's embeddings")
    return CHATML_TEMPLATE


# ------------------------------------------------------------------------------------------- rendering


def fold_system(messages: list[dict[str, str]]) -> list[dict[str, str]] | None:
    """The conversation with a leading system message moved into the first user message (its text, a blank line,
    the user's), for templates without a system role; None when there is no such pair to fold."""
    if len(messages) < 2 or messages[0]["role"] != "system" or messages[1]["role"] != "user":
        return None
    first = {"role": "user", "content": f"{messages[0]['content']}\n\n{messages[1]['content']}"}
    return [first, *messages[2:]]


def render_text(tokenizer: Any, messages: list[dict[str, str]], template: str | None = None, *,
                add_generation_prompt: bool = False) -> str:
    """`messages` rendered by the chat template (the tokenizer's own unless `template`) as text; a template that
    refuses a leading system message gets it folded into the first user message (fold_system). Raises what the
    template raises when it refuses anything else."""
    plain = [{"role": m["role"], "content": m["content"]} for m in messages]
    try:
        out = tokenizer.apply_chat_template(plain, chat_template=template, tokenize=False,
                                            add_generation_prompt=add_generation_prompt)
    except Exception:  # jinja errors, raise_exception() in templates
        folded = fold_system(plain)
        if folded is None:
            raise
        out = tokenizer.apply_chat_template(folded, chat_template=template, tokenize=False,
                                            add_generation_prompt=add_generation_prompt)
    return out if isinstance(out, str) else str(out)


@dataclass
class Rendered:
    """A conversation rendered through the chat template: its text, token ids and offsets, and where each
    message's content lies in the text."""

    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    spans: dict[int, tuple[int, int]]  # message index -> char span of its content in text


class ChatRenderer:
    """Renders conversations of one tokenizer (template and special-token sets looked up once)."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise UserError("fine-tuning needs a fast tokenizer (one with a tokenizer.json): use as_hf_tokenizer")
        self.tok = tokenizer
        self.template = chat_template_of(tokenizer)
        special = {int(i) for i in tokenizer.all_special_ids}
        turn_end = set(special)
        for tid, added in tokenizer.added_tokens_decoder.items():
            if added.special:
                special.add(int(tid))
            if added.special or not added.content.isspace():
                turn_end.add(int(tid))
        self.special = special  # may not appear inside a message
        self.turn_end = turn_end  # may end an assistant turn

    def text(self, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
        """The conversation rendered by the template, as text; ChatError when the template refuses it."""
        try:
            return render_text(self.tok, messages, self.template, add_generation_prompt=add_generation_prompt)
        except Exception as exc:  # jinja errors, raise_exception() in templates
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise ChatError(f"the chat template refuses this conversation: {first}") from None

    def _marked_spans(self, messages: list[dict[str, str]], plain: str) -> dict[int, tuple[int, int]] | None:
        if any(ch in m["content"] for m in messages for ch in (_OPEN, _MID, _CLOSE)):
            return None
        marked = [{"role": m["role"], "content": f"{_OPEN}{i}{_MID}{m['content']}{_CLOSE}"}
                  for i, m in enumerate(messages)]
        try:
            text = self.text(marked)
        except ChatError:
            return None
        pieces: list[str] = []
        spans: dict[int, tuple[int, int]] = {}
        pos = last = 0
        for match in _MARK_RE.finditer(text):
            pieces.append(text[last: match.start()])
            pos += match.start() - last
            i, content = int(match.group(1)), match.group(2)
            if i in spans or i >= len(messages):
                return None
            spans[i] = (pos, pos + len(content))
            pieces.append(content)
            pos += len(content)
            last = match.end()
        pieces.append(text[last:])
        stripped = "".join(pieces)
        if stripped != plain or any(ch in stripped for ch in (_OPEN, _MID, _CLOSE)):
            return None
        return spans

    def _searched_spans(self, messages: list[dict[str, str]], plain: str) -> dict[int, tuple[int, int]]:
        """For templates that change the content (trim, ...): find each message in order, an assistant one
        only after the rendered prefix that ends with its generation prompt."""
        spans: dict[int, tuple[int, int]] = {}
        pos = 0
        for i, m in enumerate(messages):
            lo = pos
            if m["role"] == "assistant" and i > 0:
                try:
                    prefix = self.text(messages[:i], add_generation_prompt=True)
                except ChatError:
                    prefix = ""
                if plain.startswith(prefix):
                    lo = max(lo, len(prefix))
            for candidate in (m["content"], m["content"].strip()):
                k = plain.find(candidate, lo) if candidate else -1
                if k >= 0:
                    spans[i] = (k, k + len(candidate))
                    pos = k + len(candidate)
                    break
        return spans

    def render(self, messages: list[dict[str, str]]) -> Rendered:
        """Text, ids, offsets and content spans of a conversation; ChatError for a special token inside a message."""
        plain = self.text(messages)
        spans = self._marked_spans(messages, plain)
        if spans is None:
            spans = self._searched_spans(messages, plain)
        enc = self.tok(plain, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        ids = [int(t) for t in enc["input_ids"]]
        offsets = [(int(a), int(b)) for a, b in enc["offset_mapping"]]
        for k, tid in enumerate(ids):
            if tid in self.special:
                a, b = offsets[k]
                for i, (s, e) in spans.items():
                    if s <= a and b <= e and a < b:
                        raise ChatError(
                            f"message {i + 1} ({messages[i]['role']}) contains the special token "
                            f"{plain[a:b]!r}, which the chat template uses to mark turns: remove it")
        return Rendered(plain, ids, offsets, spans)

    def mask(self, r: Rendered, messages: list[dict[str, str]], targets: Iterable[int]) -> list[bool]:
        """True on the tokens of the target assistant messages and the end-of-turn token after each."""
        n = len(r.ids)
        mask = [False] * n
        starts = [a for a, _ in r.offsets]
        for i in targets:
            if i not in r.spans:
                raise ChatError(f"message {i + 1} ({messages[i]['role']}) does not appear in the text the chat "
                                  "template renders, so it is unclear which tokens to train on")
            s, e = r.spans[i]
            j = bisect_left(starts, s)
            while j > 0 and r.offsets[j - 1][1] > s:
                j -= 1  # a token that began before the content but reaches into it
            while j < n and r.offsets[j][0] < e:
                mask[j] = True
                j += 1
            pending: list[int] = []
            while j < n:
                if r.ids[j] in self.turn_end:
                    for p in (*pending, j):
                        mask[p] = True
                    break
                a, b = r.offsets[j]
                if r.text[a:b].strip():
                    break  # no end-of-turn token: the template ends turns with plain text
                pending.append(j)
                j += 1
        return mask


# --------------------------------------------------------------------------------------------- stop tokens


def end_of_turn_id(tokenizer: ChatTokenizer) -> int | None:
    """The token the chat template closes an assistant turn with (<|im_end|>, <|eot_id|>, <|end|>, eos...), or
    None (no usable template, or one that ends turns with plain text)."""
    try:
        renderer = ChatRenderer(tokenizer)
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        r = renderer.render(messages)
        mask = renderer.mask(r, messages, [1])
    except UserError:
        return None
    last = max((k for k, m in enumerate(mask) if m), default=None)
    return r.ids[last] if last is not None and r.ids[last] in renderer.turn_end else None


def stop_token_ids(tokenizer: ChatTokenizer, model: CausalLM | None = None, *, chat: bool = True) -> list[int]:
    """Ids that end a reply, each once: the tokenizer's end-of-sequence id; with `model`, its generation
    config's and config's eos_token_id (an id or a list); with `chat`, the chat template's end-of-turn token
    (end_of_turn_id), so a chat reply stops where its turn ends and falls back to EOS alone without one."""
    candidates: list[Any] = [getattr(tokenizer, "eos_token_id", None)]
    if model is not None:
        candidates.append(getattr(getattr(model, "generation_config", None), "eos_token_id", None))
        candidates.append(getattr(getattr(model, "config", None), "eos_token_id", None))
    ids: list[int] = []
    for c in candidates:
        for i in c if isinstance(c, (list, tuple)) else [c]:
            if isinstance(i, int) and i not in ids:
                ids.append(int(i))
    if chat:
        turn = end_of_turn_id(tokenizer)
        if turn is not None and turn not in ids:
            ids.append(turn)
    return ids
