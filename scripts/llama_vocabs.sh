#!/usr/bin/env bash
# llama.cpp's own vocabulary files (models/ggml-vocab-*.gguf with their .inp/.out test vectors: Llama 3, Qwen2, Phi-3,
# GPT-2, Llama 2 SentencePiece, ...) for the llama.cpp lane's tokenizer tests (tests/engine/test_gguf_tokenizers.py).
# They come from llama-cpp-python's source archive on PyPI (the one the [llamacpp] extra builds from); only those
# files are kept, in ${AZR_LLAMA_VOCABS:-~/.cache/azr-model-trainer/llama-vocabs}.
set -euo pipefail
dest="${AZR_LLAMA_VOCABS:-$HOME/.cache/azr-model-trainer/llama-vocabs}"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp"
mkdir -p "$dest"
tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp" --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*'
find "$tmp" -path '*/vendor/llama.cpp/models/ggml-vocab-*' -type f -exec cp {} "$dest"/ \;
echo "llama.cpp vocabularies in $dest: $(ls "$dest" | grep -c '\.gguf$') files"
