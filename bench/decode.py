"""Decode speed of the trained policy: generate() against the lean greedy decoder, on the same prompts.

Usage: python bench/decode.py [--data data] [--model DIR] [--prompts 64] [--max-new 384] [--batch 16]
                              [--clients 32] [--requests 160]

After ``make pipeline``: the first ``--prompts`` val states of ``decision_samples``, rendered as the
policy reads them (its saved view, its tokenizer's chat template), are decoded greedily three ways:
one at a time with ``model.generate()`` (as evaluation called the policy before), one at a time with
``orchestra.lm.decoder.LeanDecoder``, and ``--batch`` at a time with its batched decoder (what
concurrent calls get). Prints tokens/s of each and how many outputs equal generate()'s. Then
``orchestra serve``'s server on loopback answers ``--requests`` chat requests of 64 new tokens from
``--clients`` concurrent clients (the official ``openai`` client), once with concurrent calls decoded
one at a time (``max_batch`` 1) and once batched: requests/s and p50 latency of each. Final line:
``RESULT decode speedup=… batched_speedup=… identical=…/… serve_rps=… serve_rps_unbatched=…``
(target: the batched speedup >= 5 with every output identical).
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
from orchestra.data import store

TARGET = 5.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data"))
    ap.add_argument("--model", type=Path, default=None, help="default: <data>/policy_sft/model")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-new", type=int, default=384)
    ap.add_argument("--batch", type=int, default=16, help="rows decoded together by the batched decoder")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=160)
    args = ap.parse_args()
    model_dir = args.model or store.model_dir(args.data, "sft")
    agent = AgentParams()
    policy = lm_policy(
        ProviderSpec(kind="transformers", model=str(model_dir), max_new_tokens=args.max_new), agent
    )
    chat = policy.client
    if chat.lean is None:
        print("error: the lean decoder does not cover this model", file=sys.stderr)
        return 2
    rows = []
    with store.samples_file(args.data).open() as f:
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
    t0 = time.perf_counter()
    batched = []
    for i in range(0, len(prompts), args.batch):
        batched += chat.lean.greedy_batch(prompts[i : i + args.batch], args.max_new, eos)
    batch_s = time.perf_counter() - t0
    tokens = sum(len(o) for o in slow)
    same = sum(a == b for a, b in zip(slow, fast, strict=True))
    same_b = sum(a == b for a, b in zip(slow, batched, strict=True))
    rate_slow, rate_fast = tokens / slow_s, sum(len(o) for o in fast) / fast_s
    rate_batch = sum(len(o) for o in batched) / batch_s
    speedup, batched_speedup = rate_fast / rate_slow, rate_batch / rate_slow
    sizes = f"{min(map(len, prompts))}-{max(map(len, prompts))}"
    print(
        f"{len(prompts)} prompts ({sizes} tokens), {tokens} tokens out; "
        f"torch threads {torch.get_num_threads()}"
    )
    print(
        f"generate():            {slow_s:7.2f} s  {rate_slow:8.0f} tokens/s  "
        f"({1000 / rate_slow:.2f} ms a token)"
    )
    print(
        f"lean decoder, one:     {fast_s:7.2f} s  {rate_fast:8.0f} tokens/s  identical {same}/{len(prompts)}"
    )
    print(
        f"lean decoder, {args.batch:2d} rows: {batch_s:7.2f} s  {rate_batch:8.0f} tokens/s  "
        f"identical {same_b}/{len(prompts)}"
    )
    rps_one, p50_one = serve_rate(args, model_dir, 1)
    rps, p50 = serve_rate(args, model_dir, args.clients)
    print(
        f"serve, {args.clients} clients, decoded one at a time: {rps_one:6.2f} requests/s, "
        f"p50 {p50_one:.2f} s"
    )
    print(f"serve, {args.clients} clients, batched:               {rps:6.2f} requests/s, p50 {p50:.2f} s")
    passed = batched_speedup >= TARGET and same == same_b == len(prompts)
    print(
        f"RESULT decode pass={str(passed).lower()} speedup={speedup:.2f} "
        f"batched_speedup={batched_speedup:.2f} identical={min(same, same_b)}/{len(prompts)} "
        f"generate_tok_s={rate_slow:.0f} lean_tok_s={rate_fast:.0f} batched_tok_s={rate_batch:.0f} "
        f"serve_rps={rps:.2f} serve_rps_unbatched={rps_one:.2f} target={TARGET:g}"
    )
    return 0 if passed else 1


def serve_rate(args: argparse.Namespace, model_dir: Path, max_batch: int) -> tuple[float, float]:
    """(requests/s, p50 seconds) of ``orchestra serve``'s server on ``model_dir`` answering
    ``--requests`` requests of 64 new tokens from ``--clients`` threads at once."""
    import statistics
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI

    from orchestra.agent.serve import ModelResponder, start_server
    from orchestra.lm.transformers_chat import TransformersChat

    chat = TransformersChat(model_dir, max_new_tokens=64, max_batch=max_batch)
    server = start_server(ModelResponder(chat, "policy"))
    try:
        client = OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=600)

        def ask(k: int) -> float:
            t = time.perf_counter()
            msg = [{"role": "user", "content": f"delegate E{k % 9 + 1} count the shapes in #M1"}]
            client.chat.completions.create(model="policy", messages=msg, max_tokens=64)  # type: ignore[arg-type]
            return time.perf_counter() - t

        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            lat = list(pool.map(ask, range(args.requests)))
        wall = time.perf_counter() - t0
    finally:
        server.close()
    return len(lat) / wall, statistics.median(lat)


if __name__ == "__main__":
    sys.exit(main())
