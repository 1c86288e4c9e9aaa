"""A run on several processes, as the engine's session (engine/session.py) starts it when a run asks for several:
the run config written as RUN/run.json, `torchrun` started as a child process in a process session of its own, and
the run followed from outside as the CLI's Watch does.

    launch_config(config, run_dir, controls)     a config the session prepared, then follow_launch
    resume_launch(run_dir, controls, nproc=N)    `train --resume RUN` on N processes, then follow_launch

What the generator yields is what the one-process run yields (RunFolder, then rank 0's records of metrics.jsonl as
their events: Started, StepMetrics, EvalResult, CheckpointSaved, Log, Finished), plus a Log per line the processes
write on stderr (RUN/processes.log) and, when a process dies, a `ProcessFailed` naming its rank, its exit code and
the last good checkpoint before the Finished that ends the run.

Controls become the CLI's signals (cli/train.py): stop -> SIGTERM to torchrun (it passes it on to every process,
each finishes its step and saves); pause / save now -> SIGUSR2 / SIGUSR1 to one training process, which the others
follow at the next step. `detach` leaves the processes running (the window closes; Library -> Watch live finds the
run again: it writes metrics.jsonl as any run does, and RUN/launch.json says which process to stop).

Stdlib + psutil: no torch in this process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from desktop_app.engine import run_folder
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Finished, Log, RunFolder, Transient, event_from_dict
from desktop_app.engine.methods import method_of
from desktop_app.engine.run_folder import METRICS_FILE, MetricsReader
from desktop_app.engine.specs import RunConfig, SpecError

LAUNCH_LOG = "processes.log"  # what torchrun and every process write on stderr
LAUNCH_FILE = "launch.json"  # which process group trains the run, on how many processes
_ROOT = Path(__file__).resolve().parents[3]  # the folder `-m desktop_app` is found in
_DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
             "TORCHELASTIC_RUN_ID")
_ERROR_WORDS = ("Error", "Traceback", "[process ", "exitcode", "FAILED")


@dataclass
class ProcessFailed(Transient):
    """A training process died (killed, crashed): which one, how, and the checkpoint the run can resume from."""

    type: ClassVar[str] = "process_failed"
    rank: int  # -1 when torchrun did not say
    exit_code: int
    checkpoint: str = ""  # the last good (committed, verified) checkpoint; "" when none was saved
    message: str = ""


class LaunchControls(Controls):
    """The run's Controls, plus `detach`: stop following and leave the processes running."""

    def __init__(self) -> None:
        super().__init__()
        self.detach = threading.Event()


@dataclass
class Launch:
    """torchrun started for a run folder: the process, and where its log began."""

    proc: subprocess.Popen[bytes]
    run_dir: Path
    nproc: int
    log_offset: int = 0
    resume: bool = False


def processes_of(config: RunConfig) -> int:
    """How many processes a front end starts for a config: its Distributed block's nproc_per_node, 1 without one
    (a run.json with no `distributed` block is a one-process run)."""
    if not config.distributed:
        return 1
    try:
        return max(1, int(config.distributed_spec().nproc_per_node))
    except (SpecError, TypeError, ValueError):
        return 1


def torchrun_argv(run_dir: Path, nproc: int, *, resume: bool = False) -> list[str]:
    """`torchrun --standalone --nproc_per_node N -m desktop_app train --config RUN/run.json --out RUN --json` (the
    command engine/run_commands.torchrun_command shows), with this Python's torchrun so no PATH is needed."""
    verb = ["--resume", str(run_dir)] if resume else ["--config", str(run_dir / run_folder.RUN_FILE), "--out",
                                                      str(run_dir)]
    target = ["--no-python", sys.executable] if getattr(sys, "frozen", False) else ["-m", "desktop_app"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *target,
            "train", *verb, "--json"]


def child_env(nproc: int = 1) -> dict[str, str]:
    """This process's environment for torchrun: the app importable, no rendezvous of an outer launch, and the
    machine's cores shared among the `nproc` processes (set here, torchrun does not print its OMP_NUM_THREADS
    banner into the person's log; each process still sets its own torch threads from the run's settings)."""
    env = {k: v for k, v in os.environ.items() if k not in _DIST_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, nproc))))
    return env


def launch_config(config: RunConfig, run_dir: Path, controls: Controls, *, poll_s: float = 0.25) -> Iterator[Event]:
    """A config the one run entry prepared (the server's), started on its processes in a new run folder."""
    if run_folder.list_committed(run_dir):
        raise UserError(f"{run_dir} already holds checkpoints of a run: resume it or choose a new output folder")
    nproc = processes_of(config)
    if nproc < 2:
        raise UserError("this run config names 1 process: set distributed.nproc_per_node to 2 or more to launch it "
                        "on several")
    run_dir.mkdir(parents=True, exist_ok=True)
    config.save(run_dir / run_folder.RUN_FILE)
    yield from follow_launch(start_processes(run_dir, nproc), controls, poll_s=poll_s)


