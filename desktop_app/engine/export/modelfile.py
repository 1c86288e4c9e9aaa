"""An Ollama Modelfile beside a GGUF export, so `ollama create NAME -f NAME.Modelfile` works as it is.

Ollama templates are Go templates, the model's chat template is Jinja. Rather than parse Jinja, the translator
*observes* the template: it renders probe conversations (marker words as contents) through transformers'
sandboxed Jinja environment (`apply_chat_template`), reads off what each role's message is wrapped in (prefix
and suffix), what comes before the first message (with and without a system message: templates such as
SmolLM2's insert a default system prompt) and the generation prompt, and writes one Go template built from those
pieces. It then checks the pieces reproduce the Jinja rendering of several other conversations exactly; a
template that is not a plain concatenation of wrapped messages (llama-2's system prompt inside the first user
turn, templates that drop or reorder messages) is reported as not translatable, and the Modelfile says so and
leaves TEMPLATE out. This covers ChatML (Qwen, SmolLM, ours), llama-3, Phi-3, Zephyr, Gemma and the like.
Stop parameters: the chat template's end-of-turn token and the end-of-sequence token (data/chat.py's rule).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.engine.data.chat import end_of_turn_id, fold_system, own_template, render_text

if TYPE_CHECKING:
    from desktop_app.engine.protocols import ChatTokenizer

_SYS, _USERS, _ASSTS = "AZRSYSTEMTEXT", ("AZRUSERONE", "AZRUSERTWO", "AZRUSERTHREE"), ("AZRREPLYONE", "AZRREPLYTWO")


class TemplateNotTranslatable(Exception):
    """The chat template is not a concatenation of wrapped messages (the reason says where it differs)."""


@dataclass(frozen=True)
class Wrappers:
    """What a concatenative chat template puts around each message."""

    start_without_system: str  # before the first message when it is not a system message (BOS, default system)
    start_with_system: str  # before a leading system message (BOS)
    prefix: dict[str, str]  # role -> text before its content
    suffix: dict[str, str]  # role -> text after its content
    generation: str  # the assistant turn's opening, after the last message
    # a template without a system role: a leading system message opens the first user turn (data/chat.py's
    # fold_system), so the user message right after it gets no prefix of its own
    fold_system: bool = False
    # Mistral's templates: the system text (then suffix["system"]) opens the last message when it is a user's
    system_last: bool = False
    # what the template adds after a whole conversation rendered without a generation prompt (Phi-3's EOS): a
    # training-time closing, which Ollama, always generating, never renders
    end: str = ""

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """What the Go template below produces for `messages` (used to check the translation)."""
        first_system = bool(messages) and messages[0]["role"] == "system"
        out = [self.start_with_system if first_system else self.start_without_system]
        for i, m in enumerate(messages):
            last = i == len(messages) - 1
            folded = self.fold_system and i == 1 and first_system and m["role"] == "user"
            if self.system_last and m["role"] == "system":
                continue
            system = messages[0]["content"] + self.suffix["system"] \
                if self.system_last and last and first_system and m["role"] == "user" else ""
            out.append(("" if folded else self.prefix[m["role"]]) + system + m["content"])
            if not (last and m["role"] == "assistant"):
                out.append(self.suffix[m["role"]])
            if last and m["role"] != "assistant" and add_generation_prompt:
                out.append(self.generation)
        if not add_generation_prompt:
            out.append(self.end)
        return "".join(out)

    def _system_last_branch(self, keyword: str, role: str) -> str:
        """Mistral's shape in Go: a system message prints nothing; the last message, a user's, carries its text."""
        if role == "system":
            return f'{{{{- {keyword} eq .Role "system" }}}}'
        q = lambda text: "{{ " + json.dumps(text, ensure_ascii=False) + " }}" if text else ""  # noqa: E731
        system = (f'{{{{ if and $last (eq (index $.Messages 0).Role "system") }}}}'
                  f'{{{{ (index $.Messages 0).Content }}}}{q(self.suffix["system"])}{{{{ end }}}}')
        return (f'{{{{- {keyword} eq .Role "user" }}}}{q(self.prefix["user"])}{system}{{{{ .Content }}}}'
                f'{q(self.suffix["user"])}')

    def go_template(self) -> str:
        """The Go template. Every literal is a quoted string action ({{ "..." }}), never raw text, so the
        whitespace-trimming markers that lay the template out cannot eat a newline the format needs."""

        def q(text: str) -> str:
            return "{{ " + json.dumps(text, ensure_ascii=False) + " }}" if text else ""

        branches = []
        for k, role in enumerate(("system", "user", "assistant")):
            keyword = "if" if k == 0 else "else if"
            after = (f"{{{{ if not $last }}}}{q(self.suffix[role])}{{{{ end }}}}" if role == "assistant"
                     else q(self.suffix[role]))
            prefix = q(self.prefix[role])
            if self.system_last and role != "assistant":
                branches.append(self._system_last_branch(keyword, role))
                continue
            if role == "user" and self.fold_system and prefix:
                prefix = (f'{{{{ if not (and (eq $i 1) (eq (index $.Messages 0).Role "system")) }}}}{prefix}'
                          "{{ end }}")
            branches.append(f'{{{{- {keyword} eq .Role "{role}" }}}}{prefix}{{{{ .Content }}}}{after}')
        return (
            f'{{{{- if and .Messages (eq (index .Messages 0).Role "system") }}}}{q(self.start_with_system)}'
            f"{{{{- else }}}}{q(self.start_without_system)}{{{{- end }}}}\n"
            "{{- range $i, $_ := .Messages }}\n"
            "{{- $last := eq (len (slice $.Messages $i)) 1 }}\n"
            + "\n".join(branches) + "\n{{- end }}\n"
            f'{{{{- if and $last (ne .Role "assistant") }}}}{q(self.generation)}{{{{ end }}}}\n'
            "{{- end }}"
        )


def _render(tokenizer: Any, messages: list[dict[str, str]], gen: bool) -> str:
    try:
        return render_text(tokenizer, messages, add_generation_prompt=gen)
    except Exception as exc:  # a template may raise for conversations it does not accept
        raise TemplateNotTranslatable(f"it refuses a plain conversation ({str(exc)[:120]})") from None


def _between(text: str, start: str, end: str | None) -> str:
    i = text.index(start) + len(start)
    return text[i:] if end is None else text[i:text.index(end, i)]


def _strip_end(text: str, tail: str, what: str) -> str:
    if not text.endswith(tail):
        raise TemplateNotTranslatable(f"{what} is not followed by the same text each time")
    return text[: len(text) - len(tail)]


def wrappers_of(tokenizer: ChatTokenizer) -> Wrappers:
    """The wrappers of the tokenizer's chat template, checked on several conversations; TemplateNotTranslatable."""
    u1, u2, _ = _USERS
    a1, _ = _ASSTS
    msg = lambda role, text: {"role": role, "content": text}  # noqa: E731
    full = [msg("system", _SYS), msg("user", u1), msg("assistant", a1), msg("user", u2)]
    end = _closing_text(tokenizer)
    plain = _plain(tokenizer, full, end)
    with_gen = _render(tokenizer, full, True)
    markers = [_SYS, u1, a1, u2]
    positions = [plain.find(m) for m in markers]
    if not isinstance(tokenizer, _SystemRefused) and 0 <= positions[2] < positions[0] < positions[3]:
        return _system_last_wrappers(tokenizer)
    if any(p < 0 for p in positions) or positions != sorted(positions) or any(plain.count(m) != 1 for m in markers):
        raise TemplateNotTranslatable("it does not render each message's text once, in order")
    if not with_gen.startswith(plain):
        raise TemplateNotTranslatable("its generation prompt changes what comes before it")
    generation = with_gen[len(plain):]
    suffix_user = _between(plain, u2, None)
    # [system, user, assistant] without a generation prompt: what follows the assistant's text is its suffix
    three = _plain(tokenizer, full[:3], end)
    suffix_assistant = _between(three, a1, None)
    prefix_user = _between(plain, a1, u2)
    if not prefix_user.startswith(suffix_assistant):
        raise TemplateNotTranslatable("an assistant message is not closed the same way each time")
    prefix_user = prefix_user[len(suffix_assistant):]
    between_user_assistant = _between(plain, u1, a1)
    if not between_user_assistant.startswith(suffix_user):
        raise TemplateNotTranslatable("a user message is not closed the same way each time")
    prefix_assistant = between_user_assistant[len(suffix_user):]
    between_system_user = _between(plain, _SYS, u1)
    before_system = plain[: plain.index(_SYS)]
    folds = _refuses_system(tokenizer, full[:2])
    suffix_system = between_system_user if folds else _strip_end(between_system_user, prefix_user, "the system message")
    prefix_system = prefix_user if folds else prefix_user.replace("user", "system")  # the usual shape; checked below
    if prefix_system and before_system.endswith(prefix_system):
        start_with_system = before_system[: len(before_system) - len(prefix_system)]
    else:
        start_with_system, prefix_system = "", before_system
    no_system = _plain(tokenizer, full[1:], end)
    start_without_system = _strip_end(no_system[: no_system.index(u1)], prefix_user, "the first user message")
    w = Wrappers(start_without_system, start_with_system,
                 {"system": prefix_system, "user": prefix_user, "assistant": prefix_assistant},
                 {"system": suffix_system, "user": suffix_user, "assistant": suffix_assistant}, generation,
                 fold_system=folds, end=end)
    _check_probes(tokenizer, w)
    return w


