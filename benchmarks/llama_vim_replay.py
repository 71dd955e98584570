"""A real client: llama.vim in a headless Vim, against `edgespec serve`, while an edit is typed.

llama.vim (ggml-org/llama.vim) is checked out into a temporary folder from a clone given with
`--llama-vim` (or `$LLAMA_VIM`); none of its code is kept in this repository, and without a clone
the replay says so and stops (exit 0). Debian's Vim (+job +channel +textprop, `vim --version`) runs
inside tmux, which gives it a terminal; curl is what llama.vim posts with.

A function's body is taken out of a held-out file (default `colorsys.py:yiq_to_rgb` of this
Python's standard library) and typed in again through tmux, a key at a time, pausing as
`editor_session.stops` says (after a line's indentation, after every third word, at its end), for
`--pause` seconds and then until the requests llama.vim sent are answered (30 s at most), so that
a suggestion can be shown at every stop however fast the server is.
Meanwhile llama.vim does what it does unprompted: a quick suggestion at every cursor move
(`t_max_predict_ms` 250), a speculative follow-up once one is shown, the ring of chunks read in the
background (`n_predict` 0) when the user is idle. The body's last line is not typed: after its
indentation the typist waits for a suggestion and accepts it with Tab.

Every request passes through a recording proxy here (method, kind, status, seconds, the server's
`timings/prompt_n` and `tokens_cached`); a timer inside Vim notes each suggestion llama.vim shows
(its ghost text), and Vim's messages are kept. Checks: suggestions were shown, background chunks
were read, every request was answered 200 with JSON, and Vim reported no error.

    flock /tmp/edgespec-real.lock .venv/bin/python benchmarks/llama_vim_replay.py \\
        --llama-vim ~/src/llama.vim --json benchmarks/results/llama_vim_replay.json
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).parent))
from editor_servers import edgespec_server  # noqa: E402
from editor_session import function_body, stops  # noqa: E402
from infill_proxy import RecordingProxy  # noqa: E402
from result_file import write_result  # noqa: E402

STDLIB = Path(os.__file__).parent
SESSION = f"edgespec-llama-vim-{os.getpid()}"  # one per replay: two may run at once
WORDS_PER_PAUSE = 3
PAUSE_MOST_S = 30

VIMRC = """
set nocompatible noswapfile nobackup nowritebackup viminfo= shortmess+=I
set noautoindent nosmartindent nocindent indentexpr= textwidth=0 formatoptions= nofoldenable
filetype off
syntax off
let g:llama_config = {{'endpoint_fim': '{endpoint}', 'show_info': 2}}
set runtimepath^={plugin}
let g:replay = {{'shown': [], 'started': reltimestr(reltime())}}
let s:seen = ''
function! ReplayProbe(timer) abort
  let l:texts = []
  for l:p in prop_list(line('.'))
    if get(l:p, 'type', '') ==# 'llama_hl_fim_hint'
      call add(l:texts, get(l:p, 'text', ''))
    endif
  endfor
  let l:key = line('.') . ':' . col('.') . ':' . join(l:texts, "\\n")
  if !empty(l:texts) && l:key !=# s:seen
    call add(g:replay.shown, {{'t': reltimefloat(reltime()), 'line': line('.'), 'col': col('.'), 'text': l:texts}})
  endif
  let s:seen = l:key
endfunction
function! ReplayReport() abort
  let g:replay.messages = execute('messages')
  let g:replay.errmsg = v:errmsg
  let g:replay.buffer = getline(1, '$')
  let g:replay.now = reltimefloat(reltime())
  call writefile([json_encode(g:replay)], '{report}')
