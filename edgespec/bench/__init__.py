"""Measurement, and the workflows built on it that the CLI runs.

- A bench: `suites` (JSONL prompts; `jsonl` reads such files, `structured` their response_format),
  `modes` (decoding modes run interleaved), `report` (summary, JSON, plot), `tables` (the summary
  at any width), `hf_assisted` (transformers' peer) and `comparison` (a whole bench as `edgespec
  bench` runs it); `sessions` is the suite of sequences of related calls.
- Tuning a pair's layouts: `layout_ranking` (the call a layout predicts, and the recommendation),
  `candidates` (building and measuring candidate files) and `tuning` (`models tune` and the layout
  `models pull` chooses).
- `partial_results`: a bench or a tune that a signal stops still reports what it finished.
"""
