"""How long a fine-tuning run's examples are, in the base model's tokens, before anything is loaded: what the memory
estimate uses once data files are chosen (a micro-batch is padded to its longest example, so the longest one sets
the peak).

The records are read as training reads them (finetune/formats.py: every format, the column mapping of a table) and
their text measured by characters; the LONGEST_CHECKED longest are tokenized with the base's tokenizer.json (the
`tokenizers` library: no transformers, no model). The chat template's own tokens are counted as TEMPLATE_TOKENS per
message (ChatML adds 5, Llama 3's template 5 to 7), so the figure errs on the long side. Cached per files and
tokenizer: the window asks on every change of the form.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

LONGEST_CHECKED = 32  # records tokenized (the longest by characters): the longest in tokens is among them
TEMPLATE_TOKENS = 8  # a message's role markers and separators, counted generously


def longest_example(files: list[str], columns: dict[str, str] | None, tokenizer_file: Path | None) -> int | None:
    """Tokens of the longest example of `files` (a DPO pair: its prompt and its longer answer), with the template's
    tokens counted; None where the files or the tokenizer cannot be read (the run's own checks name them)."""
    if not files or tokenizer_file is None:
        return None
    key = []
    for name in [*files, str(tokenizer_file)]:
        try:
            st = Path(name).expanduser().stat()
        except OSError:
            return None
        key.append((str(name), st.st_mtime_ns, st.st_size))
    return _longest(tuple(key), tuple(sorted((columns or {}).items())))


@functools.lru_cache(maxsize=16)
def _longest(key: tuple[tuple[str, int, int], ...], columns: tuple[tuple[str, str], ...]) -> int | None:
    *files, (tokenizer_file, _, _) = key
    from desktop_app.engine.finetune.formats import read_files  # lazy: start-up

    try:
        read = read_files([name for name, _, _ in files], dict(columns) or None)
        from tokenizers import Tokenizer  # lazy: tokenizers

        tokenizer = Tokenizer.from_file(tokenizer_file)
    except Exception:  # UserError, OSError, or the plain Exception tokenizers raises for a file it cannot read
        return None
    examples = [example_messages(record) for f in read for record in f.records]
    if not examples:
        return None
    examples.sort(key=lambda messages: sum(len(text) for text in messages), reverse=True)
    return max(sum(len(tokenizer.encode(text, add_special_tokens=False).ids) + TEMPLATE_TOKENS for text in messages)
               for messages in examples[:LONGEST_CHECKED])


def example_messages(record: dict[str, Any]) -> list[str]:
    """The texts of one normalised record's longest sequence: a chat's messages; a preference pair's prompt and its
    longer answer."""
    if "messages" in record:
        return [str(m.get("content", "")) for m in record["messages"]]
    prompt = [str(m.get("content", "")) for m in record.get("prompt", [])]
    answers = [[str(m.get("content", "")) for m in record.get(side, [])] for side in ("chosen", "rejected")]
    return prompt + max(answers, key=lambda texts: sum(len(t) for t in texts))
