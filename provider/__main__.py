"""Entry point of the `llm-pd-eks` component package: serves `LlmPdEks` over the provider protocol.

Run by the Pulumi CLI's Python language host (`python <this folder> <engine address>`); the schema is
inferred from `llm_pd_eks/deployment.py`'s annotations and docstrings by the pulumi SDK's
`pulumi.provider.experimental` analyzer. The components live one folder up, in this checkout.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi.provider.experimental import component_provider_host

from llm_pd_eks.config import PROJECT
from llm_pd_eks.deployment import PACKAGE_VERSION, LlmPdEks

if __name__ == "__main__":
    component_provider_host([LlmPdEks], name=PROJECT, version=PACKAGE_VERSION)
