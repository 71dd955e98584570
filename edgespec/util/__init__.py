"""The bottom layer: helpers every other layer may use and that import nothing else of edgespec's
(files written atomically, signals, errors, stdout, text checks, paths, the machine's hardware)."""
