"""`serve [MODEL]`: the local HTTP API, OpenAI-compatible generation plus the training REST API.

    python -m desktop_app serve ws/runs/first --port 8000 [--host 127.0.0.1] [--api-key KEY]

Prints `serving on http://HOST:PORT` (one line, flushed) once it accepts connections, then one line per
finished request on stderr (or, with --log-json, a JSON object per request start and end on stdout, as
the window reads them). SIGTERM or Ctrl+C: finish the requests in flight (up to 10 s), stop training
runs started through the API (each saves a checkpoint), exit 0. Without MODEL only the training API
runs. Listening on an address other than loopback requires an API key.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Any

from desktop_app.cli.model_file import add_file_argument, chosen_model
from desktop_app.engine.errors import UserError
from desktop_app.engine.workspace import Workspace
from desktop_app.server.monitor import Monitor


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("OpenAI clients: base_url http://HOST:PORT/v1, model = the MODEL folder's name (GET /v1/models). "
                     "The training API lives under /api; its documentation under /docs.")
    parser.add_argument("model", metavar="MODEL", nargs="?", default=None,
                        help="the model to serve: a run folder (its newest checkpoint), a checkpoint, an export, a "
                             "local Hugging Face model folder, a GGUF file or a Hub id pulled earlier (ORG/NAME, or "
                             "ORG/NAME:QUANT for one GGUF file; omit it to run only the "
                             "training API)")
    add_file_argument(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; any other address "
                             "requires --api-key)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 = any free port)")
    parser.add_argument("--api-key", default=os.environ.get("AZR_API_KEY") or None, metavar="KEY",
                        help="require 'Authorization: Bearer KEY' on every request (default: $AZR_API_KEY)")
    parser.add_argument("--workspace", metavar="DIR", default=None,
                        help="workspace folder of the training API (default: the app's, or $AZR_WORKSPACE)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "mps"),
                        help="where the served model runs")
    parser.add_argument("--max-batch", type=int, default=32,
                        help="most sequences decoded together (concurrent requests x n); more wait their turn")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads while decoding (0 = automatic, timed while decoding)")
    parser.add_argument("--max-upload-mb", type=int, default=256, help="largest dataset upload, in MiB")
    parser.add_argument("--max-body-mb", type=int, default=8, help="largest JSON request body, in MiB")
    parser.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                        help="allow browser pages from ORIGIN to call the API (CORS is off by default); repeatable")
    parser.add_argument("--log-json", action="store_true",
                        help="log each request start/end as a JSON object on stdout instead of a line on stderr")


def _check(args: argparse.Namespace) -> None:
    from desktop_app.server.security import check_bind  # lazy: fastapi

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, got {args.port}")
    for name in ("max_batch", "max_upload_mb", "max_body_mb"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.threads < 0:
        raise UserError(f"--threads must be 0 (automatic) or more, got {args.threads}")
    if args.file and not args.model:
        raise UserError("--file goes with MODEL: the Hub id (ORG/NAME) of a GGUF repository pulled earlier")
    check_bind(args.host, args.api_key)


def _log_listener(as_json: bool) -> Any:
    def listen(record: dict[str, Any]) -> None:
        if as_json:
            sys.stdout.write(json.dumps(record) + "\n")
            sys.stdout.flush()
        elif record["event"] == "end":
            print(f"{record['method']} {record['path']} {record['status']} {record['ms']:.0f} ms "
                  f"({record['clients']} in flight)", file=sys.stderr, flush=True)

    return listen


class _Terminated(Exception):
    pass


def run(args: argparse.Namespace) -> int:
    _check(args)

    def early_exit(signum: int, frame: Any) -> None:  # SIGTERM while loading: leave quietly, status 0
        raise _Terminated()

    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, early_exit) if on_main else None
    try:
        return _serve(args, on_main)
    except _Terminated:
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _serve(args: argparse.Namespace, on_main: bool) -> int:
    import logging

    from desktop_app.server.serving import Server, bind_socket, load_served, url_for  # lazy: uvicorn

    sock = bind_socket(args.host, args.port)  # a busy port fails now, before the slow imports and model load
    try:
        from transformers.utils import logging as hf_logging

        from desktop_app.server.app import create_app  # lazy: torch
        from desktop_app.server.security import is_loopback  # lazy: fastapi
        from desktop_app.server.state import ServerSettings  # lazy: fastapi

        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        hf_logging.disable_progress_bar()  # no "Writing model shards" bars in the server's log on each download
        served = None
        if args.model:
            served = load_served(chosen_model(args.model, args.file), device=args.device, max_batch=args.max_batch,
                                 threads=args.threads or None)
            for warning in served.loaded.warnings:
                print(f"warning: {warning}", file=sys.stderr)
        settings = ServerSettings(host=args.host, port=sock.getsockname()[1], api_key=args.api_key,
                                  json_limit=args.max_body_mb << 20, upload_limit=args.max_upload_mb << 20,
                                  cors_origins=list(args.cors_origin))
        monitor = Monitor()
        monitor.add_listener(_log_listener(args.log_json))
        app = create_app(settings, Workspace.open(args.workspace), served, monitor)
    except BaseException:
        sock.close()
        raise
    url = url_for(args.host, settings.port)

    def ready() -> None:
        if not is_loopback(args.host):
            print(f"warning: listening on {args.host}: reachable from other machines; every request needs "
                  "'Authorization: Bearer <key>'", file=sys.stderr, flush=True)
        elif args.api_key:
            print("requests need 'Authorization: Bearer <key>'", file=sys.stderr, flush=True)
        print(f"serving on {url}", flush=True)

    server = Server(app, sock, on_ready=ready)
    if on_main:
        def on_signal(signum: int, frame: Any) -> None:
            server.stop(force=signum == signal.SIGINT)  # a second Ctrl+C stops waiting for requests

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    server.run()
    return 0