def resume_launch(run_dir: Path, controls: Controls, *, nproc: int, poll_s: float = 0.25) -> Iterator[Event]:
    """Continue `run_dir` from its newest committed checkpoint on `nproc` processes."""
    if not (run_dir / run_folder.RUN_FILE).is_file():
        raise UserError(f"{run_dir} is not a training run (no run.json): nothing to resume")
    reader = MetricsReader(run_dir / METRICS_FILE)
    reader.poll()  # the curve so far comes again once the resume cuts the file back to its checkpoint (a Reset)
    yield from follow_launch(start_processes(run_dir, nproc, resume=True), controls, poll_s=poll_s, reader=reader)


def start_processes(run_dir: Path, nproc: int, *, resume: bool = False) -> Launch:
    """torchrun in a session of its own (the window's Ctrl+C or its exit does not reach it), its output in
    RUN/processes.log (a pipe would break when the window goes), and RUN/launch.json naming it."""
    if nproc < 2:
        raise UserError(f"{nproc} process: a run on one process starts in the window itself")
    log_path = run_dir / LAUNCH_LOG
    offset = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(torchrun_argv(run_dir, nproc, resume=resume), cwd=str(run_dir), env=child_env(nproc),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True)
    info = {"pid": proc.pid, "nproc": nproc, "argv": proc.args}
    (run_dir / LAUNCH_FILE).write_text(json.dumps(info, indent=1, default=str), encoding="utf-8")
    return Launch(proc, run_dir, nproc, offset, resume)


def launched_processes(run_dir: Path) -> int:
    """How many processes the window's last launch of `run_dir` used (RUN/launch.json); 0 when it launched none."""
    data = run_folder.read_json(run_dir / LAUNCH_FILE)
    return int(data.get("nproc", 0)) if isinstance(data, dict) and isinstance(data.get("nproc"), int) else 0


def resume_processes(run_dir: Path, config: RunConfig) -> int:
    """How many processes a resume of `run_dir` starts: as many as its last launch from a front end, else what its
    config names."""
    return launched_processes(run_dir) or processes_of(config)


def launched_torchrun(run_dir: Path) -> Any | None:
    """The torchrun (a psutil.Process) of a run launched earlier and still running (RUN/launch.json); None when it
    has ended, or its pid now belongs to another program."""
    import psutil

    data = run_folder.read_json(run_dir / LAUNCH_FILE)
    pid = data.get("pid") if isinstance(data, dict) else None
    if not isinstance(pid, int):
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or "torch.distributed.run" not in " ".join(proc.cmdline()):
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return proc


def stop_launched(run_dir: Path) -> bool:
    """Stop a run launched earlier and left running (RUN/launch.json): SIGTERM to its torchrun, which passes it on
    (each process finishes its step and saves). False when no such process is alive."""
    import psutil

    proc = launched_torchrun(run_dir)
    if proc is None:
        return False
    try:
        proc.send_signal(signal.SIGTERM)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return True


# --- following the processes -------------------------------------------------------------------------------------

def follow_launch(launch: Launch, controls: Controls, *, poll_s: float = 0.25,
                  reader: MetricsReader | None = None) -> Iterator[Event]:
    """The launched run's events until its torchrun exits (or `detach`): rank 0's metrics.jsonl records as events
    (engine/runs.py's reader), stderr lines as Logs, controls passed on as signals, a dead process reported."""
    follower = Follower(launch, controls, reader)
    run_dir = launch.run_dir
    config = run_folder.read_json(run_dir / run_folder.RUN_FILE)
    yield RunFolder(str(run_dir), method_of(config).key if isinstance(config, dict) else "pretraining",
                    resumed=launch.resume)
    yield Log("info", f"{'resuming' if launch.resume else 'started'} on {launch.nproc} processes (torchrun, "
                      f"pid {launch.proc.pid}); their output: {run_dir / LAUNCH_LOG}")
    tick = threading.Event()  # never set: a sleep that is not a busy loop
    while True:
        follower.pass_on_controls()
        exited = launch.proc.poll() is not None
        yield from follower.poll()  # after poll(): what the processes wrote before they exited is read too
        if exited:
            yield from follower.ending()
            return
        if isinstance(controls, LaunchControls) and controls.detach.is_set():
            yield Log("info", f"left running on {launch.nproc} processes: Library -> Watch live follows it again")
            return
        tick.wait(poll_s)


