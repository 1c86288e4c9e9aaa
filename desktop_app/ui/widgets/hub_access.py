"""How the rest of the window reaches the Get-a-model view: one view per main window, opened from the Library and
from every base-model picker, and the requests it makes ("Chat with it", "Fine-tune it") routed through one small
object that the main window connects (tabs and widgets never import each other). Light on purpose: the view and
huggingface_hub are imported only when the person opens it."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QDialog, QWidget

from desktop_app.ui.context import AppContext


class HubRoutes(QObject):
    """What the Get-a-model view asks of the window; one per AppContext (see hub_routes)."""

    next_step = Signal(str, str)  # ("chat" | "finetune", the model's folder or .gguf file): MainWindow.next_step


def hub_routes(ctx: AppContext) -> HubRoutes:
    """The routes of `ctx`'s window, made on first use."""
    routes = ctx.findChild(HubRoutes)
    return routes if routes is not None else HubRoutes(ctx)


def find_context(anchor: QWidget) -> AppContext | None:
    """The AppContext of the main window that holds `anchor` (None for a widget shown on its own)."""
    window = anchor.window()
    return window.findChild(AppContext) if window is not None else None


def open_get_model_view(anchor: QWidget, ctx: AppContext | None = None) -> QDialog | None:
    """Show the window's Get-a-model view (made once, then shown again with its downloads as they stand); None when
    `anchor` is in no main window. Opening it is what allows it to search the Hub (when network features are on)."""
    ctx = ctx or find_context(anchor)
    if ctx is None:
        return None
    from desktop_app.ui.widgets.get_model_view import GetModelView  # lazy: start-up

    window = anchor.window()
    view = window.findChild(GetModelView)
    if view is None:
        view = GetModelView(ctx, window)
        routes = hub_routes(ctx)
        view.downloads.chat_requested.connect(lambda path: (view.hide(), routes.next_step.emit("chat", path)))
        view.downloads.finetune_requested.connect(lambda path: (view.hide(), routes.next_step.emit("finetune", path)))
    view.show()
    view.raise_()
    view.activateWindow()
    return view
