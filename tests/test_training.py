"""Policy training: the lines format, canonical decisions, the three recipes, MLflow, resume."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestra.agent.decision import ErrorKind, ParseError, parse_decision, render_decision
from orchestra.config import Params, parse_params
from orchestra.data.store import read_run_record
from orchestra.schemas import Delegate, Finish, SubTask
from orchestra.training.examples import canonical, structure

ROOT = Path(__file__).resolve().parents[1]


def _delegate(*nodes: tuple[str, str, list[str]]) -> Delegate:
    return Delegate(
        subtasks=[
            SubTask(id=i, goal=g, depends_on=d, tools=["code_executor"], backend="code_expert")
            for i, g, d in nodes
        ]
    )


def test_lines_format_round_trips_and_names_its_errors() -> None:
    d = Delegate(
        subtasks=[
            SubTask(id="E1", goal="read the caption number in #M1", modalities=["M1"], tools=["video_text"],
                    backend="video_fast"),
            SubTask(id="E2", goal="compute  abs(#E1 - 3)", depends_on=["E1"], tools=["code_executor"]),
            SubTask(id="E3", goal="ask", backend="web_expert", skill="search"),
        ]
    )  # fmt: skip
    text = render_decision(d, "lines")
    assert text.splitlines() == [
        "E1 video_fast video_text M1 - read the caption number in #M1",
        "E2 - code_executor - E1 compute abs(#E1 - 3)",
        "E3 web_expert@search - - - ask",
    ]
    back = parse_decision(text, fmt="lines")
    assert isinstance(back, Delegate) and back.subtasks[1].goal == "compute abs(#E1 - 3)"
    assert back.subtasks[2].skill == "search" and back.subtasks[0].modalities == ["M1"]
    assert parse_decision("= #E7\n", fmt="lines") == Finish(answer="#E7")
    for bad, kind in (
        ("", "bad_format"),
        ("=  ", "no_answer"),
        ("E1 a b", "bad_format"),
        ("X1 - - - - go", "bad_id"),
    ):
        err = parse_decision(bad, fmt="lines")
        assert isinstance(err, ParseError) and err.kind == ErrorKind(kind), (bad, err)


def test_canonical_ignores_numbering_and_order_but_not_content() -> None:
    a = _delegate(("E1", "compute 2 + 3", []), ("E2", "compute #E1 * 4", ["E1"]))
    renumbered = _delegate(("E8", "compute #E7 * 4", ["E7"]), ("E7", "compute 2 + 3", []))
    assert canonical(a) == canonical(renumbered)
    other_goal = _delegate(("E1", "compute 2 + 3", []), ("E2", "compute #E1 * 5", ["E1"]))
    assert canonical(a) != canonical(other_goal) and structure(a) == structure(other_goal)
    unchained = _delegate(("E1", "compute 2 + 3", []), ("E2", "compute 4", []))
    assert structure(a) != structure(unchained)
    assert canonical(Finish(answer=" #E2 ")) == canonical(Finish(answer="#e2"))


def test_grpo_params_are_checked() -> None:
    with pytest.raises(Exception, match="beta"):
        parse_params({"train": {"dagrpo": {"beta": 0}}})
    with pytest.raises(Exception, match="save_steps"):
        parse_params({"train": {"grpo": {"steps_per_generation": 2, "save_steps": 3}}})


def test_gpu_path_configs_build(tmp_path: Path) -> None:
    """Not run on a GPU here: the TRL config the GPU path gets (vLLM server generation, bf16 where
    CUDA is) builds from params, and the multi-GPU accelerate config is one accelerate reads."""
    from accelerate.commands.config.config_args import ClusterConfig

    from orchestra.training.grpo import grpo_config

    server = {"use_vllm": True, "vllm_mode": "server", "vllm_server_url": "http://gpu-node:8000"}
    gp = parse_params({"train": {"dagrpo": server}}).train.dagrpo
    cfg = grpo_config(gp, tmp_path, 17, [1, 1, 1, 2], gp.save_steps)
    assert cfg.use_vllm and cfg.vllm_mode == "server" and cfg.beta == gp.beta > 0
    assert cfg.vllm_server_base_url == "http://gpu-node:8000"
    assert cfg.num_generations == gp.num_generations and cfg.reward_weights == [1, 1, 1, 2]
    assert cfg.use_cpu and not cfg.bf16  # this machine has no GPU: fp32 on CPU
    acc = ClusterConfig.from_yaml_file(str(ROOT / "configs" / "accelerate_multi_gpu.yaml"))
    assert acc.distributed_type == "MULTI_GPU" and acc.num_processes == 8 and acc.mixed_precision == "bf16"


# --- the recipes, for real, on the small world's decision samples ------------------------------------


def _root(built: tuple[Path, str], tmp_path: Path) -> Path:
    src, _ = built
    root = tmp_path / "data"
    root.mkdir(parents=True)
    (root / "seed_tasks").symlink_to(src / "seed_tasks")
    for name in ("verified_samples", "decision_samples"):
        shutil.copytree(src / name, root / name)
    return root


def _params(
    tmp_path: Path, root: Path, tiny: dict[str, Any], providers: dict[str, Any] | None = None, **train: Any
) -> Params:
    return parse_params(
        {
            "paths": {"data_dir": str(root)},
            "train": {**tiny, **train},
            "tools": {"cache": False, "workers": 0},
            "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "test"},
            **({"providers": providers} if providers else {}),
        }
    )


def _client(tmp_path: Path) -> Any:
    import mlflow

    return mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def _runs(tmp_path: Path) -> list[Any]:
    client = _client(tmp_path)
    exp = client.get_experiment_by_name("test")
    return client.search_runs([exp.experiment_id]) if exp else []


def _weights(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.slow
def test_three_recipes_train_publish_and_nest_in_mlflow(
    built: tuple[Path, str], tmp_path: Path, serve_process: Any, tiny_train: dict[str, Any]
) -> None:
    """SFT, then DA-GRPO scored by an ``openai`` reward model (``orchestra serve --script`` giving
    scores that differ within each group, so the tiny policy's gradient is not zero), then outcome GRPO."""
    from orchestra.agent.lm_policy import lm_policy
    from orchestra.config import ProviderSpec
    from orchestra.training.run import train_recipe

    root = _root(built, tmp_path)
    scores = [{"format": 1, "validity": 1, "tools": t, "decision": t} for t in (3, 0, 2, 1) * 20]
    script = tmp_path / "rubric.jsonl"
    script.write_text("".join(json.dumps({"content": json.dumps(x)}) + "\n" for x in scores))
    with serve_process(script, name="rubric") as (_, url):
        rubric = {"kind": "openai", "base_url": url, "model": "rubric"}
        params = _params(
            tmp_path,
            root,
            tiny_train,
            providers={"builtin": {"kind": "builtin"}, "rubric": rubric},
            dagrpo={**tiny_train["dagrpo"], "reward_provider": "rubric"},
        )
        sft = train_recipe("sft", params, root)
        dag = train_recipe("dagrpo", params, root)
        grpo = train_recipe("grpo", params, root)
    assert sft.steps == 60 and (root / "policy_sft" / "model" / "orchestra_policy.json").is_file()
    assert not (root / "policy_sft" / "checkpoints").exists()  # removed once the model is published
    assert 0 <= sft.metrics["val_parse"] <= 1 and sft.metrics["val_n"] > 0
    assert sft.metrics["val_n_unseen"] < sft.metrics["val_n"]
    assert "val_rubric_reward" not in sft.metrics  # DA-GRPO's rubric and its settings are DA-GRPO's
    summary = json.loads((root / "policy_sft" / "summary.json").read_text())
    assert summary["steps"] == 60 and "mlflow_run_id" not in summary  # the stage's run record holds it
    assert sft.summary()["run"]["mlflow_run_id"] == sft.run_id

    start = _weights(root / "policy_sft" / "model")
    changed = {}
    for res in (dag, grpo):
        assert res.steps == 2
        moved = _weights(res.model_dir)
        changed[res.recipe] = any(not (moved[k] == start[k]).all() for k in start)
    assert changed["dagrpo"], "DA-GRPO left every weight unchanged though its rewards differ in each group"
    assert {"val_rubric_reward", "val_exact", "val_parse"} <= set(dag.metrics)
    assert 0 <= dag.metrics["val_rubric_reward"] <= 1

    runs = {r.data.tags.get("orchestra.recipe"): r for r in _runs(tmp_path)}
    # outcome GRPO's rewards come from real rollouts of a 60-step policy: they may tie in every group
    # (no advantage, no update); then TRL must have said so, else the weights must have moved
    history = _client(tmp_path).get_metric_history(runs["grpo"].info.run_id, "frac_reward_zero_std")
    assert history and (changed["grpo"] or all(m.value == 1.0 for m in history)), (changed, history)
    assert set(runs) == {None, "sft", "dagrpo", "grpo"}  # None: the pipeline run they nest under
    parent = runs[None].info.run_id
    assert runs[None].info.status == "FINISHED"
    for recipe in ("sft", "dagrpo", "grpo"):
        run = runs[recipe]
        assert run.data.tags["mlflow.parentRunId"] == parent and run.info.status == "FINISHED"
        assert run.data.tags["git_commit"] and run.data.tags["orchestra.decision_samples_sha256"]
        assert "step_wall_s" in run.data.metrics and "val_exact" in run.data.metrics
        assert run.data.params["orchestra.train.seed"] == "17"
        (given,) = run.inputs.dataset_inputs
        context = "validation" if recipe == "grpo" else "training"  # outcome GRPO trains on rollouts
        assert given.dataset.name == "decision_samples" and given.tags[0].value == context
        version = _client(tmp_path).get_model_version_by_alias("orchestra-policy", recipe)
        assert version.run_id == run.info.run_id
    assert {"rewards/format/mean", "rewards/decision/mean", "kl", "entropy", "loss"} <= set(
        runs["dagrpo"].data.metrics
    )
    grpo_rewards = {"rewards/answer_reward/mean", "rewards/rollout_format_reward/mean"}
    assert grpo_rewards <= set(runs["grpo"].data.metrics)

    # the published directory is what the LM policy loads, read as it was trained (its saved view wins)
    spec = ProviderSpec(kind="transformers", model=str(dag.model_dir), state_style="verbose")
    policy = lm_policy(spec, params.agent)
    assert policy.fmt == "lines" and policy.style == "marked"


def _link(params: Params, root: Path, name: str = "checkpoint → registered model version") -> Any:
    from orchestra.pipeline.audit import audit

    (link,) = [x for x in audit(params, root, ["orchestra_sft"]) if x.link == name]
    return link


def test_a_published_policy_is_a_registered_version_with_its_data_input_and_the_audit_checks_it(
    built: tuple[Path, str], tmp_path: Path, tiny_train: dict[str, Any]
) -> None:
    """Two SFT steps: the run names its decision samples as a dataset input and keeps the val decisions;
    the model becomes a version of the registered model under the alias ``sft``, which the audit checks
    against the checkpoint's run and the model folder now."""
    import mlflow

    from orchestra.io import dir_digest
    from orchestra.training.common import file_digest
    from orchestra.training.run import train_recipe
    from orchestra.training.tracking import TrackingError, register_policy

    root = _root(built, tmp_path)
    sft = {**tiny_train["sft"], "max_steps": 2, "save_steps": 2}
    params = _params(tmp_path, root, tiny_train, sft=sft)
    res = train_recipe("sft", params, root)
    client, samples = _client(tmp_path), root / "decision_samples" / "samples.jsonl"
    (given,) = client.get_run(res.run_id).inputs.dataset_inputs
    assert given.dataset.name == "decision_samples" and given.dataset.digest == file_digest(samples)[:36]
    assert json.loads(given.dataset.source) == {"uri": str(samples.resolve())}
    assert json.loads(given.dataset.profile)["num_rows"] == len(samples.read_text().splitlines())
    assert [(t.key, t.value) for t in given.tags] == [("mlflow.data.context", "training")]
    assert {"model", "val_decisions.jsonl"} <= {a.path for a in client.list_artifacts(res.run_id)}
    kept = client.download_artifacts(res.run_id, "val_decisions.jsonl", str(tmp_path))
    assert Path(kept).read_bytes() == (root / "policy_sft" / "val_decisions.jsonl").read_bytes()

    version = client.get_model_version_by_alias("orchestra-policy", "sft")
    assert version.run_id == res.run_id and int(version.version) == res.model_version
    assert version.tags["orchestra.model_sha256"] == dir_digest(res.model_dir)
    assert read_run_record(root, "policy_sft")["mlflow_model_version"] == 1

    scores = root / "benchmark_scores" / "scores.json"
    scores.parent.mkdir()
    scores.write_text(json.dumps({"orchestra_sft": {"policy": "sft"}}))
    assert _link(params, root).ok, _link(params, root)
    shutil.rmtree(root / "policy_sft" / "_run")  # as in a clone: the run is found from the model alone
    found = _link(params, root, "checkpoint → MLflow run")
    assert found.ok and f"run {res.run_id} FINISHED" in found.detail, found
    extra = res.model_dir / "notes.txt"
    extra.write_text("edited after registration")
    changed = _link(params, root)
    assert not changed.ok and "orchestra-policy@sft = version 1 was made from model" in changed.detail
    assert not _link(params, root, "checkpoint → MLflow run").ok
    extra.unlink()
    pipeline = client.get_run(res.run_id).data.tags["mlflow.parentRunId"]
    other = client.create_model_version("orchestra-policy", "runs:/x/model", pipeline)
    client.set_registered_model_alias("orchestra-policy", "sft", other.version)
    moved = _link(params, root)
    assert not moved.ok and "was made from no recorded model, not this checkpoint's" in moved.detail
    client.delete_registered_model_alias("orchestra-policy", "sft")
    gone = _link(params, root)
    assert not gone.ok and "no version orchestra-policy@sft" in gone.detail

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(TrackingError, match="registering run 0+'s model"):
        register_policy("orchestra-policy", "sft", "0" * 32, res.model_dir)


def test_sft_rows_repeat_first_decisions_and_replans_and_the_bare_view_names_no_pool(
    built: tuple[Path, str],
) -> None:
    from orchestra.config import AgentParams
    from orchestra.training.examples import PolicyView, load_samples, prepare
    from orchestra.training.sft import sft_examples

    raw = load_samples(built[0] / "decision_samples" / "samples.jsonl", ["train"])
    samples = prepare(raw, PolicyView(), AgentParams())
    once, thrice = sft_examples(samples), sft_examples(samples, 3)
    first = [r for r in once if not re.search(r"^E\d+ ", r["prompt"][1]["content"], re.M)]  # no evidence yet
    assert first and len(thrice) == len(once) + 2 * len(first)
    # a re-plan: the expert delegates again once evidence is in (off-path delegations are not repeated)
    replans = [
        p
        for p in samples
        if p.sample.kind == "expert" and isinstance(p.decision, Delegate) and p.state.context
    ]
    n_replans = len(sft_examples(replans))
    assert n_replans, "the fixture world has no re-plan to repeat"
    assert len(sft_examples(samples, 1, 4)) == len(once) + 3 * n_replans
    assert all(r["prompt"][0] == {"role": "system", "content": "lines"} for r in once)


def test_sft_tokenizes_a_repeated_row_once_and_trains_on_every_repeat(built: tuple[Path, str]) -> None:
    from datasets import Dataset

    from orchestra.config import AgentParams
    from orchestra.training.examples import PolicyView, load_samples, prepare
    from orchestra.training.sft import _distinct, _repeat, sft_examples

    raw = load_samples(built[0] / "decision_samples" / "samples.jsonl", ["train"])
    samples = prepare(raw, PolicyView(), AgentParams())
    rows = sft_examples(samples, 3, 2)
    distinct, order = _distinct(rows)
    assert len(distinct) == len(sft_examples(samples)) < len(rows)
    # TRL's preparation adds columns and may drop a row: the repeats follow the row number, not the position
    tokenized = Dataset.from_list(distinct).map(lambda r: {"n": len(r["completion"][0]["content"])})
    tokenized = tokenized.select(range(1, len(distinct)))
    repeated = _repeat(tokenized, order)
    assert "row" not in repeated.column_names
    want = [r for r in rows if r is not rows[0]]  # every repeat of the dropped row goes with it
    assert [r["completion"] for r in repeated] == [r["completion"] for r in want]
    assert repeated["n"] == [len(r["completion"][0]["content"]) for r in want]


def _train_cli(params_file: Path, **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "orchestra.cli", "train", "--recipe", "sft", "--params", str(params_file)]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw
    )


