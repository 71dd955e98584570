"""The engine: a loaded pair (backends chosen from the registry), its prompt cache and calibrated
costs, and the event stream every front end reads.

- `options.py`: the one door, what a front end asks for (`EngineOptions`), checked, then opened.
- `loading.py`: the door's loader: a checked pair's files checked, each model on its runtime.
- `engine.py`: the loaded pair (`Engine`) and the settings of one reply (`GenerateSettings`).
- `call_figures.py`: what a call does around the decoder, gathered as it happens, for its one Summary.
- `kept_measurements.py`: the key measurements are kept under, and the noise floor's file (the cost
  curve's whole life is `decoding/costs/`).
- `engine_thread.py`: the one thread that loads an engine and runs every generation of it.
- `prompt_cache.py`: what a model has read, kept across calls and processes.
- `read_ahead.py`: the whole read chunks of a prompt yet to be asked, read before it is.
- `infill.py`: fill-in-the-middle prompts for editors' inline completion.
- `prompt_cache_files.py`: one saved state's file, and reading it without trusting it.
- `copy_sources.py`: what a call may copy from beyond its own text (the drafters: `decoding/copying/`).
- `reply_history.py`: every earlier prompt and reply, and the suffix index over them.
- `same_reply.py`: a greedy request asked before, served its earlier whole reply again.
- `history_log.py`: the history's log file, record by record.
- `history_index.py`: the history's saved suffix index, checksummed, read without trusting it.
- `history_files.py`: the history's folder: its lock, counting it read-only, clearing it.
- `repository.py`: the working repository's text files as a corpus.
- `stats_line.py`: a reply's Summary in words: `run --stats`'s line and the parts every front end shows.
- `vllm_draft.py`: what vLLM is to draft for a pair, as this machine's controller would (`export vllm`).
"""
