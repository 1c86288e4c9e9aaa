"""vLLM's tokenizer routes, for the served model: POST /tokenize, POST /detokenize, GET /tokenizer_info.

lm-evaluation-harness's OpenAI-compatible backends count and cut prompts with a tokenizer; with
`tokenizer_backend=remote` they ask the server through these routes (its RemoteTokenizer), so a harness on another
machine needs only the server's URL, not a copy of the model folder. The shapes are vLLM's, which that client and
others read: /tokenize {"prompt", "add_special_tokens"} -> {"count", "max_model_len", "tokens", "token_strs"};
/detokenize {"tokens"} -> {"prompt"}; /tokenizer_info -> the special tokens, the chat template and the context.
"model" is optional, as in vLLM; when given it must name the served model.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from desktop_app.server.errors import ApiError
from desktop_app.server.state import ServedModel, get_state, served_model

router = APIRouter(tags=["Tokenizer (vLLM-compatible)"])


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str = Field(description="The text to tokenize")
    add_special_tokens: bool = Field(True, description="Add the tokenizer's own start token(s), as its encode does")


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int] = Field(description="Token ids of the served model's vocabulary")


def _served(request: Request, model: str | None) -> ServedModel:
    if model is not None:
        return served_model(request, model)
    served = get_state(request).served
    if served is None:
        raise ApiError(404, "no model is being served: start the server with a MODEL folder", param="model",
                       code="model_not_found")
    return served


@router.post("/tokenize", summary="Token ids of a text, with the served model's tokenizer")
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    served = _served(request, body.model)
    ids = [int(i) for i in served.loaded.tokenizer(body.prompt, add_special_tokens=body.add_special_tokens)
           ["input_ids"]]
    return {"count": len(ids), "max_model_len": served.batcher.context, "tokens": ids, "token_strs": None}


@router.post("/detokenize", summary="The text of token ids, with the served model's tokenizer")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
    served = _served(request, body.model)
    vocab = served.batcher.vocab_size
    wrong = next((t for t in body.tokens if not 0 <= t < vocab), None)
    if wrong is not None:
        raise ApiError(400, f"token id {wrong} is outside this model's vocabulary (0 to {vocab - 1})",
                       param="tokens")
    return {"prompt": served.loaded.tokenizer.decode(body.tokens)}


@router.get("/tokenizer_info", summary="The served model's special tokens, chat template and context")
async def tokenizer_info(request: Request) -> dict[str, Any]:
    served = _served(request, None)
    tokenizer = served.loaded.tokenizer
    return {"tokenizer_class": type(tokenizer).__name__, "eos_token": tokenizer.eos_token,
            "bos_token": tokenizer.bos_token, "pad_token": tokenizer.pad_token, "unk_token": tokenizer.unk_token,
            "chat_template": tokenizer.chat_template, "model_max_length": served.batcher.context,
            "vocab_size": int(served.batcher.vocab_size)}