def _params_file(tmp_path: Path, root: Path, name: str, tiny: dict[str, Any]) -> Path:
    params = _params(tmp_path, root, tiny)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(params.model_dump(mode="json")))
    return path


@pytest.mark.slow
def test_sft_killed_with_sigkill_resumes_to_the_same_end(
    built: tuple[Path, str], tmp_path: Path, tiny_train: dict[str, Any]
) -> None:
    whole_root = _root(built, tmp_path / "whole")
    whole = _train_cli(_params_file(tmp_path, whole_root, "whole", tiny_train))
    _, err = whole.communicate(timeout=600)
    assert whole.returncode == 0, err[-2000:]
    expected = json.loads((whole_root / "policy_sft" / "summary.json").read_text())
    expected_run = read_run_record(whole_root, "policy_sft")

    root = _root(built, tmp_path / "killed")
    params_file = _params_file(tmp_path, root, "killed", tiny_train)
    proc = _train_cli(params_file)
    ckpt = root / "policy_sft" / "checkpoints"
    deadline = time.monotonic() + 300
    while not (ckpt / "checkpoint-20" / "trainer_state.json").is_file():  # killed mid-run, after a checkpoint
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (root / "policy_sft" / "model").exists()
    again = _train_cli(params_file)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-2000:]
    resumed, run = (
        json.loads((root / "policy_sft" / "summary.json").read_text()),
        read_run_record(root, "policy_sft"),
    )
    assert run["resumed"] is True and expected_run["resumed"] is False
    assert resumed == expected  # the same steps, metrics, everything the summary holds
    assert resumed["steps"] == 60
    assert run["mlflow_run_id"] == _runs_by_id(tmp_path, run["mlflow_run_id"])
    assert (
        _weights(root / "policy_sft" / "model").keys() == _weights(whole_root / "policy_sft" / "model").keys()
    )
    a, b = _weights(root / "policy_sft" / "model"), _weights(whole_root / "policy_sft" / "model")
    assert all((a[k] == b[k]).all() for k in a)


