"""What the user waits for: whole `edgespec run` calls on real files, drafters interleaved.

Each case pipes a file (or its first N lines) into `edgespec run INSTRUCTION`, as a user does, and
times the whole process from start to exit; the call's own `--stats-json` gives its time to first
token and decoding time. Every round runs every case in every `--draft` mode before the next round
starts, so a busy spell of the machine hits all modes alike; a case's figure in a mode is the median
of its rounds, and its speedup the ratio of those medians to `--draft none`'s. The prompt cache is
off (EDGESPEC_NO_CACHE=1): every call is cold.

    .venv/bin/python benchmarks/whole_call.py --case argparse.py:260 "Add type hints to every function." \\
        --modes "none;auto" --rounds 2 --max-tokens 200 --json benchmarks/results/whole_call.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from edgespec.util.provenance import input_name, provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

STDLIB = Path(os.__file__).parent


def read_case(spec: str) -> tuple[str, str]:
    """'FILE[:LINES]' (a bare name is looked up in Python's standard library) -> (label, text). The
    label is the spec, with a file named by a path named as a result file may name it (`input_name`:
    never an absolute path)."""
    name, _, lines = spec.partition(":")
    named = Path(name).exists()
    path = Path(name) if named else STDLIB / name
    text = path.read_text(encoding="utf-8")
    if lines:
        text = "".join(text.splitlines(keepends=True)[: int(lines)])
    return (input_name(path) + (f":{lines}" if lines else "") if named else spec), text


def parse_modes(text: str) -> dict[str, tuple[dict[str, str], list[str]]]:
    """'none;auto;all=--draft auto -m wide --config my.toml;old=PYTHONPATH=../old --draft auto' ->
    {label: (environment, `run` flags)}; a bare word is a --draft value, leading NAME=VALUE words
    are environment variables (another checkout of edgespec, say)."""
    modes = {}
    for part in (p.strip() for p in text.split(";") if p.strip()):
        label, eq, rest = part.partition("=")
        words = shlex.split(rest) if eq else ["--draft", label.strip()]
        env = {}
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        modes[label.strip()] = (env, words)
    return modes


def one_call(edgespec: str, text: str, instruction: str, mode: tuple[dict[str, str], list[str]], args) -> dict:
    """Run one call; its wall clock (process start to exit) and the stats it wrote."""
    extra_env, flags = mode
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "stats.json"
        cmd = [
            edgespec,
            "run",
            instruction,
            "--max-tokens",
            str(args.max_tokens),
            "--color",
            "never",
            "--stats-json",
            str(stats),
            *flags,
        ]
        env = {**os.environ, "EDGESPEC_NO_CACHE": "1", **extra_env}
        t0 = time.perf_counter()
        done = subprocess.run(cmd, input=text.encode(), capture_output=True, env=env)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            sys.exit(f"whole_call: {shlex.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
        summary = json.loads(stats.read_text())
    return {
        "wall_s": wall,
        "ttft_s": summary["ttft_s"],
        "decode_s": summary["decode_s"],
        "tokens": summary["tokens"],
        "prompt_tokens": summary["prompt_tokens"],
        "acceptance": summary.get("acceptance"),
        "k_histogram": summary.get("k_histogram"),
        "load_s": summary.get("load_s"),
        "output": done.stdout.decode(),
    }


def summarize(rows: list[dict], modes: list[str]) -> list[dict]:
    """Per case: medians per mode, and each mode's whole-call and first-token ratios to the first mode's."""
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        entry = {"case": case}
        med = {}
        for mode in modes:
            mine = [r for r in rows if r["case"] == case and r["mode"] == mode]
            med[mode] = {k: statistics.median(r[k] for r in mine) for k in ("wall_s", "ttft_s", "decode_s")}
            med[mode]["tokens"] = statistics.median(r["tokens"] for r in mine)
        base = med[modes[0]]
        for mode in modes:
            m = med[mode]
            entry[mode] = {
                **m,
                "whole_speedup": base["wall_s"] / m["wall_s"],
                "ttft_ratio": m["ttft_s"] / base["ttft_s"],
                "decode_speedup": base["decode_s"] / m["decode_s"] if m["decode_s"] else None,
                "same_output_as_first": all(
                    r["output"] == b["output"]
                    for r, b in zip(
                        [r for r in rows if r["case"] == case and r["mode"] == mode],
                        [r for r in rows if r["case"] == case and r["mode"] == modes[0]],
                        strict=True,
                    )
                ),
            }
        entry["prompt_tokens"] = next(r["prompt_tokens"] for r in rows if r["case"] == case)
        out.append(entry)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs=2, action="append", metavar=("FILE[:LINES]", "INSTRUCTION"), required=True)
    ap.add_argument(
        "--modes",
        default="none;auto",
        help="';'-separated --draft values or LABEL=RUN FLAGS; the first is the baseline",
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    edgespec = str(Path(sys.executable).with_name("edgespec"))
    flags = parse_modes(args.modes)
    modes = list(flags)
    cases = [(*read_case(spec), instruction) for spec, instruction in args.case]
    rows = []
    for round_ in range(args.rounds):
        for label, text, instruction in cases:
            for mode in modes:
                r = one_call(edgespec, text, instruction, flags[mode], args)
                rows.append({"case": f"{label} | {instruction}", "mode": mode, "round": round_, **r})
                print(
                    f"round {round_} {label} {mode}: wall {r['wall_s']:.1f} s, TTFT {r['ttft_s']:.1f} s, "
                    f"decode {r['decode_s']:.1f} s, {r['tokens']} tokens",
                    file=sys.stderr,
                )
    summary = summarize(rows, modes)
    for entry in summary:
        print(entry["case"], f"({entry['prompt_tokens']} prompt tokens)")
        for mode in modes:
            m = entry[mode]
            print(
                f"  {mode:6} wall {m['wall_s']:6.1f} s ({m['whole_speedup']:.2f}x)  TTFT {m['ttft_s']:5.1f} s "
                f"({m['ttft_ratio']:.2f}x)  decode {m['decode_s']:5.1f} s  same output: {m['same_output_as_first']}"
            )
    if args.json:
        meta = provenance()
        for r in rows:
            r.pop("output")
        write_result(args.json, {"meta": meta, "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
