"""The Train tab's settings search: the Search settings… button, the search window it opens for the run the form
describes (widgets/sweep_dialog.py), and what the window's answers do to the form.

Use the best settings puts the best trial's settings into the fields that hold them: the hyperparameters, the
adapter and the method's options here, a model setting on the Model tab (the window routes it). Only those fields
change, and they hold the person's choice from then on (the method's defaults no longer replace them). One search
runs at a time, never beside a run of the Train tab: each would slow the other down.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from desktop_app.engine.errors import UserError
from desktop_app.engine.methods import PIPELINE, method_of
from desktop_app.engine.specs import SpecError
from desktop_app.engine.train.request import RunRequest, plan_run
from desktop_app.ui.sweep_jobs import SWEEP_KIND
from desktop_app.ui.widgets.layouts import button

SEARCH_TIP = ("Search the hyperparameters: train this run many times with other settings (a learning rate, a "
              "warm-up...) and keep the best; a table and plots follow the trials")


class TrainSweeps(QObject):
    """Search settings… of one Train tab (`tab`: its form, its run, the app's services)."""

    open_run_requested = Signal(str)  # the best trial's run: the window selects it in the Library
    model_settings_chosen = Signal(dict)  # ModelSpec fields of the best trial: the window fills the Model tab

    def __init__(self, tab: Any):
        super().__init__(tab)
        self.tab, self.ctx, self.setup = tab, tab.ctx, tab.setup
        self.button = button("Search settings…", "searchSettingsButton", SEARCH_TIP)
        self.button.clicked.connect(lambda _=False: self.open_dialog())
        self.dialog: Any = None  # the newest search window (widgets/sweep_dialog.py)

    @property
    def running(self) -> bool:
        return self.ctx.runner.is_running(SWEEP_KIND)

    def refuses_training(self) -> bool:
        """True (and the person told why) while a search runs: a run of the Train tab waits for it."""
        if self.running:
            self.ctx.info("A settings search is running: stop it in its window first (Search settings… shows it).")
        return self.running

    def open_dialog(self) -> Any:
        """The search window (a SweepDialog): the running (or still open) one again, else a new one for the form's
        run; None when the form's run cannot be searched (the person is told why)."""
        from desktop_app.ui.widgets.sweep_dialog import SweepDialog  # lazy: start-up

        if self.dialog is not None and (self.dialog.running or self.dialog.isVisible()):
            self.dialog.show()
            self.dialog.raise_()
            return self.dialog
        if self.tab.running:
            self.ctx.info("A run is training: stop it before searching settings.")
            return None
        try:
            request = self.request()
            config = plan_run(request)
        except SpecError as exc:
            self.ctx.report_error("This run cannot be searched yet:\n" + "\n".join(f"• {p}" for p in exc.problems),
                                  title="Search settings")
            return None
        except UserError as exc:
            self.ctx.report_error(f"This run cannot be searched yet:\n• {exc}", title="Search settings")
            return None
        if self.dialog is not None:
            self.dialog.deleteLater()  # an ended search's window, closed: the Library keeps its trials
        self.dialog = SweepDialog(self.ctx, request, config, self.tab)
        self.dialog.use_best_requested.connect(self.use_best)
        self.dialog.open_run_requested.connect(self.open_run_requested)
        self.dialog.show()
        return self.dialog

    def request(self) -> RunRequest:
        """The run the form describes, as every trial starts from it; UserError (one line each) for what the Train
        tab's Start would refuse too."""
        setup = self.setup
        m = setup.current_method()
        if m is PIPELINE:
            raise UserError("a search trains one method: choose it instead of Pipeline")
        problems = setup.form.validate() + (setup.method_panel.problems() if m.finetune else [])
        if problems:
            raise SpecError(problems)
        if m.finetune:
            return setup.run_request()
        if setup.model_spec is None and not setup.base_model:
            raise UserError("the model spec on the Model tab has problems; fix them first")
        dataset = setup.dataset_box.currentData()
        if not dataset:
            raise UserError("every trial trains on one prepared dataset: choose it in the Dataset box (the Data tab "
                            "prepares the sample corpus or your files)")
        return setup.run_request(dataset)

    def use_best(self, params: dict[str, Any]) -> None:
        """The best trial's settings into the fields that hold them; the search window says which, and where."""
        from desktop_app.ui.sweep_rows import PLACES, by_section, settings_words  # lazy: start-up

        dialog = self.dialog
        if dialog is None or dialog.view is None:
            return
        searched = method_of(dialog.setup.config)
        if self.setup.current_method().key != searched.key:
            dialog.view.note(f"The Train tab shows {self.setup.current_method().label} now; the search was for "
                             f"{searched.label}: choose it, then Use the best settings again.")
            return
        if self.tab.running:
            dialog.view.note("A run is training: its settings cannot change now.")
            return
        panel = self.setup.method_panel
        forms = {"train": self.setup.form, "adapter": panel.adapter_form, "method_options": panel.options_form()}
        labels = dialog.setup.labels()
        places = []
        for section, values in by_section(params).items():
            if section == "model":
                self.model_settings_chosen.emit(dict(values))
            elif forms.get(section) is not None:
                forms[section].set_values({k: v for k, v in values.items() if k in forms[section].editors})
            else:
                continue
            shown = {path: v for path, v in params.items() if path.startswith(section + ".")}
            places.append(f"{PLACES[section]}: {settings_words(shown, labels)}")
        dialog.view.note("Filled in from the best trial: " + "; ".join(places))
