"""Generate tab seeds: each reply and each Regenerate draws a new seed (at temperature 0.8 Regenerate gives another
reply), the seed used is shown in the Seed field and under the reply, and a seed the person sets gives its reply
back exactly."""

from __future__ import annotations

import re
import shutil

import pytest


@pytest.fixture
def gen(window, chat_model, monkeypatch):
    import random

    from desktop_app.engine.generate import choices

    monkeypatch.setattr(choices, "SEED_SOURCE", random.Random(2))  # the same draws every run: no flaky test
    model = shutil.copytree(chat_model, window.ctx.workspace.folder("models") / "chatty")
    window.ctx.workspace_items_changed.emit()
    tab = window.generate_tab
    tab.select_source(str(model))
    tab.form.set_spec(tab.form.spec().replace(max_new_tokens=12, temperature=0.8, top_k=0, chat=True))
    return tab


def _wait(tab, qtbot) -> None:
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert not tab.ctx.errors, tab.ctx.errors


def _shown_seed(tab) -> int:
    """The seed under the last reply; it must be the one in the Seed field too."""
    note = tab.chat_view.last("assistant").note.text()
    found = re.search(r"seed (\d+)", note)
    assert found, note
    assert tab.form.spec().seed == int(found.group(1))
    return int(found.group(1))


def _regenerate(tab, qtbot) -> list[int]:
    tab.chat_view.last("assistant").regen_btn.click()
    _wait(tab, qtbot)
    assert [role for role, _ in tab.history] == ["user", "assistant"]
    return list(tab.stats[-1].token_ids)


def test_regenerate_draws_again_and_a_set_seed_gives_the_reply_back(gen, qtbot):
    assert gen.new_seed_check.isChecked()  # by default every reply draws its own seed
    gen.prompt.setPlainText("hello")
    gen.generate_btn.click()
    _wait(gen, qtbot)
    first, first_seed = list(gen.stats[-1].token_ids), _shown_seed(gen)
    assert first

    second = _regenerate(gen, qtbot)
    second_seed = _shown_seed(gen)
    assert second_seed != first_seed and second != first  # asked again at 0.8: another draw, another reply

    # The person types the first reply's seed into the Seed field: it is kept and gives that reply exactly.
    gen.form.editors["seed"].setValue(first_seed)
    assert not gen.new_seed_check.isChecked()
    assert _regenerate(gen, qtbot) == first and _shown_seed(gen) == first_seed
    assert _regenerate(gen, qtbot) == first  # kept: again the same
    assert gen.history[-1][1] == gen.stats[-1].text

    # Ticked again: the next message draws a seed of its own.
    gen.new_seed_check.setChecked(True)
    gen.generate("and then?")
    _wait(gen, qtbot)
    assert _shown_seed(gen) != first_seed


def test_text_completion_draws_a_seed_per_generation_and_greedy_needs_none(gen, qtbot):
    gen.set_chat_mode(False)
    seeds = []
    for _ in range(2):
        assert gen.generate("the cat")
        _wait(gen, qtbot)
        seed = gen.form.spec().seed
        assert f"seed {seed}" in gen.stats_label.text()
        seeds.append(seed)
    assert seeds[0] != seeds[1]
    # Greedy decoding: the seed changes nothing, so none is drawn or shown.
    gen.form.set_spec(gen.form.spec().replace(temperature=0.0))
    assert gen.generate("the cat")
    _wait(gen, qtbot)
    assert gen.form.spec().seed == seeds[1] and "seed" not in gen.stats_label.text()
    # Beam search greys the switch out with the other sampling-only settings.
    gen.form.set_spec(gen.form.spec().replace(num_beams=2))
    assert not gen.new_seed_check.isEnabled()
