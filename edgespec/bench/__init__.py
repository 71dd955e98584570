"""Measurement, and the workflows built on it that the CLI runs: a bench and tuning a pair's
layouts.

    suites.py           the JSONL suites and the selection `--limit` / `--suites` make of them
    jsonl.py            reading a JSONL file of the bench, every problem one line naming file and line
    structured_suite.py a suite line's `response_format`, and each reply checked against it
    sessions.py         the session suite: sequences of related calls, each timed whole
    modes.py            decoding modes measured interleaved on a suite
    hf_assisted.py      the `hf-assisted` peer: transformers' own speculative generation
    report.py           medians and speedups, the JSON document and the plot
    tables.py           the summary as tables that stay whole at any width, on a pipe too
    comparison.py       a whole bench as `edgespec bench` runs it: checked, run, reported
    layout_ranking.py   the layouts ranked by the call each predicts here, and the recommendation
    candidates.py       candidate layout files built and measured
    tuning.py           `models tune`, and the layout `models pull` chooses
    partial_results.py  a bench or a tune that a signal stops still reports what it finished
"""