class Follower:
    """What follow_launch keeps between polls: the readers, the signals sent, the run's last words."""

    def __init__(self, launch: Launch, controls: Controls, reader: MetricsReader | None = None):
        self.launch, self.controls = launch, controls
        self.reader = reader or MetricsReader(launch.run_dir / METRICS_FILE)
        self.log_pos, self.log_rest = launch.log_offset, b""
        self.log_tail: list[str] = []  # the last lines of stderr: torchrun's failure summary is there
        self.started = False  # StopSignals are in place in every process (its Started record came)
        self.stop_sent = False
        self.paused = False  # what the processes were last told
        self.finished: Finished | None = None

    def poll(self) -> list[Event]:
        events: list[Event] = [Log(log_level(line), line) for line in self._new_log_lines()]
        for record in self.reader.poll():
            event = event_from_dict(record)
            if event is None:
                continue
            if event.type == "start":
                self.started = True
            if isinstance(event, Finished):
                self.finished = event  # held back: a dead process is reported before the end
                continue
            events.append(event)
        return events

    def _new_log_lines(self) -> list[str]:
        try:
            with open(self.launch.run_dir / LAUNCH_LOG, "rb") as fh:
                fh.seek(self.log_pos)
                data = fh.read(1 << 20)
        except OSError:
            return []
        self.log_pos += len(data)
        *lines, self.log_rest = (self.log_rest + data).split(b"\n")
        text = [line.decode("utf-8", "replace").rstrip() for line in lines]
        self.log_tail = (self.log_tail + text)[-400:]
        return [line for line in text if line.strip()]

    def pass_on_controls(self) -> None:
        """Stop -> SIGTERM to torchrun (it passes it on); pause / save now -> one training process, once every
        process has its handlers (a signal before them would kill the process)."""
        controls, proc = self.controls, self.launch.proc
        if controls.stop.is_set() and not self.stop_sent:
            self.stop_sent = True
            with _quiet():
                os.kill(proc.pid, signal.SIGTERM)
        if not self.started or self.stop_sent:
            return
        if controls.pause.is_set() != self.paused and send_to_worker(proc.pid, signal.SIGUSR2):
            self.paused = not self.paused
        if controls.save_now.is_set() and send_to_worker(proc.pid, signal.SIGUSR1):
            controls.save_now.clear()

    def ending(self) -> Iterator[Event]:
        """The run's end once torchrun exited: rank 0's Finished, after a ProcessFailed when a process died."""
        code = self.launch.proc.returncode
        if self.finished is not None and self.finished.reason != "failed":
            yield self.finished
            return
        if self.finished is None and self.stop_sent:
            yield Finished("stopped", message="stopped before training began")
            return
        if self.finished is None and code == 0:
            yield Finished("failed", message="the processes ended without saying how the run ended (see "
                                             f"{self.launch.run_dir / LAUNCH_LOG})")
            return
        failed = dead_process(self.log_tail, code, self.launch.run_dir)
        yield failed
        yield self.finished or Finished("failed", message=failed.message)


def dead_process(log_lines: list[str], code: int | None, run_dir: Path) -> ProcessFailed:
    """The process that died, from torchrun's failure summary (one "rank : R ... exitcode : E" block per failed
    process), and the last good checkpoint of the run."""
    rank, how = culprit(log_lines)
    if how is None:
        how = code if code is not None else -1
    checkpoint = run_folder.latest_checkpoint(run_dir)
    who = f"process {rank}" if rank >= 0 else "a training process"
    where = (f"the last good checkpoint is step {run_folder.step_of(checkpoint)} ({checkpoint}): Resume continues "
             "from it" if checkpoint else "no checkpoint was saved yet: start the run again")
    return ProcessFailed(rank, how, str(checkpoint or ""), f"{who} ended ({exit_words(how)}); {where}")


def culprit(log_lines: list[str]) -> tuple[int, int | None]:
    """(rank, exit code) of the process that brought the run down, from torchrun's summary; (-1, None) without one.
    A process killed by a signal (not torchrun's own SIGTERM to the survivors) comes first, then one that failed
    by itself: the others' "exit code 1" after losing contact with it only follows from it."""
    text = "\n".join(log_lines)
    text = text[text.rfind("Failures:"):] if "Failures:" in text else text
    found = [(int(r), int(e)) for r, e in re.findall(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", text, re.S)]
    if not found:
        return -1, None

    def blame(entry: tuple[int, int]) -> int:
        code = entry[1]
        return 0 if code < 0 and code != -signal.SIGTERM else 2 if code == -signal.SIGTERM else 1

    return min(found, key=blame)


def exit_words(code: int) -> str:
    """An exit code as a person reads it: 'killed by SIGKILL', 'exit code 1'."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def log_level(line: str) -> str:
    """A stderr line's level: an error (a traceback, a failed process), a warning (torch's W-lines), else info."""
    if any(word in line for word in _ERROR_WORDS):
        return "error"
    if re.match(r"^W\d{4} ", line) or "warning" in line.lower():
        return "warning"
    return "info"


def worker_pids(torchrun_pid: int) -> dict[int, int]:
    """rank -> pid of the training processes torchrun started (each in a session of its own)."""
    import psutil

    out: dict[int, int] = {}
    try:
        children = psutil.Process(torchrun_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for child in children:
        with _quiet():
            rank = child.environ().get("RANK")
            if rank is not None and rank.isdigit():
                out[int(rank)] = child.pid
    return out


def send_to_worker(torchrun_pid: int, sig: int, rank: int | None = None) -> bool:
    """Send `sig` to one training process (rank 0 unless `rank`); the others follow at the next step."""
    pids = worker_pids(torchrun_pid)
    pid = pids.get(rank if rank is not None else min(pids, default=-1))
    if pid is None:
        return False
    try:
        os.kill(pid, sig)
    except OSError:
        return False
    return True


class _quiet:
    """Ignore a process that is gone or not ours (it exited between two looks)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        import psutil

        return kind is not None and issubclass(kind, (OSError, psutil.Error))
