"""Self-play task-buffer browser: what the proposer made (with verdicts, solve rates and rewards), newest
first and filterable, and the last round's rollouts side by side (prompt, answer, verdict, reward).

It reads `<run_dir>/selfplay.jsonl`, one JSON object per round that the engine appends:
    {"round": n, "rollouts": [{"role", "type", "prompt", "answer", "verdict", "reward", "reason"}],
     "proposals": [{"type", "program", "inputs", "outputs", "verdict", "solve_rate", "reward", "reason"}]}
While a run is live a timer reads only the bytes added since the last read. A file that shrank (a resumed
run forgets the rounds its checkpoint does not hold) is read again from the start; a round number seen
again replaces the rounds from it on.

A short legend on top says what the roles, task types and reward values mean; every column header fits its name (and
its tooltip says what the column holds).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop_app.ui import theme
from desktop_app.ui.widgets.layouts import add_items, button, note_label, splitter
from desktop_app.ui.widgets.selfplay_help import legend_html, proposer_rewards, solver_rewards

LOG_NAME = "selfplay.jsonl"  # the engine's objectives.selfplay.LOG_NAME (not imported: that module loads torch)
ALL = "All"
MAX_ROUNDS = 2000  # rounds kept in memory (older ones drop off the browser, never off the disk)
MAX_ROWS = 500  # proposal rows shown at once (newest first)
GOOD = {"valid", "correct", "ok"}
NEUTRAL = {"duplicate", "held-out"}  # held-out: a valid task with a held-out program: no reward, in no update

PROPOSAL_COLUMNS = ("Round", "Type", "Verdict", "Solve rate", "Reward", "Program", "Inputs → outputs", "Reason")
ROLLOUT_COLUMNS = ("Role", "Type", "Verdict", "Reward", "Prompt", "Answer")
PROPOSAL_WIDTHS = (54, 86, 80, 80, 64, 240, 220)
ROLLOUT_WIDTHS = (70, 86, 86, 60, 220)
HEADER_PADDING = 24  # a header's text plus its margins and sort indicator room
COLUMN_TIPS = {
    "Round": "The self-play round (one per training step)",
    "Type": "Task type: deduction, abduction or induction",
    "Verdict": "What the task world's check said",
    "Solve rate": "Share of the solver's samples that solved this task",
    "Program": "The program the proposer wrote",
    "Inputs → outputs": "Inputs → outputs: the inputs the proposer gave and what its program returned for each",
    "Reason": "Why the task got its verdict",
    "Role": "proposer (writes tasks) or solver (answers them)",
    "Prompt": "What the model was shown",
    "Answer": "What the model wrote",
}


class RoundLog:
    """Incremental reader of a selfplay.jsonl: every `read()` parses only the complete lines added since."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self._partial = b""
        self.bad_lines = 0

    def read(self) -> tuple[list[dict[str, Any]], bool]:
        """(new rounds, reset) where reset means the file shrank and was read again from its start."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return [], False
        reset = size < self.offset
        if reset:
            self.offset, self._partial = 0, b""
        if size == self.offset:
            return [], reset
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(size - self.offset)
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # a line the engine is still writing
        rounds = []
        for line in lines:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                self.bad_lines += 1
                continue
            if isinstance(obj, dict):
                rounds.append(obj)
        return rounds, reset


def _text(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", " ⏎ ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def _item(text: str, tooltip: str = "", color: str | None = None, align_right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if tooltip:
        item.setToolTip(tooltip)
    if color:
        item.setForeground(QColor(color))
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def buffer_summary(rounds: list[dict[str, Any]]) -> str:
    """The buffers at the last round that reports them: proposals refused as trivial (over the rounds read and in
    the last one), held-out programs proposed, and distinct programs (and shapes: programs equal up to constants)
    per task type. Empty for logs written before these figures existed."""
    figures = [r["buffers"] for r in rounds if isinstance(r.get("buffers"), dict)]
    if not figures:
        return ""
    last = figures[-1]
    proposals = sum(int(f.get("proposals", 0)) for f in figures)
    trivial = sum(int(f.get("trivial", 0)) for f in figures)
    hits = sum(int(f.get("heldout_hits", 0)) for f in figures)
    repeats = sum(int(f.get("duplicates", 0)) for f in figures)
    parts = []
    if proposals:
        share = trivial / proposals
        latest = int(last.get("trivial", 0)) / max(1, int(last.get("proposals", 0)))
        parts.append(f"proposals refused as trivial: {share:.0%} ({latest:.0%} in the last round)")
        parts.append(f"held-out programs proposed: {hits} (no reward, in no update)")
        parts.append(f"duplicates: {repeats / proposals:.0%} (no reward)")
    programs, shapes = last.get("programs") or {}, last.get("shapes") or {}
    if programs:
        parts.append("distinct programs in the buffers: " + ", ".join(
            f"{t} {n:,} ({shapes.get(t, 0):,} shapes)" for t, n in programs.items()))
    return " · ".join(parts)


def verdict_color(verdict: str) -> str:
    if verdict in GOOD:
        return theme.OK
    if verdict in NEUTRAL:
        return theme.MUTED
    return theme.ERROR


def _table(columns: tuple[str, ...], widths: tuple[int, ...], reward_tip: str) -> QTableWidget:
    """A read-only table with `columns`, each at least as wide as its header (a narrow one showed "puts → outpu")
    with the column's meaning as the header's tooltip."""
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(list(columns))
    for column, name in enumerate(columns):
        item = table.horizontalHeaderItem(column)
        item.setToolTip(reward_tip if name == "Reward" else COLUMN_TIPS.get(name, name))
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setAlternatingRowColors(True)
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setDefaultSectionSize(22)
    table.setWordWrap(False)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    header.setStretchLastSection(True)
    for column, width in enumerate(widths):
        table.setColumnWidth(column, max(width, header_width(table, column)))
    return table


def header_width(table: QTableWidget, column: int) -> int:
    """The width a column needs to show its header's whole name."""
    return table.horizontalHeader().fontMetrics().horizontalAdvance(table.horizontalHeaderItem(column).text()) \
        + HEADER_PADDING


