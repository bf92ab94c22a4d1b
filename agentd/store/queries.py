"""Loads the named queries of `store/sql/*.sql` once, at import.

Each block starts with `-- name: <table-noun>_<verb> :<one|many|val|exec>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType

_HEADER = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*:(one|many|val|exec)\s*$")


@dataclass(frozen=True)
class Query:
    name: str
    kind: str
    sql: str
    source: str


def _parse(text: str, source: str) -> dict[str, Query]:
    found: dict[str, Query] = {}
    name = kind = None
    body: list[str] = []

    def flush() -> None:
        if name is not None and kind is not None:
            sql = "\n".join(line for line in body if not line.lstrip().startswith("--")).strip()
            if name in found:
                raise ValueError(f"duplicate query name {name} in {source}")
            found[name] = Query(name, kind, sql.rstrip(";"), source)

    for line in text.splitlines():
        m = _HEADER.match(line.strip())
        if m:
            flush()
            name, kind = m.group(1), m.group(2)
            body = []
        else:
            body.append(line)
    flush()
    return found


def _load() -> MappingProxyType[str, Query]:
    out: dict[str, Query] = {}
    for entry in sorted(
        resources.files("agentd.store").joinpath("sql").iterdir(), key=lambda e: e.name
    ):
        if entry.name.endswith(".sql"):
            for q in _parse(entry.read_text(), entry.name).values():
                if q.name in out:
                    raise ValueError(f"query {q.name} defined twice")
                out[q.name] = q
    return MappingProxyType(out)


QUERIES = _load()


def sql(name: str) -> str:
    return QUERIES[name].sql
