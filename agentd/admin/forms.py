"""Admin input through the API's cleaning rules (`agentd.api.hygiene`), so both faces
refuse the same things: every query parameter and form field, and every JSON field."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import Request

from agentd.api import hygiene
from agentd.json_types import JSONValue

_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


class FormInvalid(Exception):
    """A field breaks a cleaning rule: answered 422 (render.on_invalid), nothing done."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _check(where: str, key: str, value: str) -> None:
    for text in (key, value):
        try:
            hygiene.check_text(text)
        except hygiene.Unclean as exc:
            # ascii(): a bad key is shown escaped, never echoed raw into the page
            raise FormInvalid(f"{where}.{ascii(key)[1:-1]}", str(exc)) from None


async def clean_input(request: Request) -> None:
    """Dependency of every admin router (after auth): all text the request carries in its
    query string and form body obeys `hygiene.check_text`, whatever the route reads."""
    for key, value in request.query_params.multi_items():
        _check("query", key, value)
    content_type = request.headers.get("content-type", "")
    if request.method == "POST" and content_type.startswith(_FORMS):
        form = await request.form()  # cached on the request: the handler reads it again
        for key, field in form.multi_items():
            if isinstance(field, str):
                _check("form", key, field)


def json_field(name: str, text: str) -> JSONValue:
    """The JSON value of form field `name`. FormInvalid when it breaks a cleaning rule;
    ValueError (bad syntax) is left to the caller, which shows it as a message."""
    try:
        return hygiene.parse_json(text)
    except hygiene.Unclean as exc:
        raise FormInvalid(f"form.{name}", str(exc)) from None


def text_field(form: Mapping[str, object], name: str) -> str:
    """Form field `name` as stripped text ("" when absent or a file)."""
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""
