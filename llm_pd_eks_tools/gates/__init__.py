"""Checks that stop a stack or a commit from moving on: example values, promotion, YAML programs."""