def _fill(table: QTableWidget, rows: list[list[QTableWidgetItem]], wide_column: int, widths: tuple[int, ...]) -> None:
    """Put `rows` of cells in `table`; the first time it holds rows (its `wide_column` still narrow), give its
    columns their widths."""
    table.setUpdatesEnabled(False)
    table.setRowCount(len(rows))
    for i, cells in enumerate(rows):
        for j, cell in enumerate(cells):
            table.setItem(i, j, cell)
    table.setUpdatesEnabled(True)
    if rows and table.columnWidth(wide_column) < 160:
        for column, width in zip(range(table.columnCount()), widths, strict=False):
            table.setColumnWidth(column, max(width, header_width(table, column)))


def _proposal_cells(p: dict[str, Any]) -> list[QTableWidgetItem]:
    verdict = str(p.get("verdict", ""))
    io = ""
    if p.get("inputs") is not None or p.get("outputs") is not None:
        pairs = zip(p.get("inputs") or [], p.get("outputs") or [], strict=False)
        io = "; ".join(f"{_text(a, 40)} → {_text(b, 40)}" for a, b in pairs)
    program = str(p.get("program", ""))
    return [
        _item(str(p.get("round", "")), align_right=True),
        _item(str(p.get("type", ""))),
        _item(verdict, color=verdict_color(verdict)),
        _item(_number(p.get("solve_rate"), ".2f"), align_right=True),
        _item(_number(p.get("reward"), "+.2f"), align_right=True),
        _item(_text(program), tooltip=program),
        _item(_text(io, 200), tooltip=io),
        _item(_text(p.get("reason", "") or ""), tooltip=str(p.get("reason", "") or "")),
    ]


def _rollout_cells(r: dict[str, Any]) -> list[QTableWidgetItem]:
    verdict = str(r.get("verdict", ""))
    reason = str(r.get("reason", "") or "")
    return [
        _item(str(r.get("role", ""))),
        _item(str(r.get("type", ""))),
        _item(verdict, tooltip=reason, color=verdict_color(verdict)),
        _item(_number(r.get("reward"), "+.2f"), align_right=True),
        _item(_text(r.get("prompt", ""), 120), tooltip=str(r.get("prompt", ""))[-2000:]),
        _item(_text(r.get("answer", ""), 120), tooltip=str(r.get("answer", ""))),
    ]


