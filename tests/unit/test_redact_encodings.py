"""Every encoding of a known secret the wire-log redaction promises to see, at every place.

Each case encodes the secret (or what is left of it: its first characters dropped, its end
cut) one way, puts it at the start, middle or end of a text, and checks with an independent
decoder for that encoding that nothing of the secret 12 characters or longer survives, and
that the text around it does.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Iterator

import pytest

from agentd import redact

SECRET = "sk-proj-Q7vLx2mN9pR4tK8wZ1cY5hJ3bF6gD0aE"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _wrapped(s: str, width: int) -> str:
    return "\r\n".join(s[i : i + width] for i in range(0, len(s), width))


# name -> (encode the secret, decode a text back to what a reader could recover)
ENCODINGS: dict[str, tuple[Callable[[str], str], Callable[[str], str]]] = {
    "raw": (lambda s: s, lambda t: t),
    "first char dropped": (lambda s: s[1:], lambda t: t),
    "first three dropped": (lambda s: s[3:], lambda t: t),
    "end cut": (lambda s: s[:20], lambda t: t),
    "html entity first char": (lambda s: f"&#x{ord(s[0]):x};{s[1:]}", html.unescape),
    "html entities decimal": (lambda s: "".join(f"&#{ord(c)};" for c in s), html.unescape),
    "html entities hex": (lambda s: "".join(f"&#X{ord(c):X};" for c in s), html.unescape),
    "percent every char": (
        lambda s: "".join(f"%{ord(c):02x}" for c in s),
        lambda t: re.sub(r"%([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), t),
    ),
    "utf-7": (
        lambda s: s.encode("utf-7").decode(),
        lambda t: t.encode().decode("utf-7", "replace"),
    ),
    "utf-7 all encoded": (
        lambda s: "+" + _b64(s.encode("utf-16-be")).rstrip("=") + "-",
        lambda t: t.encode().decode("utf-7", "replace"),
    ),
    "utf-16-le as text": (
        lambda s: s.encode("utf-16-le").decode("latin-1"),
        lambda t: t.replace("\x00", ""),
    ),
    "utf-16 with bom as utf-8": (
        lambda s: s.encode("utf-16").decode("utf-8", "replace"),
        lambda t: t.replace("\x00", ""),
    ),
    "utf-16-be as text": (
        lambda s: s.encode("utf-16-be").decode("latin-1"),
        lambda t: t.replace("\x00", ""),
    ),
    "base64": (lambda s: _b64(s.encode()), lambda t: _all_b64(t)),
    "base64 offset": (lambda s: _b64(b"user=" + s.encode()), lambda t: _all_b64(t)),
    "base64 wrapped 76": (
        lambda s: _wrapped(_b64(b"a long preamble of some header bytes " + s.encode() * 2), 76),
        lambda t: _all_b64(re.sub(r"\r?\n", "", t)),
    ),
    "base64 wrapped 64": (
        lambda s: _wrapped(_b64(b"Authorization: Bearer " + s.encode() + b"\n"), 64),
        lambda t: _all_b64(re.sub(r"\r?\n", "", t)),
    ),
    "base64 of base64": (
        lambda s: _b64(_b64(s.encode()).encode()),
        lambda t: _all_b64("\n".join(_b64_decoded(t))),
    ),
    "base64 of base64 offset": (
        lambda s: _b64(_b64(b"key:" + s.encode()).encode()),
        lambda t: _all_b64("\n".join(_b64_decoded(t))),
    ),
    "hex": (lambda s: s.encode().hex(), lambda t: _unhex(t)),
    "HEX": (lambda s: s.encode().hex().upper(), lambda t: _unhex(t)),
    "base32": (lambda s: base64.b32encode(s.encode()).decode(), lambda t: _all_b32(t)),
    "base32 offset": (
        lambda s: base64.b32encode(b"xy" + s.encode()).decode(),
        lambda t: _all_b32(t),
    ),
    "reversed": (lambda s: s[::-1], lambda t: t[::-1]),
    "spaced": (lambda s: " ".join(s), lambda t: t.replace(" ", "")),
}


def _b64_decoded(t: str) -> Iterator[str]:
    for run in re.findall(r"[A-Za-z0-9+/=_-]{8,}", t):
        for drop in range(4):
            tail = run[drop:].rstrip("=")
            for alt in (None, b"-_"):
                try:
                    raw = base64.b64decode(tail + "=" * (-len(tail) % 4), altchars=alt)
                except ValueError:
                    continue
                yield raw.decode("latin-1")


def _all_b64(t: str) -> str:
    return "\n".join([t, *_b64_decoded(t)])


def _all_b32(t: str) -> str:
    out = [t]
    for run in re.findall(r"[A-Z2-7=]{8,}", t):
        for drop in range(8):
            tail = run[drop:].rstrip("=")
            tail = tail[: len(tail) - len(tail) % 8]
            try:
                out.append(base64.b32decode(tail).decode("latin-1"))
            except ValueError:
                continue
    return "\n".join(out)


def _unhex(t: str) -> str:
    out = [t]
    for run in re.findall(r"[0-9a-fA-F]{8,}", t):
        for drop in range(2):
            part = run[drop:]
            out.append(bytes.fromhex(part[: len(part) - len(part) % 2]).decode("latin-1"))
    return "\n".join(out)


def _leaks(decoded: str, secret: str) -> list[str]:
    """Pieces of the secret, 12 characters or longer, that a reader recovers."""
    return [secret[i : i + 12] for i in range(len(secret) - 11) if secret[i : i + 12] in decoded]


@pytest.fixture(autouse=True)
def _known(known_secrets: redact.KnownSecrets) -> None:
    known_secrets.remember(SECRET)


@pytest.mark.parametrize("where", ["start", "middle", "end", "json"])
@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_every_encoding_of_a_known_secret_is_masked(name: str, where: str) -> None:
    encode, decode = ENCODINGS[name]
    enc = encode(SECRET)
    assert _leaks(decode(enc), SECRET), "the case must expose the secret unmasked"
    if where == "start":
        value = f"{enc}\nAFTER words"
    elif where == "middle":
        value = f"BEFORE words: {enc}\nAFTER words"
    elif where == "end":
        value = f"BEFORE words: {enc}"
    else:  # inside a JSON error body, as a provider sends it (JSON-escaped)
        import json

        value = json.dumps({"error": {"message": f"BEFORE words: {enc}\nAFTER words"}})
    out = redact.text(value)
    import json as _json

    readable = decode(_json.loads(out)["error"]["message"]) if where == "json" else decode(out)
    assert _leaks(readable, SECRET) == [], out
    assert redact.MASK in out
    if where in ("middle", "end", "json"):
        assert "BEFORE words:" in out
    if where in ("start", "middle", "json"):
        assert "AFTER words" in out


@pytest.mark.parametrize("name", ["hex", "base64", "spaced", "utf-7 all encoded"])
def test_response_headers_are_masked_in_every_encoding(name: str) -> None:
    encode, decode = ENCODINGS[name]
    out = redact.headers({"X-Debug-Echo": f"key {encode(SECRET)}", "Content-Type": "text/plain"})
    assert _leaks(decode(out["X-Debug-Echo"]), SECRET) == []
    assert out["Content-Type"] == "text/plain"


def test_a_url_userinfo_password_is_masked_and_the_user_kept() -> None:
    out = redact.text("POST https://hooks:pa55-w0rd@example.test/in failed")
    assert out == f"POST https://hooks:{redact.MASK}@example.test/in failed"


def test_ordinary_text_with_short_pieces_of_a_secret_is_kept() -> None:
    # Fewer than 12 characters of the secret, in any form, is not the secret.
    value = f"{SECRET[:8]} {SECRET[-8:]} {SECRET[4:14][::-1]} deadbeef cafebabe"
    assert redact.text(value) == value


@pytest.mark.parametrize("charset", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_a_wire_body_in_its_declared_charset_is_read_as_text_and_masked(charset: str) -> None:
    from agentd.llm.client import _Capture

    capture = _Capture()
    capture.charset = charset
    capture.add(f'{{"error": "bad key {SECRET}"}}'.encode(charset))
    body = capture.text()
    assert SECRET in body  # read as text, not as NUL-strewn bytes
    assert redact.text(body) == f'{{"error": "bad key {redact.MASK}"}}'
