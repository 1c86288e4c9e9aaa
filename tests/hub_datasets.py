"""A benchmark dataset repository for tests/hub_server.py (issue 40): what the `datasets` library and
lm-evaluation-harness read from the Hub, and the switches that point the `datasets` library at the local server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hub_server import HubServer

TINY_ARC = "tiny-org/tiny_arc"


def tiny_arc_files(items: int = 8, pad: int = 0) -> dict[str, bytes]:
    """A dataset repository as the Hub holds one: a card whose `configs:` YAML names each config's data files (the
    datasets library reads it), and two configs of JSON-lines questions. `pad` adds that many bytes of text to each
    item (a bigger download, for progress and cancel tests)."""
    card = (b"---\nconfigs:\n- config_name: Easy\n  data_files:\n  - split: test\n    path: Easy/test.jsonl\n"
            b"- config_name: Hard\n  data_files:\n  - split: test\n    path: Hard/test.jsonl\n---\n# tiny arc\n")
    files = {"README.md": card}
    for config, shift in (("Easy", 0), ("Hard", 1)):
        rows = [{"question": f"what is {i} plus {shift}?" + " " * pad, "choices": [str(i + shift), str(i + 7)],
                 "answer": 0} for i in range(items)]
        files[f"{config}/test.jsonl"] = "\n".join(json.dumps(r) for r in rows).encode() + b"\n"
    return files


def write_tiny_arc_tasks(folder: Path) -> Path:
    """Harness task YAMLs over TINY_ARC (tiny_arc_easy, tiny_arc_hard, the group tiny_arc of both) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, config in (("tiny_arc_easy", "Easy"), ("tiny_arc_hard", "Hard")):
        (folder / f"{name}.yaml").write_text(
            f"task: {name}\ndataset_path: {TINY_ARC}\ndataset_name: {config}\noutput_type: multiple_choice\n"
            "test_split: test\ndoc_to_text: \"Question: {{question}}\\nAnswer:\"\ndoc_to_choice: \"{{choices}}\"\n"
            "doc_to_target: answer\nmetric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
            "metadata:\n  version: 1.0\n")
    (folder / "tiny_arc.yaml").write_text("group: tiny_arc\ntask:\n  - tiny_arc_easy\n  - tiny_arc_hard\n"
                                          "aggregate_metric_list:\n  - metric: acc\n    weight_by_size: true\n"
                                          "metadata:\n  version: 1.0\n")
    return folder


def use_datasets_library(server: HubServer, cache: Path, monkeypatch: Any) -> None:
    """Point the `datasets` library (its constants are read once, at import) at the local Hub and a fresh cache of
    prepared datasets, for one test; the Hub's dataset-viewer service (another host) is never asked."""
    import datasets.config as ds_config

    for name, value in {"HF_ENDPOINT": server.url, "HUB_DATASETS_URL": server.url +
                        "/datasets/{repo_id}/resolve/{revision}/{path}", "HF_DATASETS_CACHE": cache,
                        "DOWNLOADED_DATASETS_PATH": cache / "downloads", "USE_PARQUET_EXPORT": False,
                        "HF_UPDATE_DOWNLOAD_COUNTS": False}.items():
        monkeypatch.setattr(ds_config, name, value)
