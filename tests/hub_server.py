"""A local stand-in for the Hugging Face Hub, so the real `huggingface_hub` client is tested without the internet.

It serves the endpoints huggingface_hub 2.4.0 calls (read from its source: hf_api.py, file_download.py,
utils/_http.py):

    GET  /api/models                              list_models: search, author, filter (tags), pipeline_tag,
                                                  num_parameters "min:1B,max:3B", sort, limit, expand
    GET  /api/models/ORG/NAME[/revision/REV]      model_info (siblings' sizes and LFS sha256 with blobs=true)
    GET  /api/models/ORG/NAME/tree/REV[/PATH]     list_repo_tree (snapshot_download, verify_repo_checksums)
    HEAD/GET /ORG/NAME/resolve/REV/FILE           ETag / X-Linked-Etag / X-Linked-Size / X-Repo-Commit, HTTP Range
    GET  /api/whoami-v2                           the token's user
    The same for dataset repositories (`datasets` of the `datasets` library and lm-evaluation-harness):
    GET  /api/datasets/ORG/NAME[/revision/REV], /api/datasets/ORG/NAME/tree/REV[/PATH] (recursive or not),
    POST /api/datasets/ORG/NAME/paths-info/REV, HEAD/GET /datasets/ORG/NAME/resolve/REV/FILE
Errors carry the X-Error-Code the client turns into its exceptions (RepoNotFound, RevisionNotFound,
EntryNotFound, GatedRepo). No Xet headers are ever sent, so downloads are plain HTTP.

Knobs: `drop_after(n)` closes the connection after n body bytes of the next download(s), `slow(bytes_per_s)`
throttles bodies, `ignore_ranges` answers a Range with the whole file, `token_required(repo)` demands TOKEN for a
repository's files, `tamper(repo, file)` serves other bytes than the hashes the listing announces, `add_repo` serves
one more repository, `add_dataset` one more dataset repository, and `requests` logs every request (once its
body ended; `settled()` waits for those under way).
The repositories are built once per test session (`build_repos`): a tiny Llama with a chat template (ChatML) that the
app's loaders open, its GGUF files in two quantizations, a gated copy, a remote-code repository and size-only
repositories for search and fit tests.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "hf_local_test_token"
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")
_UNITS = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


class Request(NamedTuple):
    """One request the server answered: range is the Range header ('' when none), sent the body bytes written."""

    method: str
    path: str
    range: str
    sent: int
    status: int


@dataclass
class HubRepo:
    """A repository as the Hub describes it. `virtual` files have a size but no stored bytes (zeros are served):
    multi-gigabyte repositories for search, fit and disk tests. Its hashes are computed once: serve changed content
    as a new repository (HubServer.add_repo), or with `tamper`."""

    repo_id: str
    files: dict[str, bytes] = field(default_factory=dict)
    virtual: dict[str, int] = field(default_factory=dict)
    gated: bool = False
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2024-01-01T00:00:00.000Z"
    pipeline_tag: str = "text-generation"
    tags: list[str] = field(default_factory=list)
    license: str = "apache-2.0"
    parameters: int = 0
    gguf: dict[str, Any] | None = None
    repo_type: str = "model"  # or "dataset"

    entries: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)  # hashed once

    @functools.cached_property
    def sha(self) -> str:
        """The commit: a hash of the repository's content (computed once: repositories do not change)."""
        digest = hashlib.sha1(self.repo_id.encode())
        for name in self.names():
            digest.update(name.encode() + json.dumps(self.entry(name), sort_keys=True).encode())
        return digest.hexdigest()

    def size(self, name: str) -> int:
        return len(self.files[name]) if name in self.files else self.virtual[name]

    def names(self) -> list[str]:
        return sorted([*self.files, *self.virtual])

    def entry(self, name: str) -> dict[str, Any]:
        """The tree entry of a file: git blob id, and for LFS files the sha256 the client names the blob by."""
        if name not in self.entries:
            self.entries[name] = self.hash_entry(name)
        return self.entries[name]

    def hash_entry(self, name: str) -> dict[str, Any]:
        data = self.files.get(name)
        size = self.size(name)
        blob = hashlib.sha1(f"blob {size}\0".encode() + data).hexdigest() if data is not None else \
            hashlib.sha1(f"virtual {name} {size}".encode()).hexdigest()
        out: dict[str, Any] = {"type": "file", "path": name, "size": size, "oid": blob}
        if name.endswith(LFS_SUFFIXES):
            sha = hashlib.sha256(data).hexdigest() if data is not None else hashlib.sha256(blob.encode()).hexdigest()
            out["lfs"] = {"oid": sha, "size": size, "pointerSize": 134}
        return out

    def config(self) -> dict[str, Any] | None:
        raw = self.files.get("config.json")
        if raw is None:
            return None
        config = json.loads(raw)
        tok = self.files.get("tokenizer_config.json")
        if tok is not None:
            tok_config = json.loads(tok)
            config["tokenizer_config"] = {k: tok_config[k] for k in ("chat_template", "bos_token", "eos_token")
                                          if k in tok_config}
        return config

    def info(self, blobs: bool = False) -> dict[str, Any]:
        """What GET /api/models/REPO answers (siblings' sizes and LFS data only with blobs=true, as the Hub)."""
        org = self.repo_id.split("/")[0]
        out: dict[str, Any] = {
            "_id": self.sha[:24], "id": self.repo_id, "modelId": self.repo_id, "author": org, "sha": self.sha,
            "lastModified": self.last_modified, "createdAt": self.last_modified, "private": False,
            "gated": "manual" if self.gated else False, "disabled": False, "downloads": self.downloads,
            "likes": self.likes, "library_name": "gguf" if self.gguf else "transformers", "tags": self.tags,
            "pipeline_tag": self.pipeline_tag, "cardData": {"license": self.license}, "siblings": [],
            "usedStorage": sum(self.size(n) for n in self.names())}
        config = self.config()
        if config is not None:
            out["config"] = config
        if self.parameters and not self.gguf:
            out["safetensors"] = {"parameters": {"F32": self.parameters}, "total": self.parameters}
        if self.gguf:
            out["gguf"] = {"total": self.parameters, **self.gguf}
        for name in self.names():
            sibling: dict[str, Any] = {"rfilename": name}
            if blobs:
                entry = self.entry(name)
                sibling.update(size=entry["size"], blobId=entry["oid"])
                if "lfs" in entry:
                    sibling["lfs"] = {"sha256": entry["lfs"]["oid"], "size": entry["size"], "pointerSize": 134}
            out["siblings"].append(sibling)
        return out


