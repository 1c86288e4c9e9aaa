"""How tasks are put to a model: plain text for the app's own models, the chat template for a model that brings
its own; answers read out of chat replies; self-play and GRPO rewarding a chat reply by the answer inside it."""

from __future__ import annotations

import pytest

from desktop_app.engine.data.tokenization import CHAT_TEMPLATE, hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.selfplay.prompting import ASK, default_world, is_chat_model, make_prompter, resolve_style
from desktop_app.engine.selfplay.rewards import answer_match
from desktop_app.engine.tasks import Task
from desktop_app.engine.tasks.mini_world import MiniWorld

OWN_TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}<|end|>{% endfor %}"
                "{% if add_generation_prompt %}[assistant] {% endif %}")
DED = Task("mini", "deduction", "f = lambda x: x + 1", ("3",), ("4",))
IND = Task("mini", "induction", "f = lambda x: x * 2", ("1", "2", "3", "4"), ("2", "4", "6", "8"), shown=2)


@pytest.fixture(scope="module")
def tokenizers():
    world = MiniWorld()
    texts = [world.example_text(t) for kind in ("deduction", "induction") for t in world.generate(kind, 40, 1)]
    texts += ["[user] [assistant] Hi Hello The answer is <answer>4</answer>.", *ASK.values()] * 5
    raw = train_tokenizer(texts, "bpe", 200, min_frequency=1)
    app_default = hf_tokenizer(raw)  # the app's own tokenizers carry its default template
    assert app_default.chat_template == CHAT_TEMPLATE
    chat = hf_tokenizer(raw)
    chat.chat_template = OWN_TEMPLATE  # an instruct model's own template
    return raw, app_default, chat


def test_auto_asks_only_models_with_their_own_template_as_a_chat(tokenizers) -> None:
    raw, app_default, chat = tokenizers
    assert not is_chat_model(raw) and not is_chat_model(app_default) and is_chat_model(chat)
    assert [resolve_style("auto", t) for t in (raw, app_default, chat)] == ["plain", "plain", "chat"]
    assert resolve_style("chat", app_default) == "chat"  # asked for: the app's template is used
    assert [default_world(t) for t in (raw, chat)] == ["mini", "python"]
    with pytest.raises(UserError, match="no chat template"):
        resolve_style("chat", raw)
    with pytest.raises(UserError, match="unknown prompt style"):
        resolve_style("fancy", chat)


def test_plain_prompts_are_the_worlds_own_and_replies_are_answers_as_written(tokenizers) -> None:
    raw, _, _ = tokenizers
    world, prompter = MiniWorld(), make_prompter(raw, "auto")
    assert prompter.codec.decode(prompter.solve_ids(world, DED)) == world.solve_prompt(DED)
    assert prompter.answer_lines(world, "deduction") == 1 and prompter.answer(world, DED, " 4\nmore") == " 4\nmore"


def test_chat_prompts_go_through_the_template_and_answers_come_out_of_the_reply(tokenizers) -> None:
    _, _, chat = tokenizers
    world, prompter = MiniWorld(), make_prompter(chat, "auto")
    text = chat.decode(prompter.solve_ids(world, DED))
    assert text.startswith("[user] ") and ASK["value"] in text and text.endswith("[assistant] ")
    assert chat.convert_tokens_to_ids("<|end|>") in prompter.stop_ids and prompter.answer_lines(world, "deduction") == 0
    replies = ["The answer is <answer>4</answer>.", "f(3) is 4", "Sure!\n<answer>5</answer>", "I cannot tell"]
    answers = [prompter.answer(world, DED, r) for r in replies]
    assert answers == ["4", "4", "5", "I cannot tell"]
    assert [c.status for c in world.check([DED] * 4, answers)] == ["correct", "correct", "wrong", "unparseable"]
    program = prompter.answer(world, IND, "Here it is:\n```python\nf = lambda x: x * 2\n```\nIt doubles.")
    assert world.check([IND], [program])[0].correct
    assert prompter.proposal("New task:\n<answer>\nf = lambda x: x - 1\ninput: 9\n</answer>") == \
        "\nf = lambda x: x - 1\ninput: 9\n"
    verdict = world.validate("deduction", [prompter.proposal("```\nf = lambda x: x - 1\ninput: 9\n```")])[0]
    assert verdict.valid, verdict.reason  # the mini world skips code-fence lines


def test_self_play_rewards_a_chat_reply_by_the_answer_inside_it(tmp_path, tokenizers) -> None:
    import contextlib
    from types import SimpleNamespace

    import torch

    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.objectives.base import TrainContext
    from desktop_app.engine.objectives.selfplay import SelfPlayObjective
    from desktop_app.engine.specs import ModelSpec, RunConfig, TrainSpec

    _, _, chat = tokenizers
    objective = SelfPlayObjective({"world": "mini", "task_types": ["deduction"], "proposals_per_type": 1,
                                   "solver_tasks_per_type": 1, "solver_samples": 2, "seed_tasks_per_type": 0,
                                   "heldout_per_type": 1})
    ctx = TrainContext(run_dir=tmp_path, config=RunConfig(), train_spec=TrainSpec(), device=torch.device("cpu"),
                       autocast=contextlib.nullcontext, seed=0, store=SimpleNamespace(context_length=256),
                       tokenizer=chat)
    objective.setup(ctx, build_model(ModelSpec("llama", len(chat), 32, 1, 2, 2, 64, 256), seed=0))
    assert objective.prompter.chat and [n.message for n in objective.notes][-1].endswith("with chat prompts")
    objective.buffers["deduction"].__init__()
    objective.buffers["deduction"].add(DED)
    queue = ["no task here", "Easy: <answer>4</answer>", "It is 7."]

    def fake(part, samples, seed, max_lines, finished=None):
        assert max_lines == 0 and all(chat.decode(e).startswith("[user] ") for e in part.prompts)
        texts = [queue.pop(0) for _ in range(len(part.prompts) * samples)]
        return [[3]] * len(texts), texts

    objective._sample = fake
    stats = objective.play_round(1).stats
    assert stats["solve_rate/deduction"] == 0.5 and stats["reward/solver/deduction"] == 0.5


def test_answer_match_reads_an_answer_block() -> None:
    assert answer_match("Let me see... <answer>Paris</answer>", "paris") == 1.0
    assert answer_match("Paris\nor maybe Rome", "Paris") == 1.0
    assert answer_match("<answer>Rome</answer>", "Paris") == 0.0
