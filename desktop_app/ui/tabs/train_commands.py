"""The Train tab's terminal equivalents and folder dialogs: Show CLI command (the `train` lines, the torchrun lines and
the run.json), Save run.json, and the Resume / Watch folder pickers. A mixin of TrainTab (its state and setup)."""

from __future__ import annotations

import json
from typing import Any

from desktop_app.engine.methods import PIPELINE
from desktop_app.engine.run_commands import pipeline_commands, run_commands, torchrun_command
from desktop_app.engine.specs import RunConfig
from desktop_app.ui.tabs.train_dialogs import CliDialog, choose_run_folder, save_config_dialog


class TrainCommands:
    """Show CLI command and the folder dialogs, over the tab's `setup`, `state`, `ctx` and its run methods."""

    ctx: Any
    setup: Any
    pipeline: Any
    cli_dialog: CliDialog | None

    def _shown_config(self) -> RunConfig:
        """The running run's config, else the form's."""
        if self.running and self.config is not None:
            return self.config
        return self.setup.build_config(self.setup.dataset_box.currentData() or "<prepared sample corpus>")

    def _pipeline_shown(self) -> bool:
        """The CLI dialog is about a pipeline: one runs, or the Pipeline method is chosen."""
        return self.pipeline_running if self.running else self.setup.current_method() is PIPELINE

    def pipeline_command(self) -> str:
        """The terminal equivalent of the pipeline: `train --pipeline pipeline.json`, and how to continue ours."""
        return pipeline_commands(self.pipeline_dir)

    def cli_command(self, config: RunConfig | None = None) -> str:
        """The terminal equivalent: `train --method ...` for the methods, `train --config` for every run."""
        if config is None and self._pipeline_shown():
            return self.pipeline_command()
        return run_commands(config or self._shown_config(), self.run_dir)

    def show_cli_command(self) -> None:
        if self._pipeline_shown():
            editor = self.pipeline
            dialog = CliDialog("The same pipeline, headless (save the pipeline below as pipeline.json):",
                               self.pipeline_command(), editor.pipeline_json(), "Save pipeline.json…",
                               editor.save_dialog, self)
        else:
            config = self._shown_config()
            dialog = CliDialog("The same run, headless (save the config below as run.json):",
                               self.cli_command(config) + "\n" + torchrun_command(config),
                               json.dumps(config.to_dict(), indent=2), "Save run.json…",
                               lambda: self._save_config(config), self)
        self.cli_dialog = dialog
        dialog.open()

    def _save_config(self, config: RunConfig) -> None:
        try:
            save_config_dialog(self, config)
        except Exception as exc:
            self.ctx.report_exception(exc)

    def _resume_dialog(self, _checked: bool = False) -> None:
        folder = choose_run_folder(self, "resume", self.ctx.workspace.folder("runs"))
        if folder:
            self.resume_run(folder)

    def _watch_dialog(self, _checked: bool = False) -> None:
        folder = choose_run_folder(self, "watch", self.ctx.workspace.folder("runs"))
        if folder:
            self.watch_run(folder)
