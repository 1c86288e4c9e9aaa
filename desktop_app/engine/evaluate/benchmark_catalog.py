"""Which standard benchmarks exist, and which datasets each one reads: the lm-evaluation-harness's task index, read
without loading any data.

- `popular_benchmarks()`: the short list a person picks from first (no harness needed to list it).
- `task_names(include_dir)`: every task, group and tag the harness knows, plus those of a folder of task YAMLs.
- `task_datasets(names, include_dir)`: the datasets the named tasks read (a group or tag is expanded to its tasks),
  each with the tasks that need it. A Hub dataset is fetched explicitly (benchmark_data); local `json`/`csv`/...
  files named by a task are present or not.

The harness is imported lazily (it is an optional extra); its index is built once per include folder (it scans
thousands of YAML files: about a second).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.benchmark_files import resolve_data_files

# The datasets library's own file-based loaders: a task with one of these as dataset_path reads local files.
LOCAL_LOADERS = ("json", "csv", "parquet", "text", "arrow")
HARNESS_MISSING = ('the benchmarks need lm-evaluation-harness, which is not installed: install it with '
                   'pip install "azr-model-trainer[benchmarks]"')


@dataclass(frozen=True)
class PopularBenchmark:
    name: str  # the harness's task or group name
    description: str  # one line: what it measures, how many items, how it is scored
    kind: str  # "log-likelihood" | "generation" | "code"


_POPULAR = (
    PopularBenchmark("mmlu", "57 school and professional subjects, 4-way multiple choice (14,042 questions)",
                     "log-likelihood"),
    PopularBenchmark("arc_easy", "grade-school science questions, easy set, multiple choice (2,376 questions)",
                     "log-likelihood"),
    PopularBenchmark("arc_challenge", "grade-school science questions that simple methods miss (1,172 questions)",
                     "log-likelihood"),
    PopularBenchmark("hellaswag", "pick the sensible ending of an everyday scene (10,042 items)", "log-likelihood"),
    PopularBenchmark("winogrande", "who does the pronoun mean: commonsense fill-in-the-blank (1,267 items)",
                     "log-likelihood"),
    PopularBenchmark("piqa", "physical commonsense: which of two ways reaches the goal (1,838 items)",
                     "log-likelihood"),
    PopularBenchmark("truthfulqa_mc2", "questions that tempt popular misconceptions, multiple true answers (817)",
                     "log-likelihood"),
    PopularBenchmark("gsm8k", "grade-school maths word problems, the final number must match (1,319 problems)",
                     "generation"),
    PopularBenchmark("humaneval", "write a Python function from its docstring; run in the app's sandbox (164)",
                     "code"),
)


class UnknownBenchmark(UserError):
    """A name that is no task, group or tag of the harness nor of the task folder."""

    def __init__(self, names: list[str], close: dict[str, str]) -> None:
        self.names = names
        hints = "; ".join(f"did you mean {close[n]}?" for n in names if n in close)
        listed = ", ".join(names)
        super().__init__(f"no benchmark named {listed}{': ' + hints if hints else ''} "
                         "(`benchmarks list` shows them all)")


@dataclass
class DatasetRef:
    """One dataset that benchmark tasks read: a Hub dataset (path "allenai/ai2_arc", config name "ARC-Easy") or local
    files (path "json", data_files absolute). `tasks`: the tasks that need it."""

    path: str
    name: str | None = None
    tasks: list[str] = field(default_factory=list)
    data_files: list[str] = field(default_factory=list)  # local files (absolute), for LOCAL_LOADERS
    kwargs: dict[str, Any] = field(default_factory=dict)  # other dataset_kwargs (revision, data_dir...)
    task_file: str = ""  # the person's task YAML (of the task folder) that names it; "" for the harness's own tasks

    @property
    def local(self) -> bool:
        return self.path in LOCAL_LOADERS or Path(self.path).expanduser().is_dir()

    @property
    def label(self) -> str:
        """How the person reads it: "allenai/ai2_arc (ARC-Easy)"."""
        return f"{self.path} ({self.name})" if self.name else self.path

    def missing_files(self) -> list[str]:
        """The local files this dataset names that do not exist (always [] for a Hub dataset)."""
        if not self.local:
            return []
        return [f for f in self.data_files if "://" not in f and not _glob_matches(f)]


def _glob_matches(pattern: str) -> bool:
    path = Path(pattern)
    if not any(ch in pattern for ch in "*?["):
        return path.is_file()
    return any(path.parent.glob(path.name)) if path.parent.is_dir() else False


def popular_benchmarks() -> list[PopularBenchmark]:
    """The benchmarks most reports publish, each with one line saying what it measures (no harness needed)."""
    return list(_POPULAR)


def require_harness() -> None:
    """UserError (one sentence naming the extra to install) unless lm_eval imports."""
    try:
        import lm_eval.tasks  # noqa: F401
    except ImportError:
        raise UserError(HARNESS_MISSING) from None


class TaskIndex(Mapping[str, Any]):
    """The harness's index (name -> its Entry: kind, YAML path, config with includes resolved) with a folder's tasks
    over it (they win over the harness's own of the same name, as in the harness). The folder's part is read at once
    (a few files); the harness's own (thousands of files, seconds) only when a name is not the folder's."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.own = _folder_index(folder) if folder else {}

    def __getitem__(self, name: str) -> Any:
        return self.own[name] if name in self.own else harness_index()[name]

    def __contains__(self, name: object) -> bool:
        return name in self.own or name in harness_index()

    def __iter__(self) -> Iterator[str]:
        return iter({**harness_index(), **self.own})

    def __len__(self) -> int:
        return len({**harness_index(), **self.own})


@functools.lru_cache(maxsize=1)
def harness_index() -> dict[str, Any]:
    """The harness's own tasks, groups and tags (built once per process)."""
    require_harness()
    from lm_eval.tasks import TaskManager

    return dict(TaskManager().task_index)


def _folder_index(folder: Path) -> dict[str, Any]:
    require_harness()
    from lm_eval.tasks import TaskManager

    return dict(TaskManager(include_path=str(folder), include_defaults=False).task_index)


@functools.lru_cache(maxsize=4)
def task_index(include_dir: str = "") -> TaskIndex:
    """The index of the harness's tasks and the folder's (see TaskIndex), made once per folder (clear it with
    `task_index.cache_clear()` after the folder's files change)."""
    return TaskIndex(check_task_folder(include_dir))


def check_task_folder(include_dir: str) -> Path | None:
    """The folder of task YAMLs as a Path (None when not given); UserError when it is not a folder."""
    if not include_dir:
        return None
    folder = Path(include_dir).expanduser()
    if not folder.is_dir():
        raise UserError(f"the benchmark task folder {folder} does not exist: choose the folder that holds your "
                        "task YAML files")
    return folder.resolve()


def task_names(include_dir: str = "") -> list[str]:
    """Every task, group and tag name the harness knows, plus those of the folder of task YAMLs, sorted."""
    return sorted(task_index(include_dir))


def folder_tasks(include_dir: str = "") -> list[str]:
    """The tasks, groups and tags defined by the YAML files of the folder (sorted; [] without a folder)."""
    return sorted(task_index(include_dir).own)


def check_names(names: list[str], include_dir: str = "") -> list[str]:
    """The names, cleaned (spaces and empties dropped); UnknownBenchmark (with close matches) for any unknown."""
    import difflib

    wanted = [n.strip() for n in names if n and n.strip()]
    if not wanted:
        raise UserError("no benchmark named: give one or more names, e.g. arc_easy,hellaswag")
    index = task_index(include_dir)
    unknown = [n for n in wanted if n not in index]
    if unknown:
        known = list(index)
        close = {n: m[0] for n in unknown if (m := difflib.get_close_matches(n, known, n=1, cutoff=0.75))}
        raise UnknownBenchmark(unknown, close)
    return wanted


def leaf_configs(names: list[str], include_dir: str = "") -> dict[str, dict[str, Any]]:
    """task name -> its configuration (includes resolved, a group's overrides applied), for the named tasks and
    every task inside the named groups and tags. Loads no data."""
    walker = _Walker(task_index(include_dir))
    for name in check_names(names, include_dir):
        walker.collect(name, {}, set())
    return walker.out


class _Walker:
    """Walks tasks, groups and tags down to their tasks, as the harness's TaskFactory does, merging a group's task
    overrides into its members' configurations (`out`: task name -> configuration)."""

    def __init__(self, index: Mapping[str, Any]) -> None:
        self.index = index
        self.out: dict[str, dict[str, Any]] = {}

    def collect(self, name: str, overrides: dict[str, Any], seen: set[str]) -> None:
        entry = self.index[name]
        kind = entry.kind.name
        if name in seen:
            return
        seen = seen | {name}
        if kind == "TAG":
            for task in sorted(entry.tags):
                if task in self.index:
                    self.collect(task, overrides, seen)
            return
        cfg = dict(entry.cfg or {})
        if kind != "GROUP":
            self.out[name] = {**cfg, **overrides, "_yaml_path": entry.yaml_path}
            return
        from lm_eval.config.group import GroupConfig

        group_fields = set(GroupConfig.__dataclass_fields__)
        merged = {**{k: v for k, v in cfg.items() if k not in group_fields}, **overrides}
        for item in cfg.get("task") or []:
            self.member(item, (name, entry.yaml_path), merged, seen)

    def member(self, item: Any, group: tuple[str, Any], overrides: dict[str, Any], seen: set[str]) -> None:
        """One member of a group's `task:` list (group: its name and YAML): a name, a name with overrides, or an
        inline task or group."""
        if isinstance(item, str):
            item = {"task": item}
        if not isinstance(item, dict):
            return
        key = "group" if "group" in item else "task"
        base = item.get(key)
        extra = {k: v for k, v in item.items() if k != key}
        if isinstance(base, str) and base in self.index:
            self.collect(base, {**overrides, **extra}, seen)
        elif key == "task" and isinstance(base, str):  # an inline task, named within its group
            self.out[f"{group[0]}::{base}"] = {**overrides, **item, "_yaml_path": group[1]}
        elif key == "group":
            for member in item.get("task") or []:
                self.member(member, (f"{group[0]}::{base}", group[1]), {**overrides, **extra}, seen)


def task_datasets(names: list[str], include_dir: str = "") -> list[DatasetRef]:
    """The datasets the named tasks (groups and tags expanded) read, one entry per (path, config name, files),
    each naming the tasks that need it. Python-defined tasks without a dataset_path are left out."""
    refs: dict[tuple[Any, ...], DatasetRef] = {}
    folder = task_index(include_dir).folder
    for task, cfg in leaf_configs(names, include_dir).items():
        path = cfg.get("dataset_path")
        if not isinstance(path, str) or not path:
            continue
        kwargs = dict(cfg.get("dataset_kwargs") or {})
        kwargs.pop("trust_remote_code", None)
        files: list[str] = []
        if path in LOCAL_LOADERS:
            files = _local_files(kwargs, cfg.get("_yaml_path"))
            kwargs.pop("data_files", None)
        name = cfg.get("dataset_name")
        key = (path, name, tuple(files), repr(sorted(kwargs.items())))
        ref = refs.setdefault(key, DatasetRef(path, name if isinstance(name, str) else None, [], files, kwargs,
                                              own_file(cfg.get("_yaml_path"), folder)))
        ref.tasks.append(task)
    return list(refs.values())


def own_file(yaml_path: Any, folder: Path | None) -> str:
    """The task's YAML file when it is one of the person's task folder, else "" (a task of the harness)."""
    if not yaml_path or folder is None:
        return ""
    path = Path(str(yaml_path)).resolve()
    return str(path) if path.is_relative_to(folder) else ""


def _local_files(kwargs: dict[str, Any], yaml_path: Any) -> list[str]:
    """The data files of a local-loader task, absolute: relative ones are read beside the task's YAML (as the app
    runs them: benchmark_files.resolve_data_files)."""

    folder = Path(yaml_path).parent if yaml_path else Path.cwd()
    resolved = resolve_data_files(kwargs, folder).get("data_files")
    if isinstance(resolved, str):
        return [resolved]
    if isinstance(resolved, dict):
        values = resolved.values()
    elif isinstance(resolved, list):
        values = resolved
    else:
        return []
    return [str(f) for v in values for f in ([v] if isinstance(v, str) else list(v))]
