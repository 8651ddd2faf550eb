"""Checks that stop a stack or a commit from moving on: example values, promotion, review stacks, YAML programs."""
