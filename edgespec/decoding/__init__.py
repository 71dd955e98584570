"""The speculative core: sampling math, drafters, the K controller and the decode loop.

Nothing here imports a runtime (llama.cpp, torch) or the UI; backends are reached only through the
small protocol this package owns (`decoding.backend`), which the backends implement.
"""
