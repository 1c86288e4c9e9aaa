"""Fit verdicts: the app's own memory estimates against a machine, one verdict per use, each a sentence with the
figures; a small and a huge machine (fake Machines); QLoRA by the engine's own rule (a CPU QLoRA where bitsandbytes
loads, said to be slower; refused with the engine's sentence where it does not); GGUF sets say they load as full
precision, and a repository without config.json is estimated from its parameter count."""

from __future__ import annotations

from desktop_app.engine.hub.details import repo_details
from desktop_app.engine.model.sizing import count_parameters
from desktop_app.engine.train.fit import USES, fit_verdicts, spec_from_config, spec_of_size
from desktop_app.engine.train.memory_plan import Machine

GB = 10**9  # decimal, as the sentences write sizes
LAPTOP = Machine(ram_free=12 * GB, ram_total=16 * GB)
WORKSTATION = Machine(ram_free=200 * GB, ram_total=256 * GB, gpu_free=78 * GB, gpu_total=80 * GB, gpu_name="H100")


def by_use(details, kind, machine):
    file_set = next(s for s in details.file_sets if s.kind == kind)
    found = fit_verdicts(details, file_set, machine)
    assert [v.use for v in found] == list(USES)
    return {v.use: v for v in found}


def test_the_tiny_model_fits_a_laptop_for_every_use(hub_server):
    found = by_use(repo_details("tiny-org/tiny-chat"), "safetensors", LAPTOP)
    for use in USES:
        v = found[use]
        assert v.fits and v.memory == "RAM" and v.available == LAPTOP.ram_free and 0 < v.needed < GB
        assert v.reason.startswith("fits: needs about ") and " MB of the 12 GB of RAM free" in v.reason
    # a model this small is all activations: LoRA's path through transformers' modules keeps more of them than the
    # full-weight step saves in gradients and optimizer state (measured: tests/engine/test_memory_estimate.py)
    assert found["full"].needed < found["lora"].needed
    assert "(batch of 16 at once, 128 tokens an example" in found["lora"].reason
    assert found["qlora"].reason.endswith("; slower than LoRA on a CPU")  # bitsandbytes' CPU path, as a run takes


def test_qlora_is_refused_with_the_engines_reason_where_bitsandbytes_cannot_load(hub_server, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # as if not installed: the import fails
    found = by_use(repo_details("tiny-org/tiny-chat"), "safetensors", LAPTOP)
    qlora = found["qlora"]
    assert not qlora.fits and qlora.available == 0
    assert qlora.reason.startswith("QLoRA needs bitsandbytes, which cannot be loaded here")
    assert qlora.reason.endswith("install it (pip install bitsandbytes) or use LoRA")
    assert found["lora"].fits  # the rest is unchanged


def test_a_70b_model_is_too_big_for_a_laptop_and_says_by_how_much(hub_server):
    found = by_use(repo_details("big-org/Llama-70B-chat"), "safetensors", LAPTOP)
    for use in ("chat", "lora", "full"):
        v = found[use]
        assert not v.fits and v.needed > 100 * GB and v.reason.startswith("too big: needs about ")
        assert v.reason.endswith("this machine has 16 GB of RAM")


def test_on_a_gpu_machine_the_verdicts_use_gpu_memory(hub_server):
    found = by_use(repo_details("mid-org/chat-7B"), "safetensors", WORKSTATION)
    assert all(v.memory == "GPU memory" and v.available == 78 * GB for v in found.values())
    assert found["chat"].fits and found["lora"].fits and found["qlora"].fits
    assert found["qlora"].needed < found["lora"].needed < found["full"].needed
    assert not found["full"].fits  # 7B parameters with AdamW: about 16 bytes each
    big = by_use(repo_details("big-org/Llama-70B-chat"), "safetensors", WORKSTATION)
    assert not big["lora"].fits and big["qlora"].needed < big["lora"].needed / 2  # a 4-bit base
    assert big["full"].reason == "too big: needs about 1.1 TB, this machine has 80 GB of GPU memory"  # at its lightest


def test_less_free_than_the_machine_has_says_to_make_room(hub_server):
    busy = Machine(ram_free=1 << 20, ram_total=16 * GB)
    found = by_use(repo_details("tiny-org/tiny-chat"), "safetensors", busy)
    assert not found["chat"].fits and "close other programs" in found["chat"].reason


def test_a_gguf_set_says_fine_tuning_loads_full_precision(hub_server):
    found = by_use(repo_details("tiny-org/tiny-chat-GGUF"), "gguf", LAPTOP)
    assert found["chat"].fits and found["chat"].reason.startswith("fits")
    assert found["lora"].reason.startswith("GGUF files are for chat; fine-tuning one loads it as full-precision "
                                           "weights: fits: needs about")
    assert all("parameter count" in v.reason for v in found.values())  # no config.json: a Llama of its size


def test_estimates_from_a_config_or_a_parameter_count():
    qwen = {"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
            "max_position_embeddings": 32768, "tie_word_embeddings": True}
    spec = spec_from_config(qwen)
    assert spec is not None and 0.45e9 < count_parameters(spec) < 0.55e9  # Qwen2.5-0.5B: 494M
    assert spec_from_config({"model_type": "mamba"}) is None
    guess = spec_of_size(7_000_000_000, 4096)
    assert 0.6 < count_parameters(guess) / 7e9 < 1.5


def test_verdicts_need_no_network_once_the_details_are_known(hub_server):
    from desktop_app.engine.hub import network

    details = repo_details("tiny-org/tiny-chat")
    before = len(hub_server.settled())
    network.set_network_allowed(False)  # the config.json the details fetched is in the cache
    found = by_use(details, "safetensors", LAPTOP)
    assert len(hub_server.settled()) == before and "parameter count" not in found["chat"].reason
