"""A clean light theme: Fusion style, a calm palette, a little QSS for spacing and accents."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

ACCENT = "#4f46e5"  # indigo
ACCENT_DARK = "#4338ca"
TEXT = "#1f2937"
MUTED = "#6b7280"
BORDER = "#d1d5db"
WINDOW = "#f5f6fa"
BASE = "#ffffff"
ERROR = "#b91c1c"
OK = "#15803d"
WARN = "#b45309"
DISABLED_TEXT = "#9ca3af"
DISABLED_BASE = "#f3f4f6"
PROGRESS_FILL = "#a5b4fc"  # light indigo: the bar's dark text stays readable over the fill and beside it

# Curve colours for plots (colour-blind friendly-ish, readable on white).
PLOT_COLORS = ["#4f46e5", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d"]

QSS = f"""
QMainWindow, QDialog {{ background: {WINDOW}; }}
QTabWidget::pane {{ border: 1px solid {BORDER}; border-radius: 6px; background: {BASE}; top: -1px; }}
QTabBar::tab {{ padding: 7px 18px; margin-right: 2px; border: 1px solid transparent;
               border-top-left-radius: 6px; border-top-right-radius: 6px; color: {MUTED}; }}
QTabBar::tab:selected {{ background: {BASE}; border-color: {BORDER}; border-bottom-color: {BASE};
                        color: {TEXT}; font-weight: 600; }}
QTabBar::tab:hover:!selected {{ color: {TEXT}; }}
QGroupBox {{ border: 1px solid {BORDER}; border-radius: 6px; margin-top: 14px; padding: 8px 6px 6px 6px;
            background: {BASE}; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 10px; padding: 0 4px; color: {TEXT}; font-weight: 600; }}
