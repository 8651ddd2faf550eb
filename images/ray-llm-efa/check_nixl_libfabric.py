"""Build-time gate: NIXL must list its LIBFABRIC plugin, and the plugin's libraries must resolve.

NIXL's Python API (nixl 1.3.1, `nixl_cu13/_api.py`): `nixl_agent(name, nixl_agent_config(backends=[]))`
creates an agent without instantiating a backend (no EFA device needed at build time);
`get_plugin_list()` returns the plugins the agent's plugin manager loaded (`getAvailPlugins`).
Exit status 1 with one line on stderr when either check fails.
"""

import importlib
import pathlib
import subprocess
import sys


def main() -> int:
    for name in ("nixl", "nixl_cu13", "nixl_cu12"):
        try:
            api = importlib.import_module(name)
            break
        except ImportError:
            continue
    else:
        print("check_nixl_libfabric: NIXL is not installed in this image", file=sys.stderr)
        return 1
    agent = api.nixl_agent("build-check", api.nixl_agent_config(backends=[]))
    plugins = list(agent.get_plugin_list())
    if "LIBFABRIC" not in plugins:
        print(f"check_nixl_libfabric: NIXL lists {plugins}, no LIBFABRIC (libfabric/EFA missing?)", file=sys.stderr)
        return 1
    root = pathlib.Path(api.__file__).resolve().parent.parent
    for so in root.rglob("libplugin_LIBFABRIC.so"):
        missing = [
            line.strip()
            for line in subprocess.run(
                ["ldd", str(so)], capture_output=True, text=True, check=False
            ).stdout.splitlines()
            if "not found" in line
        ]
        if missing:
            print(f"check_nixl_libfabric: {so} cannot load: {'; '.join(missing)}", file=sys.stderr)
            return 1
    print(f"check_nixl_libfabric: NIXL plugins {plugins} include LIBFABRIC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
