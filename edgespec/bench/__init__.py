"""Measurement: bench suites, decoding modes run interleaved on them and the report, the
transformers assisted-generation peer, and the layout tuner built on the bench.

    suites.py       the JSONL suites and the selection `--limit` / `--suites` make of them
    jsonl.py        reading a JSONL file of the bench, every problem one line naming file and line
    structured.py   a suite line's `response_format`, and each reply checked against it
    sessions.py     the session suite: sequences of related calls, each timed whole
    modes.py        decoding modes measured interleaved on a suite
    hf_assisted.py  the `hf-assisted` peer: transformers' own speculative generation
    report.py       medians and speedups, the tables, the JSON document and the plot
    tune.py         `models tune`: candidate layouts built, measured, and the fastest good one
"""
