"""Policy training: the tokenizer the small policy reads with (SFT and GRPO build on it)."""
