"""edgespec: local speculative decoding with a quantized target and a cheap drafter.

The packages are layers, each importing only those below it (docs/design.md, "Layers"), top down:

    cli/          the command line (`__main__.py` runs it)
    tui/          `edgespec chat`, the terminal app
    server/       `edgespec serve`, the OpenAI API
    bench/        measurement: suites, modes, the report, the layout tuner
    engine/       a loaded pair, its prompt cache and calibrated costs: the event stream
    quality/      whether speculative output is the target's own
    models/       the registry (models.toml), the model store, layouts, vocabularies
    constraints/  JSON, schemas, grammars and tool-call formats compiled over a vocabulary
    backends/     the runtimes: llama.cpp and transformers
    decoding/     the speculative core: sampling, drafters, the K policy, the decode loop
    util/         helpers every layer may use

`testing/` holds the tiny and rule-following models the tests and benchmarks/gpu_check.py build on.
"""

__version__ = "0.1.0"
