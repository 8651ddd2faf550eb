"""The component package's provider: `LlmPdEks` served with the schema typed from the config model.

The SDK's component provider (`pulumi.provider.experimental`, what `component_provider_host` runs)
infers the schema from `LlmPdEksArgs` and constructs the component from the engine's Construct
requests; this subclass only replaces the schema it serves by `component_schema.typed_schema`'s, so
GetSchema (`pulumi package add`, codegen, Pulumi YAML's type checks) sees every config key typed, and
the Construct path stays the SDK's. `provider/__main__.py` runs `serve`.
"""

from __future__ import annotations

from llm_pd_eks.component_schema import schema_json
from llm_pd_eks.config import PROJECT
from llm_pd_eks.deployment import PACKAGE_VERSION, TYPE, LlmPdEks
from llm_pd_eks.pulumi_sdk import ComponentProvider, provider_main


class LlmPdEksProvider(ComponentProvider):
    """The SDK's component provider for `LlmPdEks`, serving the typed schema."""

    def __init__(self) -> None:
        super().__init__([LlmPdEks], PROJECT, version=PACKAGE_VERSION)
        self.schema = schema_json(self.schema or "{}", TYPE)


def serve(args: list[str]) -> None:
    """Serve the provider protocol (prints the port, as the language host expects) until stopped."""
    provider_main(LlmPdEksProvider(), args)
