"""The configuration table of docs/configuration.md, made from the settings' fields."""

from __future__ import annotations

from datetime import timedelta

from agentd.settings.loading import Settings


def reference_markdown() -> str:
    """The configuration table of docs/configuration.md, generated so it cannot drift."""
    rows = ["| env var | default | meaning |", "|---|---|---|"]
    skip = {"agents", "mcp_servers", "schedules", "providers", "prices", "webhooks", "config"}
    for name, field in Settings.model_fields.items():
        if name in skip:
            continue
        default: object = field.default
        if field.default_factory is not None:
            default = (
                "(per user)" if name == "data_dir" else field.get_default(call_default_factory=True)
            )
        if default is None:
            shown = "unset"
        elif isinstance(default, list):
            shown = ",".join(str(x) for x in default) or "(none)"
        elif isinstance(default, timedelta):  # ISO 8601, as the variable is written
            whole_days = default.days and not default.seconds and not default.microseconds
            shown = f"P{default.days}D" if whole_days else f"PT{default.total_seconds():g}S"
        else:
            shown = str(default)
        rows.append(f"| `AGENTD_{name.upper()}` | `{shown}` | {field.description or ''} |")
    return "\n".join(rows) + "\n"
