"""The chat replay of issue 48: time to the first token after enter, read ahead on and off, and how
fast a keystroke is echoed while the app reads.

Each run is a fresh `edgespec chat` process in a terminal, driven as a user drives it: a detached
tmux session of 120 x 40 on a server of its own (`tmux -L`), where

  1. a file is pasted (tmux's `paste-buffer -p`: a bracketed paste, as a terminal sends one; by
     default the first ~1k tokens of fractions.py of Python's standard library, a file no suite or
     tuning here reads, and a second case of ~2k tokens);
  2. a 120-character question is typed at 6 characters a second (`send-keys`, one key each);
  3. enter is pressed, and the run waits for the whole reply.

Per run: the first token after enter as the user sees it (from sending enter to the app's output
that put the reply's first figures on screen) and as the engine counted it (the reply's saved
`ttft_s`: the target's reading, without the app's wait for a read in hand), how many prompt tokens
were read ahead and how many were left to read at enter, the reply's text, and each keystroke's echo.
An echo is timed from sending a key (but a space) to the app's output after which the pane's text shows it:
tmux `pipe-pane` copies every byte the app writes to the terminal into a pipe a thread here reads
and stamps, and the pane is captured after each of them. It includes tmux's own hop (a client
process per key, the server, the pty), which a terminal emulator does not add: `--floor` measures
that hop on `cat` (one round of the question's keys) and reports it beside the app's.

Runs alternate read ahead on and `--no-read-ahead`, the first mode alternating by round; every run
reads cold (`--no-cache`, `--no-history`, a fresh chats folder), so the two modes differ only in
reading ahead. The replies of both modes are compared per round (identical text, or not).

Targets (issue 48; AMD EPYC with AVX-512, 2 cores, the default pair): the first token after enter
within 1.0 s with the 1k-token file; a keystroke echoed within 50 ms while reading.

    .venv/bin/python benchmarks/chat_read_ahead.py --rounds 3 --json benchmarks/results/chat_read_ahead.json
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import click

from edgespec.util.provenance import input_name, provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INPUT = Path(sysconfig.get_paths()["stdlib"]) / "fractions.py"
QUESTION = (
    "Which of these functions would you test first, and why? Name two edge cases for each one, "
    "and say what each one returns."
)
SIZE = (120, 40)
CASES = "4000,8500"  # characters of the file: about 1,000 and 2,000 tokens of fractions.py


class Terminal:
    """One program in a tmux pane of its own server: keys in, its output stamped as it comes."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]):
        self.socket = f"edgespec-bench-{os.getpid()}-{time.monotonic_ns()}"
        self.fifo = cwd / "pane-output"
        os.mkfifo(self.fifo)
        command = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *argv])
        self.tmux("new-session", "-d", "-s", "bench", "-x", str(SIZE[0]), "-y", str(SIZE[1]), "-c", str(cwd), command)
        self.stamps: list[float] = []  # when each chunk of the program's output reached the pane
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.tmux("pipe-pane", "-t", "bench", f"cat > {shlex.quote(str(self.fifo))}")

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False)
        if done.returncode and args[0] not in ("kill-server", "has-session"):
            raise click.ClickException(f"tmux {args[0]}: {done.stderr.strip()}")
        return done.stdout

    def _read(self) -> None:
        fd = os.open(self.fifo, os.O_RDONLY)
        try:
            while os.read(fd, 1 << 16):
                self.stamps.append(time.perf_counter())
        finally:
            os.close(fd)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "bench")

    def keys(self, *keys: str, literal: bool = False) -> float:
        """Send keys; -> when they were sent."""
        sent = time.perf_counter()
        self.tmux("send-keys", "-t", "bench", *(["-l"] if literal else []), *keys)
        return sent

    def paste(self, text: str) -> float:
        self.tmux("set-buffer", "-b", "paste", text)
        sent = time.perf_counter()
        self.tmux("paste-buffer", "-p", "-d", "-b", "paste", "-t", "bench")
        return sent

    def alive(self) -> bool:
        return subprocess.run(["tmux", "-L", self.socket, "has-session"], capture_output=True).returncode == 0

    def wait_for(self, shows, since: float, timeout: float) -> float:
        """Until the pane's text `shows(text)`, looking after each output chunk that came after
        `since`; -> the stamp of the latest chunk before the look that saw it (the output that put
        it on screen, or one after it: never too early)."""
        deadline, looked = time.perf_counter() + timeout, 0
        while time.perf_counter() < deadline:
            fresh = [t for t in self.stamps[looked:] if t > since]
            looked = len(self.stamps)
            if fresh:
                latest = self.stamps[looked - 1]
                if shows(self.screen()):
                    return latest
            time.sleep(0.001)
        raise click.ClickException(f"the screen did not show what was waited for in {timeout:.0f} s")

    def close(self) -> None:
        self.tmux("kill-server")


