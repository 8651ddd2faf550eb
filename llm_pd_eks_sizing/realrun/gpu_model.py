"""The run's model on the GPU machine: the real config.json, dummy weights, a tokenizer built here.

Standard library only (plus the `tokenizers` wheel), like gpu_main beside it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

if __package__:
    from . import gpu_load
else:  # loaded from its file on the GPU machine: the module beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_load  # type: ignore[import-not-found,no-redef]

MODEL_DIR = gpu_load.MODEL_DIR

SPECIALS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(bundle: Path) -> None:
    """A byte-level BPE trained in seconds on generated text, padded to the model's vocabulary so every
    id a dummy-weight model samples decodes (filler tokens are ASCII, which byte-level maps to itself)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # type: ignore[import-not-found]

    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    config = json.loads((bundle / "model" / "config.json").read_text())
    (MODEL_DIR / "config.json").write_text(json.dumps(config))
    vocab_size = config["vocab_size"]
    words = gpu_load.WORDS
    corpus = [
        " ".join(words[(i * 7 + j) % len(words)] for j in range(40)) + f" {i} {i * 31 % 977}" for i in range(4000)
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=2048, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    )
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    taken = set(vocab.values()) | set(SPECIALS.values())
    for n, i in enumerate(i for i in range(vocab_size) if i not in taken):
        vocab[f"zz{n:06d}"] = i
    vocab.update(SPECIALS)
    added = {
        t: {"content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for t in SPECIALS
    }
    spec["added_tokens"] = [{"id": i, **added[t]} for t, i in SPECIALS.items()]
    (MODEL_DIR / "tokenizer.json").write_text(json.dumps(spec))
    (MODEL_DIR / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "model_max_length": config["max_position_embeddings"],
                "chat_template": CHAT_TEMPLATE,
                "added_tokens_decoder": {str(i): added[t] for t, i in SPECIALS.items()},
            }
        )
    )
    (MODEL_DIR / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))


def run_tokenizer() -> Any:
    """The tokenizer build_tokenizer wrote (the served model's), to fit prompts to a token count."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
