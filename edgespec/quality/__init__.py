"""Whether speculative output is the target's own: the noise floor of the target's logits, where
two outputs part and why (tie or a bug), and a layout's fidelity to its original. Reads models
only through the decoding Backend protocol.

    noise_floor.py  how far a target's logits move when asked for a batch instead of one token
    divergence.py   why a greedy speculative output parted from plain decoding
    fidelity.py     how closely a derived model follows its original, position by position
    perplexity.py   a weight layout judged against text
"""
