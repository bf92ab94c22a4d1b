from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SDK_SERVER = Path(__file__).parents[1] / "integration" / "mcp" / "peers" / "sdk_server.py"


def load_sdk_server() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agentd_tests_sdk_server", SDK_SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sdk_server_module() -> ModuleType:
    """The peer built with the official `mcp` SDK (tests/integration/mcp/peers/sdk_server.py)."""
    return load_sdk_server()