def type_keys(term: Terminal, text: str, rate: float) -> list[float]:
    """Type `text` at `rate` keys a second (a key is sent on time whatever the last echo took);
    -> the echo in seconds of each key but the spaces (a space at the end of a line draws nothing
    that the pane's text shows; it costs the app what a letter costs)."""
    echoes, start = [], time.perf_counter()
    for i, key in enumerate(text):
        time.sleep(max(0.0, start + i / rate - time.perf_counter()))
        before = term.screen()
        sent = term.keys(key, literal=True)
        if key != " ":
            echoes.append(term.wait_for(lambda screen, before=before: screen != before, sent, 10) - sent)
    return echoes


def chat_run(chat: list[str], text: str, rate: float, read_ahead: bool, timeout: float) -> dict:
    """One replay in a fresh `edgespec chat`; its figures and reply."""
    with tempfile.TemporaryDirectory(prefix="edgespec-chat-replay-") as tmp:
        folder = Path(tmp)
        env = {
            "PYTHONPATH": str(ROOT),  # this checkout, whatever is installed
            "XDG_DATA_HOME": str(folder / "data"),  # the run's chats, not the user's
            "EDGESPEC_NO_REPOSITORY": "1",
            "TERM": "xterm-256color",
        }
        argv = [sys.executable, "-m", "edgespec", "chat", "--no-cache", "--no-history", *chat]
        argv += [] if read_ahead else ["--no-read-ahead"]
        chats = chats_folder(folder / "data")
        earlier = set(chats.glob("*.json"))  # other runs' chats, where EDGESPEC_HOME keeps them all
        term = Terminal(argv, folder, env)
        try:
            term.wait_for(lambda screen: "ready" in screen, 0.0, timeout)
            time.sleep(1.0)  # the user looks at the app before pasting
            pasted = term.paste(text)
            term.wait_for(lambda screen: text.rstrip().splitlines()[-1].strip() in screen, pasted, 30)
            time.sleep(0.5)
            echoes = type_keys(term, QUESTION, rate)
            time.sleep(max(0.0, 1 / rate - echoes[-1]))
            enter = term.keys("Enter")
            first = term.wait_for(lambda screen: "tok/s" in screen, enter, timeout) - enter
            reply = finished_reply(chats, earlier, text + QUESTION, timeout)
            term.keys("C-q")
            deadline = time.perf_counter() + 60
            while term.alive() and time.perf_counter() < deadline:
                time.sleep(0.1)
        finally:
            term.close()
    stats = reply["stats"] or {}
    return {
        "read_ahead": read_ahead,
        "screen_ttft_s": first,
        "engine_ttft_s": stats.get("ttft_s"),
        "prompt_tokens": stats.get("prompt_tokens"),
        "prompt_read_ahead": stats.get("prompt_read_ahead", 0),
        "target_read_tokens": stats.get("target_read_tokens"),
        "target_read_s": stats.get("target_read_s"),
        "tokens": stats.get("tokens"),
        "stop_reason": stats.get("stop_reason"),
        # what shaped the reply's passes: a parting between two replies comes from their shapes
        "k_histogram": stats.get("k_histogram"),
        "threads": stats.get("threads"),
        "echo_s": echoes,
        "reply": reply["content"],
    }


def chats_folder(data: Path) -> Path:
    """Where the app saves its chats: EDGESPEC_HOME's, when it is set, else the run's data folder's."""
    home = os.environ.get("EDGESPEC_HOME")
    return Path(home) / "chats" if home else data / "edgespec" / "chats"


def finished_reply(chats: Path, earlier: set[Path], message: str, timeout: float) -> dict:
    """The reply to `message` in a chat not among `earlier`, once its chat file says it is complete."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        for path in set(chats.glob("*.json")) - earlier:
            try:
                messages = json.loads(path.read_text())["messages"]
            except (OSError, ValueError, KeyError):
                continue  # being written
            if len(messages) == 2 and messages[0]["content"] == message and messages[1].get("complete"):
                return messages[1]
        time.sleep(0.2)
    raise click.ClickException(f"no complete reply in {timeout:.0f} s")


def tmux_floor(rate: float) -> list[float]:
    """The echo of the question's keys typed into `cat`: what tmux itself adds to every echo."""
    with tempfile.TemporaryDirectory(prefix="edgespec-chat-replay-") as tmp:
        term = Terminal(["cat"], Path(tmp), {})
        try:
            time.sleep(0.5)
            return type_keys(term, QUESTION, rate)
        finally:
            term.close()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def compared(case: list[dict]) -> list[dict]:
    """Per round of a case, whether the replies with and without reading ahead were the same, and
    whether their passes were (K and thread counts per pass, which `auto` and the thread policy
    choose live from the machine's timings: passes of other shapes give other bits, and a reply can
    then part at a near-tie, as two cold runs can; the prompt's reading is the same either way)."""
    pairs = [(a, b) for a in case if a["read_ahead"] for b in case if not b["read_ahead"] and b["round"] == a["round"]]
    return [
        {
            "round": a["round"],
            "same_reply": a["reply"] == b["reply"],
            "same_passes": (a["k_histogram"], a["threads"]) == (b["k_histogram"], b["threads"]),
        }
        for a, b in pairs
    ]


