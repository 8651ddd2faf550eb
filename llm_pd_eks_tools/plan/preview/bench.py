"""Benchmark: a warm offline preview against the SDK import floor, measured in the same run.

`python -m llm_pd_eks_tools.plan.preview.bench [--stack dev] [--reps 5] [--make]`

The floor is `python -c 'import pulumi, pulumi_aws, pulumi_eks, pulumi_kubernetes'`: no preview can
be faster than loading the SDKs it drives. Both commands run interleaved, after one warm-up each
(so .pyc files and the page cache are warm), and the medians are compared. The goal is a preview
within 3x the floor. For context it also times importing exactly the SDK modules the program
itself loads (the floor does not: `import pulumi_aws` is lazy). Not a test: timings depend on the
machine and its load; the result is printed and written to build/bench/preview.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from llm_pd_eks_tools.core.cli import ROOT, Exit, ToolError, exit_with, one_line
from llm_pd_eks_tools.core.io_safety import atomic_write

FLOOR = "import pulumi, pulumi_aws, pulumi_eks, pulumi_kubernetes"
GOAL = 3.0
SDK_PACKAGES = ("pulumi", "pulumi_aws", "pulumi_eks", "pulumi_kubernetes", "pydantic", "yaml")

# Prints the SDK modules the program itself loads (pulumi_aws.ec2 alone is ~1,000 classes, which the
# floor never imports: `import pulumi_aws` loads its submodules lazily).
_LIST_MODULES = """
import sys
from llm_pd_eks_tools.plan.preview.mockrun import run_program
run_program(sys.argv[1])
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[2:])))
"""
_IMPORT_ALL = """
import gc, importlib, sys
gc.disable()  # as the preview does: a like-for-like comparison
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
"""


def _time(cmd: list[str], ok_codes: tuple[int, ...] = (0,)) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in ok_codes:
        raise ToolError(Exit.FAILED, f"{' '.join(cmd)} failed ({done.returncode}): {one_line(done.stderr)}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llm_pd_eks_tools.plan.preview.bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--make", action="store_true", help="time `make preview` instead of the python entry point")
    args = parser.parse_args(argv)

    python = sys.executable
    floor_cmd = [python, "-c", FLOOR]
    listed = subprocess.run(
        [python, "-c", _LIST_MODULES, args.stack, *SDK_PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True
    )
    program_sdk_cmd = [python, "-c", _IMPORT_ALL, *listed.stdout.split()]
    with tempfile.TemporaryDirectory() as out:
        if args.make:
            preview_cmd = ["make", "--no-print-directory", "preview", f"STACK={args.stack}"]
        else:
            preview_cmd = [
                python,
                "-m",
                "llm_pd_eks_tools.plan.preview",
                "--stack",
                args.stack,
                "--quiet",
                "--out",
                out,
            ]
        print(f"warming up ({' '.join(preview_cmd)})…", file=sys.stderr)
        _time(floor_cmd)
        _time(program_sdk_cmd)
        _time(preview_cmd, ok_codes=(0, 1))
        floors, sdks, previews = [], [], []
        for i in range(args.reps):
            floors.append(_time(floor_cmd))
            sdks.append(_time(program_sdk_cmd))
            previews.append(_time(preview_cmd, ok_codes=(0, 1)))
            print(
                f"  rep {i + 1}/{args.reps}: floor {floors[-1]:.2f}s, program's SDK modules {sdks[-1]:.2f}s, "
                f"preview {previews[-1]:.2f}s",
                file=sys.stderr,
            )

    floor, sdk, preview = statistics.median(floors), statistics.median(sdks), statistics.median(previews)
    ratio = preview / floor
    record = {
        "stack": args.stack,
        "command": "make preview" if args.make else "python -m llm_pd_eks_tools.plan.preview",
        "reps": args.reps,
        "floor_median_s": round(floor, 3),
        "preview_median_s": round(preview, 3),
        "ratio": round(ratio, 2),
        "program_sdk_modules": len(program_sdk_cmd) - 3,
        "program_sdk_import_median_s": round(sdk, 3),
        "ratio_to_program_sdk_import": round(preview / sdk, 2),
        "goal_ratio": GOAL,
        "floor_s": [round(x, 3) for x in floors],
        "program_sdk_import_s": [round(x, 3) for x in sdks],
        "preview_s": [round(x, 3) for x in previews],
        "python": platform.python_version(),
        "machine": platform.machine(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out_dir = ROOT / "build" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write((out_dir / "preview.json"), json.dumps(record, indent=2) + "\n")
    verdict = "within" if ratio <= GOAL else "above"
    print(
        f"SDK import floor {floor:.2f}s · preview ({record['command']}, {args.stack}) {preview:.2f}s · "
        f"ratio {ratio:.2f}x ({verdict} the {GOAL:g}x goal; medians of {args.reps})\n"
        f"importing just the {record['program_sdk_modules']} SDK modules the program loads: {sdk:.2f}s "
        f"(preview = {preview / sdk:.2f}x that)"
    )
    return Exit.OK


if __name__ == "__main__":
    exit_with("bench", main)
