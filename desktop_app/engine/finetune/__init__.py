"""Fine-tuning: data formats, chat-template loss masks and examples, base models, adapters (SFT, LoRA, QLoRA, DPO)."""

# formats.py        data files: read chat / ShareGPT / Alpaca / preference records, normalise them, one verdict each
# chat_template.py  tokenizers that render chats (ChatML tokens added, embeddings grown), exact loss masks, preview
# examples.py       SFT and DPO examples from data files (truncated or dropped with a verdict), packing into rows
# base_model.py     load base models for training (fp32, or 4-bit NF4 for QLoRA); fetch a Hub model when asked
# adapters.py       LoRA/QLoRA with peft: default target modules per family, PEFT-format state, exact reload
# reference.py      DPO's reference log-probabilities: adapters disabled or a frozen copy; precomputed and cached
# pipeline.py       multi-stage pipelines (pretrain -> SFT -> DPO), each stage a run whose base is the previous one
# The methods themselves are objectives of the one loop: objectives/sft.py and objectives/dpo.py. What a model
# folder is (and an adapter's base) is model/folders.py; chat messages and stop tokens are data/chat.py.
