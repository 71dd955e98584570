"""`edgespec chat`: a Textual app that shows where every token came from.

    app.py         the app: one conversation on screen, events batched into the UI by a timer
    actions.py     what its keys and command palette do
    generation.py  one reply in flight apart from the widgets: what is sent, the engine's worker
    pacing.py      how often the app repaints while a reply streams (a CPU budget)
    header.py      the subtitle: what every reply of this chat is made by
    transcript.py  messages and replies coloured by token source, notices, the legend
    stats.py       per-reply figures, live and then frozen, and the bar that shows them
    prompt.py      the prompt box
    read_while_typing.py
                   the next prompt, read on the engine's thread while its message is written
    details.py     F2: the last reply's K histogram, where its time went, what drafting gained
    chat_list.py   ctrl+o: the saved chats
    chat.tcss      the app's stylesheet
    chat_store.py  saved chats, one JSON file each; knows nothing of Textual

The click command is `edgespec.cli.chat`. The engine never imports this package.
"""
