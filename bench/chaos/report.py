"""The soak's summary table."""

from __future__ import annotations

from bench.chaos.soak import Result


def table(result: Result) -> str:
    f = result.findings
    rows = [("faults injected (total)", sum(result.faults.values()))]
    rows += [(f"  {k}", v) for k, v in sorted(result.faults.items())]
    rows += [
        ("loops", f.loops),
        *[(f"  {k}", v) for k, v in sorted(f.statuses.items())],
        *[(f"    {k}", v) for k, v in sorted(f.reasons.items())],
        ("turns (visible assistant messages)", f.turns),
        ("tool calls", f.tool_calls),
        ("external tool effects", f.effects),
        ("duplicate effects, same key (allowed)", f.duplicate_effects),
        ("duplicate answers / results (must be 0)", f.duplicate_messages + f.duplicate_results),
        ("loops lost (must be 0)", len(f.lost)),
        ("other violations (must be 0)", len(f.violations)),
        ("seconds", f"{result.seconds:.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines += [f"LOST: {x}" for x in f.lost[:20]]
    lines += [f"VIOLATION: {x}" for x in f.violations[:20]]
    lines += [f"NOTE: {x}" for x in result.notes]
    return "\n".join(lines)
