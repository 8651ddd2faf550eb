"""Generate the EFA GPU instance-type table (`make facts`) from EC2's own DescribeInstanceTypes data.

Offline source: moto ships the EC2 DescribeInstanceTypes answers captured from AWS
(`moto/ec2/resources/instance_types.json.gz`, written by moto's `scripts/get_instance_info.py`);
botocore carries no such data. The table keeps every type with GPUs (`GpuInfo`) whose
`NetworkInfo.EfaSupported` is true, and only facts EC2 states. Facts EC2 does not state (Ray's
accelerator names, GPUDirect RDMA, datasheet figures) are hand-written in `llm_pd_eks/catalog.py`.

Two byte-equal copies are written: the program's (`llm_pd_eks/data/`) and the policy pack's
(`policies/data/`: a published pack must not import the program it judges). A test keeps both equal
to what this script produces. `--check` exits 1 when either copy is stale.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

from llm_pd_eks_tools.core.cli import ROOT, Exit, ToolError, exit_with
from llm_pd_eks_tools.maint.facts import sync

FILE_NAME = "gpu_instance_types.json"
OUTPUTS = (ROOT / "llm_pd_eks" / "data" / FILE_NAME, ROOT / "policies" / "data" / FILE_NAME)
MOTO_DATA = ("moto", "ec2/resources/instance_types.json.gz")


def moto_source() -> tuple[Path, str]:
    """(path of moto's captured DescribeInstanceTypes data, moto's version)."""
    try:
        version = metadata.version(MOTO_DATA[0])
    except metadata.PackageNotFoundError:
        raise ToolError(
            Exit.USAGE, "moto is not installed: run `make venv-dev` (requirements-dev.txt pins it)"
        ) from None
    import moto  # the package's files, not its mocks

    return Path(moto.__file__).parent / MOTO_DATA[1], version


def _gpu_type(info: dict[str, Any]) -> Optional[dict[str, Any]]:
    """One table row from one DescribeInstanceTypes entry, or None when it is not an EFA GPU type."""
    network = info.get("NetworkInfo") or {}
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus or network.get("EfaSupported") is not True:
        return None
    if len(gpus) != 1:  # every EC2 GPU type has one GPU model; a second would need a table change
        raise ToolError(
            Exit.USAGE, f"{info['InstanceType']}: {len(gpus)} GPU models in GpuInfo.Gpus; the table holds one per type"
        )
    gpu = gpus[0]
    disks = (info.get("InstanceStorageInfo") or {}).get("Disks") or []
    cards = sorted(
        int(card["NetworkCardIndex"])
        for card in network.get("NetworkCards") or []
        if "efa" in (card.get("InterfaceTypes") or [])
    )
    return {
        "instanceType": info["InstanceType"],
        "gpus": int(gpu["Count"]),
        "gpuName": gpu["Name"],
        "gpuManufacturer": gpu["Manufacturer"],
        "gpuMemoryMiB": int(gpu["MemoryInfo"]["SizeInMiB"]),
        "efaSupported": True,
        "maximumNetworkCards": int(network["MaximumNetworkCards"]),
        "maximumEfaInterfaces": int(network["EfaInfo"]["MaximumEfaInterfaces"]),
        "efaNetworkCards": cards,
        "networkPerformance": network.get("NetworkPerformance"),
        "vcpus": int(info["VCpuInfo"]["DefaultVCpus"]),
        "memoryMiB": int(info["MemoryInfo"]["SizeInMiB"]),
        "architectures": sorted(info["ProcessorInfo"]["SupportedArchitectures"]),
        "nvmeDisks": sum(int(d["Count"]) for d in disks),
        "nvmeDiskGB": max((int(d["SizeInGB"]) for d in disks), default=0),
    }


# When each moto release carrying the data was published (PyPI upload time of its wheel): the date
# the table is as of. A new pin needs its date here; the generator refuses to guess one.
MOTO_PUBLISHED = {"5.2.5": "2026-10-27"}


def _published(moto_version: str) -> str:
    if moto_version not in MOTO_PUBLISHED:
        raise SystemExit(
            f"gen_instance_types: no publication date for moto {moto_version}: add it to MOTO_PUBLISHED "
            "(the PyPI upload date of its wheel)"
        )
    return MOTO_PUBLISHED[moto_version]


def generate(data_path: Path, moto_version: str) -> str:
    """The table as JSON text (sorted, one trailing newline: byte-stable for the equality test)."""
    raw = data_path.read_bytes()
    entries = json.loads(gzip.decompress(raw))
    rows = [row for row in (_gpu_type(v) for v in entries.values()) if row is not None]
    table = {
        "source": {
            "what": "EC2 DescribeInstanceTypes, every instance type with GpuInfo and NetworkInfo.EfaSupported",
            "capturedBy": f"moto {moto_version} (getmoto/moto scripts/get_instance_info.py, describe_instance_types)",
            "asOf": f"{_published(moto_version)} (moto {moto_version} published on PyPI)",
            "file": f"moto/{MOTO_DATA[1]}",
            "sha256": hashlib.sha256(raw).hexdigest(),
            "generator": "llm_pd_eks_tools/maint/gen_instance_types.py (make facts)",
        },
        "instanceTypes": {row["instanceType"]: row for row in sorted(rows, key=lambda r: r["instanceType"])},
    }
    return json.dumps(table, indent=1, sort_keys=False) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gen_instance_types", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a copy differs from the generated table")
    args = parser.parse_args(argv)
    return sync(generate(*moto_source()), OUTPUTS, ROOT, args.check)


if __name__ == "__main__":
    exit_with("gen_instance_types", main)
