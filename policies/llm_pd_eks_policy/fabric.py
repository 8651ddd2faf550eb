"""Where a GPU container's fabric comes from text the pack cannot read: refused, not passed.

A GPU container's KV-cache fabric (FI_PROVIDER, NIXL's backends, the connector) is judged from its
env and command line. Each way below hands that choice to something outside the plan, so such a
container is refused with the way to make it readable; the cluster's admission policy judges the
pod itself, whatever ran it (docs/policies.md):

- code that runs before the engine and can rewrite its environment (`PYTHONPATH` to a
  `sitecustomize.py`, `PYTHONSTARTUP`, `LD_PRELOAD`, `BASH_ENV`);
- engine settings read from a file (`vllm serve --config FILE`, `serve run FILE.yaml`);
- a script read from a file or a pipe (`bash start.sh`, `curl ... | bash`, `. file.env`);
- SGLang's disaggregation transfer backends (the pack judges vLLM's NixlConnector only).
"""

from __future__ import annotations

from typing import Any

from .command_lines import SHELLS, CommandLine, shell_script

# Variables that load code into the engine's process (or its shell) before it reads its settings.
CODE_BEFORE_ENGINE = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "LD_PRELOAD", "BASH_ENV", "ENV")
_SETTINGS_FILES = (".yaml", ".yml", ".json", ".toml")


def unreadable_fabric(line: CommandLine, env_values: dict[str, Any]) -> list[str]:
    """Why a GPU container's fabric cannot be read from its env (`env_values`) and command line."""
    found = [f"env {name}" for name in CODE_BEFORE_ENGINE if env_values.get(name) not in (None, "")]
    found += [f"the command line sets {name}" for name, _ in line.assignments if name in CODE_BEFORE_ENGINE]
    for argv in line.commands:
        program = argv[0].rsplit("/", 1)[-1]
        shown = " ".join(argv)[:60]
        if program in (".", "source"):
            found.append(f"`{shown}` (a sourced file)")
        elif SHELLS.search(program) and shell_script(argv) is None:
            found.append(f"`{shown}` (a script from a file or a pipe)")
        elif (program == "vllm" or any(a.startswith("vllm.entrypoints") for a in argv[1:3])) and any(
            a == "--config" or a.startswith("--config=") for a in argv
        ):
            found.append(f"`{shown}` (vLLM settings from a file)")
        elif (
            program == "serve"
            and argv[1:2] in (["run"], ["deploy"])
            and any(a.endswith(_SETTINGS_FILES) for a in argv[2:])
        ):
            found.append(f"`{shown}` (a serve config from a file)")
        elif any("sglang" in a for a in argv[:3]) and any(
            a.startswith("--disaggregation-transfer-backend") for a in argv
        ):
            found.append(f"`{shown}` (SGLang's transfer backend, which no rule judges)")
    return found
