"""Constraints on a reply (JSON, a schema, a regular expression, a grammar), compiled over a
backend's vocabulary into the decoding layer's `Constraint`. Above the backends (it reads their
vocabulary through the Backend protocol), below the models and the engine."""
