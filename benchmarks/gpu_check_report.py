"""The GPU check's report (benchmarks/gpu_check.py): its tables as text, and its JSON."""

from __future__ import annotations

from dataclasses import asdict

from gpu_check_plan import CheckPlan
from gpu_check_runs import DecodeResult


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    rows = [header] + rows
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(rows[0]), line(tuple("-" * w for w in widths))] + [line(r) for r in rows[1:]])


def render(plan: CheckPlan, report: dict) -> str:
    sides = report["sides"]
    head = (
        f"edgespec gpu_check on {report['device']}: target {plan.target}, draft {plan.draft} (random weights, "
        f"rule-following), prompt {plan.prompt} tokens, {plan.tokens} generated per run, greedy; "
        f"total {report['seconds']:.0f} s"
    )
    setup = "setup: " + "; ".join(f"{what} {s:.0f} s" for what, s in report["setup"].items())
    if "llama.cpp left out" in report:
        setup += f"\nllama.cpp left out: {report['llama.cpp left out']}"
    verify = table(
        ("verify ms, n =",) + tuple(str(n) for n in plan.verify_ns),
        [(label,) + tuple(f"{s['verify_ms'][n]:.1f}" for n in plan.verify_ns) for label, s in sides.items()],
    )
    plain = "\n".join(
        f"{label}: draft step {s['draft_ms']:.2f} ms; ar {s['ar'].tok_s:.1f} tok/s, host {s['ar'].host_ms:.2f} "
        f"ms/pass, follows the target's rule {s['ar'].follows_rule:.3f}"
        + (f"; runs on {s['placement']}" if "placement" in s else "")
        for label, s in sides.items()
    )
    rows = []
    for label, s in sides.items():
        ar = s["ar"].tok_s
        for a, r in s["accept"].items():
            if r is None:
                rows.append((label, f"{a:g}", "skipped: over the time budget") + ("",) * 6)
                continue
            fixed = ", ".join(f"k={k} {f.tok_s:.1f} ({f.tok_s / ar:.2f}x)" for k, f in r["fixed"].items())
            auto = r["auto"]
            hist = ",".join(f"{k}:{n}" for k, n in sorted(auto.k_hist.items()))
            assisted = r["assisted"]
            rows.append(
                (
                    label,
                    f"{a:g}",
                    f"{r['measured_a']:.2f}",
                    fixed,
                    f"{auto.tok_s:.1f}",
                    f"{auto.k_used} ({hist}); K* {r['k_star']}",
                    f"{r['predicted_speedup']:.2f}x",
                    f"{r['measured_speedup']:.2f}x",
                    f"{assisted['tok_s']:.1f} ({assisted['speedup']:.2f}x)" if assisted else "-",
                )
            )
    decode = table(
        (
            "backend",
            "a",
            "measured a",
            "fixed K tok/s",
            "auto tok/s",
            "auto K used (passes); best K*",
            "auto predicted",
            "auto measured",
            "hf-assisted tok/s",
        ),
        rows,
    )
    return "\n\n".join([head, setup, verify, plain, decode])


def json_default(value):
    """A decode run with its derived figures; anything else JSON cannot hold as its text."""
    if isinstance(value, DecodeResult):
        return {**asdict(value), "tok_s": value.tok_s, "acceptance": value.acceptance, "k_used": value.k_used}
    return str(value)
