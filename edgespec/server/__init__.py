"""`edgespec serve`: OpenAI's chat and text completions API over the engine, for editors and agents,
and llama.cpp's own endpoints for editors' inline completion.

    app.py               the endpoints (FastAPI), streaming as server-sent events, disconnects
    request_body.py      a request's body read into its model off the event loop
    schema_base.py       what every request model is made of: strict fields, valid Unicode text
    schemas.py           request and response bodies (pydantic)
    tool_schemas.py      the request side of tool calls: the tools offered and the choice among them
    openai_errors.py     every error in OpenAI's shape
    engine_worker.py     the engine's one thread and the bounded FIFO of requests in front of it
    shutdown_signals.py  SIGINT, SIGTERM and SIGHUP end the requests in flight, then the server
    replies.py           a request's events folded into what its client is sent (the one Tally)
    stop_strings.py      stop strings cut the text as OpenAI's API does
    structured.py        a chat request's `response_format` as the constraint its reply decodes under
    tool_choice.py       what `tools`, `tool_choice` and `parallel_tool_calls` ask of one generation
    tool_call_parser.py  tool calls read out of a reply's text as it streams, in the pair's markup
    json_calls.py        tool calls written as plain JSON instead of the markup, which "auto" takes too
    queued.py            what every endpoint does with a queued job: start, read, give up on a client gone
    native_routes.py     llama.cpp's own /completion and /infill, for editors' plugins
    native_schemas.py    their request bodies, each field honoured or refused by name
    native_replies.py    their reply bodies, `response_fields` flattened by path
    line_limits.py       an inline completion's `n_indent` and `t_max_predict_ms` stops
    reach.py             who may use the server: its own Host names and origins (DNS rebinding)

The server consumes the same event stream (Token, Step, Summary) as `run`, the chat app and the
bench; the engine never imports it. The click command is `edgespec.cli.serve`.
"""
