"""The trainable policy: a Qwen3 causal LM from scratch (or a local base model) and its directory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from orchestra.agent.lm_policy import VIEW_FILE
from orchestra.config import PolicyInit
from orchestra.errors import OrchestraError
from orchestra.training.examples import PolicyView
from orchestra.training.tokenizer import load_tokenizer, train_tokenizer

__all__ = [
    "VIEW_FILE",
    "PolicyInitError",
    "build_policy",
    "load_policy",
    "n_params",
    "read_view",
    "save_policy",
]


class PolicyInitError(OrchestraError):
    """A policy cannot be built (bad sizes, unreadable base model) or loaded."""


def n_params(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def _from_scratch(spec: PolicyInit, tokenizer: Any, seed: int) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if spec.hidden_size % spec.heads:
        raise PolicyInitError(f"hidden_size {spec.hidden_size} is not a multiple of heads {spec.heads}")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size or 3 * spec.hidden_size,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.heads,
        head_dim=spec.hidden_size // spec.heads,
        max_position_embeddings=spec.max_length,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config)


def build_policy(spec: PolicyInit, texts: Sequence[str], seed: int) -> tuple[Any, Any]:
    """``(model, tokenizer)``: with ``spec.base_model`` that local Hugging Face directory (offline),
    else a byte-level BPE of ``spec.vocab_size`` trained on ``texts`` and a Qwen3 of the given
    sizes, initialised from ``seed`` (same texts and seed -> the same weights)."""
    if spec.base_model:
        from transformers import AutoModelForCausalLM

        path = Path(spec.base_model)
        if not path.is_dir():
            raise PolicyInitError(f"train.policy.base_model {path}: not a model directory")
        try:
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as e:
            raise PolicyInitError(f"train.policy.base_model {path}: cannot load a causal LM: {e}") from e
        return model, load_tokenizer(path)
    tokenizer = train_tokenizer(texts, vocab_size=spec.vocab_size)
    return _from_scratch(spec, tokenizer, seed), tokenizer


def save_policy(model: Any, tokenizer: Any, view: PolicyView, out: Path) -> Path:
    """A standard model directory (weights, config, tokenizer) plus :data:`VIEW_FILE`."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / VIEW_FILE).write_text(json.dumps(asdict(view), sort_keys=True) + "\n", encoding="utf-8")
    return out


def read_view(path: Path) -> PolicyView | None:
    """The view saved with a trained policy; None for a plain model directory."""
    f = Path(path) / VIEW_FILE
    if not f.is_file():
        return None
    try:
        saved = json.loads(f.read_text(encoding="utf-8"))
        return PolicyView(**{"ids": "expert", **saved})  # saved before tree ids: the expert's
    except (ValueError, TypeError) as e:
        raise PolicyInitError(f"{f}: not a policy view: {e}") from e


def load_policy(path: Path) -> tuple[Any, Any, PolicyView]:
    """``(model, tokenizer, view)`` of a saved policy directory, offline."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(Path(path), local_files_only=True)
    except (OSError, ValueError) as e:
        raise PolicyInitError(f"{path}: cannot load a causal LM: {e}") from e
    return model, load_tokenizer(path), read_view(path) or PolicyView()
