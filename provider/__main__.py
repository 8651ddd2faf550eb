"""Entry point of the `llm-pd-eks` component package: serves `LlmPdEks` over the provider protocol.

Run by the Pulumi CLI's Python language host (`python <this folder> <engine address>`). The provider
(`llm_pd_eks/component_provider.py`) is the pulumi SDK's component provider, its schema inferred from
`llm_pd_eks/deployment.py`'s annotations and each config section typed from the config model. The
components live one folder up, in this checkout.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llm_pd_eks.component_provider import serve

if __name__ == "__main__":
    serve(sys.argv[1:])
