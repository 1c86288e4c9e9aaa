"""Fine-tuning's view of the chat template: a fast tokenizer that can render chats (adding chat tokens and
growing the model's embeddings when needed) and exact loss masks over rendered conversations.

The rendering itself (template, token offsets, where each message's content lies) is data/chat.py's
`ChatRenderer`. A token carries loss when it overlaps an assistant content span, plus the end-of-turn token
right after it (any whitespace tokens between included) so the model learns to stop. Role headers, system
and user turns and text the template injects (a default system prompt) never carry loss.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.engine.data.chat import (
    CHATML_TEMPLATE,
    CHATML_TOKENS,
    ChatRenderer,
    Rendered,
    check_messages,
    own_template,
    spelled_tokens,
    token_id,
)
from desktop_app.engine.errors import UserError
from desktop_app.engine.finetune.formats import RecordError, normalise_record
from desktop_app.engine.method_options import LOSS_ON
from desktop_app.engine.model.folders import resolve_model_folder
from desktop_app.engine.model.gguf_file import is_gguf_file
from desktop_app.engine.model.loading import load_tokenizer

if TYPE_CHECKING:
    from desktop_app.engine.protocols import CausalLM, ChatTokenizer


def as_hf_tokenizer(obj_or_path: Any) -> Any:
    """A transformers fast tokenizer from one, a `tokenizers.Tokenizer`, a tokenizer.json, or a model /
    run / checkpoint / export folder (the same rules as loading a model)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase

    from desktop_app.engine.data.tokenization import hf_tokenizer  # lazy: tokenizers

    if isinstance(obj_or_path, PreTrainedTokenizerBase):
        tok = obj_or_path
    elif isinstance(obj_or_path, Tokenizer):
        tok = hf_tokenizer(obj_or_path)
    else:

        p = Path(obj_or_path).expanduser()
        if p.is_file() and not is_gguf_file(p):
            tok = hf_tokenizer(p)
        else:

            tok = load_tokenizer(resolve_model_folder(p)[0])
    if not getattr(tok, "is_fast", False):
        raise UserError("fine-tuning needs a fast (tokenizer.json) tokenizer; this one is a slow Python "
                        "tokenizer: convert it once with transformers' AutoTokenizer and save_pretrained")
    return tok


def ensure_chat_tokens(tokenizer: ChatTokenizer, model: CausalLM | None = None) -> list[str]:
    """Make `tokenizer` able to render chats, and `model` able to embed every token. Returns log lines.

    No chat template → the ChatML default is set and <|im_start|>/<|im_end|> are added as special tokens
    where missing. Own template → any <|...|> token it spells out that the vocabulary lacks is added. With
    a model, the embedding matrix (and an untied output layer) grows to the tokenizer's length and every
    new token's row is the mean of the old rows. Call it before wrapping the model (LoRA/QLoRA): with
    frozen embeddings the new rows stay equal to the mean, so train them (modules_to_save or peft's
    trainable_token_indices) when tokens were added.
    """
    from tokenizers import AddedToken

    log: list[str] = []
    own = own_template(tokenizer)
    if own is None:
        tokenizer.chat_template = CHATML_TEMPLATE
        wanted = list(CHATML_TOKENS)
        log.append("the tokenizer has no chat template: using the ChatML default "
                   "(<|im_start|>role\\n...<|im_end|>)")
    else:
        wanted = spelled_tokens(own)
    missing = [t for t in wanted if token_id(tokenizer, t) is None]
    added_ids: list[int] = []
    if missing:
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in missing], special_tokens=True)
        added_ids = [int(token_id(tokenizer, t)) for t in missing]  # type: ignore[arg-type]
        log.append(f"added the chat token{'s' if len(missing) > 1 else ''} "
                   f"{', '.join(f'{t} (id {i})' for t, i in zip(missing, added_ids, strict=True))} to the tokenizer")
    if model is not None:
        log += _grow_embeddings(model, len(tokenizer), added_ids)
    return log


