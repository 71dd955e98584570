"""Does the chat UI slow decoding? Decode tokens/s with the TUI open against the engine alone.

Same pair, prompt and settings for both, interleaved repetitions (one of each per round, after one
warm-up of each), medians:

  direct  `engine.chat(...)` iterated in this thread, nothing else running;
  tui     the `ChatApp` driven headless (`App.run_test()` and a Pilot): the prompt is typed, enter
          pressed, and the run ends when the reply's Summary has reached the app. Decoding then runs
          in the app's worker thread while the event loop drains, folds and repaints as often as its
          UpdatePacer allows, as in `edgespec chat` (minus the terminal writes: the headless driver
          draws nowhere). The script prints how many updates a second the app made.

Both figures are the engine Summary's decode tokens/s (tokens after the first per second after the
first); for the app, the Summary it received and froze under the reply. The issue's target: tui
within 5% of direct.

    .venv/bin/python benchmarks/tui_throughput.py                      # the default pair
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import click

from edgespec.cli.common import decoding_options, error_boundary, opens_engine, pair_options
from edgespec.decoding.events import Summary
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.options import EngineOptions

PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring."
SIZE = (120, 40)


def direct_rate(engine: Engine, settings: GenerateSettings, prompt: str) -> tuple[float, int]:
    """(decode tokens/s, tokens) of one reply generated straight from the engine."""
    summary = [e for e in engine.chat([{"role": "user", "content": prompt}], settings) if isinstance(e, Summary)][0]
    return summary.decode_tokens_per_s, summary.tokens


async def tui_rate(
    engine: Engine,
    engine_thread,
    settings: GenerateSettings,
    prompt: str,
    store_dir: Path,
    timeout: float,
    app_updates: list[float],
) -> tuple[float, int]:
    """(decode tokens/s, tokens) of one reply generated through the chat app, from the Summary it got."""
    from edgespec.tui.app import ChatApp
    from edgespec.tui.chat_store import ChatStore
    from edgespec.tui.prompt import PromptBox
    from edgespec.tui.stats import ReplyFigures

    app = ChatApp(engine, settings, store=ChatStore(store_dir), engine_thread=engine_thread)
    updates = []
    drain = app._drain_events

    def counted_drain() -> None:
        if app._gen is not None and app._gen.stats.tokens:
            updates.append(time.perf_counter())
        drain()

    app._drain_events = counted_drain
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*prompt)
        typed = app.query_one(PromptBox).text
        if typed != prompt:
            raise click.ClickException(f"typing the prompt gave {typed!r}")
        await pilot.press("enter")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        def reply_stats() -> dict | None:
            messages = app.conversation.messages
            if app.generating or not messages or messages[-1]["role"] != "assistant":
                return None
            return messages[-1].get("stats")

        while (stats := reply_stats()) is None:
            if loop.time() > deadline:
                raise click.ClickException(f"no finished reply after {timeout:.0f} s")
            await asyncio.sleep(0.25)  # not pilot.pause: that drives the app, work `edgespec chat` does not do
    figures = ReplyFigures.from_saved(stats)
    if figures.error or not figures.summary.stop_reason:  # only the decoder's own Summary has a stop reason
        raise click.ClickException(f"the app's reply failed: {figures.error or 'no Summary reached the app'}")
    span = updates[-1] - updates[0] if len(updates) > 1 else 0.0
    app_updates.append((len(updates) - 1) / span if span else 0.0)
    return figures.summary.decode_tokens_per_s, figures.summary.tokens


def rounds(engine: Engine, engine_thread, settings: GenerateSettings, prompt: str, reps: int):
    """`reps` rounds of one direct reply and one through the app, after a warm-up round of each:
    ({"direct": [(tok/s, tokens)], "tui": [...]}, the app's reply updates a second per app reply)."""
    timeout = max(120.0, 2.0 * settings.max_tokens)
    runs: dict[str, list[tuple[float, int]]] = {"direct": [], "tui": []}
    hz: list[float] = []  # the app's reply updates a second, while tokens streamed
    with tempfile.TemporaryDirectory(prefix="edgespec-tui-throughput-") as tmp:
        store_dir = Path(tmp) / "chats"  # the app saves its chats here, not in the user's history

        def one_round() -> tuple[tuple[float, int], tuple[float, int]]:
            return (
                engine_thread.call(direct_rate, engine, settings, prompt),
                asyncio.run(tui_rate(engine, engine_thread, settings, prompt, store_dir, timeout, hz)),
            )

        click.echo(
            f"pair {engine.pair.name}, draft {settings.draft}, k {settings.policy}, max {settings.max_tokens} tokens, "
            f"{reps} rounds after a warm-up",
            err=True,
        )
        one_round()  # warm-up (calibration, allocations, Textual's first compose): not counted
        for i in range(reps):
            d, t = one_round()
            runs["direct"].append(d)
            runs["tui"].append(t)
            click.echo(
                f"round {i + 1}: direct {d[0]:.1f} tok/s ({d[1]} tokens), "
                f"tui {t[0]:.1f} tok/s ({t[1]} tokens, {hz[-1]:.1f} updates/s)",
                err=True,
            )
    return runs, hz


@click.command()
@pair_options
@decoding_options
@click.option("--prompt", default=PROMPT, show_default=True, help="The user message (one line: it is typed).")
@click.option("--max-tokens", type=click.IntRange(min=2), default=256, show_default=True)
@click.option("--reps", type=click.IntRange(min=1), default=5, show_default=True, help="Measured rounds.")
@error_boundary
@opens_engine()
def main(prompt, reps, options: EngineOptions):
    from edgespec.engine.engine_thread import EngineThread

    if "\n" in prompt:
        raise click.UsageError("--prompt must be one line (enter sends it)")
    checked = options.check()
    engine_thread = EngineThread()  # as in `edgespec chat`: one thread loads and generates
    engine, settings = engine_thread.call(checked.open)
    try:
        runs, hz = rounds(engine, engine_thread, settings, prompt, reps)
    finally:
        engine_thread.call(engine.close)
        engine_thread.shutdown()
    direct = statistics.median(r for r, _ in runs["direct"])
    tui = statistics.median(r for r, _ in runs["tui"])
    lengths = {n for rs in runs.values() for _, n in rs}
    print(
        f"decode tok/s, median of {reps}: direct {direct:.1f}, tui {tui:.1f}, "
        f"tui/direct {tui / direct if direct else float('nan'):.3f}; the app updated the reply "
        f"{statistics.median(hz[1:]):.1f} times a second"
    )
    if len(lengths) > 1:
        print(f"note: reply lengths differed between runs ({sorted(lengths)} tokens): sampled, or near-ties")


if __name__ == "__main__":
    main()
