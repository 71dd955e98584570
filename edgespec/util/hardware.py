"""What this machine has: its physical cores (the thread count llama.cpp and the chat's UI pacing
start from) and its RAM (where a pair that runs on the CPU keeps its weights)."""

from __future__ import annotations

import os

import psutil


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def ram_bytes() -> int:
    return psutil.virtual_memory().total
