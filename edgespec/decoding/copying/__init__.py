"""The copying drafters: drafts copied from text, never computed by a model.

What they share: each is free to ask (a lookup, no forward pass), so the decoder asks every one of
them every round and the controller scores each proposal against the text whether it was drafted
or not (`policy/acceptance.NgramScores`, per match length and position, for each kind in
`drafters.LOOKUPS`); each draft is a point mass (q(x) = 1), so verification keeps the target's
output whatever was copied; and under a constraint each drafts one chain, up to the first token the
constraint forbids (`drafters.allowed_chain`).

- `ngram.py`: prompt lookup (`NgramDrafter`, kind `ngram`), copies from the call's own text: what
  followed earlier occurrences of its last few tokens.
- `source_copy.py`: under a constraint, at a value's start, the prompt's next word (`SourceCopy`),
  where token lookup finds nothing; `NgramDrafter` asks it first there, and its drafts count as
  `ngram`'s at match length 0.
- `corpus.py`: copies from text other than the call's own (`CorpusDrafter`: kinds `retry`,
  `history`, `repository`, `replaced`), over an index of that text (`Corpus`).
- `suffix_index.py`: that index, the suffix array of a corpus of token documents (`SuffixIndex`,
  and `SegmentedIndex` for one that grows).

Which corpora a call copies from is the engine's to say (`engine/copy_sources.py`).
"""
