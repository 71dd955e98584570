"""The speculative core: sampling math, drafters, the K policy and the decode loop.

Nothing here imports a runtime (llama.cpp, torch) or the UI; backends are reached only through the
small protocol this package owns (`decoding.backend`), which the backends implement.

One round reads top to bottom in `decoder.py` (`SpeculativeDecoder._round`). The modules:

- `decoder.py`: the draft -> verify -> accept / roll back loop (`SpeculativeDecoder`), one reply's
  state (`Reply`); it yields the events.
- `events.py`: the event stream every front end reads (`Token`, `Step`, `Summary`) and its `Tally`.
- `backend.py`: the `Backend` protocol the runtimes implement, and the cache bookkeeping they share.
- `sampling.py`: logit warping, and greedy and sampled verification that keep the target's output.
- `tree.py`: draft trees flattened into nodes (a chain is a tree with one branch).
- `constraint.py`: what the loop needs from a grammar or schema: masks, a matcher that rolls back,
  the forced text.
- `drafters.py`: the `Drafter` protocol every draft source implements, and the `Draft` it returns.
- `model_drafter.py`: the draft model as a drafter.
- `copying/`: the drafters that copy text, point masses free to ask (its own index): prompt
  lookup, a value's start copied from the prompt under a constraint, and copies from other text
  over a suffix index.
- `costs/`: what a pass costs on this machine: the cost curve, its calibration, its file, and the
  thread count measured against it (its own index).
- `policy/`: the K policy, which drafter and how many tokens each round (its own index).
"""
