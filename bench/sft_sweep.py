"""SFT sweep: model size x steps x data volume on this machine, scored on the val split.

Usage: python bench/sft_sweep.py [--data data] [--params params.yaml]
           [--point HIDDEN,LAYERS,VOCAB,STEPS,TRAIN_FRACTION[,REPEATS] ...] [--out FILE.md]

Each point trains the SFT recipe from scratch (the params' other settings; a VOCAB-token BPE) for
STEPS optimizer steps on the first TRAIN_FRACTION of the train split's decision samples (by seed, so a
smaller volume is fewer seeds, not fewer states per seed), each first decision REPEATS times (default
1; ``train.sft.first_decision_repeats``), in a scratch data root and MLflow store, and reports the
parameter count, wall minutes, tokens per second and the val split's exact, structural, parse and
validity rates, the exact rate on targets never seen in training, and exact / structural on the
first decisions (the whole plan) and exact on the finishes.
Writes the table as Markdown (``--out``) and prints ``RESULT best=<point> exact=<rate>``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from orchestra.data.store import SAMPLES_FILE
from orchestra.stages import DECISION_SAMPLES, POLICY_SFT

DEFAULT_POINTS = ("128,2,1000,1300,1.0,1", "128,2,1000,1300,1.0,6", "128,2,1000,1300,1.0,12")


def _scratch(root: Path, tmp: Path, fraction: float) -> Path:
    out = tmp / "data"
    (out / DECISION_SAMPLES).mkdir(parents=True)
    rows = [json.loads(x) for x in (root / DECISION_SAMPLES / SAMPLES_FILE).open(encoding="utf-8")]
    seeds = sorted({r["seed_id"] for r in rows if r["split"] == "train"})
    keep = set(seeds[: max(1, round(len(seeds) * fraction))])
    text = "".join(json.dumps(r) + "\n" for r in rows if r["split"] != "train" or r["seed_id"] in keep)
    (out / DECISION_SAMPLES / SAMPLES_FILE).write_text(text, encoding="utf-8")
    return out


def _by_type(data: Path) -> dict[str, float]:
    """Exact (and structural) rates of the val decisions per type: first (no evidence yet), finish."""
    samples = {}
    for line in (data / DECISION_SAMPLES / SAMPLES_FILE).open(encoding="utf-8"):
        row = json.loads(line)
        if row["split"] == "val":
            first = not row["state"].get("context")
            samples[row["sample_id"]] = "first" if first else row["decision"].get("kind", "delegate")
    rows = [json.loads(x) for x in (data / POLICY_SFT / "val_decisions.jsonl").open(encoding="utf-8")]
    out = {}
    for kind, key in (("first", "exact"), ("first", "structural"), ("finish", "exact")):
        got = [r[key] for r in rows if samples[r["sample_id"]] == kind]
        out[f"{kind}_{key}"] = sum(got) / len(got) if got else 0.0
    return out


def run_point(  # type: ignore[no-untyped-def]
    params, root: Path, hidden: int, layers: int, vocab: int, steps: int, fraction: float, repeats: int = 1
) -> dict:
    import mlflow

    from orchestra.training.sft import train_sft

    with tempfile.TemporaryDirectory(prefix=".bench-", dir=root.parent) as tmp:
        data = _scratch(root, Path(tmp), fraction)
        db = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        train = params.train.model_copy(
            update={
                "policy": params.train.policy.model_copy(
                    update={"hidden_size": hidden, "layers": layers, "vocab_size": vocab}
                ),
                "sft": params.train.sft.model_copy(
                    update={"max_steps": steps, "save_steps": steps, "first_decision_repeats": repeats}
                ),
            }
        )
        p = params.model_copy(
            update={"train": train, "tracking": params.tracking.model_copy(update={"mlflow_uri": db})}
        )
        t0 = time.perf_counter()
        res = train_sft(p, data)
        run = mlflow.MlflowClient(db).get_run(res.run_id or "")
        wall = sum(
            m.value for m in mlflow.MlflowClient(db).get_metric_history(res.run_id or "", "step_wall_s")
        )
        tokens = run.data.metrics.get("num_tokens", 0.0)
        return {
            "hidden": hidden,
            "layers": layers,
            "vocab": vocab,
            "steps": steps,
            "fraction": fraction,
            "repeats": repeats,
            "samples": res.samples,
            "params_m": float(run.data.tags.get("orchestra.params_n", 0)) / 1e6,
            "train_min": wall / 60,
            "total_min": (time.perf_counter() - t0) / 60,
            "tokens_per_s": tokens / wall if wall else 0.0,
            **{k[4:]: v for k, v in res.metrics.items() if k.startswith("val_")},
            **_by_type(data),
        }


def main() -> int:
    from orchestra.config import data_root, load_params

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument(
        "--point", action="append", default=None, help="HIDDEN,LAYERS,VOCAB,STEPS,TRAIN_FRACTION[,REPEATS]"
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    params = load_params(args.params)
    root = (args.data or data_root(args.params, params)).resolve()
    head = "| hidden | layers | vocab | params (M) | steps | train data | first x | samples | train min | tok/s | exact | structural | parse | valid | exact unseen (n) | first exact / struct | finish exact |"  # noqa: E501
    lines = [head, "|" + "---|" * 17]
    best: tuple[float, str] = (-1.0, "")
    for point in args.point or DEFAULT_POINTS:
        h, la, vo, st, fr, *rep = point.split(",")
        r = run_point(params, root, int(h), int(la), int(vo), int(st), float(fr), int(rep[0]) if rep else 1)
        lines.append(
            f"| {r['hidden']} | {r['layers']} | {r['vocab']} | {r['params_m']:.2f} | {r['steps']} | "
            f"{r['fraction']:.0%} | {r['repeats']} | "
            f"{r['samples']} | {r['train_min']:.1f} | {r['tokens_per_s']:.0f} | {r['exact']:.3f} | "
            f"{r['structural']:.3f} | {r['parse']:.3f} | {r['valid']:.3f} | "
            f"{r['exact_unseen']:.3f} ({r['n_unseen']:.0f}) | "
            f"{r['first_exact']:.3f} / {r['first_structural']:.3f} | {r['finish_exact']:.3f} |"
        )
        print(lines[-1], flush=True)
        best = max(best, (r["exact"], point))
    table = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(table, encoding="utf-8")
    print(table)
    print(f"RESULT best={best[1]} exact={best[0]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
