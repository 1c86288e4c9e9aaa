"""The local HTTP API: OpenAI-compatible generation and the training REST API, on FastAPI + uvicorn.

A peer of `ui/` and `cli/`: it drives the engine (generation runners, the training generator, dataset
preparation, export) and the engine never imports it. It never imports Qt either, so the window can run
it as a subprocess (`python -m desktop_app serve`) and a headless machine can run it alone.

    app.py              the FastAPI app: routes, middlewares, lifespan (create_app)
    openai_routes.py    /v1/models, /v1/completions, /v1/chat/completions (JSON and server-sent events)
    openai_schemas.py   request bodies of the /v1 routes (strict types, OpenAI's names and ranges)
    tokenizer_routes.py /tokenize, /detokenize, /tokenizer_info (vLLM's shapes: the harness's remote tokenizer)
    prompts.py          request -> token ids (chat template, truncation, vocabulary check)
    batcher.py          one decode thread serving every request: concurrent rows decode as one batch (the KV cache
                        of that batch, engine/generate/slot_cache.py, and per-row sampling, row_sampler.py, are the
                        engine's, beside its other decoders)
    thread_policy.py    torch threads of the decode thread (the engine's tuner, per batch size)
    training_routes.py  /api/...: models, datasets (uploads), runs (start, status, controls), downloads
    runs.py             training runs started here: threads, controls, status (and runs found on disk)
    uploads.py          multipart files -> sanitised names in the workspace -> dataset with verdicts
    security.py         loopback/API-key policy, bearer check, body size limits, safe file names
    monitor.py          request log and in-flight count (for the CLI's log and the window's panel)
    errors.py           OpenAI's error JSON shape for every error
    state.py            settings and what the routes share (served model, workspace, runs)
    serving.py          bind, run uvicorn, say when ready, exit cleanly on SIGTERM
"""
