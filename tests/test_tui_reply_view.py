"""The chat's reply view: finished lines frozen in blocks while a reply streams."""

from __future__ import annotations

import pytest
from textual.app import App

from edgespec.tui.transcript import ReplyView


@pytest.mark.asyncio
async def test_lines_that_streamed_in_before_the_view_was_mounted_are_frozen_at_the_mount():
    """A busy machine can fold the whole stream (up to a pause) before the view is mounted, and a
    paused stream brings no next update: the mount itself must freeze what is there."""
    spans = [["target", f"line {i}: value = compute({i})\n"] for i in range(2 * ReplyView.FREEZE_SPANS + 8)]

    class One(App):
        def compose(self):
            view = ReplyView({"role": "assistant", "content": "", "spans": spans}, generating=True)
            view.update_tokens()  # not mounted yet: nowhere to put a block
            assert not view._blocks
            yield view

    async with One().run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        view = pilot.app.query_one(ReplyView)
        assert view._blocks, "finished lines should be frozen once the view is mounted"
        frozen = "".join(block.content.plain for block in view._blocks)
        assert frozen + view.tokens.content.plain.rstrip("▍") == "".join(text for _, text in spans)
