"""The Pulumi SDK internals the offline tools use, in one place, behind a version guard.

The preview runs the program under the SDK's mock runtime and drives the policy pack over the
analyzer protocol, as the Pulumi CLI would. That needs a few parts of the Python SDK that are not
its public API (`pulumi.runtime.rpc`'s property (de)serialisation and signature keys, the mock
monitor, `run_in_stack`, `_sync_await`, the settings and config stores, the component provider
host's provider class, the input-type classes' plain dict form). They can change in any
release, so every module imports them from here, and importing this module with an SDK outside
the tested minor release fails with one line saying what to do.
"""

from __future__ import annotations

import importlib.metadata

TESTED_MINOR = "3.272"
"""The SDK minor release these internals were read from (pyproject pins pulumi to it)."""


def _check_version() -> str:
    found = importlib.metadata.version("pulumi")
    if ".".join(found.split(".")[:2]) != TESTED_MINOR:
        raise ImportError(
            f"pulumi {found} is installed but the offline tools use SDK internals read from pulumi "
            f"{TESTED_MINOR}.x (llm_pd_eks/pulumi_sdk.py): install the pinned SDK (`make venv`) or "
            "re-check those internals against the new release and move TESTED_MINOR"
        )
    return found


VERSION = _check_version()

# The internals, re-exported (after the guard, so an untested SDK never gets this far).
from pulumi._types import input_type_to_dict, is_input_type  # noqa: E402
from pulumi.provider import main as provider_main  # noqa: E402
from pulumi.provider.experimental.component import ComponentProvider  # noqa: E402
from pulumi.runtime import config as runtime_config  # noqa: E402
from pulumi.runtime import rpc, settings  # noqa: E402
from pulumi.runtime.mocks import MockMonitor  # noqa: E402
from pulumi.runtime.proto import (  # noqa: E402
    analyzer_pb2,
    analyzer_pb2_grpc,
    engine_pb2,
    engine_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
)
from pulumi.runtime.stack import run_in_stack  # noqa: E402
from pulumi.runtime.sync_await import _sync_await as sync_await  # noqa: E402

__all__ = [
    "TESTED_MINOR",
    "VERSION",
    "ComponentProvider",
    "MockMonitor",
    "analyzer_pb2",
    "analyzer_pb2_grpc",
    "engine_pb2",
    "engine_pb2_grpc",
    "input_type_to_dict",
    "is_input_type",
    "provider_main",
    "provider_pb2",
    "provider_pb2_grpc",
    "resource_pb2",
    "resource_pb2_grpc",
    "rpc",
    "run_in_stack",
    "runtime_config",
    "settings",
    "sync_await",
]
