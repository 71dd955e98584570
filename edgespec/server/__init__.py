"""`edgespec serve`: OpenAI's chat and text completions API over the engine, for editors and agents.

    app.py            the endpoints (FastAPI), streaming as server-sent events, disconnects
    engine_worker.py  the engine's one thread and the bounded FIFO of requests in front of it
    replies.py        a request's events folded into what its client is sent (the one Tally)
    stop_strings.py   stop strings cut the text as OpenAI's API does
    schemas.py        request and response bodies (pydantic)
    openai_errors.py  every error in OpenAI's shape

The server consumes the same event stream (Token, Step, Summary) as `run`, the chat app and the
bench; the engine never imports it. The click command is `edgespec.cli.serve`.
"""
