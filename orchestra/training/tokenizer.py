"""A byte-level BPE tokenizer trained on the policy's own text, with a chat template (HF `tokenizers`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from orchestra.errors import OrchestraError

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "TokenizerError", "load_tokenizer", "train_tokenizer"]

#: pad, end of a message (also eos), and one marker per chat role.
SPECIAL_TOKENS = ("<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>")

#: ``<|role|>content<|end|>`` per message; a generation prompt opens ``<|assistant|>``.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class TokenizerError(OrchestraError):
    """A tokenizer cannot be trained (no text) or loaded."""


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4000, min_frequency: int = 2):  # type: ignore[no-untyped-def]
    """A ``PreTrainedTokenizerFast``: byte-level BPE of ``vocab_size`` trained on ``texts`` (same
    texts in the same order -> the same merges), the special tokens above and :data:`CHAT_TEMPLATE`.
    Byte-level, so any text encodes (no unknown token)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [t for t in texts if t]
    if not corpus:
        raise TokenizerError("no text to train a tokenizer on")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(  # words split at whitespace only: names stay whole
        [
            pre_tokenizers.Split(Regex(r" ?[^\s]+|\s+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>", bos_token=None, unk_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def load_tokenizer(path: str | Path):  # type: ignore[no-untyped-def]
    """A tokenizer saved by ``save_pretrained`` (a model directory), offline."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(Path(path), local_files_only=True)
    except (OSError, ValueError) as e:
        raise TokenizerError(f"{path}: cannot load a tokenizer: {e}") from e
