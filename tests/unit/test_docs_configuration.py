from __future__ import annotations

from pathlib import Path

from agentd.settings import reference_markdown


def test_configuration_reference_matches_settings() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    assert doc.endswith(reference_markdown()), "run: python -m agentd.settings"