def summarize(runs: list[dict]) -> list[dict]:
    """Per case and mode: medians of the first token, the echo's median, 95th percentile and most
    over every key of its runs, and the replies of both modes compared per round (`compared`)."""
    out = []
    for chars in sorted({r["chars"] for r in runs}):
        case = [r for r in runs if r["chars"] == chars]
        rounds = compared(case)
        for mode in (True, False):
            rs = [r for r in case if r["read_ahead"] is mode]
            echoes = [e for r in rs for e in r["echo_s"]]
            out.append(
                {
                    "chars": chars,
                    "read_ahead": mode,
                    "runs": len(rs),
                    "prompt_tokens": statistics.median(r["prompt_tokens"] for r in rs),
                    "prompt_read_ahead": statistics.median(r["prompt_read_ahead"] for r in rs),
                    "screen_ttft_s": statistics.median(r["screen_ttft_s"] for r in rs),
                    "engine_ttft_s": statistics.median(r["engine_ttft_s"] for r in rs),
                    "echo_median_s": statistics.median(echoes),
                    "echo_p95_s": quantile(echoes, 0.95),
                    "echo_max_s": max(echoes),
                    "replies_identical": all(r["same_reply"] for r in rounds) if rounds else None,
                    "rounds_compared": rounds,
                }
            )
    return out


def interleaved_runs(chat: list[str], texts: dict[int, str], rounds: int, rate: float, timeout: float) -> list[dict]:
    """Each case with reading ahead on and off, the order swapped every round; a line per run."""
    runs = []
    for n in range(rounds):
        for chars, text in texts.items():
            for read_ahead in (True, False) if n % 2 == 0 else (False, True):
                run = {"round": n + 1, "chars": chars, **chat_run(chat, text, rate, read_ahead, timeout)}
                runs.append(run)
                print(
                    f"round {n + 1}, {run['prompt_tokens']} prompt tokens, read ahead {'on' if read_ahead else 'off'}: "
                    f"first token {run['screen_ttft_s']:.2f} s after enter (engine {run['engine_ttft_s']:.2f} s), "
                    f"{run['prompt_read_ahead']} read ahead, {run['target_read_tokens']} read at enter; echo median "
                    f"{statistics.median(run['echo_s']) * 1000:.0f} ms, most {max(run['echo_s']) * 1000:.0f} ms",
                    flush=True,
                )
    return runs


def print_summary(summary: list[dict]) -> None:
    for s in summary:
        print(
            f"{s['prompt_tokens']:.0f} tokens, read ahead {'on ' if s['read_ahead'] else 'off'}: first token "
            f"{s['screen_ttft_s']:.2f} s after enter (median of {s['runs']}); echo median "
            f"{s['echo_median_s'] * 1000:.0f} ms, p95 {s['echo_p95_s'] * 1000:.0f} ms, most "
            f"{s['echo_max_s'] * 1000:.0f} ms; replies identical: {s['replies_identical']}"
        )


@click.command()
@click.option("-m", "--pair", default=None, help="Model pair (default: the registry's default).")
@click.option(
    "--input",
    "input_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=DEFAULT_INPUT,
    show_default=True,
    help="The file pasted.",
)
@click.option("--cases", default=CASES, show_default=True, help="Characters of the file pasted, per case.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--rate", default=6.0, show_default=True, help="Keys typed a second.")
@click.option("--draft", default=None, help="The chat's --draft (default: the pair's).")
@click.option("--max-tokens", default=48, show_default=True, help="Of each reply.")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds any one wait may take.")
@click.option("--floor/--no-floor", default=True, show_default=True, help="Also the echo of `cat` in tmux.")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), default=None)
def main(pair, input_path, cases, rounds, rate, draft, max_tokens, timeout, floor, json_path):
    meta = provenance()  # before the run: the tree as it was when it started
    whole = input_path.read_text()
    texts = {}
    for chars in (int(c) for c in cases.split(",")):
        cut = whole[:chars]
        texts[chars] = cut[: cut.rfind("\n") + 1] or cut  # whole lines, as a user copies them
    chat = ["--max-tokens", str(max_tokens), *(["-m", pair] if pair else []), *(["--draft", draft] if draft else [])]
    runs = interleaved_runs(chat, texts, rounds, rate, timeout)
    summary = summarize(runs)
    floor_s = tmux_floor(rate) if floor else None
    print_summary(summary)
    if floor_s:
        cat = statistics.median(floor_s) * 1000, max(floor_s) * 1000
        print(f"tmux's own echo (cat): median {cat[0]:.0f} ms, most {cat[1]:.0f} ms")
    if json_path:
        result = {
            "meta": meta,
            "pair": pair,
            "draft": draft,
            "input": input_name(input_path),
            "question": QUESTION,
            "rate": rate,
            "max_tokens": max_tokens,
            "runs": runs,
            "summary": summary,
            "tmux_echo_s": floor_s,
        }
        write_result(json_path, result)


if __name__ == "__main__":
    main()
