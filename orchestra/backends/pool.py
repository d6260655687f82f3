"""The expert pool B from the registry file and params: the builtin experts alone, or every expert."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from orchestra.backends.base import BackendRegistry, registry_from_params
from orchestra.backends.builtin import builtin_factory
from orchestra.backends.registry import expert_specs, registry_for
from orchestra.config import AgentParams, ProviderSpec

__all__ = ["backend_pool", "builtin_backends"]


def builtin_backends(agent: AgentParams) -> BackendRegistry:
    """The builtin experts of the pool (the registry file's, with ``agent.backends`` on top)."""
    reg = registry_for(agent)
    specs = {k: v for k, v in expert_specs(agent, reg).items() if v.kind == "builtin"}
    return registry_from_params(specs, {"builtin": partial(builtin_factory, routines=reg.routines())})


def backend_pool(agent: AgentParams, providers: Mapping[str, ProviderSpec]) -> BackendRegistry:
    """The whole pool B (the registry file's experts, with ``agent.backends`` on top): builtin experts,
    and ``openai``/``transformers`` experts on the chat client their provider names (clients are
    built, nothing is called)."""
    from orchestra.backends.openai_backend import openai_factory

    reg = registry_for(agent)
    lm = openai_factory(providers)
    builtin = partial(builtin_factory, routines=reg.routines())
    return registry_from_params(
        expert_specs(agent, reg), {"builtin": builtin, "openai": lm, "transformers": lm}
    )
