"""The models a pair is made of: the registry (models.toml), the store of model files and how they
are pulled or built, tensor layouts, vocabulary checks, and whether a pair fits this machine.
Imports backends (to read vocabularies, quantize layouts), decoding and util; never the engine."""
