"""Generate tab, beam search: the Beams spin box and length penalty, sampling settings greyed out at beams > 1,
and the outputs showing the engine's best beams when the search ends."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.specs import ModelSpec

    folder = tmp_path_factory.mktemp("beams") / "tiny-beams"
    spec = ModelSpec("llama", 320, 32, 1, 2, 2, 64, 64, init_std=0.2, tie_embeddings=False)
    build_model(spec, seed=2).save_pretrained(folder)
    hf_tokenizer(train_tokenizer(["hello world, the cat sat on the mat"] * 20, "byte-bpe", 320)).save_pretrained(folder)
    return folder


def _with_model(window, workspace, tiny_model):
    import shutil

    target = workspace.folder("models") / tiny_model.name
    shutil.copytree(tiny_model, target)
    window.ctx.workspace_items_changed.emit()
    gen = window.generate_tab
    gen.select_source(str(target))
    return gen, target


def test_beams_grey_out_sampling_settings(window):
    gen = window.generate_tab
    editors = gen.form.editors
    assert editors["num_beams"].value() == 1 and editors["num_beams"].maximum() == 64
    assert editors["temperature"].isEnabled() and not editors["length_penalty"].isEnabled()
    gen.form.set_value("num_beams", 3)
    for name in ("temperature", "top_k", "top_p", "min_p", "seed"):
        assert not editors[name].isEnabled(), name
    for name in ("length_penalty", "early_stopping", "max_new_tokens", "samples", "stop", "repetition_penalty"):
        assert editors[name].isEnabled(), name
    # The greyed-out temperature (0.8 by default) is not used, so it is not reported as a problem.
    assert gen.form.spec().temperature > 0 and not gen.form.problems.isVisibleTo(gen.form)
    assert gen.settings_spec().temperature == 0.0
    gen.form.set_value("samples", 5)  # more returned beams than beams: the form says so
    assert gen.form.problems.isVisibleTo(gen.form) and "5 cannot exceed beams 3" in gen.form.problems.text()
    gen.form.set_spec(gen.form.spec().replace(samples=1, num_beams=1))
    assert editors["temperature"].isEnabled() and not editors["length_penalty"].isEnabled()


def test_generate_with_beams_shows_the_best_beams(window, workspace, tiny_model, qtbot):
    from PySide6.QtWidgets import QGroupBox

    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    gen, target = _with_model(window, workspace, tiny_model)
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=10, num_beams=3, samples=2, length_penalty=0.5))
    assert gen.generate("the cat")
    assert "beam" in gen.stats_label.text() or "loading" in gen.stats_label.text()
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert not window.ctx.errors, window.ctx.errors
    assert [box.title() for box in gen.out_area.findChildren(QGroupBox)] == ["Beam 1", "Beam 2"]
    spec = GenerateSpec(max_new_tokens=10, temperature=0.0, num_beams=3, samples=2, length_penalty=0.5)
    ref = sorted((e for e in stream_text(load_model(target), "the cat", spec, threads=1) if e.type == "generation"),
                 key=lambda e: e.sample)
    assert len(gen.outputs) == 2 and len(gen.stats) == 2
    for i in range(2):
        assert gen.output_text(i) == ref[i].text
    assert sorted(s.token_ids for s in gen.stats) == sorted(r.token_ids for r in ref)
    # One beam again: the usual streaming path, greedy at temperature 0.
    gen.form.set_spec(gen.form.spec().replace(num_beams=1, samples=1, temperature=0.0))
    assert gen.generate("the cat")
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    greedy = next(e for e in stream_text(load_model(target), "the cat", GenerateSpec(max_new_tokens=10,
                                                                                     temperature=0.0), threads=1)
                  if e.type == "generation")
    assert gen.output_text(0) == greedy.text
