"""images/ray-llm-efa: the bring-your-own recipe pins what llm_pd_eks/versions.py records, and
its build gate fails unless NIXL lists the LIBFABRIC plugin (run here against stand-in NIXL modules
shaped like nixl 1.3.1's `nixl_agent` / `nixl_agent_config`)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from llm_pd_eks.versions import DLC_EFA_INSTALLER_VERSION, DLC_IMAGE

RECIPE = ROOT / "images" / "ray-llm-efa"


def build_arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", (RECIPE / "Dockerfile").read_text(), re.M)
    assert match, name
    return match.group(1)


def test_the_recipe_defaults_to_the_recorded_dlc_and_efa_installer():
    assert build_arg("BASE_IMAGE") == DLC_IMAGE
    assert build_arg("EFA_INSTALLER_VERSION") == DLC_EFA_INSTALLER_VERSION
    assert "RUN python3 /usr/local/bin/check_nixl_libfabric.py" in (RECIPE / "Dockerfile").read_text()


def fake_nixl(tmp_path: Path, plugins: list[str]) -> Path:
    package = tmp_path / "nixl"
    package.mkdir()
    (package / "__init__.py").write_text(
        "class nixl_agent_config:\n"
        "    def __init__(self, backends=('UCX',)):\n"
        "        self.backends = list(backends)\n"
        "class nixl_agent:\n"
        "    def __init__(self, name, conf=None):\n"
        "        assert conf is not None and conf.backends == [], 'the gate must not instantiate a backend'\n"
        f"        self.plugin_list = {plugins!r}\n"
        "    def get_plugin_list(self):\n"
        "        return self.plugin_list\n"
    )
    return tmp_path


@pytest.mark.parametrize("plugins, rc", [(["UCX", "LIBFABRIC", "POSIX"], 0), (["UCX", "POSIX", "GDS"], 1)])
def test_the_build_gate_needs_libfabric(tmp_path, plugins, rc):
    path = fake_nixl(tmp_path, plugins)
    done = subprocess.run(
        [sys.executable, str(RECIPE / "check_nixl_libfabric.py")],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert done.returncode == rc, done.stderr
    if rc:
        assert "no LIBFABRIC" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_dlc_image_is_accepted_by_the_config_and_a_mutable_tag_is_not():
    from helpers import config_problems, validate_values

    from llm_pd_eks_tools.core.stack import stack_config

    base = stack_config("dev").model_dump(by_alias=True, exclude_none=True)
    values = {k: v for k, v in base.items() if k != "region"}
    values["serving"] = {**base["serving"], "image": DLC_IMAGE}
    assert validate_values(values).serving.image == DLC_IMAGE
    values["serving"] = {**base["serving"], "image": "public.ecr.aws/deep-learning-containers/ray:latest"}
    assert any("'latest'" in p for p in config_problems(values))
