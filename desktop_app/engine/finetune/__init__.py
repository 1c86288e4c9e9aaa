"""Fine-tuning: data formats and chat templates (`data`), methods and objectives (SFT, LoRA, QLoRA, DPO)."""

# base_model.py  find, fingerprint (sha256) and load base models (fp32, or 4-bit NF4 for QLoRA); adapter runs merge
# adapters.py    LoRA/QLoRA with peft: default target modules per family, PEFT-format state, exact reload
# reference.py   DPO's reference log-probabilities: adapters disabled or a frozen copy; precomputed and cached
# pipeline.py    multi-stage pipelines (pretrain -> SFT -> DPO), each stage a run whose base is the previous one
# The methods themselves are objectives of the one loop: objectives/sft.py and objectives/dpo.py.
