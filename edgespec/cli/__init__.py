"""The command line: `main.main` is the click group (`edgespec.__main__` runs it); one module per
command, and `common` for the options and error handling they share.

    main.py         the `edgespec` group
    common.py       the shared options, the types that check flag values, the error boundary
    run.py          `edgespec run`: a reply streamed to stdout
    chat.py         `edgespec chat`: the terminal app
    serve.py        `edgespec serve`: the OpenAI API
    bench.py        `edgespec bench`
    models.py       `edgespec models`: list, pull, check
    tune.py         `edgespec models tune`
    history.py      `edgespec history`: what the history of earlier calls holds, and clearing it
    export_vllm.py  `edgespec export vllm`: the `vllm serve` command that runs a pair on vLLM
"""
