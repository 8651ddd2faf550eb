"""llm_pd_eks/models.py and llm_pd_eks/data/models/: one complete, strictly read file per model."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from helpers import ROOT
from pydantic import ValidationError

from llm_pd_eks.config import ServingConfig
from llm_pd_eks.models import (
    MODELS,
    MODELS_DIR,
    NATIVE_CONTEXT,
    HfConfig,
    ModelDataError,
    ModelFile,
    ModelSpec,
    load_models,
)

VENDORED = ROOT / "llm_pd_eks_sizing" / "realrun" / "models"
QWEN_7B = "Qwen--Qwen2.5-7B-Instruct.json"


def copy_models(tmp_path: Path) -> Path:
    shutil.copytree(MODELS_DIR, tmp_path / "models")
    return tmp_path / "models"


def refused(directory: Path) -> str:
    with pytest.raises(ModelDataError) as info:
        load_models(directory)
    message = str(info.value)
    assert "\n" not in message
    return message


def model_id_problems(model_id: str) -> list[str]:
    """What ServingConfig says about `model_id` itself (the other fields are left out)."""
    try:
        ServingConfig.model_validate({"modelId": model_id})
    except ValidationError as error:
        return [e["msg"] for e in error.errors() if e["loc"] == ("modelId",)]
    return []


def test_every_model_the_config_accepts_has_a_complete_file() -> None:
    files = sorted(p.name for p in MODELS_DIR.glob("*.json"))
    assert files == sorted(model_id.replace("/", "--") + ".json" for model_id in MODELS)
    unset = {f.name: f.default for f in dataclasses.fields(ModelSpec) if f.default is not dataclasses.MISSING}
    for model_id, spec in MODELS.items():
        assert model_id_problems(model_id) == []  # the config accepts it
        for name, default in unset.items():
            if name not in ("gated", "tie_word_embeddings"):  # booleans: either value is a real answer
                assert getattr(spec, name) != default, (model_id, name)
        assert NATIVE_CONTEXT[model_id] == spec.native_context > 0
    (problem,) = model_id_problems("org/no-such-model")
    assert "is not a model this project knows; choose one of " + ", ".join(sorted(MODELS)) in problem


FIELDS = [name for name in ModelFile.model_fields if name != "config"]
FIELDS += [f"config.{name}" for name in HfConfig.model_fields]


@pytest.mark.parametrize("field", FIELDS)
def test_a_model_file_missing_a_field_fails_naming_file_and_field(tmp_path: Path, field: str) -> None:
    directory = copy_models(tmp_path)
    path = directory / QWEN_7B
    data = json.loads(path.read_text())
    parent, _, leaf = field.rpartition(".")
    (data[parent] if parent else data).pop(leaf)
    path.write_text(json.dumps(data))
    assert refused(directory) == f"{path}: {field}: Field required"


def test_a_model_file_is_read_strictly(tmp_path: Path) -> None:
    directory = copy_models(tmp_path)
    path = directory / QWEN_7B
    text = path.read_text()
    path.write_text(text.replace('"num_hidden_layers": 28', '"num_hidden_layers": "28"'))
    assert refused(directory) == f"{path}: config.num_hidden_layers: Input should be a valid integer"
    path.write_text(text.replace('"gated": false,', '"gated": false,\n  "gated": true,'))
    assert refused(directory) == f"{path}: not a model file: key 'gated' is given twice"
    path.write_text(text.replace('"gated": false,', '"gated": false,\n  "license": "x",'))
    assert refused(directory) == f"{path}: license: Extra inputs are not permitted"
    path.write_text(text.replace('"vocab_size": 152064', '"vocab": 152064').replace('"gated": false,', ""))
    assert refused(directory) == (
        f"{path}: gated: Field required; config.vocab_size: Field required; "
        "config.vocab: Extra inputs are not permitted"
    )  # every problem of the file, on one line
    path.write_text(text)
    path.rename(directory / "Qwen--Qwen2.5-7B.json")
    assert refused(directory) == (
        f"{directory / 'Qwen--Qwen2.5-7B.json'}: model_id 'Qwen/Qwen2.5-7B-Instruct' belongs in {QWEN_7B}"
    )


def test_a_vendored_config_json_agrees_with_the_model_file() -> None:
    vendored = sorted(VENDORED.glob("*/*/config.json"))
    assert vendored  # the real run's model
    for config_json in vendored:
        model_id = f"{config_json.parent.parent.name}/{config_json.parent.name}"
        published = json.loads(config_json.read_text())
        kept = json.loads((MODELS_DIR / (model_id.replace("/", "--") + ".json")).read_text())["config"]
        assert {k: v for k, v in kept.items() if v is not None} == {k: published[k] for k in kept if k in published}
        assert all(k not in published for k, v in kept.items() if v is None)


def test_head_dim_falls_back_to_hidden_size_over_heads_only_where_config_json_has_none(tmp_path: Path) -> None:
    directory = copy_models(tmp_path)
    path = directory / QWEN_7B
    data = json.loads(path.read_text())
    data["config"]["head_dim"] = 96  # as a model with an explicit head_dim (Qwen3, Gemma) publishes
    path.write_text(json.dumps(data))
    spec = load_models(directory)["Qwen/Qwen2.5-7B-Instruct"]
    assert spec.head_dim == 96 and MODELS["Qwen/Qwen2.5-7B-Instruct"].head_dim == 3584 // 28


def test_embedding_parameters_come_from_the_file() -> None:
    qwen = MODELS["Qwen/Qwen2.5-7B-Instruct"]
    assert qwen.embedding_params() == (152064.0 * 3584, 152064.0 * 3584)  # untied: the LM head is its own
    tied = dataclasses.replace(qwen, tie_word_embeddings=True)
    assert tied.embedding_params() == (152064.0 * 3584, 0.0)
