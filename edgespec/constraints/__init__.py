"""Constraints on a reply (JSON, a schema, a regular expression, a grammar), compiled over a
backend's vocabulary into the decoding layer's `Constraint`. Above the backends (it reads their
vocabulary through the Backend protocol), below the models and the engine.

    guidance.py         constraints compiled by llguidance over a backend's own vocabulary
    json_schemas.py     a user's JSON schema: depth bounded, walked, checked satisfiable
    response_format.py  OpenAI's `response_format` and the constraint it asks for
    tool_calls.py       tool-call formats: a model's call markup and the grammar of valid calls
"""
