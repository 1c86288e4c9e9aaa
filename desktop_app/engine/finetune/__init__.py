"""Fine-tuning: data formats and chat templates (`data`), methods and objectives (SFT, LoRA, QLoRA, DPO)."""