def _runs_by_id(tmp_path: Path, run_id: str) -> str:
    """The run id if that run exists and finished (the resumed attempt continued the killed one's run)."""
    run = next(r for r in _runs(tmp_path) if r.info.run_id == run_id)
    assert run.info.status == "FINISHED"
    return run.info.run_id


def test_the_marked_view_names_question_spans_and_scores_references_as_the_spans() -> None:
    from orchestra.agent.state import OrchestraState, ToolCard, validation_context
    from orchestra.backends.base import BackendCard
    from orchestra.schemas import DecisionSample
    from orchestra.tools.image import ImageCountObjects
    from orchestra.training.examples import PolicyView, prepare, score_decisions, span_refs

    card = ToolCard.from_tool(ImageCountObjects())
    assert {"red", "yellow"} <= set(card.values["colour"]) and "circle" in card.values["shape"]
    assert "mode" not in card.values  # the execution mode is no argument a question names
    state = OrchestraState(
        question="What is the count of yellow squares times the value shown for Setesas in the chart?",
        modal_inputs=[{"id": "image_a", "path": "images/a.png", "type": "image"}],
        tools=[card, ToolCard(name="image_read_chart"), ToolCard(name="code_executor")],
        backends=[BackendCard(name="vision_fast", kind="builtin", skills={"counting": 1.0, "chart": 1.0},
                              price_per_call=0.001, latency_s=0.1)],
    )  # fmt: skip
    count = "count the shapes of colour yellow and type square in #M1"
    chart = "read the chart value for the label Setesas in #M1"
    look = {"modalities": ["M1"], "backend": "vision_fast"}
    expert = Delegate(
        subtasks=[
            SubTask(id="E1", goal=count, tools=["image_count_objects"], **look),
            SubTask(id="E2", goal=chart, tools=["image_read_chart"], **look),
            SubTask(id="E3", goal="compute #E1 * #E2", depends_on=["E1", "E2"], tools=["code_executor"]),
        ]
    )
    view = PolicyView()
    assert view.style == "marked"
    prompt = view.messages(state, Params().agent)[1]["content"]
    assert "yellow #C1 squares #S1" in prompt and "Setesas #N1 in the chart" in prompt
    target = view.target(expert, state)
    assert "colour #C1 and type #S1 in #M1" in target and "for the label #N1 in #M1" in target
    assert "compute #E1 * #E2" in target and span_refs(expert, {}) == expert
    # a colour named twice: each count takes the next occurrence's key, as the question reads
    twice = Delegate(
        subtasks=[
            SubTask(id=f"E{i}", goal=f"count the shapes of colour yellow and type {t} in #M1", **look)
            for i, t in ((1, "square"), (2, "circle"))
        ]
    )
    spans = {"C1": "yellow", "S1": "square", "C2": "yellow", "S2": "circle"}
    assert [st.goal for st in span_refs(twice, spans).subtasks] == [
        "count the shapes of colour #C1 and type #S1 in #M1",
        "count the shapes of colour #C2 and type #S2 in #M1",
    ]
    # a browse goal reads the field the question names: the k-th browse of a field takes its k-th key
    browse = Delegate(
        subtasks=[
            SubTask(id=f"E{i}", goal=f"browse #E9 and read the field {f}", tools=["page_browser"])
            for i, f in ((1, "born"), (2, "founded"), (3, "born"), (4, "height_m"))
        ]
    )
    fields = {"F1": "born", "F2": "founded", "F3": "born"}
    assert [st.goal.rsplit(" ", 1)[1] for st in span_refs(browse, fields).subtasks] == [
        "#F1", "#F2", "#F3", "height_m"
    ]  # fmt: skip
    # with the page browser in the state, the knowledge base's field phrases are spans of the question
    web = state.model_copy(
        update={"question": "What is the birth year of Zegas?", "tools": [ToolCard(name="page_browser")]}
    )
    one = Delegate(
        subtasks=[SubTask(id="E1", goal="browse #E9 and read the field born", tools=["page_browser"])]
    )
    assert "the birth year #F1 of Zegas #N1?" in view.messages(web, Params().agent)[1]["content"]
    assert view.target(one, web).endswith("read the field #F1")
    assert validation_context(web).spans == {"F1": "born", "N1": "Zegas"}
    (sample,) = prepare(
        [DecisionSample(sample_id="s", task_id="t", split="val", step_index=0,
                        state=state.model_dump(mode="json"), decision=expert, completion="")],
        PolicyView(ids="expert"),
        Params().agent,
    )  # fmt: skip
    assert sample.target == target and sample.prompt == view.messages(state, Params().agent)
    wrong_span = target.replace("label #N1", "label #C1")
    beyond = target.replace("#N1", "#N9")
    outputs = [target, render_decision(expert, "lines"), wrong_span, beyond]
    score, rows = score_decisions(outputs, [sample] * 4)
    assert [r["exact"] for r in rows] == [True, True, False, False]
    assert [r["valid"] for r in rows] == [True, True, True, False] and "#N9" in rows[3]["error"]
    assert rows[0]["unseen"] and not score_decisions([target], [sample], {target})[1][0]["unseen"]

    # a result less sure than the runtime's escalation threshold is marked (?1, the first mark); the
    # bare view shows no mark
    from orchestra.agent.memory import Evidence

    seen = [
        Evidence(id="E1", goal=count, status="ok", value=3, confidence=c, backend="vision_fast")
        for c in (0.4, 0.9)
    ]
    strong = state.backends[0].model_copy(update={"name": "vision_expert", "price_per_call": 0.004})
    pool = [*state.backends, strong]
    unsure = state.model_copy(update={"context": seen[:1], "unsure_below": 0.6, "backends": pool})
    sure = state.model_copy(update={"context": seen[1:], "unsure_below": 0.6, "backends": pool})

    def lines(s: OrchestraState) -> list[str]:
        return view.messages(s, Params().agent)[1]["content"].splitlines()

    assert lines(unsure)[2].endswith("= 3 c0.40 ?1") and lines(sure)[2].endswith("= 3 c0.90")
    assert "?1" not in PolicyView(style="bare").messages(unsure, Params().agent)[1]["content"]
    # marked only where it can run again on a backend at least as strong: not with vision_fast alone,
    # nor once vision_expert has run it too (both unsure: the expert accepts the surer)
    assert lines(unsure.model_copy(update={"backends": state.backends}))[2].endswith("= 3 c0.40")
    again = seen[0].model_copy(update={"id": "E2", "backend": "vision_expert", "confidence": 0.5})
    assert [x[-5:] for x in lines(unsure.model_copy(update={"context": [seen[0], again]}))[2:4]] == [
        "c0.40",
        "c0.50",
    ]


