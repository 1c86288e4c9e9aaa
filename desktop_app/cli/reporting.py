"""How the headless verbs report long work: the engine's events as a progress bar and lines on stderr, or one JSON
object per line on stdout (--json); and the signals that stop, save or pause it (shared by train and
selfplay-demo)."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from desktop_app.engine.events import Log


def process_prefix() -> str:
    """'[process N] ' in the processes torchrun starts besides the first (they may all report one mistake)."""
    rank = os.environ.get("RANK", "0")
    return f"[process {rank}] " if os.environ.get("WORLD_SIZE", "1") != "1" and rank != "0" else ""


def consume_quietly(events: Any) -> int:
    """A process besides the first under torchrun: it trains, process 0 reports; only its errors are printed."""
    reason = "failed"
    for event in events:
        if event.type == "log" and event.level == "error":
            print(f"{process_prefix()}{event.message}", file=sys.stderr, flush=True)
        elif event.type == "finished":
            reason = event.reason
    return 1 if reason == "failed" else 0


class SignalScope:
    """Signal handlers installed for a `with` block, the previous ones put back after it (signals this platform
    lacks, such as SIGUSR1/2 on Windows, are skipped). `handlers()` names them; `old` keeps what they replaced."""

    old: dict[int, Any]

    def handlers(self) -> dict[str, Any]:
        raise NotImplementedError

    def __enter__(self) -> SignalScope:
        self.old = {}
        for name, handler in self.handlers().items():
            if hasattr(signal, name):
                number = getattr(signal, name)
                self.old[number] = signal.signal(number, handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for number, handler in self.old.items():
            signal.signal(number, handler)


class StopSignals(SignalScope):
    """Ctrl+C / SIGTERM = graceful stop (a second Ctrl+C exits at once); SIGUSR1 = save a checkpoint now;
    SIGUSR2 = pause / resume. torchrun passes Ctrl+C on to every process as SIGINT, and SIGTERM when it ends the
    others because one of them died."""

    def __init__(self, controls: Any):
        self.controls = controls
        self.interrupts = 0

    def _on_stop(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts > 1:
                os._exit(130)  # committed checkpoints are intact by construction (atomic rename)
        if not self.controls.stop.is_set():
            self.controls.stop.set()
            again = " (Ctrl+C again to quit at once)" if signum == signal.SIGINT else ""
            print(f"\nstopping after this step and saving{again}", file=sys.stderr, flush=True)

    def _on_pause(self, signum: int, frame: Any) -> None:
        pause = self.controls.pause
        pause.clear() if pause.is_set() else pause.set()

    def handlers(self) -> dict[str, Any]:
        return {"SIGINT": self._on_stop, "SIGTERM": self._on_stop, "SIGUSR2": self._on_pause,
                "SIGUSR1": lambda s, f: self.controls.save_now.set()}


def consume(events: Any, notes: list[str], *, as_json: bool) -> int:
    """Report a run's events until it finishes; the exit code (1 when it failed). Events that describe the work for
    a window (where a run lives, its replayed history) are not printed: the output is the run's own record."""
    reason = "failed"
    bar = None
    shown = (e for e in events if e.recorded or e.type == "progress")
    try:
        first = next(shown, None)  # setup errors surface here, before any note is printed
        if first is not None:
            _show(first, as_json, bar)  # a run's first event says how many processes train it
        for note in notes:
            _show(Log("info", note), as_json, bar)
        for event in shown:
            if event.type == "step" and not as_json:
                if bar is not None and (bar.total != event.total_steps or event.step < bar.n):
                    bar.close()  # the next stage of a pipeline: a fresh bar
                    bar = None
                bar = bar or _make_bar(event.total_steps)
                m = event.metrics
                bar.n = event.step
                bar.set_postfix_str(f"loss {m.get('loss', float('nan')):.4f}, {m.get('tokens_per_s', 0):,.0f} tok/s, "
                                    f"ETA {_hms(event.eta_s) if event.eta_s else '–'}", refresh=False)
                bar.refresh()
                continue
            if event.type == "finished":
                reason = event.reason
            _show(event, as_json, bar)
    finally:
        if bar is not None:
            bar.close()
    return 1 if reason == "failed" else 0


def _make_bar(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="step", file=sys.stderr, dynamic_ncols=True)


def _show(event: Any, as_json: bool, bar: Any) -> None:
    if as_json:
        sys.stdout.write(json.dumps(event.to_dict(), allow_nan=True) + "\n")
        sys.stdout.flush()
        return
    d = event.to_dict()
    if event.type == "log":
        line = f"[{event.level}] {event.message}"
    elif event.type == "eval":
        line = f"step {event.step}: " + ", ".join(f"{k} {v:.4f}" for k, v in event.metrics.items())
    elif event.type == "sample":
        line = f"sample @ {event.step}: {event.prompt!r} -> {event.text!r}"
    elif event.type == "checkpoint":
        line = f"saved {event.path}" + (" (best)" if event.best else "")
    elif event.type == "finished":
        line = f"{event.reason}: {event.message}"
    elif event.type == "model_evaluated":
        figures = {k: v for k, v in event.metrics.items() if isinstance(v, float) and "/ci95" not in k}
        line = f"{event.name}: " + ", ".join(f"{k} {v:.4g}" for k, v in figures.items())
    elif event.type == "progress":
        line = f"{event.stage}: {int(event.done)}/{int(event.total)} {event.unit} {event.message}".rstrip()
    else:
        line = json.dumps(d)
    if bar is not None:
        bar.write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)


def _hms(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
