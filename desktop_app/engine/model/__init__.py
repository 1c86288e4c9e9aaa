"""Models: build from a spec, size them, load any run/checkpoint/export/HF folder, the fused fp32 forward."""
