"""Decode speed of the trained policy: generate() against the lean greedy decoder, on the same prompts.

Usage: python bench/decode.py [--data data] [--model DIR] [--prompts 64] [--max-new 384]

After ``make pipeline``: the first ``--prompts`` val states of ``decision_samples``, rendered as the
policy reads them (its saved view, its tokenizer's chat template), are decoded greedily once each,
one at a time as evaluation calls the policy: first with ``model.generate()``, then with
``orchestra.backends.decoder.LeanDecoder``. Prints tokens/s of each, how many outputs are identical,
and ``RESULT decode speedup=… identical=…/…`` (target: speedup >= 5, every output identical).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from orchestra.agent.lm_policy import lm_policy
from orchestra.agent.state import OrchestraState
from orchestra.config import AgentParams, ProviderSpec

TARGET = 5.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data"))
    ap.add_argument("--model", type=Path, default=None, help="default: <data>/policy_sft/model")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-new", type=int, default=384)
    args = ap.parse_args()
    model_dir = args.model or args.data / "policy_sft" / "model"
    agent = AgentParams()
    policy = lm_policy(
        ProviderSpec(kind="transformers", model=str(model_dir), max_new_tokens=args.max_new), agent
    )
    chat = policy.client
    if chat.lean is None:
        print("error: the lean decoder does not cover this model", file=sys.stderr)
        return 2
    rows = []
    with (args.data / "decision_samples" / "samples.jsonl").open() as f:
        for line in f:
            row = json.loads(line)
            if row["split"] == "val":
                rows.append(row)
            if len(rows) >= args.prompts:
                break
    prompts = [
        chat.tokenizer(chat._prompt(policy.render(OrchestraState.model_validate(r["state"]), agent), None))[
            "input_ids"
        ]
        for r in rows
    ]
    prompts = [p for p in prompts if chat.lean.fits(len(p), args.max_new)]
    eos, pad = chat.eos, chat.tokenizer.pad_token_id or 0
    t0 = time.perf_counter()
    slow = []
    with torch.no_grad():
        for p in prompts:
            out = chat.model.generate(
                torch.tensor([p]), max_new_tokens=args.max_new, do_sample=False, pad_token_id=pad
            )
            slow.append(out[0, len(p) :].tolist())
    slow_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fast = [chat.lean.greedy(p, args.max_new, eos) for p in prompts]
    fast_s = time.perf_counter() - t0
    tokens = sum(len(o) for o in slow)
    same = sum(a == b for a, b in zip(slow, fast, strict=True))
    rate_slow, rate_fast = tokens / slow_s, sum(len(o) for o in fast) / fast_s
    speedup = rate_fast / rate_slow
    sizes = f"{min(map(len, prompts))}-{max(map(len, prompts))}"
    print(f"{len(prompts)} prompts ({sizes} tokens), {tokens} tokens out")
    print(f"generate():   {slow_s:7.2f} s  {rate_slow:8.0f} tokens/s  ({1000 / rate_slow:.2f} ms a token)")
    print(f"lean decoder: {fast_s:7.2f} s  {rate_fast:8.0f} tokens/s  ({1000 / rate_fast:.2f} ms a token)")
    print(f"identical outputs: {same} of {len(prompts)}; torch threads {torch.get_num_threads()}")
    passed = speedup >= TARGET and same == len(prompts)
    print(
        f"RESULT decode pass={str(passed).lower()} speedup={speedup:.2f} identical={same}/{len(prompts)} "
        f"generate_tok_s={rate_slow:.0f} lean_tok_s={rate_fast:.0f} target={TARGET:g}"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
