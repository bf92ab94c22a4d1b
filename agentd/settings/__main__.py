"""`python -m agentd.settings`: print the configuration table of docs/configuration.md."""

from __future__ import annotations

from agentd.settings.reference import reference_markdown

if __name__ == "__main__":
    print(reference_markdown(), end="")
