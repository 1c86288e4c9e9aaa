"""What the engine's public functions need of a model and a tokenizer, named for the reader.

`CausalLM`: our own models (built from a ModelSpec) and any transformers causal LM alike. `ChatTokenizer`: a
transformers tokenizer (the base model's, with its chat template). `TextTokenizer`: that, or the `tokenizers`
library's Tokenizer a prepared dataset carries. These are structural types (typing.Protocol): nothing inherits from
them and nothing checks them at run time; they say what a function uses where `Any` said nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Union

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer


class CausalLM(Protocol):
    """A decoder-only language model: ids in, logits (and a cache) out, with its config and weights."""

    config: Any

    def __call__(self, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> Any: ...

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...

    def get_input_embeddings(self) -> torch.nn.Module: ...


class ChatTokenizer(Protocol):
    """A transformers tokenizer: text to ids and back, special tokens, and the chat template."""

    eos_token_id: int | None
    pad_token_id: int | None
    chat_template: str | None

    def __len__(self) -> int: ...

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str: ...

    def convert_tokens_to_ids(self, tokens: str) -> int | None: ...

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...


TextTokenizer = Union[ChatTokenizer, "Tokenizer"]  # a string member: the tokenizers library loads only when used
