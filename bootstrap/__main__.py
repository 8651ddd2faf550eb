"""The bootstrap program's entry: its config -> the prerequisites (bootstrap/program.py) -> outputs.

Pulumi runs this file with bootstrap/ as the working directory; the `bootstrap` package is imported
from the repository root, as the tests import it (tests/stack/test_bootstrap.py).
"""

import sys
from pathlib import Path

import pulumi

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bootstrap.program import Prerequisites
from bootstrap.settings import BootstrapConfig

config = pulumi.Config()
values = {}
for name, field in BootstrapConfig.model_fields.items():
    alias = field.alias or name
    try:
        raw = config.get_object(alias)  # lists, booleans, numbers: JSON in the engine's config
    except pulumi.ConfigTypeError:
        raw = config.get(alias)  # a plain string
    if raw is not None:
        values[alias] = raw
try:
    settings = BootstrapConfig.model_validate(values)
except ValueError as error:
    raise pulumi.RunError(f"bootstrap config: {error}") from None
prerequisites = Prerequisites(settings)
for key, value in prerequisites.outputs.items():
    pulumi.export(key, value)
