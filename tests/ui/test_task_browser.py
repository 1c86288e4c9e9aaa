"""Self-play task-buffer browser: rows from a hand-written selfplay.jsonl, newest first, filters, the last
round's rollouts side by side, incremental reads (only new bytes), a torn last line and a truncated log."""

from __future__ import annotations

import json

from desktop_app.ui.widgets.task_browser import LOG_NAME, PROPOSAL_COLUMNS, ROLLOUT_COLUMNS, RoundLog, TaskBrowser


def _round(n: int, *, valid: bool = True) -> dict:
    return {
        "round": n,
        "rollouts": [
            {"role": "proposer", "type": "deduction", "prompt": f"Write a task #{n}", "answer": "x + 1",
             "verdict": "valid" if valid else "invalid", "reward": 0.25 if valid else -0.5, "reason": ""},
            {"role": "solver", "type": "deduction", "prompt": f"f(x) = x + 1; f(2) = ? #{n}", "answer": "3",
             "verdict": "correct", "reward": 1.0, "reason": ""},
            {"role": "solver", "type": "induction", "prompt": f"2 -> 4, 3 -> 6 #{n}", "answer": "x * 3",
             "verdict": "wrong", "reward": 0.0, "reason": "f(2) = 6, expected 4"},
        ],
        "proposals": [
            {"type": "deduction", "program": f"x + {n}", "inputs": [1, 2], "outputs": [1 + n, 2 + n],
             "verdict": "valid" if valid else "invalid", "solve_rate": 0.5, "reward": 0.5, "reason": ""},
            {"type": "induction", "program": "x *", "verdict": "invalid", "reward": -0.5,
             "reason": "syntax error at end"},
        ],
    }


def _write(path, rounds, mode="w", tail=""):
    with open(path, mode, encoding="utf-8") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rounds) + tail)


