"""Fixtures shared by every test module; plain helpers live in `helpers.py`."""

from __future__ import annotations

import pytest
from helpers import STACKS, program_run

from tools.preview.mockrun import ProgramRun


@pytest.fixture(params=STACKS)
def run(request) -> ProgramRun:
    """The recorded registrations of each stack in turn."""
    return program_run(request.param)