def parse_count(text: str) -> int:
    """'1B' -> 10**9, '500M' -> 5 * 10**8 (the Hub's num_parameters bounds)."""
    text = text.strip().upper()
    if text and text[-1] in _UNITS:
        return int(float(text[:-1]) * _UNITS[text[-1]])
    return int(float(text))


def matches(repo: HubRepo, query: dict[str, list[str]]) -> bool:
    """Whether a repository passes list_models' filters."""
    one = {k: v[-1] for k, v in query.items()}
    if "search" in one and one["search"].lower() not in repo.repo_id.lower():
        return False
    if "author" in one and repo.repo_id.split("/")[0] != one["author"]:
        return False
    if "pipeline_tag" in one and repo.pipeline_tag != one["pipeline_tag"]:
        return False
    if any(tag not in repo.tags for tag in query.get("filter", [])):
        return False
    bounds = dict(part.split(":", 1) for part in one.get("num_parameters", "").split(",") if ":" in part)
    if "min" in bounds and repo.parameters < parse_count(bounds["min"]):
        return False
    return not ("max" in bounds and repo.parameters > parse_count(bounds["max"]))


_SORT_KEYS = {"downloads": lambda r: r.downloads, "likes": lambda r: r.likes,
              "lastModified": lambda r: r.last_modified, "createdAt": lambda r: r.last_modified}


