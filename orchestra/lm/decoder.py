"""A lean greedy decoder for a Qwen3 causal LM (the trained policy): its own weights run as a few torch
ops per token with a preallocated KV cache and a precomputed rotary table, none of ``generate()``'s
per-token machinery (logits processors, stopping criteria, cache objects, output records).

It computes what ``Qwen3ForCausalLM`` computes, op for op in the same order (RMSNorm in float32, q/k
norms before the rotary embedding, PyTorch's scaled-dot-product attention, SiLU-gated MLP, the last
position's logits), so the greedy tokens are ``generate(do_sample=False)``'s: ``tests/test_decoder.py``
checks them on random models and ``bench/decode.py`` on the trained policy's own prompts. A model it
does not cover (another architecture, another attention implementation, a rope scaling, a sliding
window) is reported by :meth:`LeanDecoder.covers`, and the caller keeps ``generate()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["LeanDecoder", "stop_tokens"]


def stop_tokens(model: Any) -> set[int]:
    """The token ids that end a generation of ``model`` (its generation config's eos ids)."""
    eos = model.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [] if eos is None else [eos])


class LeanDecoder:
    """``greedy(prompt_ids, max_new_tokens, eos)``: the tokens ``generate()`` would add, greedily."""

    def __init__(self, model: Any) -> None:
        why = self.covers(model)
        if why:
            raise ValueError(f"the lean decoder does not cover this model: {why}")
        m, c = model.model, model.config
        self.dtype = model.lm_head.weight.dtype
        self.device = model.lm_head.weight.device
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.eps, self.max_len = c.rms_norm_eps, c.max_position_embeddings
        self.embed, self.norm, self.head = m.embed_tokens.weight, m.norm.weight, model.lm_head.weight
        self.scaling = m.layers[0].self_attn.scaling
        self.inter = m.layers[0].mlp.gate_proj.weight.shape[0]
        self.layers = [
            (
                layer.input_layernorm.weight,
                torch.cat(
                    [
                        layer.self_attn.q_proj.weight,
                        layer.self_attn.k_proj.weight,
                        layer.self_attn.v_proj.weight,
                    ]
                ),
                layer.self_attn.q_norm.weight,
                layer.self_attn.k_norm.weight,
                layer.self_attn.o_proj.weight,
                layer.post_attention_layernorm.weight,
                torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
                layer.mlp.down_proj.weight,
            )
            for layer in m.layers
        ]
        positions = torch.arange(self.max_len, device=self.device).float()[:, None]
        freqs = positions * m.rotary_emb.inv_freq.to(device=self.device, dtype=torch.float)[None]
        table = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = table.cos().to(self.dtype), table.sin().to(self.dtype)

    @staticmethod
    def covers(model: Any) -> str:
        """Why this decoder cannot stand in for ``model.generate`` ('' when it can)."""
        c = getattr(model, "config", None)
        if c is None or getattr(c, "model_type", None) != "qwen3":
            return f"model type {getattr(c, 'model_type', None)!r} (only qwen3)"
        if getattr(c, "_attn_implementation", None) != "sdpa":
            return f"attention implementation {getattr(c, '_attn_implementation', None)!r} (only sdpa)"
        rope = getattr(c, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default":
            return f"rope type {rope.get('rope_type')!r}"
        if getattr(c, "use_sliding_window", False) or "sliding_attention" in (
            getattr(c, "layer_types", None) or []
        ):
            return "a sliding attention window"
        if getattr(c, "attention_bias", False):
            return "attention biases"
        return ""

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(x.dtype)

    @staticmethod
    def _rotate(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def _kv(self, x: torch.Tensor) -> torch.Tensor:
        """Key or value heads repeated for grouped-query attention (as ``repeat_kv``)."""
        n = self.heads // self.kv_heads
        if n == 1:
            return x
        b, h, t, d = x.shape
        return x[:, :, None].expand(b, h, n, t, d).reshape(b, h * n, t, d)

    def _step(
        self,
        ids: torch.Tensor,
        start: int,
        cache: list[tuple[torch.Tensor, torch.Tensor]],
        positions: torch.Tensor | None = None,
        allowed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The next-token logits after ``ids`` (b, t) at cache slots ``start``.., the cache filled. One
        unpadded row: rotary positions are the slots and attention is causal. Several rows: each row's
        rotary ``positions`` (b, t) and the keys each query may see, ``allowed`` (b, 1, t, start + t)."""
        b, t = ids.shape
        end = start + t
        q_dim, kv_dim = self.heads * self.head_dim, self.kv_heads * self.head_dim
        if positions is None:
            cos, sin = self.cos[start:end], self.sin[start:end]
        else:
            cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]
        x = F.embedding(ids, self.embed)
        for (norm1, wqkv, q_norm, k_norm, wo, norm2, wgu, wd), (keys, values) in zip(
            self.layers, cache, strict=True
        ):
            qkv = F.linear(self._rms(x, norm1), wqkv)
            q = self._rms(qkv[..., :q_dim].view(b, t, self.heads, self.head_dim), q_norm).transpose(1, 2)
            k = self._rms(qkv[..., q_dim : q_dim + kv_dim].view(b, t, self.kv_heads, self.head_dim), k_norm)
            v = qkv[..., q_dim + kv_dim :].view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            k = k.transpose(1, 2)
            q = q * cos + self._rotate(q) * sin
            keys[:, :, start:end] = k * cos + self._rotate(k) * sin
            values[:, :, start:end] = v
            out = F.scaled_dot_product_attention(
                q,
                self._kv(keys[:, :, :end]),
                self._kv(values[:, :, :end]),
                attn_mask=allowed,
                scale=self.scaling,
                is_causal=allowed is None and t > 1,
            )
            x = x + F.linear(out.transpose(1, 2).reshape(b, t, q_dim), wo)
            gate_up = F.linear(self._rms(x, norm2), wgu)
            x = x + F.linear(F.silu(gate_up[..., : self.inter]) * gate_up[..., self.inter :], wd)
        return F.linear(self._rms(x[:, -1:], self.norm), self.head)[:, -1]

    def greedy_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos: Iterable[int]
    ) -> list[list[int]]:
        """:meth:`greedy` of several prompts decoded together (left-padded; each row's positions start
        at its first token, padding is never attended to); a finished row leaves the batch."""
        if len(prompts) == 1:
            return [self.greedy(prompts[0], max_new_tokens, eos)]
        lens = [len(p) for p in prompts]
        width = max(lens)
        if not self.fits(width, max_new_tokens):
            raise ValueError(f"{width} + {max_new_tokens} tokens exceed the context of {self.max_len}")
        dev, stop = self.device, set(eos)
        pad = torch.tensor([width - n for n in lens], device=dev)
        ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long, device=dev)
        slots = torch.arange(width + max_new_tokens, device=dev)
        valid = slots[None] >= pad[:, None]  # (b, cap): a key slot holding a real token
        causal = slots[:width, None] >= slots[None, :width]
        eye = torch.eye(width, dtype=torch.bool, device=dev)  # a padding query sees itself: no empty row
        allowed = (valid[:, None, None, :width] & causal) | eye
        shape = (len(prompts), self.kv_heads, width + max_new_tokens, self.head_dim)
        new = dict(dtype=self.dtype, device=dev)
        cache = [(torch.zeros(shape, **new), torch.zeros(shape, **new)) for _ in self.layers]  # type: ignore[arg-type]
        out: list[list[int]] = [[] for _ in prompts]
        rows = list(range(len(prompts)))
        with torch.inference_mode():
            logits = self._step(ids, 0, cache, (slots[None, :width] - pad[:, None]).clamp(min=0), allowed)
            for k in range(max_new_tokens):
                tokens = logits.argmax(-1).tolist()
                keep = []
                for i, (row, token) in enumerate(zip(rows, tokens, strict=True)):
                    out[row].append(token)
                    if token not in stop and k + 1 < max_new_tokens:
                        keep.append(i)
                if not keep:
                    break
                if len(keep) < len(rows):  # finished rows leave: the batch stays dense
                    at = torch.tensor(keep, device=dev)
                    cache = [(kk.index_select(0, at), vv.index_select(0, at)) for kk, vv in cache]
                    pad, valid = pad.index_select(0, at), valid.index_select(0, at)
                    rows = [rows[i] for i in keep]
                    tokens = [tokens[i] for i in keep]
                slot = width + k
                step = torch.tensor(tokens, dtype=torch.long, device=dev)[:, None]
                logits = self._step(
                    step, slot, cache, (slot - pad)[:, None], valid[:, None, None, : slot + 1]
                )
        return out

    def fits(self, prompt_tokens: int, max_new_tokens: int) -> bool:
        """Whether the prompt and the longest completion fit the rotary table (the model's context)."""
        return prompt_tokens + max_new_tokens <= self.max_len

    def greedy(self, prompt: Iterable[int], max_new_tokens: int, eos: Iterable[int]) -> list[int]:
        """The greedy continuation of ``prompt``: up to ``max_new_tokens`` tokens, the first eos included."""
        ids = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)
        if not self.fits(ids.shape[1], max_new_tokens):
            raise ValueError(f"{ids.shape[1]} + {max_new_tokens} tokens exceed the context of {self.max_len}")
        stop = set(eos)
        shape = (1, self.kv_heads, ids.shape[1] + max_new_tokens, self.head_dim)
        new = dict(dtype=self.dtype, device=self.device)
        cache = [(torch.zeros(shape, **new), torch.zeros(shape, **new)) for _ in self.layers]  # type: ignore[arg-type]
        out: list[int] = []
        with torch.inference_mode():
            logits = self._step(ids, 0, cache)
            for k in range(max_new_tokens):
                token = int(logits.argmax(-1))
                out.append(token)
                if token in stop or k + 1 == max_new_tokens:
                    break
                step = torch.tensor([[token]], dtype=torch.long, device=self.device)
                logits = self._step(step, ids.shape[1] + k, cache)
        return out
