"""A chat client over a local Hugging Face model directory (no downloads): greedy generation, text only."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestra.lm.chat import ChatResult, LMError

__all__ = ["GreedyBatches", "TransformersChat"]


class GreedyBatches:
    """Greedy requests from concurrent threads decoded as one batch by the lean decoder. A caller that
    finds no batch running decodes one: every request waiting, its own first, at most ``max_batch``;
    then it hands the lead to the first request still waiting (which decodes the next batch) and
    returns. No thread of its own, so nothing to stop when a process exits."""

    _LEAD = object()

    def __init__(self, chat: TransformersChat, max_batch: int) -> None:
        self.chat, self.max_batch = chat, max(1, max_batch)
        self._lock = threading.Lock()
        self._waiting: list[tuple[list[int], threading.Event, list[Any]]] = []
        self._leading = False
        self.batches: list[int] = []  # the size of every batch decoded (for benches and tests)

    def decode(self, prompt: list[int]) -> list[int]:
        item: tuple[list[int], threading.Event, list[Any]] = (prompt, threading.Event(), [])
        with self._lock:
            self._waiting.append(item)
            lead, self._leading = not self._leading, True
        while True:
            if lead:
                self._batch()
            item[1].wait()
            if item[2][0] is not self._LEAD:
                break
            item[1].clear()
            item[2].clear()
            lead = True
        if isinstance(item[2][0], BaseException):
            raise item[2][0]
        return list(item[2][0])

    def _batch(self) -> None:
        with self._lock:
            batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch :]
        chat = self.chat
        try:
            prompts = [p for p, _, _ in batch]
            outs: list[Any] = chat.lean.greedy_batch(prompts, chat.max_new_tokens, chat.eos)  # type: ignore[union-attr]
        except Exception as e:  # noqa: BLE001 - each caller re-raises it in its own thread
            outs = [e] * len(batch)
        self.batches.append(len(batch))
        for (_, done, box), out in zip(batch, outs, strict=True):
            box.append(out)
            done.set()
        with self._lock:
            if self._waiting:  # the next batch is led by the first request waiting
                _, done, box = self._waiting[0]
                box.append(self._LEAD)
                done.set()
            else:
                self._leading = False


class TransformersChat:
    """``chat(messages) -> ChatResult`` with a causal LM loaded from ``model_dir`` (``local_files_only``).

    The prompt is the tokenizer's chat template when it has one, else ``role: content`` lines ending
    in ``assistant:``. Tool specs are described in the prompt, never parsed back: the reply is text
    (a policy parses its decision from it). Greedy calls from several threads at once are decoded
    together (:class:`GreedyBatches`, up to ``max_batch`` rows); sampled ones are serialised by a lock.
    ``count_tokens`` uses the model's tokenizer and ``context_tokens`` its ``max_position_embeddings``,
    so a policy on this model renders its state in the tokens the model reads.
    """

    def __init__(
        self,
        model_dir: str | Path,
        max_new_tokens: int = 256,
        seed: int = 0,
        max_batch: int = 32,
        temperature: float = 0.0,
    ) -> None:
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
        self.temperature = temperature  # > 0: sample (seeded by ``seed`` on every call), else greedy
        self._torch = torch
        self._lock = threading.Lock()
        from orchestra.lm.decoder import LeanDecoder, stop_tokens

        # greedy calls on a model it covers: the same tokens as generate(), without its per-token machinery
        self.lean = None if LeanDecoder.covers(self.model) else LeanDecoder(self.model)
        self.eos = stop_tokens(self.model)
        self._batches = GreedyBatches(self, max_batch)

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
        enc = self.tokenizer(prompt, return_tensors="pt")
        n = int(enc["input_ids"].shape[1])
        if self.temperature == 0 and self.lean is not None and self.lean.fits(n, self.max_new_tokens):
            tokens = self._batches.decode(enc["input_ids"][0].tolist())
            new = self._torch.tensor(tokens, dtype=self._torch.long)
        else:
            with self._lock:
                new = self._generate(enc)[0, n:]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return ChatResult(
            content=text,
            prompt_tokens=int(enc["input_ids"].shape[1]),
            completion_tokens=int(new.shape[0]),
            latency_s=time.perf_counter() - t0,
        )
