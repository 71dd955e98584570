"""`edgespec chat`: a Textual app that shows where every token came from.

Layout of this package: `app.py` holds the app and the generation loop (engine in a thread worker,
events batched into the UI by a timer) and `actions.py` what its keys and commands do; the
widgets live in small modules (`transcript.py`, `stats.py`, `prompt.py`, `details.py`,
`chat_list.py`); `history.py` is the conversation store and knows nothing of Textual; the click
command is `edgespec.cli.chat`. The engine never imports this package.
"""
