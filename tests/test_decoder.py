"""The lean greedy decoder gives generate()'s tokens: on random Qwen3 models (near-flat logits, the
hardest case for an op-order slip), and through the transformers chat client a trained policy uses."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

from orchestra.lm.decoder import LeanDecoder


def _model(tmp: Path, layers: int, heads: int, kv_heads: int) -> Qwen3ForCausalLM:
    config = Qwen3Config(
        vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=64 // heads,
        max_position_embeddings=256, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(layers * 10 + heads)
    Qwen3ForCausalLM(config).save_pretrained(tmp)
    return AutoModelForCausalLM.from_pretrained(tmp, local_files_only=True).eval()  # as policies load


@pytest.mark.parametrize(("layers", "heads", "kv_heads"), [(1, 2, 2), (2, 4, 4), (2, 4, 2)])
def test_greedy_tokens_are_generates(tmp_path: Path, layers: int, heads: int, kv_heads: int) -> None:
    model = _model(tmp_path, layers, heads, kv_heads)
    lean = LeanDecoder(model)
    rng = torch.Generator().manual_seed(5)
    for n in (1, 7, 33, 120, 200):
        prompt = torch.randint(2, 300, (n,), generator=rng).tolist()
        for cap in (1, 12, 50):
            ids = torch.tensor([prompt])
            with torch.no_grad():
                want = model.generate(ids, max_new_tokens=cap, do_sample=False, pad_token_id=0)[
                    0, n:
                ].tolist()
            assert lean.greedy(prompt, cap, {1}) == want, (n, cap)
    assert not lean.fits(250, 10)  # past the context: the caller keeps generate()
    with pytest.raises(ValueError, match="exceed the context of 256"):
        lean.greedy([5] * 250, 10, {1})


def test_an_uncovered_model_is_named(tmp_path: Path) -> None:
    model = _model(tmp_path, 1, 2, 2)
    model.config._attn_implementation = "eager"
    assert "attention implementation 'eager'" in LeanDecoder.covers(model)
    with pytest.raises(ValueError, match="does not cover"):
        LeanDecoder(model)


def test_the_chat_client_answers_the_same_with_and_without_it(tmp_path: Path) -> None:
    from orchestra.config import PolicyInit
    from orchestra.lm.transformers_chat import TransformersChat
    from orchestra.training.examples import PolicyView
    from orchestra.training.policy import build_policy, save_policy

    texts = [f"delegate E{k} count the shapes of colour red in #M{k % 3 + 1} finish #E{k}" for k in range(60)]
    spec = PolicyInit(vocab_size=300, hidden_size=32, layers=2, heads=2, max_length=256)
    model, tokenizer = build_policy(spec, texts, seed=3)
    save_policy(model, tokenizer, PolicyView(), tmp_path / "policy")
    chat = TransformersChat(tmp_path / "policy", max_new_tokens=40)
    assert chat.lean is not None
    messages = [{"role": "system", "content": "lines"}, {"role": "user", "content": texts[7]}]
    fast = chat.chat(messages)
    chat.lean = None
    slow = chat.chat(messages)
    assert (fast.content, fast.completion_tokens) == (slow.content, slow.completion_tokens)
    assert fast.completion_tokens > 0


@pytest.mark.parametrize(("layers", "heads", "kv_heads"), [(1, 2, 2), (2, 4, 2)])
def test_a_batch_gives_each_rows_greedy_tokens(
    tmp_path: Path, layers: int, heads: int, kv_heads: int
) -> None:
    """Prompts of different lengths decoded together (left padding, rows leaving as they finish) give
    what each gives alone, which is generate()'s (above)."""
    model = _model(tmp_path, layers, heads, kv_heads)
    lean = LeanDecoder(model)
    rng = torch.Generator().manual_seed(9)
    prompts = [torch.randint(2, 300, (n,), generator=rng).tolist() for n in (1, 7, 33, 120, 200, 15, 15)]
    for eos in ({1}, set(range(2, 60))):  # the second stops rows at different steps
        for cap in (1, 12, 50):
            batch = lean.greedy_batch(prompts, cap, eos)
            assert batch == [lean.greedy(p, cap, eos) for p in prompts], (eos, cap)
        if len(eos) > 1:
            assert len({len(b) for b in batch}) > 1  # rows did finish apart
    with pytest.raises(ValueError, match="exceed the context"):
        lean.greedy_batch([[5] * 250, [5]], 10, {1})


def test_concurrent_chat_calls_are_decoded_together_with_the_same_answers(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from orchestra.config import PolicyInit
    from orchestra.lm.transformers_chat import TransformersChat
    from orchestra.training.examples import PolicyView
    from orchestra.training.policy import build_policy, save_policy

    texts = [f"delegate E{k} count the shapes of colour red in #M{k % 3 + 1} finish #E{k}" for k in range(60)]
    spec = PolicyInit(vocab_size=300, hidden_size=32, layers=2, heads=2, max_length=256)
    model, tokenizer = build_policy(spec, texts, seed=3)
    save_policy(model, tokenizer, PolicyView(), tmp_path / "policy")
    chat = TransformersChat(tmp_path / "policy", max_new_tokens=40, max_batch=8)
    asks = [[{"role": "user", "content": texts[k]}] for k in range(24)]
    alone = [chat.chat(m).content for m in asks]
    with ThreadPoolExecutor(12) as pool:
        together = list(pool.map(lambda m: chat.chat(m).content, asks))
    assert together == alone
    assert max(chat._batches.batches) > 1 and max(chat._batches.batches) <= 8
    assert sum(chat._batches.batches) == 48