def _grow_embeddings(model: Any, vocab: int, added_ids: list[int]) -> list[str]:
    import torch

    emb = model.get_input_embeddings()
    old_rows = int(emb.weight.shape[0])
    new_ids = sorted(set(added_ids) | set(range(old_rows, vocab)))
    if not new_ids:
        return []
    old_in = emb.weight.detach()[:old_rows]
    out = model.get_output_embeddings()
    old_out = out.weight.detach()[:old_rows].clone() if out is not None else None
    old_bias = (out.bias.detach()[:old_rows].clone()
                if out is not None and getattr(out, "bias", None) is not None else None)
    keep = torch.ones(old_rows, dtype=torch.bool)
    keep[[i for i in new_ids if i < old_rows]] = False
    mean_in = old_in[keep].float().mean(0)
    mean_out = old_out[keep].float().mean(0) if old_out is not None else None
    mean_bias = old_bias[keep].float().mean() if old_bias is not None else None
    if vocab > old_rows:
        model.resize_token_embeddings(vocab, mean_resizing=False)
    emb = model.get_input_embeddings()
    out = model.get_output_embeddings()
    tied = out is not None and out.weight.data_ptr() == emb.weight.data_ptr()
    with torch.no_grad():
        index = torch.tensor(new_ids, dtype=torch.long, device=emb.weight.device)
        emb.weight[index] = mean_in.to(emb.weight.dtype).to(emb.weight.device)
        if out is not None and not tied and mean_out is not None:
            out.weight[index] = mean_out.to(out.weight.dtype).to(out.weight.device)
            if mean_bias is not None and getattr(out, "bias", None) is not None:
                out.bias[index] = mean_bias.to(out.bias.dtype)
    where = "embeddings" + ("" if out is None or tied else " and output layer")
    grew = f"resized the model's {where} from {old_rows} to {vocab} rows; " if vocab > old_rows else ""
    return [f"{grew}the rows of the {len(new_ids)} new token{'s' if len(new_ids) > 1 else ''} start as the mean "
            f"of the old rows ({where})"]


def check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    """UserError naming the setting unless `value` is one of `choices`."""
    if value not in choices:
        raise UserError(f"{name} must be one of {', '.join(choices)}, not {value!r}")


def loss_targets(messages: list[dict[str, str]], loss_on: str, first: int = 0) -> list[int]:
    """Indices of the assistant messages (from `first` on) whose tokens carry loss under `loss_on`."""
    found = [i for i in range(first, len(messages)) if messages[i]["role"] == "assistant"]
    return found[-1:] if loss_on == "last" else found


def render_masked(chat: ChatRenderer, messages: list[dict[str, str]], loss_on: str) -> tuple[Rendered, list[bool]]:
    """A normalised conversation rendered, with its loss mask; RecordError when no token carries loss."""
    r = chat.render(messages)
    if loss_on == "all":
        return r, [True] * len(r.ids)
    mask = chat.mask(r, messages, loss_targets(messages, loss_on))
    if not any(mask):
        raise RecordError("no token carries loss: the chat template renders no assistant token to train on")
    return r, mask


def render_chat(tokenizer: ChatTokenizer, messages: list[dict[str, Any]], *, loss_on: str = "assistant",
                ) -> tuple[list[int], list[bool]]:
    """Token ids of a conversation rendered through the chat template, and per token whether it carries
    loss ("assistant": assistant contents + their end-of-turn token; "last": only the final assistant
    turn; "all": every token). UserError (a RecordError or ChatError) with the reason when it cannot be
    rendered."""
    check_choice(loss_on, LOSS_ON, "loss_on")
    normal = check_messages(messages, "messages")
    r, mask = render_masked(ChatRenderer(tokenizer), normal, loss_on)
    return r.ids, mask


def preview(tokenizer: ChatTokenizer, record: Any, *, loss_on: str = "assistant") -> list[tuple[str, bool]]:
    """(token text, carries loss) per token of one record (raw in any format, or normalised) rendered
    through the chat template; the texts join to exactly the rendered text. A preference record shows
    prompt + chosen with loss on the chosen answer. UserError with the reason if it cannot be used."""
    check_choice(loss_on, LOSS_ON, "loss_on")
    chat = ChatRenderer(tokenizer)
    rec = normalise_record(record)
    if "chosen" in rec:
        messages = rec["prompt"] + rec["chosen"]
        r = chat.render(messages)
        mask = ([True] * len(r.ids) if loss_on == "all"
                else chat.mask(r, messages, loss_targets(messages, loss_on, len(rec["prompt"]))))
    else:
        r, mask = render_masked(chat, rec["messages"], loss_on)
    pieces: list[tuple[str, bool]] = []
    cursor = 0
    for (_, b), carries in zip(r.offsets, mask, strict=True):
        end = max(b, cursor)
        pieces.append((r.text[cursor:end], carries))
        cursor = end
    if pieces and cursor < len(r.text):
        pieces[-1] = (pieces[-1][0] + r.text[cursor:], pieces[-1][1])
    return pieces