def test_tree_ids_name_nodes_by_their_place_in_the_plan_and_list_them_as_the_question_reads() -> None:
    from orchestra.agent.decision import parse_decision
    from orchestra.agent.memory import Evidence
    from orchestra.agent.state import OrchestraState, ToolCard, validation_context
    from orchestra.backends.base import BackendCard
    from orchestra.schemas import DecisionSample
    from orchestra.training.examples import PolicyView, prepare
    from orchestra.training.tree_ids import tree_ids, tree_mapping

    def st(sid: str, goal: str, deps: tuple[str, ...] = (), tool: str = "code_executor") -> SubTask:
        return SubTask(id=sid, goal=goal, tools=[tool], depends_on=list(deps), backend="fast")

    # the gap between (the sum of A and B) and C: the expert numbers bottom-up, the tree top-down
    plan = Delegate(
        subtasks=[
            st("E1", "read the caption number in #M1", tool="video_text"),
            st("E2", "decode the dtmf digits in #M2", tool="audio_dtmf"),
            st("E3", "compute #E1 + #E2", ("E1", "E2")),
            st("E4", "count the objects that appear in #M1", tool="video_events"),
            st("E5", "compute abs(#E3 - #E4)", ("E3", "E4")),
        ]
    )
    state = OrchestraState(
        question="What is the gap between (the sum of a and b) and c?",
        modal_inputs=[{"id": "v", "path": "v.mp4", "type": "video"},
                      {"id": "a", "path": "a.wav", "type": "audio"}],
        tools=[ToolCard(name=n) for n in ("code_executor", "video_text", "audio_dtmf", "video_events")],
        backends=[BackendCard(name="fast", kind="builtin", skills={"code": 1.0}, price_per_call=0.0,
                              latency_s=0.1)],
    )  # fmt: skip

    def sample(state: OrchestraState, decision: Delegate | Finish) -> DecisionSample:
        return DecisionSample(
            sample_id="s", task_id="t", split="train", step_index=0, completion="",
            state=state.model_dump(mode="json"), decision=decision,
        )  # fmt: skip

    _, first = tree_ids(state, plan)
    assert isinstance(first, Delegate)
    assert [(s.id, s.depends_on, s.goal) for s in first.subtasks] == [
        ("E1", ["E11", "E12"], "compute abs(#E11 - #E12)"),
        ("E11", ["E111", "E112"], "compute #E111 + #E112"),
        ("E111", [], "read the caption number in #M1"),
        ("E112", [], "decode the dtmf digits in #M2"),
        ("E12", [], "count the objects that appear in #M1"),
    ]
    assert canonical(first) == canonical(plan)  # the same plan, other names
    text = PolicyView().target(first, state)
    assert not isinstance(parse_decision(text, fmt="lines", context=validation_context(state)), ParseError)

    # later: E4 was unsure, the expert re-runs it (E6) and the gap (E7); then finishes with E7
    ran = [
        Evidence(id=s.id, goal=s.goal.replace("#E", "v"), status="ok", value=1, depends_on=s.depends_on)
        for s in plan.subtasks
    ]
    ran[2] = ran[2].model_copy(update={"status": "skipped", "error": "E2 did not finish"})
    later = state.model_copy(update={"context": ran})
    redo = Delegate(
        subtasks=[
            st("E6", "count the objects", tool="video_events"),
            st("E7", "compute abs(#E3 - #E6)", ("E3", "E6")),
        ]
    )
    again_state, again = tree_ids(later, redo)
    assert [e.id for e in again_state.context] == ["E111", "E112", "E11", "E12", "E1"]
    assert again_state.context[2].error == "E112 did not finish"
    assert isinstance(again, Delegate)
    assert [(s.id, s.depends_on, s.goal) for s in again.subtasks] == [
        ("E2", ["E11", "E22"], "compute abs(#E11 - #E22)"),  # a second root; its new operand E2 + 2nd place
        ("E22", [], "count the objects"),
    ]
    redone = [
        Evidence(id=s.id, goal=s.goal, status="ok", value=2, depends_on=s.depends_on) for s in redo.subtasks
    ]
    done = later.model_copy(update={"context": [*ran, *redone]})
    assert tree_ids(done, Finish(answer="#E7"))[1] == Finish(answer="#E2")

    # a shared node keeps its first name; ids that would collide leave the state and decision as they are
    assert tree_mapping({"E1": [], "E2": ["E1"], "E3": ["E1"], "E4": ["E2", "E3"]}) == {
        "E4": "E1", "E2": "E11", "E1": "E111", "E3": "E12",
    }  # fmt: skip
    wide = Delegate(subtasks=[st(f"E{i}", "compute 1") for i in range(1, 11)])
    assert tree_ids(state, wide) == (state, wide)
    # prepared for a view: renumbered for tree ids (the default), as the expert wrote it for expert ids
    agent = Params().agent
    assert prepare([sample(state, plan)], PolicyView(), agent)[0].decision == first
    assert prepare([sample(state, plan)], PolicyView(ids="expert"), agent)[0].decision == plan


