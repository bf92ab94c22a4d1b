"""Parse a /metrics body and check what the observability tests assert on."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
#: every label agentd may put on a series; anything else risks unbounded cardinality
ALLOWED_LABELS = {"agent", "model", "outcome", "type", "status", "queue", "case", "state", "le"}


class Scrape:
    def __init__(self, text: str) -> None:
        self.families = list(text_string_to_metric_families(text))
        self.samples = [s for f in self.families for s in f.samples]

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def value(self, name: str, **labels: str) -> float:
        """The sum of `name`'s samples whose labels include `labels`."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def assert_bounded(self) -> None:
        for s in self.samples:
            assert set(s.labels) <= ALLOWED_LABELS, (s.name, s.labels)
            for v in s.labels.values():
                assert not UUID.search(v), f"{s.name} carries an id label: {s.labels}"
