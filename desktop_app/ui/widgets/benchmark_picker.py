"""widget="benchmarks": the standard benchmarks of an evaluation, ticked in a searchable list.

The list shows the ticked benchmarks and the popular ones (each with its one-line description) until the person
types; then the matches among every task and group of the harness and of the benchmark folder. A name typed and
confirmed with Enter is ticked whether or not the list knows it (a task of a folder not read yet). Each row says
where its data stands (fetched, to fetch, local files). What the rows say comes from the engine's catalog; this
editor only shows it and asks, by its signals, for the catalog (`catalog_wanted`) and for a fetch
(`fetch_requested`); the Evaluate view does that work in the background (benchmark_section.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLineEdit, QListWidget, QListWidgetItem, QVBoxLayout, QWidget

from desktop_app.ui.widgets.hub_words import progress_words
from desktop_app.ui.widgets.layouts import button, note_label, progress_bar

NAME_ROLE = Qt.ItemDataRole.UserRole
MOST_SHOWN = 200  # matches listed at once; typing more narrows them
UNKNOWN = "not a task the harness or the folder knows"
STATE_WORDS = {"ready": "data fetched", "missing": "data to fetch", "local": "local data files", "unknown": UNKNOWN}


def popular_pairs(popular: Any) -> list[tuple[str, str]]:
    """(name, description) of the catalog's popular benchmarks, whatever container holds them: a dict, pairs, or
    records with .name and .description."""
    items: Iterable[Any] = popular.items() if isinstance(popular, dict) else popular or []
    out = []
    for item in items:
        if isinstance(item, (tuple, list)) and item:
            out.append((str(item[0]), str(item[1]) if len(item) > 1 else ""))
        elif isinstance(item, str):
            out.append((item, ""))
        else:
            out.append((str(getattr(item, "name", item)), str(getattr(item, "description", ""))))
    return out


def matches(query: str, names: list[str], described: dict[str, str], most: int = MOST_SHOWN) -> tuple[list[str], int]:
    """The names (of `names`, described ones first) that contain every word of `query` in their name or
    description, case ignored: at most `most`, and how many match in all."""
    words = query.lower().split()
    found = [n for n in dict.fromkeys([*described, *names])
             if all(w in f"{n} {described.get(n, '')}".lower() for w in words)]
    return found[:most], len(found)


class BenchmarkPicker(QWidget):
    """Some of the harness's task and group names. value(): the ticked names in the order they were ticked."""

    changed = Signal()
    catalog_wanted = Signal()  # the full task list is needed (the person searches or ticks): load it once
    fetch_requested = Signal(list)  # the ticked names whose data is missing
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.chosen: list[str] = []
        self.described: dict[str, str] = {}  # the popular benchmarks, by name
        self.names: list[str] = []  # every task and group the catalog knows ([] until it is loaded)
        self.states: dict[str, str] = {}  # name -> ready | missing | local
        self.unavailable = ""  # why benchmarks cannot run here (no harness), or ""
        self.fetching_now = False
        self.state_note = note_label("")
        self.state_note.setObjectName("benchmarkState")
        self.search = QLineEdit()
        self.search.setObjectName("benchmarkSearch")
        self.search.setPlaceholderText("Search benchmarks, or type a task name and press Enter")
        self.search.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.setObjectName("benchmarkList")
        self.list.setMinimumHeight(110)
        self.list.setMaximumHeight(170)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)  # the tooltip has the whole line
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.fetch_btn = button("Fetch data", "benchmarkFetch", "Download the data of the ticked benchmarks that "
                                "is not here yet, from the Hugging Face Hub; evaluations then run offline")
        self.cancel_btn = button("Cancel", "benchmarkFetchCancel", "Stop fetching; what is fetched stays")
        self.bar = progress_bar("")
        self.bar.setObjectName("benchmarkFetchBar")
        self.fetch_note = note_label("")
        self.fetch_note.setObjectName("benchmarkFetchNote")
        self._lay_out()
        self.search.textEdited.connect(self._searched)
        self.search.returnPressed.connect(self._typed)
        self.list.itemChanged.connect(self._ticked)
        self.fetch_btn.clicked.connect(lambda _=False: self.fetch_requested.emit(self.missing()))
        self.cancel_btn.clicked.connect(lambda _=False: self.cancel_requested.emit())
        self.show_fetching(False)
        self._fill()

    def _lay_out(self) -> None:
        fetch_row = QHBoxLayout()
        fetch_row.setContentsMargins(0, 0, 0, 0)
        fetch_row.addWidget(self.fetch_btn)
        fetch_row.addWidget(self.bar, 1)
        fetch_row.addWidget(self.cancel_btn)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        for part in (self.state_note, self.search, self.list):
            layout.addWidget(part)
        layout.addLayout(fetch_row)
        layout.addWidget(self.fetch_note)

    # --- the editor's interface (field_editors.py) ---
    def value(self) -> list[str]:
        return list(self.chosen)

    def set_value(self, value: Any) -> None:
        chosen = list(dict.fromkeys(str(v).strip() for v in value if str(v).strip())) \
            if isinstance(value, (list, tuple)) else []
        if chosen != self.chosen:
            self.clear_error()
        self.chosen = chosen
        self._fill()

    def problems(self) -> list[str]:
        return []

    # --- what the catalog says ---
    def set_popular(self, popular: Any) -> None:
        self.described = dict(popular_pairs(popular))
        self._fill()

    def set_catalog(self, names: list[str]) -> None:
        self.names = list(names)
        self._fill()

    def set_states(self, states: dict[str, str]) -> None:
        self.states.update(states)
        self._fill()

    def set_unavailable(self, sentence: str) -> None:
        """Benchmarks cannot run here (`sentence` says why and what to install): the sentence instead of the list."""
        self.unavailable = sentence
        for part in (self.search, self.list, self.fetch_btn):
            part.setVisible(not sentence)
        self._fill()

    def missing(self) -> list[str]:
        """The ticked names whose data is known to be missing."""
        return [n for n in self.chosen if self.states.get(n) == "missing"]

    # --- fetching, as the view reports it ---
    def show_fetching(self, on: bool) -> None:
        self.fetching_now = on
        self.bar.setVisible(on)
        self.cancel_btn.setVisible(on)
        self.fetch_btn.setEnabled(not on and bool(self.missing()) and not self.unavailable)
        self.search.setEnabled(not on)
        self.list.setEnabled(not on)

    def show_progress(self, done: float, total: float, speed: float = 0.0, eta_s: float = -1.0) -> None:
        if total > 0:
            self.bar.setValue(int(1000 * min(done, total) / total))
            self.bar.setFormat(f"{done / total:.0%}")
        self.fetch_note.setText(progress_words(int(done), int(total), speed, eta_s))

    def show_fetch_note(self, text: str, role: str = "muted") -> None:
        self.fetch_note.setText(text)
        self.fetch_note.setProperty("role", role)
        self.fetch_note.style().unpolish(self.fetch_note)
        self.fetch_note.style().polish(self.fetch_note)

    def clear_error(self) -> None:
        """An error in the fetch line is about benchmarks no longer ticked, or outdated by a later success: gone.
        (A note that is no error, such as a fetch's progress, stays.)"""
        if self.fetch_note.property("role") == "error":
            self.show_fetch_note("")

    # --- the list ---
    def shown_names(self) -> list[str]:
        """The rows: the ticked names, then the popular ones, or the matches of what is typed."""
        query = self.search.text().strip()
        if not query:
            return list(dict.fromkeys([*self.chosen, *self.described]))
        found, _total = matches(query, self.names, self.described)
        return list(dict.fromkeys([*[n for n in self.chosen if n in found], *found]))

    def row_text(self, name: str) -> str:
        """Name, where its data stands (before the description: a narrow list cuts the line's end), description."""
        parts = [name]
        if self.states.get(name) in STATE_WORDS:
            parts.append(STATE_WORDS[self.states[name]])
        elif self.names and name not in self.names and name not in self.described:
            parts.append(UNKNOWN)
        if self.described.get(name):
            parts.append(self.described[name])
        return " — ".join(parts)

    def _fill(self) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for name in self.shown_names():
            item = QListWidgetItem(self.row_text(name))
            item.setData(NAME_ROLE, name)
            item.setToolTip(self.row_text(name))
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if name in self.chosen else Qt.CheckState.Unchecked)
            self.list.addItem(item)
        self.list.blockSignals(False)
        self.state_note.setText(self._summary())
        self.state_note.setProperty("role", "error" if self.unavailable else "muted")
        self.fetch_btn.setEnabled(bool(self.missing()) and not self.unavailable and not self.fetching_now)

    def _summary(self) -> str:
        if self.unavailable:
            return self.unavailable
        query = self.search.text().strip()
        if query and not self.names:
            return "reading the harness's task list…"
        if query:
            shown, total = matches(query, self.names, self.described)
            more = f" (the first {len(shown)}; type more to narrow them)" if total > len(shown) else ""
            return f"{total:,} match{'es' if total != 1 else ''}{more}" if total else \
                "no task of that name: press Enter to tick it anyway"
        ticked = f"{len(self.chosen)} ticked" if self.chosen else "none ticked"
        missing = self.missing()
        return ticked + (f"; data to fetch for {', '.join(missing)}" if missing else "")

    def _searched(self, _text: str) -> None:
        if not self.names:
            self.catalog_wanted.emit()
        self._fill()

    def _typed(self) -> None:
        """Enter: the one match, or the name as typed, is ticked."""
        query = self.search.text().strip()
        if not query:
            return
        found, total = matches(query, self.names, self.described)
        name = found[0] if total == 1 and query not in found else query
        if any(c.isspace() for c in name):  # words to search by, not a task name
            return
        if name not in self.chosen:
            self.chosen.append(name)
            self.clear_error()
            self.changed.emit()
        self.search.clear()
        self._fill()
        self.catalog_wanted.emit()

    def _ticked(self, item: QListWidgetItem) -> None:
        name = item.data(NAME_ROLE)
        on = item.checkState() == Qt.CheckState.Checked
        if on and name not in self.chosen:
            self.chosen.append(name)
        elif not on and name in self.chosen:
            self.chosen.remove(name)
        else:
            return
        self.clear_error()
        self.state_note.setText(self._summary())
        self.fetch_btn.setEnabled(bool(self.missing()) and not self.unavailable and not self.fetching_now)
        self.changed.emit()
        if on:
            self.catalog_wanted.emit()