def _check_probes(tokenizer: Any, w: Wrappers) -> None:
    """The wrappers reproduce the template on conversations they were not read from; TemplateNotTranslatable."""
    u1, u2, u3 = _USERS
    a1, a2 = _ASSTS
    msg = lambda role, text: {"role": role, "content": text}  # noqa: E731
    probes = [
        [msg("user", u1)],
        [msg("system", _SYS), msg("user", u1)],
        [msg("user", u1), msg("assistant", a1), msg("user", u2), msg("assistant", a2), msg("user", u3)],
        [msg("system", _SYS), msg("user", u1), msg("assistant", a1), msg("user", u2), msg("assistant", a2),
         msg("user", u3)],
    ]
    for probe in probes:
        for gen in (True, False):
            if _render(tokenizer, probe, gen) != w.render(probe, gen):
                raise TemplateNotTranslatable(f"a conversation of {len(probe)} messages renders differently from "
                                              "wrapped messages in a row")


class _SystemRefused:
    """The tokenizer, but its template refuses a leading system message (so render_text folds it into the first user
    turn): how the wrappers of a template that puts the system text into the last user turn are read off."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)

    def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        if messages and messages[0]["role"] == "system":
            raise TemplateNotTranslatable("a system message")
        return self.tokenizer.apply_chat_template(messages, **kwargs)


def _system_last_wrappers(tokenizer: Any) -> Wrappers:
    """Mistral's shape (the system text opens the last user message), checked on the real template."""
    folded = wrappers_of(_SystemRefused(tokenizer))
    w = dataclasses.replace(folded, fold_system=False, system_last=True,
                            start_with_system=folded.start_without_system)
    _check_probes(tokenizer, w)
    return w


