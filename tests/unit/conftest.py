"""The unit tier's fixtures: Pulumi's public mocks, installed fresh for each test that asks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.mocks import install


@pytest.fixture
def mocks() -> Any:
    """Pulumi's mock runtime (tests/unit/mocks.py), what the test's components register recorded on it."""
    return install()
