"""The exact secret values one process knows: a `KnownSecrets` its runtime owns.

The engine (engine/service.py) and the API (api/app.py) each own one (`agentd up` shares
one between them), fill it with the configured secrets at start (agentd/known_secrets.py),
and add the ones they meet (a provider key, a per-loop MCP token). A `Snapshot` is
immutable: `remember` builds the next one and swaps it in, so a reader (another thread, a
redaction in flight) always iterates one consistent set.

The owner also installs its set (`installed`) for the tasks it runs, so that code deep in
the stack — the store's transcript writes, the log processor, an MCP transport — reaches
it without a parameter through every layer between: an asyncio task inherits the set
installed when it was created, and a task or test that installed none has none (nothing
known is masked there, and nothing remembered there outlives it).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from agentd.redact.forms import Forms, Linear
from agentd.redact.patterns import FIXED_NEEDLES, JSON_ESCAPED, MAX_KNOWN, MIN_SECRET


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One consistent state of a set of known secrets, each with its forms (`Forms`), and
    the forms gathered for the searches: computed once when the set changes."""

    forms: Mapping[str, Forms]
    pinned: frozenset[str]
    linear: tuple[Linear, ...]
    hexa: tuple[Linear, ...]
    nul_linear: tuple[Linear, ...]
    runs: tuple[tuple[str, frozenset[str]], ...]
    # Only `needles` are searched in every text. The encoded forms (`hexa`, `runs`) are
    # searched in its runs of base64 characters only (forms.run_text); the NUL forms where
    # a NUL is (or its JSON escape `\u0000`, which patterns.not_plain sees).
    needles: tuple[str, ...]
    whole_ok: bool  # no needle holds a character JSON escapes (see `json_is_clean`)

    @classmethod
    def of(cls, forms: dict[str, Forms], pinned: frozenset[str]) -> Snapshot:
        linear = {n: (n, f, o) for fs in forms.values() for n, f, o in fs.linear}
        hexa = {n: (n, f, o) for fs in forms.values() for n, f, o in fs.hexa}
        nul = {n: (n, f, o) for fs in forms.values() for n, f, o in fs.nul}
        runs = {n: (n, a) for fs in forms.values() for n, a in fs.runs}
        needles = dict.fromkeys(FIXED_NEEDLES)
        needles.update(dict.fromkeys(linear))
        return cls(
            forms=MappingProxyType(forms),
            pinned=pinned,
            linear=tuple(linear.values()),
            hexa=tuple(hexa.values()),
            nul_linear=tuple(nul.values()),
            runs=tuple(runs.values()),
            needles=tuple(needles),
            whole_ok=not any(JSON_ESCAPED.search(n) for n in (*needles, *hexa, *runs)),
        )


EMPTY = Snapshot.of({}, frozenset())


class KnownSecrets:
    """The secret values a process masks wherever it redacts text, in any encoding."""

    __slots__ = ("_lock", "snapshot")

    def __init__(self, *values: str | None) -> None:
        self.snapshot = EMPTY
        self._lock = threading.Lock()  # two remembers at once must not drop either's values
        if values:
            self.remember(*values)

    def remember(self, *values: str | None, pin: bool = False) -> None:
        """Mask these exact values (and every encoding of them) from now on. `pin`: a
        configured secret (API tokens, env keys), never evicted by per-loop ones."""
        with self._lock:
            old = self.snapshot
            fresh = [v for v in values if v and len(v) >= MIN_SECRET and v not in old.forms]
            if not fresh:
                if pin and any(v and v in old.forms and v not in old.pinned for v in values):
                    extra = {v for v in values if v and v in old.forms}
                    self.snapshot = Snapshot.of(dict(old.forms), old.pinned | extra)
                return
            forms = dict(old.forms)
            for v in dict.fromkeys(fresh):
                forms[v] = Forms(v)
            pinned = old.pinned | set(fresh) if pin else old.pinned
            # Per-loop secrets (a key from a loop's state) must not grow this without bound.
            for gone in [k for k in forms if k not in pinned][: max(0, len(forms) - MAX_KNOWN)]:
                del forms[gone]
            self.snapshot = Snapshot.of(forms, pinned)

    def __contains__(self, value: object) -> bool:
        return value in self.snapshot.forms

    def __len__(self) -> int:
        return len(self.snapshot.forms)

    def __repr__(self) -> str:  # never the values
        return f"<KnownSecrets: {len(self)} known>"


_installed: contextvars.ContextVar[KnownSecrets | None] = contextvars.ContextVar(
    "agentd_known_secrets", default=None
)


@contextlib.contextmanager
def installed(secrets: KnownSecrets) -> Iterator[KnownSecrets]:
    """Inside (and in every task created inside), redaction masks `secrets` and
    `current()` is it."""
    token = _installed.set(secrets)
    try:
        yield secrets
    finally:
        _installed.reset(token)


def current() -> KnownSecrets:
    """The set the running task's owner installed; without one, a new empty set that no
    one else sees (what is remembered in it is masked nowhere)."""
    known = _installed.get()
    return known if known is not None else KnownSecrets()


def snapshot(known: KnownSecrets | None = None) -> Snapshot:
    """`known`'s state, else the installed set's, else the empty one."""
    if known is None:
        known = _installed.get()
        if known is None:
            return EMPTY
    return known.snapshot