def _closing_text(tokenizer: Any) -> str:
    """The EOS text a template puts after a conversation only when no generation prompt follows (Phi-3), else ""."""
    eos = getattr(tokenizer, "eos_token", None)
    conversation = [{"role": "user", "content": _USERS[0]}]
    if not isinstance(eos, str) or not eos:
        return ""
    closed = _render(tokenizer, conversation, False)
    if closed.endswith(eos) and not _render(tokenizer, conversation, True).endswith(eos):
        return eos
    return ""


def _plain(tokenizer: Any, messages: list[dict[str, str]], end: str) -> str:
    """The rendering without a generation prompt, less the template's closing text."""
    text = _render(tokenizer, messages, False)
    return text[: len(text) - len(end)] if end and text.endswith(end) else text


def _refuses_system(tokenizer: Any, system_and_user: list[dict[str, str]]) -> bool:
    """The template itself refuses a system message (render_text then folds it into the first user turn)."""
    try:
        tokenizer.apply_chat_template(system_and_user, tokenize=False)
    except Exception:  # Gemma's templates raise_exception() on a system role
        return fold_system(system_and_user) is not None
    return False


def template_name(w: Wrappers) -> str:
    """A familiar name for the translated format, for logs."""
    text = w.prefix["user"] + w.generation
    for needle, name in (("<|im_start|>", "ChatML"), ("<|start_header_id|>", "llama-3"), ("<|user|>", "Zephyr/Phi-3"),
                         ("<start_of_turn>", "Gemma"), ("[INST]", "Mistral")):
        if needle in text:
            return name
    return "custom"


@dataclass
class ModelfileResult:
    text: str
    translated: bool
    note: str  # one line for the export log


def modelfile_text(gguf_name: str, tokenizer: ChatTokenizer, context_length: int | None) -> ModelfileResult:
    """The Modelfile for `gguf_name` (a file in the same folder) and the model's tokenizer."""
    lines = ["# Ollama Modelfile written by AZR Model Trainer:", f"#   ollama create NAME -f {Path(gguf_name).stem}"
             ".Modelfile", f"FROM ./{gguf_name}"]
    template = own_template(tokenizer)
    translated = False
    if template is None:
        note = "no chat template: Ollama continues prompts as plain text"
        lines.insert(2, "# The model has no chat template: prompts are continued as plain text.")
    else:
        try:
            w = wrappers_of(tokenizer)
        except TemplateNotTranslatable as exc:
            note = (f"the chat template could not be translated to Ollama's Go template ({exc}); the Modelfile has "
                    "no TEMPLATE: add one by hand")
            lines.insert(2, f"# {note}")
        else:
            translated = True
            note = f"chat template translated ({template_name(w)})"
            lines += [f"# chat template translated from the model's Jinja template ({template_name(w)})",
                      f'TEMPLATE """{w.go_template()}"""']
    stops: list[str] = []
    ids = [end_of_turn_id(tokenizer) if template is not None else None, getattr(tokenizer, "eos_token_id", None)]
    for i in ids:
        if isinstance(i, int):
            token = tokenizer.convert_ids_to_tokens(i)
            if isinstance(token, str) and token and token not in stops and '"' not in token:
                stops.append(token)
    lines += [f'PARAMETER stop "{s}"' for s in stops]
    if context_length:
        lines.append(f"PARAMETER num_ctx {min(int(context_length), 8192)}")
    return ModelfileResult("\n".join(lines) + "\n", translated, note)
