"""The engine: a loaded pair (backends chosen from the registry), its prompt cache and calibrated
costs, and the event stream every front end reads; `figures` words a reply's Summary."""