class TaskBrowser(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.run_dir: Path | None = None
        self.log: RoundLog | None = None
        self.rounds: list[dict[str, Any]] = []

        self.summary = note_label("No self-play run yet: the proposer's tasks and the solver's answers appear here "
                                  "round by round.")
        self.summary.setMinimumWidth(40)
        self.legend = note_label(legend_html())
        self.legend.setObjectName("selfplayLegend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setMinimumWidth(40)
        bar = self._build_filter_bar()
        split = splitter(Qt.Orientation.Vertical, [self._build_proposals_pane(), self._build_rollouts_pane()],
                         collapsible=False)
        layout = add_items(QVBoxLayout(self), bar, self.legend, self.summary, (split, 1))
        layout.setContentsMargins(4, 4, 4, 4)

        self.timer = QTimer(self)
        self.timer.setObjectName("azr-task-browser")
        self.timer.setInterval(1000)
        self.timer.timeout.connect(self.refresh)
        self.refresh_btn.clicked.connect(lambda _=False: self.refresh())
        for box in (self.type_box, self.role_box, self.verdict_box):
            box.currentTextChanged.connect(lambda _t: self._render())
        self.rollouts.currentCellChanged.connect(lambda row, *_: self._show_rollout(row))
        self._shown_rollouts: list[dict[str, Any]] = []

    def _build_filter_bar(self) -> QHBoxLayout:
        """Filters by task type, role and verdict, and Refresh."""
        self.type_box = self._filter_box("Task type")
        self.role_box = self._filter_box("Role: proposer (writes tasks) or solver (answers them)")
        self.verdict_box = self._filter_box("Verdict of the task world's check")
        self.refresh_btn = button("Refresh",
                                  tip="Read the rounds written since the last look (automatic while a run is live)")
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        for text, box in (("Type", self.type_box), ("Role", self.role_box), ("Verdict", self.verdict_box)):
            bar.addWidget(QLabel(text))
            bar.addWidget(box)
            bar.addSpacing(6)
        bar.addStretch(1)
        bar.addWidget(self.refresh_btn)
        return bar

    def _build_proposals_pane(self) -> QWidget:
        self.proposals = _table(PROPOSAL_COLUMNS, PROPOSAL_WIDTHS, f"The proposer's reward: {proposer_rewards()}")
        self.proposals.setObjectName("proposalTable")
        self.proposals_title = note_label("Proposed tasks, newest first", wrap=False)
        upper = QWidget()
        add_items(QVBoxLayout(upper), self.proposals_title, (self.proposals, 1), margins=0)
        return upper

    def _build_rollouts_pane(self) -> QWidget:
        """The last round's rollouts, beside the selected one's whole prompt and answer."""
        self.rollouts = _table(ROLLOUT_COLUMNS, ROLLOUT_WIDTHS,
                               f"Solver: {solver_rewards()}. Proposer: {proposer_rewards()}")
        self.rollouts.setObjectName("rolloutTable")
        self.rollouts_title = note_label("Rollouts of the last round", wrap=False)
        self.prompt_view = QPlainTextEdit()
        self.prompt_view.setReadOnly(True)
        self.prompt_view.setPlaceholderText("Select a rollout: its whole prompt shows here")
        self.answer_view = QPlainTextEdit()
        self.answer_view.setReadOnly(True)
        self.answer_view.setPlaceholderText("… and the model's answer with its verdict here")
        side = splitter(Qt.Orientation.Horizontal, [self.prompt_view, self.answer_view])
        rs = splitter(Qt.Orientation.Horizontal, [self.rollouts, side], stretch=(3, 2))
        lower = QWidget()
        add_items(QVBoxLayout(lower), self.rollouts_title, (rs, 1), margins=0)
        return lower

    @staticmethod
    def _filter_box(tip: str) -> QComboBox:
        box = QComboBox()
        box.addItem(ALL)
        box.setToolTip(tip)
        box.setMinimumWidth(110)
        return box

    # --- source ---
    def set_run(self, run_dir: str | Path | None) -> None:
        """Show the self-play log of `run_dir` (None: nothing); reads what is there now."""
        self.run_dir = Path(run_dir) if run_dir else None
        self.log = RoundLog(self.run_dir / LOG_NAME) if self.run_dir else None
        self.rounds = []
        self.refresh()

    def start_live(self, run_dir: str | Path) -> None:
        if self.run_dir is None or Path(run_dir) != self.run_dir:
            self.set_run(run_dir)
        self.timer.start()

    def stop_live(self) -> None:
        self.timer.stop()
        if self.log is not None:
            self.refresh()  # the last rounds written before the run ended

    def stop_timers(self) -> None:
        self.timer.stop()

    def refresh(self) -> int:
        """Read the rounds added since the last call; returns how many arrived."""
        if self.log is None:
            self._render()
            return 0
        new, reset = self.log.read()
        if reset:
            self.rounds = []
        for rnd in new:
            number = rnd.get("round")
            if isinstance(number, int) and self.rounds and isinstance(self.rounds[-1].get("round"), int) \
                    and number <= self.rounds[-1]["round"]:
                self.rounds = [r for r in self.rounds if not (isinstance(r.get("round"), int) and r["round"] >= number)]
            self.rounds.append(rnd)
        if len(self.rounds) > MAX_ROUNDS:
            del self.rounds[: len(self.rounds) - MAX_ROUNDS]
        if new or reset or not self.rounds:
            self._update_filters()
            self._render()
        return len(new)

    # --- rows ---
    def proposal_rows(self) -> list[dict[str, Any]]:
        """Every proposal, newest round first (in the engine's order within a round), with its round."""
        rows = []
        for rnd in reversed(self.rounds):
            for p in rnd.get("proposals") or []:
                if isinstance(p, dict):
                    rows.append({"round": rnd.get("round", p.get("round")), **p})
        return rows

    def last_rollouts(self) -> list[dict[str, Any]]:
        for rnd in reversed(self.rounds):
            if rnd.get("rollouts"):
                return [r for r in rnd["rollouts"] if isinstance(r, dict)]
        return []

    def _matches(self, row: dict[str, Any], role: str) -> bool:
        t, r, v = self.type_box.currentText(), self.role_box.currentText(), self.verdict_box.currentText()
        return ((t == ALL or row.get("type") == t) and (r == ALL or role == r)
                and (v == ALL or row.get("verdict") == v))

    def visible_proposals(self) -> list[dict[str, Any]]:
        return [p for p in self.proposal_rows() if self._matches(p, "proposer")]

    def visible_rollouts(self) -> list[dict[str, Any]]:
        return [r for r in self.last_rollouts() if self._matches(r, str(r.get("role", "")))]

    def _update_filters(self) -> None:
        types, roles, verdicts = set(), set(), set()
        for rnd in self.rounds:
            for p in rnd.get("proposals") or []:
                if isinstance(p, dict):
                    types.add(str(p.get("type", "")))
                    verdicts.add(str(p.get("verdict", "")))
            for r in rnd.get("rollouts") or []:
                if isinstance(r, dict):
                    types.add(str(r.get("type", "")))
                    roles.add(str(r.get("role", "")))
                    verdicts.add(str(r.get("verdict", "")))
        if self.rounds:
            roles.add("proposer")
        for box, values in ((self.type_box, types), (self.role_box, roles), (self.verdict_box, verdicts)):
            have = {box.itemText(i) for i in range(box.count())}
            box.blockSignals(True)
            if not self.rounds:
                current = box.currentText()
                box.clear()
                box.addItem(ALL)
                box.setCurrentText(current if current == ALL else ALL)
            for value in sorted(v for v in values if v and v not in have):
                box.addItem(value)
            box.blockSignals(False)

    def _render(self) -> None:
        self._render_proposals()
        self._render_rollouts()
        if self.rounds:
            figures = buffer_summary(self.rounds)
            self.summary.setText(f"{len(self.rounds)} round(s) read" + (f" · {figures}" if figures else ""))
            self.summary.setToolTip(str(self.log.path) if self.log else "")
        elif self.run_dir is not None:
            self.summary.setText("No self-play round written yet")
            self.summary.setToolTip(str(self.run_dir / LOG_NAME))
        self._show_rollout(self.rollouts.currentRow())

    def _render_proposals(self) -> None:
        rows = self.visible_proposals()
        total = sum(len(r.get("proposals") or []) for r in self.rounds)
        shown = rows[:MAX_ROWS]
        _fill(self.proposals, [_proposal_cells(p) for p in shown], wide_column=5, widths=PROPOSAL_WIDTHS)
        more = f" (newest {len(shown)} shown)" if len(rows) > len(shown) else ""
        self.proposals_title.setText(f"Proposed tasks, newest first: {len(rows)} of {total} match the filters{more}")

    def _render_rollouts(self) -> None:
        rollouts = self.visible_rollouts()
        self._shown_rollouts = rollouts
        _fill(self.rollouts, [_rollout_cells(r) for r in rollouts], wide_column=4, widths=ROLLOUT_WIDTHS)
        last = self.rounds[-1].get("round") if self.rounds else None
        self.rollouts_title.setText(f"Rollouts of round {last}: {len(rollouts)} match the filters"
                                    if last is not None else "Rollouts of the last round")

    def _show_rollout(self, row: int) -> None:
        if not (0 <= row < len(self._shown_rollouts)):
            self.prompt_view.clear()
            self.answer_view.clear()
            return
        r = self._shown_rollouts[row]
        self.prompt_view.setPlainText(str(r.get("prompt", "")))
        reward = _number(r.get("reward"), "+.2f")
        reason = str(r.get("reason", "") or "")
        self.answer_view.setPlainText(f"{r.get('answer', '')}\n\n— {r.get('role', '')} · {r.get('type', '')} · "
                                      f"verdict: {r.get('verdict', '')}" + (f" · reward {reward}" if reward else "")
                                      + (f"\n{reason}" if reason else ""))
