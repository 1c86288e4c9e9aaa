"""Fine-tuning examples: SFT examples (token ids + labels, loss only where chat_template.py's mask says) and
DPO preference examples (prompt, chosen and rejected completion ids) built from data files, with a verdict for
every record truncated, dropped or in error; and packing SFT examples into fixed-size rows.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from desktop_app.engine.data.chat import ChatError, ChatRenderer
from desktop_app.engine.errors import UserError
from desktop_app.engine.finetune.chat_template import check_choice, loss_targets, render_masked
from desktop_app.engine.finetune.formats import (
    SFT_FORMATS,
    FileRead,
    RecordError,
    RecordVerdict,
    file_verdicts,
    read_files,
    refuse_unusable,
    summary_verdict,
)
from desktop_app.engine.method_options import LOSS_ON, OVERLONG

IGNORE_INDEX = -100
ExampleT = TypeVar("ExampleT")  # an example type (SFTExample, PreferenceExample)


@dataclass
class SFTExample:
    """One SFT training sequence: token ids and per-token labels."""

    input_ids: list[int]
    labels: list[int]  # IGNORE_INDEX (-100) where no loss


@dataclass
class PreferenceExample:
    """One DPO pair: the rendered prompt's ids and each answer's completion ids."""

    prompt_ids: list[int]
    chosen_ids: list[int]  # completion only
    rejected_ids: list[int]  # completion only


# -------------------------------------------------------------------------------------------- building


def _sft_example(chat: ChatRenderer, messages: list[dict[str, str]], max_len: int, loss_on: str,
                 overlong: str) -> tuple[SFTExample, str | None]:
    r, mask = render_masked(chat, messages, loss_on)
    ids, n = r.ids, len(r.ids)
    note = None
    if n > max_len:
        if overlong == "drop":
            raise RecordError(f"{n} tokens, longer than max_len {max_len}: dropped", "dropped")
        total = sum(mask)
        ids, mask = ids[:max_len], mask[:max_len]
        kept = sum(mask)
        if not kept:
            raise RecordError(f"{n} tokens, longer than max_len {max_len}: cut to {max_len} tokens no assistant "
                              "token is left to train on, so it is dropped (raise max_len or shorten it)", "dropped")
        note = (f"{n} tokens, longer than max_len {max_len}: truncated to {max_len} "
                f"({kept} of {total} loss-bearing tokens kept)")
    labels = [t if m else IGNORE_INDEX for t, m in zip(ids, mask, strict=True)]
    return SFTExample(input_ids=list(ids), labels=labels), note


def _check_max_len(max_len: int) -> None:
    if not isinstance(max_len, int) or max_len < 2:
        raise UserError(f"max_len must be a whole number of at least 2 tokens, not {max_len!r}")


def _nothing_left(verdicts: list[RecordVerdict], what: str) -> UserError:
    bad = [str(v) for v in verdicts if v.status != "ok"][:5]
    return UserError(f"no usable {what} in the data" + (": " + "; ".join(bad) if bad else ""))


def _examples_of(files: list[FileRead], make: Callable[[dict[str, Any]], tuple[ExampleT, str | None]],
                 what: str) -> tuple[list[ExampleT], list[RecordVerdict]]:
    """`make` (record -> example and truncation note) over every record of `files`, and the verdicts: a record it
    refuses gets its error, a truncated one its note, each file its summary. UserError when no example is left."""
    examples: list[ExampleT] = []
    verdicts: list[RecordVerdict] = []
    for f in files:
        used = 0
        for rec in f.records:
            line = rec["source"]["line"]
            try:
                example, note = make(rec)
            except (RecordError, ChatError) as exc:
                f.verdicts.append(RecordVerdict.of(f.path, line, exc))
                continue
            if note:
                f.verdicts.append(RecordVerdict(str(f.path), line, "truncated", note))
            examples.append(example)
            used += 1
        verdicts += file_verdicts(f)
        verdicts.append(summary_verdict(f, examples=used))
    if not examples:
        raise _nothing_left(verdicts, what)
    return examples, verdicts


def build_sft_examples(paths: str | Path | Iterable[str | Path], tokenizer: Any, max_len: int, *,
                       loss_on: str = "assistant", overlong: str = "truncate", columns: dict[str, str] | None = None,
                       ) -> tuple[list[SFTExample], list[RecordVerdict]]:
    """SFT examples of chat / ShareGPT / Alpaca files (tables read through the column mapping `columns`, else the
    guessed one), and the verdicts (records truncated, dropped or in error, with lines; one summary per file).
    UserError for a file unusable as a whole, a preference file, or when no example is left."""
    check_choice(loss_on, LOSS_ON, "loss_on")
    check_choice(overlong, OVERLONG, "overlong")
    _check_max_len(max_len)
    files = read_files(paths, columns)
    refuse_unusable(files, SFT_FORMATS, "SFT")
    chat = ChatRenderer(tokenizer)
    return _examples_of(files, lambda rec: _sft_example(chat, rec["messages"], max_len, loss_on, overlong),
                        "SFT example")


def _preference_example(chat: ChatRenderer, rec: dict[str, Any], max_len: int,
                        overlong: str) -> tuple[PreferenceExample, str | None]:
    prompt = rec["prompt"]
    parts: list[tuple[list[int], list[int]]] = []
    for key in ("chosen", "rejected"):
        messages = prompt + rec[key]
        r = chat.render(messages)
        mask = chat.mask(r, messages, loss_targets(messages, "assistant", len(prompt)))
        loss = [k for k, m in enumerate(mask) if m]
        if not loss:
            raise RecordError(f"'{key}': no token carries loss: the chat template renders no assistant token")
        parts.append((r.ids[: loss[0]], r.ids[loss[0]: loss[-1] + 1]))
    (prompt_ids, chosen), (prompt_again, rejected) = parts
    if prompt_ids != prompt_again:
        raise RecordError("the chat template renders the prompt differently before the chosen and the rejected "
                          "answer, so they cannot share one prompt")
    if not prompt_ids:
        raise RecordError("the prompt renders to no token")
    if chosen == rejected:
        raise RecordError("'chosen' and 'rejected' give the same tokens: nothing to prefer", "dropped")
    longest = max(len(chosen), len(rejected))
    total = len(prompt_ids) + longest
    note = None
    if total > max_len:
        head = f"prompt {len(prompt_ids)} + longest answer {longest} = {total} tokens, longer than max_len {max_len}"
        if overlong == "drop":
            raise RecordError(f"{head}: dropped", "dropped")
        keep = len(prompt_ids)
        if keep + longest > max_len:
            keep = min(keep, max(max_len // 2, max_len - longest))
        room = max_len - keep
        cut = []
        if keep < len(prompt_ids):
            cut.append(f"prompt cut from the left to its last {keep} tokens")
            prompt_ids = prompt_ids[len(prompt_ids) - keep:]
        if longest > room:
            cut.append(f"answers cut to {room} tokens")
            chosen, rejected = chosen[:room], rejected[:room]
        if chosen == rejected:
            raise RecordError(f"{head}: once cut to fit, 'chosen' and 'rejected' are the same tokens: dropped",
                              "dropped")
        note = f"{head}: truncated ({', '.join(cut)})"
    return PreferenceExample(prompt_ids=list(prompt_ids), chosen_ids=list(chosen), rejected_ids=list(rejected)), note


def build_preference_examples(paths: str | Path | Iterable[str | Path], tokenizer: Any, max_len: int, *,
                              overlong: str = "truncate", columns: dict[str, str] | None = None,
                              ) -> tuple[list[PreferenceExample], list[RecordVerdict]]:
    """DPO examples (prompt ids, chosen and rejected completion ids) of preference files, and the verdicts.
    prompt + each answer fits max_len: an over-long pair has its prompt cut from the left (down to half of
    max_len) and then its answers cut, or is dropped (overlong="drop"); the verdict says which. Tables are read
    through the column mapping `columns` (else the guessed one)."""
    check_choice(overlong, OVERLONG, "overlong")
    _check_max_len(max_len)
    files = read_files(paths, columns)
    refuse_unusable(files, ("preference",), "DPO")
    chat = ChatRenderer(tokenizer)
    return _examples_of(files, lambda rec: _preference_example(chat, rec, max_len, overlong), "preference pair")


# --------------------------------------------------------------------------------------------- packing


def pack_examples(examples: Sequence[SFTExample | dict[str, Any]], window: int, pad_id: int, *,
                  pack: bool = True) -> list[dict[str, list[int]]]:
    """Rows of exactly `window` tokens: {"input_ids", "labels", "position_ids"}.

    pack=True puts several examples in one row (best fit, longest first; each row keeps its examples in
    their original order) with position ids restarting at 0 for each example, so a model that reads
    packed sequences from position ids never attends across examples (transformers' llama, mistral,
    qwen2... do so when called with no attention_mask and use_cache=False; with a cache they ignore
    it). The first token of each example gets no label (nothing before it in its own example predicts
    it). pack=False pads each example to its own row. Padding: pad_id, label -100, position ids
    restarting at 0.
    """
    if window < 1:
        raise UserError(f"window must be at least 1 token, not {window}")
    seqs: list[tuple[list[int], list[int]]] = []
    for ex in examples:
        ids = list(ex["input_ids"] if isinstance(ex, dict) else ex.input_ids)
        labels = list(ex["labels"] if isinstance(ex, dict) else ex.labels)
        if len(ids) != len(labels):
            raise ValueError("input_ids and labels differ in length")
        if len(ids) > window:
            raise UserError(f"an example of {len(ids)} tokens does not fit the window of {window}: build the "
                            "examples with max_len no larger than the window")
        if ids:
            seqs.append((ids, labels))
    if not pack:
        rows = [[k] for k in range(len(seqs))]
    else:
        rows = []
        free: list[tuple[int, int]] = []  # (room left, row index), sorted
        for k in sorted(range(len(seqs)), key=lambda k: (-len(seqs[k][0]), k)):
            size = len(seqs[k][0])
            at = bisect_left(free, (size, -1))
            if at < len(free):
                room, row = free.pop(at)
                rows[row].append(k)
            else:
                row, room = len(rows), window
                rows.append([k])
            if room - size > 0:
                insort(free, (room - size, row))
    out = []
    for members in rows:
        input_ids: list[int] = []
        labels: list[int] = []
        positions: list[int] = []
        for k in sorted(members):
            ids, labs = seqs[k]
            input_ids += ids
            labels += [IGNORE_INDEX, *labs[1:]]
            positions += range(len(ids))
        pad = window - len(input_ids)
        input_ids += [pad_id] * pad
        labels += [IGNORE_INDEX] * pad
        positions += range(pad)
        out.append({"input_ids": input_ids, "labels": labels, "position_ids": positions})
    return out
