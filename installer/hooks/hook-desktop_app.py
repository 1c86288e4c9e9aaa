"""PyInstaller hook for the app package itself.

The CLI imports each verb module by name (`importlib.import_module("desktop_app.cli.<verb>")`) so that
start-up stays fast; PyInstaller's import scan cannot follow a name in a string, so list every submodule.
Heavy imports made inside functions (torch, transformers, ...) are found by the normal scan.
"""

from PyInstaller.utils.hooks import collect_submodules

hiddenimports = collect_submodules("desktop_app")

# Libraries the app's features load lazily (LoRA/QLoRA fine-tuning, GGUF export): named here so the bundle
# keeps them even while no module imports them at top level. Nothing is downloaded at first start.
hiddenimports += ["peft", "bitsandbytes", "gguf", "safetensors.torch", "tokenizers", "jinja2"]
