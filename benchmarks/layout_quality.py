"""The quality table of a GGUF target's candidate layouts, as edgespec ships it for the built-in
pair (edgespec/data/layout_quality.json): each layout of `models.layouts.CANDIDATES` against the
published file, on held-out text, by the rule of `quality/perplexity.py`.

Quality belongs to the file, not to the machine, so it is measured once, here; `models pull` and
`models tune` on a user's machine measure only speed, and only of the layouts that qualify. Results
are merged into the existing table: one entry per source sha256, whose layouts a later run with
--layouts adds to or replaces, and whose `meta` lists every run that made it.

    .venv/bin/python benchmarks/layout_quality.py --json edgespec/data/layout_quality.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.models import layouts
from edgespec.models.config import load_registry
from edgespec.models.machine_layout import derived_model
from edgespec.models.store import Store
from edgespec.quality.perplexity import HELDOUT_TEXT, RULE, Reference, heldout_documents, measure_quality
from edgespec.util.provenance import provenance

sys.path.insert(0, str(Path(__file__).parent))
from result_file import write_result  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default=None, help="a pair whose GGUF target is measured (default: the default pair)")
    parser.add_argument("--layouts", default=None, help="comma-separated candidate layouts (default: all)")
    parser.add_argument("--json", type=Path, required=True, help="the table to write (merged into an existing one)")
    args = parser.parse_args(argv)
    pair = load_registry().pair(args.pair)
    chosen = layouts.CANDIDATES if args.layouts is None else [layouts.candidate(n) for n in args.layouts.split(",")]
    store = Store()
    source = store.ensure(pair.target, pair.name)
    sha = pair.target.sha256 or store.sha256(source)
    published = LlamaCppBackend(source, pair.context)
    documents = heldout_documents(published)
    print(f"{pair.target.name}: {sum(map(len, documents))} tokens of held-out text in {len(documents)} documents")
    reference = Reference(published, documents)
    rows = {}
    try:
        for layout in chosen:
            model = derived_model(pair.target, sha, layout.name)
            path = store.pull(model)
            candidate = LlamaCppBackend(path, pair.context)
            try:
                quality = measure_quality(reference, candidate)
            finally:
                candidate.close()
            rows[layout.name] = {"what": layout.describe(), **quality.to_dict()}
            verdict = "qualifies" if quality.qualifies else "does not qualify"
            print(f"{layout.name}: {quality.text()}: {verdict}", flush=True)
    finally:
        published.close()
    table = json.loads(args.json.read_text()) if args.json.exists() else {"files": {}}
    table["rule"] = RULE
    table["text"] = {
        "file": "edgespec/data/" + HELDOUT_TEXT.name,
        "sha256": hashlib.sha256(HELDOUT_TEXT.read_bytes()).hexdigest(),
        "tokens": sum(map(len, documents)),
    }
    entry = table["files"].get(sha, {})
    runs = [*entry.get("meta", []), provenance()]  # every run that measured some of these layouts
    table["files"][sha] = {"model": pair.target.name, "meta": runs, "layouts": {**entry.get("layouts", {}), **rows}}
    write_result(args.json, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
