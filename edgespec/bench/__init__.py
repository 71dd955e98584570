"""Measurement: bench suites, decoding modes run interleaved on them and the report, the
transformers assisted-generation peer, and the layout tuner built on the bench."""