def search(repos: list[HubRepo], query: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The answer of GET /api/models: matching repositories, sorted (descending) and cut at limit; `expand`
    keeps only the named properties, as the Hub does."""
    found = [r for r in repos if matches(r, query)]
    sort = query.get("sort", [""])[-1]
    if sort in _SORT_KEYS:
        found.sort(key=_SORT_KEYS[sort], reverse=True)
    limit = int(query.get("limit", ["1000"])[-1])
    expand = query.get("expand[]") or query.get("expand")
    out = []
    for repo in found[:limit]:
        info = repo.info()
        info.pop("siblings", None)
        if expand:
            info = {k: v for k, v in info.items() if k in (*expand, "id", "_id", "modelId")}
        out.append(info)
    return out


class HubServer:
    """The server in a thread; `url` is what HF_ENDPOINT is set to."""

    def __init__(self, repos: list[HubRepo]) -> None:
        self.repos = {r.repo_id: r for r in repos if r.repo_type == "model"}
        self.datasets = {r.repo_id: r for r in repos if r.repo_type == "dataset"}
        self.requests: list[Request] = []
        self.tokens: dict[str, str] = {r.repo_id: TOKEN for r in repos if r.gated}
        self.tampered: set[tuple[str, str]] = set()
        self.rate = 0.0
        self.ignore_ranges = False  # answer a Range with the whole file (200), as some proxies and CDNs do
        self.drops: list[int] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.idle = threading.Condition()
        self.stopping = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="hub-server", daemon=True)

    def start(self) -> HubServer:
        self.thread.start()
        return self

    def settled(self, timeout: float = 10.0) -> list[Request]:
        """The request log once every request under way has been logged. A request is logged when its body has
        ended, which can be a moment after the client has read it all: counting `requests` right after a download
        could miss that download."""
        with self.idle:
            self.idle.wait_for(lambda: self.in_flight == 0, timeout)
        return list(self.requests)

    def stop(self) -> None:
        """Stop answering (the port closes: later requests are refused)."""
        self.stopping.set()
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    # --- knobs ----------------------------------------------------------------------------------------------

    def drop_after(self, n_bytes: int, times: int = 1) -> None:
        """Close the connection after `n_bytes` of the body of each of the next `times` downloads that are longer
        than that (queued after drops asked for before: drop_after(600_000) then drop_after(0, times=5) cuts a
        download, then refuses its next five tries)."""
        with self.lock:
            self.drops += [n_bytes] * times

    def slow(self, bytes_per_s: float) -> None:
        """Throttle every body to about `bytes_per_s` (0: full speed)."""
        self.rate = float(bytes_per_s)

    def token_required(self, repo_id: str, token: str = TOKEN) -> None:
        """The repository's files need `token` (Authorization: Bearer); without it: 401 GatedRepo."""
        self.tokens[repo_id] = token

    def tamper(self, repo_id: str, filename: str) -> None:
        """Serve other bytes (same length) for a file than the hashes the Hub announces for it."""
        self.tampered.add((repo_id, filename))

    def add(self, repo: HubRepo) -> HubRepo:
        (self.datasets if repo.repo_type == "dataset" else self.repos)[repo.repo_id] = repo
        if repo.gated:
            self.tokens[repo.repo_id] = TOKEN
        return repo

    def add_repo(self, repo_id: str, files: dict[str, bytes | Path], **meta: Any) -> HubRepo:
        """Serve one more repository: file name -> bytes or a local file to read them from; `meta` as HubRepo's
        fields (gated, downloads, tags, parameters, gguf...)."""
        data = {name: v.read_bytes() if isinstance(v, Path) else v for name, v in files.items()}
        if "gguf" not in meta and any(n.endswith(".gguf") for n in data):
            meta["gguf"] = {}
            meta.setdefault("tags", ["gguf", "text-generation"])
        return self.add(HubRepo(repo_id, data, **meta))

    def add_dataset(self, repo_id: str, files: dict[str, bytes | Path], **meta: Any) -> HubRepo:
        """Serve one more dataset repository (as add_repo); its README.md may carry the `configs:` card YAML that
        the datasets library reads."""
        data = {name: v.read_bytes() if isinstance(v, Path) else v for name, v in files.items()}
        return self.add(HubRepo(repo_id, data, repo_type="dataset", pipeline_tag="", **meta))

    def fetched(self, filename: str = "") -> int:
        """Body bytes sent for downloads (of files whose path ends with `filename`)."""
        return sum(r.sent for r in self.requests if r.method == "GET" and "/resolve/" in r.path
                   and r.path.endswith(filename))

    def take_drop(self, length: int) -> int | None:
        """The next cut, if it falls inside a body of `length` bytes (a shorter body is sent whole)."""
        with self.lock:
            return self.drops.pop(0) if self.drops and self.drops[0] < length else None


_RESOLVE = re.compile(r"^/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_INFO = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+?)(?:/revision/([^/]+))?$")
_TREE = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$")
_PATHS_INFO = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+)/paths-info/([^/]+)$")