QPushButton {{ padding: 5px 14px; border: 1px solid {BORDER}; border-radius: 5px; background: {BASE}; }}
QPushButton:hover {{ border-color: {ACCENT}; }}
QPushButton:disabled {{ color: #9ca3af; background: #f3f4f6; }}
QPushButton:checked {{ background: #e0e7ff; border-color: {ACCENT}; color: {ACCENT_DARK}; font-weight: 600; }}
QPushButton[primary="true"] {{ background: {ACCENT}; color: white; border-color: {ACCENT}; font-weight: 600; }}
QPushButton[primary="true"]:hover {{ background: {ACCENT_DARK}; }}
QPushButton[primary="true"]:disabled {{ background: #a5b4fc; border-color: #a5b4fc; color: #eef2ff; }}
QScrollArea, QScrollArea > QWidget > QWidget {{ background: transparent; }}
QLineEdit, QPlainTextEdit, QTextEdit, QTextBrowser {{
    border: 1px solid {BORDER}; border-radius: 4px; padding: 3px 5px; background: {BASE};
    selection-background-color: {ACCENT}; }}
QLineEdit:focus, QPlainTextEdit:focus {{
    border-color: {ACCENT}; }}
QLineEdit:disabled, QPlainTextEdit:disabled, QTextEdit:disabled, QSpinBox:disabled, QDoubleSpinBox:disabled,
QComboBox:disabled {{ color: {DISABLED_TEXT}; background: {DISABLED_BASE}; }}
QLabel:disabled, QCheckBox:disabled, QRadioButton:disabled {{ color: {DISABLED_TEXT}; }}
QScrollBar:vertical {{ width: 12px; background: #eceef3; margin: 0; border: none; }}
QScrollBar:horizontal {{ height: 12px; background: #eceef3; margin: 0; border: none; }}
QScrollBar::handle:vertical {{ background: #a3a8b6; border-radius: 4px; min-height: 28px; margin: 2px; }}
QScrollBar::handle:horizontal {{ background: #a3a8b6; border-radius: 4px; min-width: 28px; margin: 2px; }}
QScrollBar::handle:hover {{ background: #6b7280; }}
QScrollBar::add-line, QScrollBar::sub-line {{ width: 0; height: 0; }}
QScrollBar::add-page, QScrollBar::sub-page {{ background: none; }}
QTableWidget, QTreeWidget, QListWidget {{ border: 1px solid {BORDER}; border-radius: 4px; background: {BASE};
    alternate-background-color: #f9fafb; gridline-color: #eef0f3; selection-background-color: #e0e7ff;
    selection-color: {TEXT}; }}
QTreeWidget::item {{ padding: 3px 2px; }}
QHeaderView::section {{ background: #f3f4f6; border: none; border-bottom: 1px solid {BORDER};
    padding: 4px 6px; color: {TEXT}; font-weight: 600; }}
QProgressBar {{ border: 1px solid {BORDER}; border-radius: 4px; text-align: center; background: #eef0f3;
    min-height: 18px; color: {TEXT}; }}
QProgressBar::chunk {{ background: {PROGRESS_FILL}; border-radius: 3px; }}
QStatusBar {{ background: {BASE}; border-top: 1px solid {BORDER}; color: {MUTED}; }}
QToolBar {{ background: {BASE}; border-bottom: 1px solid {BORDER}; spacing: 4px; padding: 3px; }}
QLabel[role="title"] {{ font-size: 15px; font-weight: 600; color: {TEXT}; }}
QLabel[role="muted"] {{ color: {MUTED}; }}
QLabel[role="error"] {{ color: {ERROR}; }}
QLabel[role="ok"] {{ color: {OK}; }}
QLabel[role="metric"] {{ font-size: 18px; font-weight: 600; color: {ACCENT}; }}
QFrame#dropZone {{ border: 2px dashed #a5b4fc; border-radius: 8px; background: #eef2ff; }}
QFrame#dropZone[active="true"] {{ border-color: {ACCENT}; background: #e0e7ff; }}
QFrame#nextSteps {{ background: #ecfdf5; border: 1px solid #a7f3d0; border-radius: 6px; }}
QFrame#saveBlocked {{ background: #fef3c7; border: 1px solid #f59e0b; border-radius: 6px; }}
QFrame[bubble="user"] {{ background: #eef2ff; border: 1px solid #c7d2fe; border-radius: 8px; }}
QFrame[bubble="assistant"] {{ background: {BASE}; border: 1px solid {BORDER}; border-radius: 8px; }}
QFrame[bubble="system"] {{ background: #f9fafb; border: 1px dashed {BORDER}; border-radius: 8px; }}
QToolButton[flat="true"] {{ border: none; color: {MUTED}; padding: 1px 4px; }}
QToolButton[flat="true"]:hover {{ color: {ACCENT}; }}
"""


def apply_theme(app: QApplication) -> None:
    app.setStyle("Fusion")
    pal = QPalette()
    pal.setColor(QPalette.ColorRole.Window, QColor(WINDOW))
    pal.setColor(QPalette.ColorRole.WindowText, QColor(TEXT))
    pal.setColor(QPalette.ColorRole.Base, QColor(BASE))
    pal.setColor(QPalette.ColorRole.AlternateBase, QColor("#f9fafb"))
    pal.setColor(QPalette.ColorRole.Text, QColor(TEXT))
    pal.setColor(QPalette.ColorRole.Button, QColor(BASE))
    pal.setColor(QPalette.ColorRole.ButtonText, QColor(TEXT))
    pal.setColor(QPalette.ColorRole.Highlight, QColor(ACCENT))
    pal.setColor(QPalette.ColorRole.HighlightedText, QColor("white"))
    pal.setColor(QPalette.ColorRole.ToolTipBase, QColor("#111827"))
    pal.setColor(QPalette.ColorRole.ToolTipText, QColor("white"))
    pal.setColor(QPalette.ColorRole.PlaceholderText, QColor("#9ca3af"))
    pal.setColor(QPalette.ColorRole.Link, QColor(ACCENT))
    # Disabled widgets must look disabled (a setting that does not apply, a form locked while a run trains).
    disabled = QPalette.ColorGroup.Disabled
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
        pal.setColor(disabled, role, QColor(DISABLED_TEXT))
    pal.setColor(disabled, QPalette.ColorRole.Base, QColor(DISABLED_BASE))
    pal.setColor(disabled, QPalette.ColorRole.Button, QColor(DISABLED_BASE))
    app.setPalette(pal)
    app.setStyleSheet(QSS)