def test_browser_shows_rows_newest_first_and_filters(qtbot, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _write(run / LOG_NAME, [_round(1), _round(2), _round(3, valid=False)])
    browser = TaskBrowser()
    qtbot.addWidget(browser)
    browser.set_run(run)
    assert browser.proposals.rowCount() == 6
    assert browser.proposals.item(0, 0).text() == "3"  # newest round first
    assert [browser.proposals.item(r, 0).text() for r in range(6)] == ["3", "3", "2", "2", "1", "1"]
    assert browser.proposals.item(1, 7).text() == "syntax error at end"
    assert "1 → 3" in browser.proposals.item(2, 6).text()  # inputs → outputs of round 2's program x + 2
    # the last round's rollouts, side by side: prompt, answer, verdict, reward
    assert browser.rollouts.rowCount() == 3
    assert ROLLOUT_COLUMNS == ("Role", "Type", "Verdict", "Reward", "Prompt", "Answer")
    assert browser.rollouts.item(0, 4).text() == "Write a task #3"
    assert browser.rollouts.item(0, 2).text() == "invalid" and browser.rollouts.item(0, 3).text() == "-0.50"
    browser.rollouts.setCurrentCell(2, 0)
    assert browser.prompt_view.toPlainText() == "2 -> 4, 3 -> 6 #3"
    assert "x * 3" in browser.answer_view.toPlainText() and "expected 4" in browser.answer_view.toPlainText()
    assert "Rollouts of round 3" in browser.rollouts_title.text()

    browser.type_box.setCurrentText("induction")
    assert browser.proposals.rowCount() == 3 and browser.rollouts.rowCount() == 1
    browser.type_box.setCurrentText("All")
    browser.verdict_box.setCurrentText("invalid")
    assert browser.proposals.rowCount() == 4  # 3 invalid induction proposals + round 3's invalid deduction
    assert browser.rollouts.rowCount() == 1
    browser.verdict_box.setCurrentText("All")
    browser.role_box.setCurrentText("solver")
    assert browser.proposals.rowCount() == 0  # proposals are the proposer's
    assert browser.rollouts.rowCount() == 2
    browser.role_box.setCurrentText("proposer")
    assert browser.proposals.rowCount() == 6 and browser.rollouts.rowCount() == 1


def test_live_refresh_reads_only_new_bytes_and_survives_torn_and_truncated_logs(qtbot, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = run / LOG_NAME
    browser = TaskBrowser()
    qtbot.addWidget(browser)
    browser.start_live(run)
    assert browser.timer.isActive()
    assert "No self-play round written yet" in browser.summary.text()
    _write(path, [_round(1)], tail='{"round": 2, "rollo')  # the engine is mid-write
    qtbot.waitUntil(lambda: len(browser.rounds) == 1, timeout=5000)
    offset = browser.log.offset
    assert offset == path.stat().st_size  # everything read once...
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('uts": [], "proposals": []}\n')
    assert browser.refresh() == 1  # ...and only the new bytes next time, the torn line completed
    assert browser.log.offset > offset and [r["round"] for r in browser.rounds] == [1, 2]
    assert browser.refresh() == 0
    # a resumed run forgets rounds after its checkpoint: the file shrinks, then rounds are played again
    _write(path, [_round(1)])
    browser.refresh()
    assert [r["round"] for r in browser.rounds] == [1]
    _write(path, [_round(2), _round(3)], mode="a")
    browser.refresh()
    assert [r["round"] for r in browser.rounds] == [1, 2, 3]
    browser.stop_live()
    assert not browser.timer.isActive()


def test_round_log_replaces_replayed_rounds(tmp_path):
    path = tmp_path / LOG_NAME
    _write(path, [_round(1), _round(2)], tail="not json\n")
    log = RoundLog(path)
    rounds, reset = log.read()
    assert [r["round"] for r in rounds] == [1, 2] and not reset and log.bad_lines == 1
    assert RoundLog(tmp_path / "missing.jsonl").read() == ([], False)


def test_browser_sums_up_trivial_proposals_held_out_hits_and_distinct_programs(qtbot, tmp_path):
    """The engine's per-round buffer figures: the share refused as trivial (over the rounds read and in the last),
    held-out programs proposed (never practised), distinct programs and shapes per type; older logs show none."""
    run = tmp_path / "run"
    run.mkdir()
    first, second = _round(1), _round(2)
    first["buffers"] = {"proposals": 4, "trivial": 1, "heldout_hits": 0, "programs": {"deduction": 10},
                        "shapes": {"deduction": 7}, "tasks": {"deduction": 10}}
    second["buffers"] = {"proposals": 4, "trivial": 3, "heldout_hits": 1, "duplicates": 2,
                         "programs": {"deduction": 11}, "shapes": {"deduction": 7}, "tasks": {"deduction": 11}}
    second["proposals"].append({"type": "deduction", "program": "x if 1 else x", "verdict": "trivial",
                                "reward": -0.5, "reason": "trivial: the output is always the input"})
    _write(run / LOG_NAME, [_round(0), first, second])
    browser = TaskBrowser()
    qtbot.addWidget(browser)
    browser.set_run(run)
    text = browser.summary.text()
    assert "3 round(s) read" in text and "refused as trivial: 50% (75% in the last round)" in text
    assert "held-out programs proposed: 1" in text and "deduction 11 (7 shapes)" in text
    assert "duplicates: 25% (no reward)" in text
    browser.verdict_box.setCurrentText("trivial")
    assert browser.proposals.rowCount() == 1 and browser.proposals.item(0, 2).text() == "trivial"
    _write(run / LOG_NAME, [_round(0)])
    browser.set_run(run)
    assert browser.summary.text() == "1 round(s) read"


def _header_fits(table) -> list[str]:
    """The columns whose header does not show its whole name (the last one stretches to the table's edge)."""
    header = table.horizontalHeader()
    out = []
    for column in range(table.columnCount() - 1):
        item = table.horizontalHeaderItem(column)
        if table.columnWidth(column) < header.fontMetrics().horizontalAdvance(item.text()) + 16:
            out.append(item.text())
    return out


def test_every_column_header_shows_its_whole_name_with_a_tooltip(qtbot, tmp_path):
    """A narrow column cut "Inputs → outputs" to "puts → outpu": every header fits, empty or full, and its tooltip
    says what the column holds (the reward's, what each value means)."""
    browser = TaskBrowser()
    qtbot.addWidget(browser)
    browser.resize(900, 600)
    browser.show()
    qtbot.waitExposed(browser)
    for table in (browser.proposals, browser.rollouts):
        assert _header_fits(table) == []  # no round yet
    run = tmp_path / "run"
    run.mkdir()
    _write(run / LOG_NAME, [_round(1), _round(2)])
    browser.set_run(run)
    for table in (browser.proposals, browser.rollouts):
        assert table.rowCount() and _header_fits(table) == []
        tips = [table.horizontalHeaderItem(c).toolTip() for c in range(table.columnCount())]
        assert all(tips), tips
    io = PROPOSAL_COLUMNS.index("Inputs → outputs")
    assert browser.proposals.horizontalHeaderItem(io).toolTip().startswith("Inputs → outputs")
    reward = browser.proposals.horizontalHeaderItem(PROPOSAL_COLUMNS.index("Reward")).toolTip()
    assert "1 − the solver's solve rate" in reward and "−0.5 an invalid or trivial task" in reward


def test_the_legend_says_what_roles_task_types_and_rewards_mean(qtbot):
    """The values are the engine's: a change of a reward there changes the words here."""
    from desktop_app.engine.tasks.base import PENALTY_FORMAT, PENALTY_UNPARSEABLE, REWARD_CORRECT
    from desktop_app.ui.widgets.selfplay_help import signed

    browser = TaskBrowser()
    qtbot.addWidget(browser)
    text = browser.legend.text()
    for word in ("proposer", "solver", "deduction", "abduction", "induction"):
        assert f"<b>{word}</b>" in text, word
    assert f"{signed(REWARD_CORRECT)} correct" in text and signed(REWARD_CORRECT) == "+1"
    assert f"{signed(PENALTY_FORMAT)} an answer in the wrong format" in text and signed(PENALTY_FORMAT) == "−0.5"
    assert f"{signed(PENALTY_UNPARSEABLE)} no answer could be read" in text and signed(PENALTY_UNPARSEABLE) == "−1"
    assert "−0.5 an invalid or trivial task" in text and "0 a duplicate" in text  # the proposer's