def test_dagrpo_draws_first_decisions_as_often_as_asked() -> None:
    from orchestra.schemas import DecisionSample
    from orchestra.training.dagrpo import pick_prompts
    from orchestra.training.examples import PolicyView, prepare

    def sample(i: int, first: bool) -> DecisionSample:
        context = [] if first else [{"id": "E1", "goal": "g", "status": "ok"}]
        return DecisionSample(
            sample_id=f"s{i}", task_id="t", split="train", step_index=0, completion="",
            state={"question": "q", "context": context}, decision=Finish(answer="1"),
        )  # fmt: skip

    train = prepare([sample(i, first=i % 10 == 0) for i in range(100)], PolicyView(), Params().agent)
    assert len(train) == 100  # 10 plans among 100 states
    plain = pick_prompts(train, 1000, 1, seed=3)
    weighted = pick_prompts(train, 1000, 12, seed=3)
    assert pick_prompts(train, 1000, 12, seed=3) == weighted  # a resumed run sees the same prompts
    share = [sum(not p.state.context for p in picked) / len(picked) for picked in (plain, weighted)]
    assert share[0] == pytest.approx(0.10, abs=0.01) and share[1] == pytest.approx(120 / 210, abs=0.02)


def test_dagrpo_screen_keeps_the_states_the_policy_gets_wrong_first() -> None:
    from orchestra.schemas import DecisionSample
    from orchestra.training.dagrpo import screen_prompts
    from orchestra.training.examples import PolicyView, prepare

    def sample(i: int) -> DecisionSample:
        return DecisionSample(
            sample_id=f"s{i}", task_id="t", split="train", step_index=0, completion="",
            state={"question": "q"}, decision=Finish(answer="1"),
        )  # fmt: skip

    cands = prepare([sample(i) for i in range(8)], PolicyView(), Params().agent)
    totals = [1.0, 0.4, 1.0, 0.999, 1.0, 0.0, 1.0, 1.0]
    picked, hard = screen_prompts(cands, totals, 4)
    assert hard == 3 and [p.sample.sample_id for p in picked] == ["s1", "s3", "s5", "s0"]  # then the rest
    picked, hard = screen_prompts(cands, totals, 2)
    assert [p.sample.sample_id for p in picked] == ["s1", "s3"]
    assert screen_prompts(cands, [1.0] * 8, 3)[0] == cands[:3]  # nothing to learn from: the draw as it was
    with pytest.raises(ValueError):
        screen_prompts(cands, totals[:3], 2)
