from __future__ import annotations

import agentd


def test_all_is_sorted_and_exported() -> None:
    assert agentd.__all__ == sorted(agentd.__all__)
    for name in agentd.__all__:
        assert hasattr(agentd, name), name


def test_public_members_are_exactly_all() -> None:
    public = {n for n in vars(agentd) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(agentd, n)).__name__ == "module"}
    assert public - modules - {"annotations"} == set(agentd.__all__) - {"__version__"}
