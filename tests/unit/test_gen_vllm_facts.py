"""llm_pd_eks_tools/maint/gen_vllm_facts.py over a small wheel written here, shaped like vLLM's modules
(the real wheel is read by `make facts`, never by the tests)."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
from helpers import DATA

from llm_pd_eks import versions
from llm_pd_eks_tools.core.cli import Exit, ToolError
from llm_pd_eks_tools.maint.gen_vllm_facts import generate

NIXL = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/"
SOURCES = {
    "vllm/_version.py": "__version__ = version = '9.9.9'\n__commit_id__ = commit_id = 'gabc'\n",
    "vllm/engine/arg_utils.py": (
        "from typing import ClassVar\n"
        "@dataclass\nclass EngineArgs:\n    model: str = 'x'\n    _rank: int = 0\n"
        "    registry: ClassVar[dict] = {}\n    def method(self):\n        local: int = 1\n"
    ),
    "vllm/config/kv_transfer.py": (
        'KVProducer = Literal["kv_producer", "kv_both"]\nKVConsumer = Literal["kv_consumer", "kv_both"]\n'
        "KVRole = Literal[KVProducer, KVConsumer]\n"
        "@config\nclass KVTransferConfig:\n    kv_role: KVRole | None = None\n    kv_connector: str | None = None\n"
        '    kv_load_failure_policy: Literal["recompute", "fail"] = "fail"\n'
    ),
    "vllm/config/cache.py": 'CacheDType = Literal["auto", "fp8", "bfloat16"]\n',
    "vllm/config/compilation.py": (
        "@config\nclass CompilationConfig:\n    cudagraph_capture_sizes: list[int] = None\n"
        "    compilation_time: float = field(default=0.0, init=False)\n    mode: int = 0\n"
    ),
    "vllm/distributed/kv_transfer/kv_connector/factory.py": (
        'KVConnectorFactory.register_connector("NixlConnector", "m", "C")\n'
        'KVConnectorFactory.register_connector("ExampleConnector", "m", "C")\n'
    ),
    NIXL + "base_worker.py": (
        "class W:\n    def __init__(self, c):\n"
        '        self.nixl_backends = c.kv_transfer_config.get_from_extra_config("backends", ["UCX"])\n'
        '        self.other = c.kv_transfer_config.get_from_extra_config("num_threads", 4)\n'
    ),
    NIXL + "stats.py": (
        "class P:\n    def __init__(self):\n"
        '        self.h = self._histogram_cls(name="vllm:nixl_bytes_transferred", buckets=[1, 2])\n'
        '        self.c = self._counter_cls(name="vllm:nixl_num_failed_transfers")\n'
    ),
    "vllm/entrypoints/openai/api_server.py": (
        "async def init_app_state(engine_client, state, args):\n"
        "    state.engine_client = engine_client\n    state.serving_tokenization = object()\n"
        "    other.not_state = 1\n"
    ),
    "vllm/entrypoints/generate/api_router.py": "def init(state):\n    state.openai_serving_chat = None\n",
    "vllm/v1/executor/ray_executor_v2.py": (
        "class E:\n    @staticmethod\n    def _select_tcpstore_port(local_dp_rank, master_port):\n"
        "        if local_dp_rank is None:\n            return get_open_port()\n"
        "        window = 16\n        start_port = master_port + 200 + local_dp_rank * window\n"
        "        return _get_open_port(start_port=start_port, max_attempts=window)\n"
    ),
    "vllm/envs.py": (
        'environment_variables = {\n    "VLLM_DP_MASTER_PORT": lambda: int(os.getenv("VLLM_DP_MASTER_PORT", "7")),\n'
        '    "VLLM_PORT": lambda: os.getenv("VLLM_PORT", None),\n}\n'
    ),
    "vllm/v1/metrics/loggers.py": (
        "class L:\n    def __init__(self, b):\n"
        '        self._gauge_cls(name="vllm:num_requests_running")\n'
        '        self._histogram_cls(name="vllm:time_to_first_token_seconds", buckets=[0.001, 1])\n'
        '        self._histogram_cls(name="vllm:inter_token_latency_seconds", buckets=[0.01, 2.5])\n'
        '        self._histogram_cls(name="vllm:e2e_request_latency_seconds", buckets=b)\n'
        "        self._gauge_cls(name=computed_name)\n"
        '        self._gauge_cls(name="not_vllm")\n'
    ),
}


def wheel(tmp_path: Path, sources: dict[str, str]) -> Path:
    path = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in sources.items():
            zf.writestr(name, text)
    return path


def test_the_facts_are_read_from_the_wheels_source(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for old in ("engine-args-9.9.8.json", "metrics-9.9.8.json", "notes.txt"):
        (out / old).write_text("{}")
    generate(wheel(tmp_path, SOURCES), out, today="2026-12-02")
    # the previous release's facts go, anything else stays
    assert sorted(p.name for p in out.iterdir()) == [
        "SOURCE",
        "engine-args-9.9.9.json",
        "metrics-9.9.9.json",
        "notes.txt",
    ]
    args = json.loads((out / "engine-args-9.9.9.json").read_text())
    assert args == {
        "engine_args_fields": ["_rank", "model"],  # the ClassVar and a method's local are no fields
        "kv_transfer_config_fields": ["kv_connector", "kv_load_failure_policy", "kv_role"],
        "compilation_config_fields": ["cudagraph_capture_sizes", "mode"],  # init=False is not settable
        "kv_roles": ["kv_producer", "kv_both", "kv_consumer"],  # typing.get_args order of the nested Literal
        "kv_load_failure_policy": {"values": ["recompute", "fail"], "default": "fail"},
        "kv_connectors": ["ExampleConnector", "NixlConnector"],
        "cache_dtypes": ["auto", "fp8", "bfloat16"],
        "nixl_backends_extra_config_key": "backends",
        # every `state.<name> = ...` under vllm/entrypoints/, whichever module sets it
        "app_state_attributes": ["engine_client", "openai_serving_chat", "serving_tokenization"],
        # the first port a non-DP engine tries (default master port + offset) and how many it tries
        "tcpstore_scan": {"dp_master_port_default": 7, "offset": 200, "window": 16, "first_port": 207},
    }
    facts = json.loads((out / "metrics-9.9.9.json").read_text())
    assert facts["buckets"] == {
        "vllm:inter_token_latency_seconds": [0.01, 2.5],
        "vllm:time_to_first_token_seconds": [0.001, 1.0],
    }
    assert {n: m["type"] for n, m in facts["metrics"].items()} == {
        "vllm:e2e_request_latency_seconds": "histogram",  # buckets from a variable: still a metric
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:nixl_bytes_transferred": "histogram",
        "vllm:nixl_num_failed_transfers": "counter",
        "vllm:num_requests_running": "gauge",
        "vllm:time_to_first_token_seconds": "histogram",
    }
    assert facts["metrics"]["vllm:nixl_bytes_transferred"]["file"] == NIXL + "stats.py"
    source = (out / "SOURCE").read_text()
    assert "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl" in source and "commit gabc" in source
    assert "Generated 2026-12-02." in source


@pytest.mark.parametrize(
    "name, text, words",
    [
        ("vllm/config/cache.py", "CacheDType = str\n", "not a Literal"),
        (NIXL + "base_worker.py", "x = 1\n", "expected one nixl_backends extra-config key"),
        (
            "vllm/v1/metrics/loggers.py",
            'self._histogram_cls(name="vllm:time_to_first_token_seconds", buckets=b)\n',
            "no literal buckets",
        ),
    ],
)
def test_a_wheel_whose_source_moved_is_refused_not_guessed(tmp_path, name, text, words):
    with pytest.raises(ToolError, match=words) as error:
        generate(wheel(tmp_path, {**SOURCES, name: text}), tmp_path / "out")
    assert error.value.exit_code == Exit.FAILED


def test_a_wheel_whose_entrypoints_set_no_app_state_is_refused(tmp_path):
    sources = {**SOURCES, "vllm/entrypoints/openai/api_server.py": "x = 1\n"}
    sources["vllm/entrypoints/generate/api_router.py"] = "y = 2\n"
    with pytest.raises(ToolError, match=re.escape("no `state.<name> = ...` assignments")) as error:
        generate(wheel(tmp_path, sources), tmp_path / "out")
    assert error.value.exit_code == Exit.FAILED


def test_the_vendored_facts_have_the_generators_shape():
    """What `make facts` wrote for the DLC's vLLM: the same keys the generator writes here."""
    args = json.loads((DATA / "vllm" / f"engine-args-{versions.DLC_VLLM_VERSION}.json").read_text())
    assert list(args) == [
        "engine_args_fields",
        "kv_transfer_config_fields",
        "compilation_config_fields",
        "kv_roles",
        "kv_load_failure_policy",
        "kv_connectors",
        "cache_dtypes",
        "nixl_backends_extra_config_key",
        "app_state_attributes",
        "tcpstore_scan",
    ]
    assert {"tensor_parallel_size", "max_model_len", "kv_cache_dtype", "kv_transfer_config"} <= set(
        args["engine_args_fields"]
    )
    facts = json.loads((DATA / "vllm" / f"metrics-{versions.DLC_VLLM_VERSION}.json").read_text())
    assert set(facts) == {"buckets", "metrics"}
