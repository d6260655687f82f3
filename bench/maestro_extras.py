"""Maestro's extra evaluations on the embedded benchmark: self-consistency, plug-and-play, pool scaling.

Usage: python bench/maestro_extras.py [--data data] [--params params.yaml] [--tasks N] [--k K]
           [--policy RECIPE]

- Self-consistency: the trained policy (``data/policy_<RECIPE>/model``, default dagrpo) samples K
  trajectories per task (temperature 0.7): pass@1, sc@K (majority vote), pass@K, beside greedy.
- Plug-and-play (Maestro*): the same policy and the oracle with an expert registry that adds an
  expert neither was built with (``vision_plus``: the careful vision routines under a new name,
  priced higher); accuracy with and without it.
- Pool scaling: the oracle on the orchestra system with the pool cut to its first N experts,
  N = 2 ... all.
Each run goes through ``orchestra.evaluation.runner.run_eval`` into a scratch folder. Prints the
tables and ``RESULT pool_curve=<acc at 2>..<acc at all> sc_gain=<sc@K - greedy>``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml


def plug_in_registry(out: Path) -> Path:
    """The shipped registry plus ``vision_plus`` (a copy of ``vision_expert`` under a new name)."""
    from orchestra.backends.registry import default_registry_path

    data = yaml.safe_load(default_registry_path().read_text(encoding="utf-8"))
    plus = dict(data["experts"]["vision_expert"])
    plus["description"] = "reads images carefully (a plug-in expert the policy never saw)"
    plus["price"] = {k: v * 1.5 for k, v in plus.get("price", {}).items()}
    data["experts"]["vision_plus"] = plus
    path = out / "experts_plus.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _run(params, bench: Path, out: Path, **kw) -> dict:  # type: ignore[no-untyped-def]
    from orchestra.evaluation.runner import EvalConfig, run_eval

    return run_eval(params, EvalConfig(benchmark=bench, out=out, **kw))


def cli() -> int:
    from orchestra.backends.pool import backend_pool
    from orchestra.config import data_root, load_params
    from orchestra.data.store import benchmark_file, model_dir

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--tasks", type=int, default=20, help="the first N benchmark tasks")
    ap.add_argument("--k", type=int, default=4, help="self-consistency samples")
    ap.add_argument("--policy", default="dagrpo", help="which trained recipe's model")
    args = ap.parse_args()
    params = load_params(args.params)
    root = args.data or data_root(args.params, params)
    bench = benchmark_file(root)
    model = model_dir(root, args.policy)
    trained = f"checkpoint:{model}" if (model / "config.json").is_file() else None
    common = {"limit": args.tasks, "concurrency": 2, "data_dir": root, "seed": params.train.seed}
    with tempfile.TemporaryDirectory(prefix=".bench-", dir=root.parent) as tmp:
        t = Path(tmp)
        em = {}
        if trained:
            print(f"self-consistency ({args.policy}, {args.tasks} tasks, K={args.k}):")
            greedy = _run(params, bench, t / "greedy", policy=trained, **common)
            sc = _run(params, bench, t / "sc", policy=trained, samples=args.k, **common)
            s = sc["self_consistency"]
            em["greedy"], em["sc"] = greedy["accuracy"]["em"]["mean"], s[f"sc_at_{args.k}"]
            print(
                f"  greedy {em['greedy']:.3f}  pass@1 {s['pass_at_1']:.3f}  sc@{args.k} {em['sc']:.3f}  "
                f"pass@{args.k} {s[f'pass_at_{args.k}']:.3f}",
                flush=True,
            )
        registry = plug_in_registry(t)
        print("plug-and-play (registry + vision_plus):")
        for name, pol in (("oracle", "oracle"), (args.policy, trained)):
            if pol is None:
                continue
            base = _run(params, bench, t / f"pp0_{name}", policy=pol, **common)["accuracy"]["em"]["mean"]
            plus = _run(params, bench, t / f"pp1_{name}", policy=pol, registry=registry, **common)
            plus_em = plus["accuracy"]["em"]["mean"]
            print(f"  {name:8s} shipped pool {base:.3f}  with vision_plus {plus_em:.3f}")
        n_all = len(backend_pool(params.agent, params.providers).names())
        curve = []
        print("pool scaling (orchestra + oracle):")
        for n in range(2, n_all + 1):
            acc = _run(params, bench, t / f"pool{n}", pool=n, **common)["accuracy"]["em"]["mean"]
            curve.append(acc)
            print(f"  N={n}: {acc:.3f}", flush=True)
    gain = em["sc"] - em["greedy"] if em else float("nan")
    print(f"RESULT pool_curve={'..'.join(f'{a:.2f}' for a in curve)} sc_gain={gain:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
