"""Actions on a loop from its admin page: lifecycle buttons, the State editor, sending a
message, fork and regenerate at a message, and approval decisions. Each answers 303 with a
flash message; a refused transition is a message on the page, never an error page."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from fastapi import APIRouter, Request
from fastapi.responses import Response

from agentd.admin import forms, render
from agentd.admin.loops import parse_uuid
from agentd.api.state import AppState
from agentd.db.pool import connection
from agentd.engine import loop_state
from agentd.errors import AgentdError, BadRequest, DatabaseError, PreconditionFailed
from agentd.states import InputMode, LoopInputStatus
from agentd.store import loops, tool_calls

router = APIRouter(prefix="/admin")

ACTIONS = ("pause", "resume", "stop", "freeze", "unfreeze", "observe", "unobserve")


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.agentd
    return state


def _actor(request: Request) -> str:
    """Who acts, as decisions and sends record it: `admin:<token name>`."""
    session = getattr(request.state, "admin_session", None)
    return f"admin:{getattr(session, 'name', None) or 'operator'}"


def _limit(form: Mapping[str, object], name: str) -> int | None:
    """An optional positive whole number from the resume form (blank: unchanged)."""
    raw = forms.text_field(form, name).replace(",", "").replace("_", "")
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1 or len(raw) > 13:
        raise BadRequest(f"{name} must be a whole number of at least 1; got {raw[:40]!r}")
    return int(raw)


def _money(form: Mapping[str, object], name: str) -> Decimal | None:
    """An optional positive amount in USD from the resume form (blank: unchanged)."""
    raw = forms.text_field(form, name).replace(",", "").replace("_", "").lstrip("$")
    if not raw:
        return None
    try:
        value = Decimal(raw) if len(raw) <= 20 else None
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value <= 0 or value > Decimal("1e9"):
        raise BadRequest(f"{name} must be an amount in USD above 0; got {raw[:40]!r}")
    return value


_DONE = {
    "pause": "Paused.",
    "resume": "Resumed.",
    "stop": "Stopped.",
    "freeze": "Frozen: no new work will be claimed until unfrozen.",
    "unfreeze": "Unfrozen.",
    "observe": "Observing: turns stream live.",
    "unobserve": "No longer observed.",
}


@router.post("/loops/{loop_id}/actions/{action}", include_in_schema=False)
async def loop_action(request: Request, loop_id: str, action: str) -> Response:
    state = _state(request)
    ident = parse_uuid(loop_id)
    if ident is None:
        return render.redirect(request, "/admin/loops", flash=("error", f"No loop {loop_id!r}."))
    back = f"/admin/loops/{ident}"
    if action not in ACTIONS:
        return render.redirect(request, back, flash=("error", f"Unknown action {action!r}."))
    lc = state.lifecycle
    try:
        if action == "pause":
            await lc.pause(ident)
        elif action == "resume":
            form = await request.form()
            wanted = [s.strip() for s in forms.text_field(form, "from").split(",") if s.strip()]
            await lc.resume(
                ident,
                from_=wanted or None,
                max_steps=_limit(form, "max_steps"),
                max_tokens_total=_limit(form, "max_tokens_total"),
                max_cost=_money(form, "max_cost"),
            )
        elif action == "stop":
            await lc.stop(ident)
        elif action == "freeze":
            await lc.freeze(ident)
        elif action == "unfreeze":
            await lc.unfreeze(ident)
        else:
            await lc.observe(ident, action == "observe")
    except DatabaseError:
        raise  # an outage or a bug, not a mistake in the form: the API's handlers answer
    except AgentdError as exc:
        return render.redirect(request, back, flash=("error", exc.message))
    return render.redirect(request, back, flash=("ok", _DONE[action]))


@router.post("/loops/{loop_id}/state", include_in_schema=False)
async def save_state(request: Request, loop_id: str) -> Response:
    """The State tab's editor: the edited JSON becomes a merge patch against the version the
    page showed, so a change made meanwhile by anyone else is never overwritten."""
    state = _state(request)
    ident = parse_uuid(loop_id)
    if ident is None:
        return render.redirect(request, "/admin/loops", flash=("error", f"No loop {loop_id!r}."))
    back = f"/admin/loops/{ident}?tab=state"
    form = await request.form()
    version = forms.text_field(form, "version")
    try:
        edited = forms.json_field("state", forms.text_field(form, "state") or "{}")
    except ValueError:
        return render.redirect(request, back, flash=("error", "State is not JSON."))
    if not isinstance(edited, dict) or not version.isdigit() or len(version) > 18:
        return render.redirect(request, back, flash=("error", "State must be a JSON object."))
    async with connection(state.pool) as conn:
        current = await loops.get(conn, loop_id=ident)
    if current is None:
        return render.redirect(request, "/admin/loops", flash=("error", f"No loop {ident}."))
    try:
        patch = loop_state.diff(current.state, edited)
        row, changed = await loop_state.patch(
            state.pool,
            ident,
            patch,
            if_match=int(version),
            by="admin",
            max_bytes=state.settings.max_state_bytes,
        )
    except ValueError as exc:
        return render.redirect(request, back, flash=("error", str(exc)))
    except DatabaseError:
        raise  # an outage or a bug, not a mistake in the form: the API's handlers answer
    except AgentdError as exc:
        if isinstance(exc, PreconditionFailed):
            msg = "The state changed since this page loaded; reload and edit again."
            return render.redirect(request, back, flash=("error", msg))
        return render.redirect(request, back, flash=("error", exc.message))
    if not changed:
        return render.redirect(request, back, flash=("ok", "Nothing changed."))
    return render.redirect(
        request, back, flash=("ok", f"State saved (version {row.state_version}).")
    )


@router.post("/loops/{loop_id}/messages", include_in_schema=False)
async def continue_loop(request: Request, loop_id: str) -> Response:
    state = _state(request)
    ident = parse_uuid(loop_id)
    if ident is None:
        return render.redirect(request, "/admin/loops", flash=("error", f"No loop {loop_id!r}."))
    back = f"/admin/loops/{ident}"
    form = await request.form()
    mode = forms.text_field(form, "mode") or InputMode.QUEUE
    if mode not in {str(m) for m in InputMode}:
        return render.redirect(request, back, flash=("error", f"Unknown mode {mode!r}."))
    try:
        sent = await state.lifecycle.send(
            ident, forms.text_field(form, "content"), mode=mode, sent_by=_actor(request)
        )
    except DatabaseError:
        raise  # an outage or a bug, not a mistake in the form: the API's handlers answer
    except AgentdError as exc:
        return render.redirect(request, back, flash=("error", exc.message))
    if sent.input.status == LoopInputStatus.APPLIED:
        done = "the turn in flight was interrupted" if mode == InputMode.INTERRUPT else None
        text = f"Message added; {done or 'the loop continues'}."
    elif mode == InputMode.INJECT:
        text = "Message queued; the model sees it when its next turn starts."
    else:
        text = "Message queued; the loop continues with it when the current run ends."
    return render.redirect(request, back, flash=("ok", text))


@router.post("/loops/{loop_id}/messages/{message_id}/{action}", include_in_schema=False)
async def message_action(request: Request, loop_id: str, message_id: str, action: str) -> Response:
    """Fork the loop at a message, or regenerate from it (later messages are superseded)."""
    state = _state(request)
    ident = parse_uuid(loop_id)
    if ident is None:
        return render.redirect(request, "/admin/loops", flash=("error", f"No loop {loop_id!r}."))
    back = f"/admin/loops/{ident}"
    if action not in ("fork", "regenerate") or not message_id.isdigit() or len(message_id) > 18:
        return render.redirect(request, back, flash=("error", "Unknown message action."))
    try:
        if action == "fork":
            new = await state.lifecycle.fork(ident, int(message_id))
        else:
            await state.lifecycle.regenerate(ident, int(message_id))
    except DatabaseError:
        raise  # an outage or a bug, not a mistake in the form: the API's handlers answer
    except AgentdError as exc:
        return render.redirect(request, back, flash=("error", exc.message))
    if action == "fork":
        return render.redirect(
            request,
            f"/admin/loops/{new.id}",
            flash=("ok", f"Forked at message {message_id}: a paused copy; resume it to run."),
        )
    return render.redirect(
        request,
        back,
        flash=("ok", f"Regenerating after message {message_id}; later messages are superseded."),
    )


@router.post("/tool-calls/{tool_call_id}/approve", include_in_schema=False)
async def approve(request: Request, tool_call_id: str) -> Response:
    return await _decide(request, tool_call_id, "approve")


@router.post("/tool-calls/{tool_call_id}/deny", include_in_schema=False)
async def deny(request: Request, tool_call_id: str) -> Response:
    return await _decide(request, tool_call_id, "deny")


async def _decide(request: Request, tool_call_id: str, decision: str) -> Response:
    state = _state(request)
    if not tool_call_id.isdigit() or len(tool_call_id) > 18:
        return render.redirect(
            request, "/admin/loops", flash=("error", f"No tool call {tool_call_id!r}.")
        )
    async with connection(state.pool) as conn:
        call = await tool_calls.get(conn, tool_call_id=int(tool_call_id))
    if call is None:
        return render.redirect(
            request, "/admin/loops", flash=("error", f"No tool call {tool_call_id}.")
        )
    back = f"/admin/loops/{call.loop_id}"
    form = await request.form()
    arguments = None
    text = forms.text_field(form, "arguments") if decision == "approve" else ""
    if text:
        # The approve form always carries the arguments (prefilled with the model's): equal
        # ones are a plain approval, edited ones are checked against the tool's schema.
        try:
            arguments = forms.json_field("arguments", text)
        except ValueError:
            return render.redirect(request, back, flash=("error", "Arguments are not JSON."))
        if not isinstance(arguments, dict):
            return render.redirect(
                request, back, flash=("error", "Arguments must be a JSON object.")
            )
    try:
        decided = await state.lifecycle.decide(
            call.id,
            approve=decision == "approve",
            reason=forms.text_field(form, "reason") or None,
            decided_by=_actor(request),
            arguments=arguments,
        )
    except DatabaseError:
        raise  # an outage or a bug, not a mistake in the form: the API's handlers answer
    except AgentdError as exc:
        return render.redirect(request, back, flash=("error", exc.message))
    if decided.approved_arguments is not None and arguments is not None:
        return render.redirect(
            request,
            back,
            flash=("ok", f"Approved {call.name} (call {call.id}) with edited arguments."),
        )
    verb = "Approved" if decision == "approve" else "Denied"
    return render.redirect(request, back, flash=("ok", f"{verb} {call.name} (call {call.id})."))
