"""A chat client over a local Hugging Face model directory (no downloads): greedy generation, text only."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestra.backends.chat import ChatResult, LMError

__all__ = ["TransformersChat"]


class TransformersChat:
    """``chat(messages) -> ChatResult`` with a causal LM loaded from ``model_dir`` (``local_files_only``).

    The prompt is the tokenizer's chat template when it has one, else ``role: content`` lines ending
    in ``assistant:``. Tool specs are described in the prompt, never parsed back: the reply is text
    (a policy parses its decision from it). Generation is serialised by a lock (one model, many threads).
    ``count_tokens`` uses the model's tokenizer and ``context_tokens`` its ``max_position_embeddings``,
    so a policy on this model renders its state in the tokens the model reads.
    """

    def __init__(self, model_dir: str | Path, max_new_tokens: int = 256, seed: int = 0) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:  # pragma: no cover - transformers is a dependency
            raise LMError(f"transformers is not importable: {e}") from e
        path = Path(model_dir)
        if not path.is_dir():
            raise LMError(f"{path}: not a model directory")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as e:
            raise LMError(f"{path}: cannot load a causal LM: {e}") from e
        self.model.eval()
        ctx = getattr(self.model.config, "max_position_embeddings", None)
        self.context_tokens: int | None = int(ctx) if isinstance(ctx, int) and ctx > 0 else None
        self.model_name = path.name
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.temperature = 0.0  # > 0: sample (seeded by ``seed`` on every call), else greedy
        self._torch = torch
        self._lock = threading.Lock()
        from orchestra.backends.decoder import LeanDecoder

        # greedy calls on a model it covers: the same tokens as generate(), without its per-token machinery
        self.lean = None if LeanDecoder.covers(self.model) else LeanDecoder(self.model)
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])

    @property
    def model_id(self) -> str:
        return self.model_name

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> str:
        msgs = [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in messages]
        if tools:
            names = ", ".join(str(t.get("name")) for t in tools)
            msgs.insert(0, {"role": "system", "content": f"Tools: {names}"})
        if getattr(self.tokenizer, "chat_template", None):
            return str(self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))
        return "\n".join(f"{m['role']}: {m['content']}" for m in msgs) + "\nassistant:"

    def _generate(self, enc: Any) -> Any:
        """``generate()``: sampled at ``temperature`` (seeded), or greedy."""
        self._torch.manual_seed(self.seed)
        sample = {"do_sample": True, "temperature": self.temperature} if self.temperature > 0 else {}
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        with self._torch.no_grad():
            return self.model.generate(
                **enc,
                max_new_tokens=self.max_new_tokens,
                **(sample or {"do_sample": False}),
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id or 0,
            ).cpu()

    def chat(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResult:
        t0 = time.perf_counter()
        prompt = self._prompt(messages, tools)
        with self._lock:
            enc = self.tokenizer(prompt, return_tensors="pt")
            n = int(enc["input_ids"].shape[1])
            if self.temperature == 0 and self.lean is not None and self.lean.fits(n, self.max_new_tokens):
                tokens = self.lean.greedy(enc["input_ids"][0].tolist(), self.max_new_tokens, self.eos)
                new = self._torch.tensor(tokens, dtype=self._torch.long)
            else:
                new = self._generate(enc)[0, n:]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return ChatResult(
            content=text,
            prompt_tokens=int(enc["input_ids"].shape[1]),
            completion_tokens=int(new.shape[0]),
            latency_s=time.perf_counter() - t0,
        )