def _handler(server: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_HubHandler):
        hub = server

    return Handler


class _HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Hub; the client reuses connections
    hub: HubServer
    kind = "models"  # or "datasets": which repositories the request names

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the request log is `hub.requests`
        return

    def handle(self) -> None:
        with contextlib.suppress(ConnectionError):  # a client that hangs up (a cancelled pull) is no error here
            super().handle()

    def do_GET(self) -> None:
        self.route("GET")

    def do_HEAD(self) -> None:
        self.route("HEAD")

    def do_POST(self) -> None:
        self.route("POST")

    def route(self, method: str) -> None:
        with self.hub.idle:
            self.hub.in_flight += 1
        try:
            self.answer(method)
        finally:
            with self.hub.idle:
                self.hub.in_flight -= 1
                self.hub.idle.notify_all()

    def answer(self, method: str) -> None:
        self.sent, self.status, self.kind = 0, 0, "models"
        parts = urlsplit(self.path)
        path, query = unquote(parts.path), parse_qs(parts.query)
        try:
            if path == "/api/whoami-v2":
                self.whoami()
            elif path == "/api/models":
                self.send_json(search(list(self.hub.repos.values()), query))
            elif m := _TREE.match(path):
                self.kind = m.group(1)
                self.tree(m.group(2), m.group(3), m.group(4) or "", query)
            elif m := _PATHS_INFO.match(path):
                self.kind = m.group(1)
                self.paths_info(m.group(2), m.group(3))
            elif m := _INFO.match(path):
                self.kind = m.group(1)
                self.model_info(m.group(2), m.group(3), query)
            elif m := _RESOLVE.match(path):
                self.kind = "datasets" if m.group(1) else "models"
                self.resolve(method, m.group(2), m.group(3), m.group(4))
            else:
                self.error(404, "", "Not found")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.hub.requests.append(Request(method, path, self.headers.get("Range", ""), self.sent, self.status))

    # --- answers ---------------------------------------------------------------------------------------------

    def repo(self, repo_id: str, revision: str | None = None) -> HubRepo | None:
        repo = (self.hub.datasets if self.kind == "datasets" else self.hub.repos).get(repo_id)
        if repo is None:
            self.error(404, "RepoNotFound", "Repository not found")
            return None
        if revision not in (None, "main", repo.sha):
            self.error(404, "RevisionNotFound", "Invalid rev id: " + str(revision), commit="")
            return None
        return repo

    def authorized(self, repo_id: str) -> bool:
        token = self.hub.tokens.get(repo_id)
        return token is None or self.headers.get("Authorization", "") == f"Bearer {token}"

    def whoami(self) -> None:
        auth = self.headers.get("Authorization", "")
        if auth != f"Bearer {TOKEN}":
            self.error(401, "", "Invalid credentials in Authorization header")
            return
        self.send_json({"type": "user", "name": "local-tester", "auth": {"type": "access_token"}})

    def model_info(self, repo_id: str, revision: str | None, query: dict[str, list[str]]) -> None:
        repo = self.repo(repo_id, revision)
        if repo is not None:
            self.send_json(repo.info(blobs=query.get("blobs", [""])[-1].lower() == "true"))

    def tree(self, repo_id: str, revision: str, prefix: str, query: dict[str, list[str]]) -> None:
        """The files under `prefix`: all of them when recursive, else its direct children and folders."""
        repo = self.repo(repo_id, revision)
        if repo is None:
            return
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        under = [n for n in repo.names() if n.startswith(base)]
        if query.get("recursive", [""])[-1].lower() == "true":
            self.send_json([repo.entry(n) for n in under])
            return
        folders = sorted({base + n[len(base):].split("/")[0] for n in under if "/" in n[len(base):]})
        self.send_json([{"type": "directory", "path": f, "oid": hashlib.sha1(f.encode()).hexdigest()}
                        for f in folders] + [repo.entry(n) for n in under if "/" not in n[len(base):]])

    def paths_info(self, repo_id: str, revision: str) -> None:
        """POST paths-info: the entries of the named paths (form field `paths`, repeated)."""
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode()) if length else {}
        repo = self.repo(repo_id, revision)
        if repo is None:
            return
        names = repo.names()
        out: list[dict[str, Any]] = []
        for path in form.get("paths", []):
            path = path.strip("/")
            if path in names:
                out.append(repo.entry(path))
            elif any(n.startswith(path + "/") for n in names):
                out.append({"type": "directory", "path": path, "oid": hashlib.sha1(path.encode()).hexdigest()})
        self.send_json(out)

    def resolve(self, method: str, repo_id: str, revision: str, filename: str) -> None:
        repo = self.repo(repo_id, revision)
        if repo is None:
            return
        if not self.authorized(repo_id):
            self.error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access to it "
                       "and be authenticated to access it. Please log in.", commit=repo.sha)
            return
        if filename not in repo.names():
            self.error(404, "EntryNotFound", f"{filename} does not exist on main", commit=repo.sha)
            return
        entry = repo.entry(filename)
        size = entry["size"]
        start = self.range_start(size)
        self.status = 206 if start else 200
        self.send_response(self.status)
        self.send_header("X-Repo-Commit", repo.sha)
        self.send_header("ETag", f'"{entry["oid"]}"')
        if "lfs" in entry:
            self.send_header("X-Linked-Etag", f'"{entry["lfs"]["oid"]}"')
            self.send_header("X-Linked-Size", str(size))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(size - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        if method == "GET":
            self.send_body(self.content(repo, filename), start)

    def range_start(self, size: int) -> int:
        m = None if self.hub.ignore_ranges else re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        return min(int(m.group(1)), size) if m else 0

    def content(self, repo: HubRepo, filename: str) -> bytes:
        data = repo.files.get(filename)
        data = bytes(repo.virtual[filename]) if data is None else data
        if (repo.repo_id, filename) in self.hub.tampered:
            data = bytes(b ^ 0x5A for b in data)
        return data

    def send_body(self, data: bytes, start: int) -> None:
        """Write data[start:], throttled by `slow`, cut by `drop_after` (the connection then closes)."""
        drop = self.hub.take_drop(len(data) - start)
        end = len(data) if drop is None else start + drop
        step = 64 * 1024
        for i in range(start, end, step):
            piece = data[i:min(i + step, end)]
            self.wfile.write(piece)
            self.sent += len(piece)
            if self.hub.rate and not self.hub.stopping.is_set():
                time.sleep(len(piece) / self.hub.rate)
        if drop is not None and end < len(data):
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)

    def send_json(self, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command in ("GET", "POST"):
            self.wfile.write(body)

    def error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self.status = status
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command in ("GET", "POST"):
            self.wfile.write(body)


# --- the repositories ---------------------------------------------------------------------------------------

def read_folder(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def build_tiny_chat(root: Path) -> tuple[Path, Path]:
    """(source folder, HF export folder) of a tiny Llama (about 3 MB of fp32 safetensors) with the app's own
    tokenizer and chat template: what the app's loaders open for chat and as a LoRA base."""
    from desktop_app.engine.data.tokenization import save_tokenizer, train_tokenizer
    from desktop_app.engine.export.hf import export_model
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.specs import ModelSpec

    tok = train_tokenizer(["the cat sat on the mat and the dog ran to the park " * 4] * 60, "byte-bpe", 320, 2)
    src = root / "src"
    build_model(ModelSpec("llama", 320, 128, 4, 4, 4, 256, 128), seed=0).save_pretrained(src)
    save_tokenizer(tok, src)
    out = root / "hf"
    assert list(export_model(src, "hf", out))[-1].reason == "completed"
    return src, out


def build_ggufs(src: Path, root: Path) -> dict[str, bytes]:
    """GGUF files of the tiny model in two quantizations, named as GGUF repositories name them."""
    from desktop_app.engine.export.hf import export_model

    files = {}
    for gguf_type, label in (("q8_0", "Q8_0"), ("f16", "F16")):
        out = root / f"tiny-chat-{label}.gguf"
        assert list(export_model(src, "gguf", out, gguf_type=gguf_type))[-1].reason == "completed"
        files[out.name] = out.read_bytes()
    return files


def chatml(tokenizer_config: bytes) -> dict[str, bytes]:
    """A chat template of the model's own (ChatML), as Hub chat models ship one: not the template every tokenizer
    the app trains gets (which the app reads as "a model that completes text")."""
    from desktop_app.engine.data.chat import CHATML_TEMPLATE

    config = json.loads(tokenizer_config)
    config["chat_template"] = CHATML_TEMPLATE
    return {"tokenizer_config.json": json.dumps(config, indent=2).encode(),
            "chat_template.jinja": CHATML_TEMPLATE.encode()}


def llama_config(hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, vocab: int) -> bytes:
    """The config.json of a Llama of a given shape (the size-only repositories: no weights are stored)."""
    return json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
                       "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                       "intermediate_size": ffn, "vocab_size": vocab, "max_position_embeddings": 8192,
                       "tie_word_embeddings": False, "torch_dtype": "bfloat16"}).encode()