endfunction
call timer_start(50, 'ReplayProbe', {{'repeat': -1}})
"""


def checkout(source: Path, dest: Path) -> str:
    """llama.vim from `source` (a git clone, bare or not, or a plain copy) into `dest`; its commit."""
    if (source / "autoload" / "llama.vim").exists() and not (source / "HEAD").exists():
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".git"))
    else:
        archive = subprocess.run(["git", "-C", str(source), "archive", "HEAD"], capture_output=True, check=True)
        dest.mkdir(parents=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    done = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def missing_tools() -> list[str]:
    return [tool for tool in ("vim", "tmux", "curl", "git") if shutil.which(tool) is None]


def vim_features() -> dict:
    text = subprocess.run(["vim", "--version"], capture_output=True, text=True).stdout
    wanted = ("+job", "+channel", "+textprop", "+timers")
    return {"version": text.splitlines()[0], "features": [f for f in wanted if f in text.split()]}


class Tmux:
    """A detached tmux session running one command, keys sent to it."""

    def __init__(self, name: str, command: list[str], cwd: Path):
        self.name = name
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        args = ["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "50", "-c", str(cwd)]
        subprocess.run([*args, subprocess.list2cmdline(command)], check=True)

    def keys(self, *keys: str, literal: bool = False) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *(["-l"] if literal else []), *keys], check=True)

    def alive(self) -> bool:
        return subprocess.run(["tmux", "has-session", "-t", self.name], capture_output=True).returncode == 0

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def type_body(tmux: Tmux, body: list[str], pause: Callable[[], None], key_s: float) -> int:
    """Type `body` a key at a time (insert mode, one line opened below the cursor first), pausing
    where the typist stops; the number of pauses."""
    tmux.keys("o")
    n = 0
    for i, line in enumerate(body):
        if i:
            tmux.keys("Enter")
        done = 0
        for x, _kind in stops(line, WORDS_PER_PAUSE) or [(len(line), "end")]:
            for ch in line[done:x]:
                tmux.keys(ch, literal=True)
                time.sleep(key_s)
            done = x
            pause()
            n += 1
    return n


def accept_one(tmux: Tmux, indent: str, pause: Callable[[], None], new_line: bool) -> None:
    """On a new line (or the line `o` opened), type the indentation, wait for a suggestion and press
    Tab (llama.vim's accept)."""
    if new_line:
        tmux.keys("Enter")
    tmux.keys(indent, literal=True)
    pause()
    tmux.keys("Tab")
    time.sleep(0.5)


def drive(plugin: Path, folder: Path, file: Path, edit, endpoint: str, pause: Callable[[], None]) -> dict:
    """Open `file` (the body taken out) in Vim with llama.vim, type the body but its last line, take
    that line from a suggestion with Tab, save, and return Vim's report. `pause` is the typist's
    wait at each stop."""
    report = folder / "report.json"
    vimrc = folder / "vimrc"
    vimrc.write_text(VIMRC.format(endpoint=endpoint, plugin=plugin, report=report))
    tmux = Tmux(SESSION, ["vim", "-u", str(vimrc), "-i", "NONE", "-n", f"+{edit.start}", file.name], folder)
    try:
        time.sleep(2.5)  # Vim starts; llama.vim picks a chunk at BufEnter and reads it within a second or two
        body = list(edit.lines[edit.start : edit.end])
        pauses = type_body(tmux, body[:-1], pause, key_s=0.06)  # the last line is left to a suggestion
        accept_one(tmux, body[-1][: len(body[-1]) - len(body[-1].lstrip())], pause, new_line=len(body) > 1)
        tmux.keys("Escape")
        tmux.keys(":w", "Enter")
        time.sleep(3.5)  # normal mode: the ring's background reads go on
        tmux.keys(":call ReplayReport()", "Enter")
        deadline = time.monotonic() + 10
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        tmux.keys(":qa!", "Enter")
    finally:
        tmux.close()
    if not report.exists():
        raise SystemExit("Vim wrote no report (is llama.vim's plugin loading?)")
    return json.loads(report.read_text()) | {"pauses": pauses}


def checks(records: list[dict], vim: dict, accept_line: int) -> dict:
    """What the replay must show: suggestions shown, chunks read, every request answered, no error;
    and whether Tab at the end took a suggestion into the buffer (0-based `accept_line`)."""
    fim = [r for r in records if r.get("kind") in ("quick", "follow")]
    ring = [r for r in records if r.get("kind") == "ring"]
    errors = [line for line in vim.get("messages", "").splitlines() if _is_error(line)]
    return {
        "requests": len(records),
        "suggestions_answered": sum(r["status"] == 200 and (r.get("content_chars") or 0) > 0 for r in fim),
        "suggestions_shown": len(vim.get("shown", [])),
        "ring_reads_answered": sum(r["status"] == 200 for r in ring),
        "every_request_answered": bool(records) and all(r["status"] == 200 and r.get("json") for r in records),
        "vim_errors": errors,
        "accepted": _accepted(vim.get("buffer", []), accept_line),
        "accepted_as_in_the_file": _accepted(vim.get("buffer", []), accept_line) == vim.get("expected"),
    }


def _accepted(buffer: list[str], n: int) -> str | None:
    """The line Tab was pressed on, where it holds more than indentation (a Tab inserted is not)."""
    line = buffer[n] if n < len(buffer) else ""
    return line if line.strip() and "\t" not in line else None


def _is_error(line: str) -> bool:
    """A line of Vim's messages that says something failed (llama.vim's own warning that it wants
    Vim 9.0.1 while Debian ships 9.0 is not one)."""
    return line.startswith("E") and line[1:2].isdigit() or "failed" in line.lower() or "error" in line.lower()


def passed(check: dict) -> bool:
    return (
        check["every_request_answered"]
        and check["suggestions_answered"] > 0
        and check["suggestions_shown"] > 0
        and check["ring_reads_answered"] > 0
        and not check["vim_errors"]
    )


def latencies(records: list[dict]) -> dict:
    """Per kind of request: how many, and the median and most seconds, tokens read and tokens cached."""
    out = {}
    for kind in ("quick", "follow", "ring"):
        rows = [r for r in records if r.get("kind") == kind and r["status"] == 200]
        if not rows:
            continue
        read = [r["prompt_n"] for r in rows if isinstance(r.get("prompt_n"), int)]
        out[kind] = {
            "n": len(rows),
            "median_s": statistics.median(r["seconds"] for r in rows),
            "max_s": max(r["seconds"] for r in rows),
            "median_prompt_n": statistics.median(read) if read else None,
        }
    return out


Serve = Callable[[], AbstractContextManager[str]]  # starts a server, yields its root URL, stops it


def replay(llama_vim: Path, target: str, lines: int, pause_s: float, serve: Serve) -> dict:
    """The whole replay against the server `serve` starts (a context that yields its root URL):
    proxy, Vim; the document the result file holds."""
    path, qualname = target.split(":")
    edit = function_body(STDLIB / path, qualname, lines)
    with tempfile.TemporaryDirectory(prefix="llama-vim-replay-") as tmp:
        folder = Path(tmp)
        commit = checkout(llama_vim, folder / "llama.vim")
        file = folder / path
        file.write_text("\n".join(edit.lines[: edit.start] + edit.lines[edit.end :]) + "\n")
        started = time.perf_counter()
        with serve() as root:
            ready_s = time.perf_counter() - started
            proxy = RecordingProxy(root)

            def pause() -> None:
                """The typist waits `pause_s`, and on until llama.vim's requests are answered
                (`PAUSE_MOST_S` at most) and the suggestion drawn: one is seen at every stop."""
                time.sleep(pause_s)
                # llama.vim sends a request held back while another was in flight (its 100 ms timer
                # polls; Vim notices the curl job's end) up to about 0.6 s after that one's answer
                proxy.wait_idle(PAUSE_MOST_S, quiet_s=1.5)

            try:
                vim = drive(folder / "llama.vim", folder, file, edit, proxy.url + "/infill", pause)
            finally:
                proxy.close()
        wall = time.perf_counter() - started
    typed = "\n".join(edit.lines[edit.start : edit.end])
    return {
        "llama_vim": {"commit": commit, "config": "defaults; endpoint_fim at the proxy, show_info 2"},
        "vim": vim_features(),
        "edit": {"file": f"{path} of Python's standard library", "function": qualname, "lines": edit.end - edit.start}
        | {"chars_typed": len(typed), "pauses": vim["pauses"], "pause_s": pause_s},
        "seconds": {"server_ready": round(ready_s, 1), "whole": round(wall, 1)},
        "checks": checks(proxy.records, vim | {"expected": edit.lines[edit.end - 1]}, edit.end - 1),
        "latency": latencies(proxy.records),
        "shown": [{"line": s["line"], "col": s["col"], "lines": len(s["text"])} for s in vim.get("shown", [])],
        "vim_messages": vim.get("messages", "").strip().splitlines(),
        "requests": proxy.records,
    }


@click.command()
@click.option("--llama-vim", type=click.Path(path_type=Path), envvar="LLAMA_VIM", help="a clone of ggml-org/llama.vim")
@click.option("--file", "target", default="colorsys.py:yiq_to_rgb", show_default=True, help="FILE:FUNCTION (stdlib)")
@click.option("--lines", default=6, show_default=True, help="lines of the body typed again")
@click.option("--pause", "pause_s", default=2.0, show_default=True, help="seconds at each pause")
@click.option("-m", "--pair", default=None, help="the pair served (default: the default pair)")
@click.option("--fim-order", type=click.Choice(["psm", "psm-near", "spm"]), help="serve's (default: serve's default)")
@click.option("--json", "json_path", type=click.Path(path_type=Path))
def main(
    llama_vim: Path | None, target: str, lines: int, pause_s: float, pair, fim_order: str | None, json_path
) -> None:
    if llama_vim is None or not llama_vim.exists():
        click.echo("llama_vim_replay: skipped: no llama.vim clone (give --llama-vim PATH or set LLAMA_VIM)", err=True)
        return
    if missing := missing_tools():
        click.echo(f"llama_vim_replay: skipped: {', '.join(missing)} not installed (apt-get install vim tmux curl)")
        return
    from edgespec.util.provenance import provenance

    meta = provenance() | {"loadavg": os.getloadavg(), "fim_order": fim_order or "serve's default"}  # as it starts
    flags = ["--fim-order", fim_order] if fim_order else []
    doc = {"meta": meta, **replay(llama_vim, target, lines, pause_s, lambda: edgespec_server(pair, flags))}
    check = doc["checks"]
    for kind, row in doc["latency"].items():
        click.echo(f"{kind:6s} {row['n']:3d} requests, median {row['median_s']:.2f} s, most {row['max_s']:.2f} s")
    click.echo(json.dumps(check))
    if json_path:
        write_result(json_path, doc)
    if not passed(check):
        raise SystemExit("llama_vim_replay: FAILED: " + json.dumps(check))


if __name__ == "__main__":
    main()
