"""Whether speculative output is the target's own: the noise floor of the target's logits, where
two outputs part and why (tie or a bug), and a layout's fidelity to its original. Reads models
only through the decoding Backend protocol."""