def build_repos(root: Path) -> list[HubRepo]:
    """Every repository the tests use (built once per session; HubServer copies nothing)."""
    src, hf = build_tiny_chat(root / "tiny")
    # A plain Hugging Face folder, as on the Hub: without the app's own model_spec.json (that would make it an export)
    chat_files = {k: v for k, v in read_folder(hf).items() if k not in ("README.md", "model_spec.json")}
    chat_files["README.md"] = b"---\nlicense: apache-2.0\n---\n# tiny-chat\nA tiny test model.\n"
    chat_files.update(chatml(chat_files["tokenizer_config.json"]))
    params = _parameters(hf)
    ggufs = build_ggufs(src, root / "gguf")
    remote = {"config.json": json.dumps({"model_type": "tiny-custom", "architectures": ["TinyCustomForCausalLM"],
                                         "auto_map": {"AutoModelForCausalLM": "modeling_tiny.TinyCustom"}}).encode(),
              "modeling_tiny.py": b"# custom code this app never runs\n", "model.safetensors": b"\0" * 1024}
    shutil.rmtree(root / "tiny" / "src", ignore_errors=True)
    tags_st = ["transformers", "safetensors", "llama", "text-generation", "conversational"]
    return [
        HubRepo("tiny-org/tiny-chat", chat_files, downloads=500, likes=7, last_modified="2025-03-01T10:00:00.000Z",
                tags=tags_st, parameters=params),
        HubRepo("tiny-org/tiny-chat-GGUF", {**ggufs, "README.md": b"# GGUF files of tiny-chat\n"}, downloads=300,
                likes=9, last_modified="2025-04-01T10:00:00.000Z", tags=["gguf", "llama", "text-generation"],
                parameters=params, gguf={"architecture": "llama", "context_length": 128}),
        HubRepo("tiny-org/gated", dict(chat_files), gated=True, downloads=50, likes=1, license="llama3.2",
                last_modified="2025-01-01T10:00:00.000Z", tags=[*tags_st, "license:llama3.2"], parameters=params),
        HubRepo("tiny-org/remote-code", remote, downloads=20, likes=0, tags=["transformers", "custom_code"],
                last_modified="2024-06-01T10:00:00.000Z", parameters=256),
        HubRepo("big-org/Llama-70B-chat", {"config.json": llama_config(8192, 80, 64, 8, 28672, 128256)},
                virtual={f"model-0000{i}-of-00004.safetensors": 35_000_000_000 for i in range(1, 5)},
                downloads=900, likes=90, last_modified="2024-12-01T10:00:00.000Z", tags=tags_st,
                parameters=70_000_000_000),
        HubRepo("mid-org/chat-7B", {"config.json": llama_config(4096, 32, 32, 8, 14336, 128256)},
                virtual={"model.safetensors": 14_000_000_000}, downloads=700, likes=3,
                last_modified="2025-02-01T10:00:00.000Z", tags=tags_st, parameters=7_000_000_000),
        HubRepo("small-org/chat-2B", {"config.json": llama_config(2048, 16, 32, 8, 8192, 128256)},
                virtual={"model.safetensors": 4_000_000_000}, downloads=100, likes=40,
                last_modified="2023-05-01T10:00:00.000Z", tags=tags_st, parameters=2_000_000_000),
        HubRepo("tiny-org/tiny-embedder", {"config.json": b'{"model_type": "bert"}'}, downloads=10_000,
                pipeline_tag="feature-extraction", tags=["transformers", "bert"], parameters=1000),
    ]


def _parameters(folder: Path) -> int:
    from safetensors import safe_open

    total = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), "np") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                total += math.prod(f.get_slice(key).get_shape())
    return total

