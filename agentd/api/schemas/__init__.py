"""Request and response bodies of the REST API (pydantic, so /openapi.json is exact).

One module per subject; every name is re-exported here, so `from agentd.api.schemas
import LoopOut` is the way to use them.
"""

from __future__ import annotations

from agentd.api.schemas.agents import (
    AgentOut,
    AgentUpgradeOut,
    AgentVersionOut,
    LoopUpgradeOut,
    UpgradeAgent,
    UpgradeLoop,
)
from agentd.api.schemas.base import (
    Bool,
    CleanStr,
    Int,
    IsoDatetime,
    JsonObject,
    Money,
    NonBlank,
    Page,
    Tokens,
    Usd,
)
from agentd.api.schemas.fleet import (
    AgentCostOut,
    ConcurrencyKeyOut,
    CostsOut,
    ModelCostOut,
    ProviderOut,
    ProvidersOut,
)
from agentd.api.schemas.loops import (
    AppendMessage,
    AtMessage,
    Concurrency,
    ForkedFrom,
    ForkLoop,
    LoopOut,
    Observe,
    Resume,
    SentMessageOut,
    SentOut,
    Speed,
    StartLoop,
)
from agentd.api.schemas.messages import EventOut, MessageOut, render_messages
from agentd.api.schemas.tool_calls import (
    Approval,
    Decision,
    InputAnswer,
    InputAnswerItem,
    InputRequestItem,
    InputRequestOut,
    ToolCallOut,
)

__all__ = [
    "AgentCostOut",
    "AgentOut",
    "AgentUpgradeOut",
    "AgentVersionOut",
    "AppendMessage",
    "Approval",
    "AtMessage",
    "Bool",
    "CleanStr",
    "Concurrency",
    "ConcurrencyKeyOut",
    "CostsOut",
    "Decision",
    "EventOut",
    "ForkLoop",
    "ForkedFrom",
    "InputAnswer",
    "InputAnswerItem",
    "InputRequestItem",
    "InputRequestOut",
    "Int",
    "IsoDatetime",
    "JsonObject",
    "LoopOut",
    "LoopUpgradeOut",
    "MessageOut",
    "ModelCostOut",
    "Money",
    "NonBlank",
    "Observe",
    "Page",
    "ProviderOut",
    "ProvidersOut",
    "Resume",
    "SentMessageOut",
    "SentOut",
    "Speed",
    "StartLoop",
    "Tokens",
    "ToolCallOut",
    "UpgradeAgent",
    "UpgradeLoop",
    "Usd",
    "render_messages",
]
