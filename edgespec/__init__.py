"""edgespec: local speculative decoding with a quantized target and a cheap drafter."""

__version__ = "0.1.0"
