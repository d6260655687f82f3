"""The RL recipes do what they claim: the clip acts, outcome GRPO trains each decision on the tokens it was
sampled from, the policy's own states are relabelled by the expert, a start can be chosen, a wall budget
stops a run, DA-GRPO resumes after SIGKILL, the published rubric credits a correct early finish."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TINY_TRAIN

from orchestra.config import Params, parse_params

ROOT = Path(__file__).resolve().parents[1]


def _params(
    tmp: Path, root: Path, tiny: dict[str, Any], providers: dict[str, Any] | None = None, **train: Any
) -> Params:
    for k, v in train.items():
        tiny[k] = {**tiny[k], **v} if isinstance(v, dict) and isinstance(tiny.get(k), dict) else v
    return parse_params(
        {
            "paths": {"data_dir": str(root)},
            "train": tiny,
            "tools": {"cache": False, "workers": 0},
            "eval": {"max_turns": 3},
            "tracking": {"mlflow_uri": f"sqlite:///{tmp / 'mlflow.db'}", "experiment": "test"},
            "providers": {"builtin": {"kind": "builtin"}, **(providers or {})},
        }
    )


@pytest.fixture(scope="module")
def sft_root(built: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root with the tiny SFT policy trained (snapshot at step 20); copy it, do not change it."""
    from orchestra.training.run import train_recipe

    tmp = tmp_path_factory.mktemp("sft")
    root = tmp / "data"
    root.mkdir()
    (root / "seed_tasks").symlink_to(built[0] / "seed_tasks")
    for name in ("verified_samples", "decision_samples"):
        shutil.copytree(built[0] / name, root / name)
    params = _params(tmp, root, json.loads(json.dumps(TINY_TRAIN)), sft={"snapshot_steps": [20]})
    train_recipe("sft", params, root)
    return root


def _copy(sft_root: Path, tmp: Path) -> Path:
    root = tmp / "data"
    root.mkdir(parents=True)
    (root / "seed_tasks").symlink_to((sft_root / "seed_tasks").resolve())
    for name in ("verified_samples", "decision_samples", "policy_sft"):
        shutil.copytree(sft_root / name, root / name)
    return root


def _metric(tmp: Path, run_id: str, key: str) -> list[float]:
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    return [m.value for m in client.get_metric_history(run_id, key)]


def test_sft_keeps_a_snapshot_and_rl_starts_from_it(sft_root: Path) -> None:
    from orchestra.training.common import init_policy

    snap = init_policy(sft_root, "sft@20")
    assert snap == sft_root / "policy_sft" / "snapshots" / "step-20"
    assert (snap / "orchestra_policy.json").is_file()
    from safetensors.torch import load_file

    a, b = (
        load_file(str(snap / "model.safetensors")),
        load_file(str(sft_root / "policy_sft/model/model.safetensors")),
    )
    assert any(not (a[k] == b[k]).all() for k in a)  # 20 of 60 steps: not the final policy
    from orchestra.errors import StageError

    with pytest.raises(StageError, match="sft@7"):
        init_policy(sft_root, "sft@7")


@pytest.mark.slow
def test_dagrpo_clip_acts_with_several_iterations(
    sft_root: Path, tmp_path: Path, tiny_train: dict[str, Any], serve_process: Any
) -> None:
    """num_iterations 2: the second pass over a generation batch sees a moved policy, so the
    importance ratio leaves 1 and TRL's clip acts (its logged clip ratios are not all zero). The
    rubric is an ``openai`` reward model (``orchestra serve --script``) whose scores differ in every
    group, so each group has an advantage."""
    from orchestra.training.run import train_recipe

    root = _copy(sft_root, tmp_path)
    scores = [{"format": 1, "validity": 1, "tools": t, "decision": t} for t in (3, 0, 2, 1) * 40]
    script = tmp_path / "rubric.jsonl"
    script.write_text("".join(json.dumps({"content": json.dumps(x)}) + "\n" for x in scores))
    dag = {"max_steps": 4, "num_iterations": 2, "save_steps": 2, "learning_rate": 0.05, "epsilon": 0.05,
           "num_generations": 4, "per_device_batch_size": 4, "reward_provider": "rubric"}  # fmt: skip
    with serve_process(script, name="rubric") as (_, url):
        rubric = {"kind": "openai", "base_url": url, "model": "rubric"}
        params = _params(tmp_path, root, tiny_train, {"rubric": rubric}, dagrpo=dag)
        res = train_recipe("dagrpo", params, root)
    assert res.steps == 4
    clipped = _metric(tmp_path, res.run_id, "clip_ratio/region_mean")
    assert len(clipped) == 4 and max(clipped) > 0, clipped


def test_distinct_prompts_keep_one_of_each_rendering(built: tuple[Path, str]) -> None:
    from orchestra.config import AgentParams
    from orchestra.training.dagrpo import distinct_prompts
    from orchestra.training.examples import PolicyView, load_samples, prepare

    view = PolicyView()
    raw = load_samples(built[0] / "decision_samples" / "samples.jsonl", ["train"])
    samples = prepare(raw, view, AgentParams())
    kept = distinct_prompts(samples)
    assert 0 < len(kept) < len(samples)  # backend-order re-renderings look alike in the marked view
    assert any(p.sample.kind == "backend_order" for p in samples)
    keys = [json.dumps(view.messages(p.state, AgentParams())) for p in kept]
    assert len(set(keys)) == len(keys)
    assert distinct_prompts(kept) == kept


def test_outcome_rows_are_the_sampled_decisions_within_the_context(
    sft_root: Path, tmp_path: Path, tiny_train: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row of a rollout batch is one decision: its prompt and completion tokens are the call that
    sampled it (re-tokenising the state the runtime recorded gives the prompt; decoding the completion
    gives the raw output), each fits the model's context, and row j of every decision of a task comes
    from the same rollout (the same rewards)."""
    import orchestra.agent.systems as systems
    from orchestra.agent.runtime import Environment
    from orchestra.agent.state import OrchestraState
    from orchestra.backends.pool import builtin_backends
    from orchestra.data.store import read_verified
    from orchestra.tools.registry import default_registry
    from orchestra.training.grpo import decision_prompt, make_rollout
    from orchestra.training.policy import load_policy

    root = _copy(sft_root, tmp_path)
    params = _params(tmp_path, root, tiny_train)
    model, tok, view = load_policy(root / "policy_sft" / "model")
    tasks = {s.candidate_id: s.task for s in read_verified(root) if s.split == "train"}
    ids = sorted(tasks)[:2]
    runs: list[Any] = []
    real = systems.run_task_sync
    monkeypatch.setattr(systems, "run_task_sync", lambda *a: runs.append(real(*a)) or runs[-1])
    trainer = type("T", (), {"model": model, "processing_class": tok})()
    prompts = [
        [{"role": "user", "content": decision_prompt(t, k)}] for t in ids for k in range(2) for _ in range(2)
    ]
    with default_registry(root / "seed_tasks", params.tools) as tools:
        env = Environment(tools=tools, backends=builtin_backends(params.agent), agent=params.agent,
                          media_root=root / "seed_tasks" / "media", max_turns=3)  # fmt: skip
        out = make_rollout(tasks, env, view, params.agent, params.train.grpo)(prompts, trainer)
    assert len(runs) == 4  # two rollouts per task serve both decisions' groups
    ctx = model.config.max_position_embeddings
    rows = list(
        zip(prompts, out["prompt_ids"], out["completion_ids"], out["env_mask"], out["correct"], strict=True)
    )
    trained = 0
    for i, (p, pids, cids, mask, correct) in enumerate(rows):
        t, k = p[0]["content"].rsplit("#", 1)
        traj = runs[ids.index(t) * 2 + i % 2]
        assert correct == float(traj.answer == tasks[t].answer)
        decisions = [s for s in traj.steps if s.raw_output is not None]
        assert len(pids) + len(cids) <= ctx
        if int(k) >= len(decisions):
            assert mask == [0]
            continue
        step = decisions[int(k)]
        state = OrchestraState.model_validate(step.state)
        msgs = view.messages(state, params.agent)
        want = tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True)["input_ids"]
        assert pids == list(want) and mask == [1] * len(cids)
        assert tok.decode(cids, skip_special_tokens=True) == step.raw_output
        trained += 1
    assert trained >= 4


def test_policy_states_are_the_states_the_policy_reached_relabelled(
    sft_root: Path, tmp_path: Path, tiny_train: dict[str, Any]
) -> None:
    from orchestra.agent.decision import validate_decision
    from orchestra.agent.expert import expert_decision
    from orchestra.agent.state import OrchestraState, validation_context
    from orchestra.data.store import read_verified
    from orchestra.io import read_jsonl
    from orchestra.schemas import DecisionSample
    from orchestra.training.states import policy_states

    root = _copy(sft_root, tmp_path)
    params = _params(tmp_path, root, tiny_train)
    out = tmp_path / "states.jsonl"
    samples, stats = policy_states(params, root, root / "policy_sft" / "model", 4, out)
    assert stats["states_tasks"] == 4 and stats["states_n"] == len(samples) > 0
    assert read_jsonl(out, DecisionSample) == samples
    programs = {s.candidate_id: s.task.solution_program for s in read_verified(root)}
    for s in samples:
        state = OrchestraState.model_validate(s.state)
        assert s.kind == "policy" and s.split == "train"
        assert s.decision == expert_decision(state, programs[s.task_id], agent=params.agent)
        assert validate_decision(s.decision, validation_context(state)) is None
    again, _ = policy_states(params, root, root / "policy_sft" / "model", 4, tmp_path / "again.jsonl")
    assert again == samples  # greedy rollouts: the same policy reaches the same states


@pytest.mark.slow
def test_dagrpo_on_policy_states_from_a_snapshot_within_a_wall_budget(
    sft_root: Path, tmp_path: Path, tiny_train: dict[str, Any]
) -> None:
    from orchestra.training.run import train_recipe

    root = _copy(sft_root, tmp_path)
    dag = {
        "states": "both",
        "state_tasks": 3,
        "init": "sft@20",
        "max_steps": 500,
        "save_steps": 10,
        "max_wall_s": 20,
    }
    res = train_recipe("dagrpo", _params(tmp_path, root, tiny_train, dagrpo=dag), root)
    assert 0 < res.steps < 500  # stopped by the budget
    assert (root / "policy_dagrpo" / "policy_states.jsonl").is_file()
    assert _metric(tmp_path, res.run_id, "states_n")[0] > 0
    import mlflow

    run = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(res.run_id)
    assert run.data.tags["orchestra.start_policy"].endswith("snapshots/step-20")


@pytest.mark.parametrize("reward", ["progress", "lookahead"])
def test_dagrpo_trains_on_a_grounded_reward_and_resamples_groups_without_signal(
    sft_root: Path, tmp_path: Path, tiny_train: dict[str, Any], reward: str
) -> None:
    from orchestra.training.run import train_recipe

    root = _copy(sft_root, tmp_path)
    dag = {"reward": reward, "resample_rounds": 2, "screen": 2, "per_device_batch_size": 4, "save_steps": 2}
    res = train_recipe("dagrpo", _params(tmp_path, root, tiny_train, dagrpo=dag), root)
    assert res.steps == 2 and (root / "policy_dagrpo" / "model" / "model.safetensors").is_file()
    scored = _metric(tmp_path, res.run_id, f"rewards/{reward}/mean")
    assert len(scored) >= 2 and all(-1.0 <= v <= 1.0 for v in scored)
    drawn = _metric(tmp_path, res.run_id, "dynamic/groups_drawn")
    trained = _metric(tmp_path, res.run_id, "dynamic/signal_trained")
    assert len(drawn) == 2 and all(2 <= d <= 6 for d in drawn)  # 2 groups a batch, 2 more rounds at most
    no_signal = _metric(tmp_path, res.run_id, "dynamic/no_signal_drawn")
    assert all(0 <= v <= 1 for v in trained + no_signal)
    assert _metric(tmp_path, res.run_id, "screen_candidates") == [8.0]  # 2 steps x 2 prompts x screen 2


def test_dagrpo_guides_groups_without_signal_with_the_experts_decision(
    sft_root: Path, tmp_path: Path, tiny_train: dict[str, Any]
) -> None:
    from orchestra.training.run import train_recipe

    root = _copy(sft_root, tmp_path)
    dag = {"reward": "progress", "guide": True, "init": "sft@20", "per_device_batch_size": 8, "save_steps": 2}
    res = train_recipe("dagrpo", _params(tmp_path, root, tiny_train, dagrpo=dag), root)
    assert res.steps == 2 and (root / "policy_dagrpo" / "model" / "model.safetensors").is_file()
    guided = _metric(tmp_path, res.run_id, "dynamic/guided")
    trained = _metric(tmp_path, res.run_id, "dynamic/signal_trained")
    assert len(guided) == 2 and all(0 <= g <= t for g, t in zip(guided, trained, strict=True))
    assert max(guided) > 0  # the snapshot's groups that all tie get the expert's decision


@pytest.mark.slow
def test_dagger_sft_adds_the_policy_states(
    sft_root: Path, tmp_path: Path, tiny_train: dict[str, Any]
) -> None:
    from orchestra.training.run import train_recipe

    root = _copy(sft_root, tmp_path)
    base = _params(tmp_path, root, json.loads(json.dumps(tiny_train)), sft={"init": "sft", "max_steps": 5})
    dagger = _params(
        tmp_path, root, tiny_train, sft={"init": "sft", "max_steps": 5, "states": "both", "state_tasks": 3}
    )
    n_base = train_recipe("sft", base, root).samples
    res = train_recipe("sft", dagger, root)
    assert res.samples > n_base and res.steps == 5
    assert _metric(tmp_path, res.run_id, "states_n")[0] == res.samples - n_base


def test_answer_credit_rewards_a_correct_early_finish(built: tuple[Path, str]) -> None:
    from orchestra.agent.state import OrchestraState
    from orchestra.data.store import read_verified
    from orchestra.schemas import Delegate
    from orchestra.training.examples import load_samples
    from orchestra.training.reward_model import credit_answer
    from orchestra.training.rewards import rubric

    answers = {s.candidate_id: s.task.answer for s in read_verified(built[0])}
    s = next(
        s for s in load_samples(built[0] / "decision_samples" / "samples.jsonl", ["train"])
        if s.kind == "expert" and isinstance(s.decision, Delegate) and not s.state["context"]
    )  # fmt: skip
    state, gold = OrchestraState.model_validate(s.state), answers[s.task_id]
    scored = credit_answer(rubric)
    plain = scored(f"= {gold}", state, s.decision, "lines")
    assert plain == rubric(f"= {gold}", state, s.decision, "lines") and plain.decision == 0
    right = scored(f"= {gold}", state, s.decision, "lines", answer=gold)
    assert (right.format, right.validity, right.tools, right.decision) == (1, 1, 1, 1)
    wrong = scored("= not the answer", state, s.decision, "lines", answer=gold)
    assert wrong.decision == 0


def _cli(params_file: Path, recipe: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "orchestra.cli", "train", "--recipe", recipe, "--params", str(params_file)]
    return subprocess.Popen(cmd, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_dagrpo_killed_with_sigkill_resumes_to_the_same_end(
    sft_root: Path, tmp_path: Path, tiny_train: dict[str, Any]
) -> None:
    from safetensors.torch import load_file

    from orchestra.data.store import read_run_record

    dag = {"max_steps": 6, "save_steps": 2, "resample_rounds": 1}  # reserve draws replay on resume
    ends = []
    for name, kill in (("whole", False), ("killed", True)):
        root = _copy(sft_root, tmp_path / name)
        f = tmp_path / f"{name}.yaml"
        f.write_text(
            yaml.safe_dump(
                _params(tmp_path / name, root, json.loads(json.dumps(tiny_train)), dagrpo=dag).model_dump(
                    mode="json"
                )
            )
        )
        if kill:
            proc = _cli(f, "dagrpo")
            ckpt = root / "policy_dagrpo" / "checkpoints" / "checkpoint-2" / "trainer_state.json"
            deadline = time.monotonic() + 300
            while not ckpt.is_file():
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert not (root / "policy_dagrpo" / "model").exists()
        proc = _cli(f, "dagrpo")
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        summary = json.loads((root / "policy_dagrpo" / "summary.json").read_text())
        summary["resumed"] = read_run_record(root, "policy_dagrpo")["resumed"]  # the run's, not the data's
        ends.append((summary, load_file(str(root / "policy_dagrpo" / "model" / "model.safetensors"))))
    (whole, a), (resumed, b) = ends
    assert (
        resumed["resumed"] is True and whole["resumed"] is False and resumed["steps"] == whole["steps"] == 6
    )
    assert resumed["metrics"] == whole["metrics"]
    assert all((a[k] == b[k]).all() for k in a)


def test_placement_on_a_gpu_follows_the_model(sft_root: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU on this machine: the placement test runs where one exists")
    from orchestra.training.common import generate
    from orchestra.training.grpo import SamplingChat
    from orchestra.training.policy import load_policy

    model, tok, _ = load_policy(sft_root / "policy_sft" / "model")
    model.to("cuda")
    msgs = [{"role": "user", "content": "hello"}]
    assert isinstance(generate(model, tok, [msgs], 8)[0], str)
    chat = SamplingChat(model, tok, 8)
    assert chat.chat(msgs).completion_tokens > 0


@pytest.mark.slow
def test_two_processes_train_sft_and_dagrpo_to_one_run_and_one_model(
    sft_root: Path, tmp_path: Path, tiny_train: dict[str, Any]
) -> None:
    """``accelerate launch --multi_gpu --num_processes 2`` (gloo on CPU; ``--cpu`` would start one
    process, since accelerate's multi-CPU launch is mpirun): each recipe ends in one MLflow run, one published
    model and one registered version; each process trained on its own share of every batch."""
    import mlflow

    root = _copy(sft_root, tmp_path)
    shutil.rmtree(root / "policy_sft")
    params = _params(
        tmp_path, root, tiny_train, sft={"max_steps": 6, "save_steps": 3}, dagrpo={"max_steps": 2}
    )
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params.model_dump(mode="json")))
    launch = [
        str(Path(sys.executable).parent / "accelerate"),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
    ]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    for recipe in ("sft", "dagrpo"):
        cmd = [*launch, "-m", "orchestra.cli", "train", "--recipe", recipe]
        proc = subprocess.run(
            [*cmd, "--params", str(f)], cwd=ROOT, text=True, capture_output=True, timeout=600, check=False
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = json.loads((root / f"policy_{recipe}" / "summary.json").read_text())
        assert summary["processes"] == 2 and summary["steps"] == (6 if recipe == "sft" else 2)
        assert (root / f"policy_{recipe}" / "model" / "model.safetensors").is_file()
        assert not (root / f"policy_{recipe}" / "checkpoints").exists()
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("test")
    runs = client.search_runs([exp.experiment_id])
    by_recipe = sorted(r.data.tags.get("orchestra.recipe", "") for r in runs)
    assert by_recipe == ["", "dagrpo", "sft"]  # the pipeline run and one run per recipe
    versions = client.search_model_versions(f"name = '{params.tracking.registered_model}'")
    assert sorted(v.tags["orchestra.recipe"] for v in versions) == ["dagrpo", "sft"]
    for r in runs:
        if r.data.tags.get("orchestra.recipe"):
            assert r.info.status == "FINISHED"
            assert "step_wall_s" in r.data.metrics
    # the same 6 SFT steps in one process cover half the epoch: each of the two took its own batch
    from orchestra.training.run import train_recipe

    one = _copy(sft_root, tmp_path / "one")
    shutil.rmtree(one / "policy_sft")
    single = train_recipe("sft", _params(tmp_path, one, tiny_train), one)  # tiny_train as updated above
    sft_run = next(r for r in runs if r.data.tags.get("orchestra.recipe") == "sft")
    two_epochs, one_epochs = (
        sft_run.data.metrics["epoch"],
        client.get_run(single.run_id).data.metrics["epoch"],
    )
    assert two_epochs == pytest.approx(2 * one_epochs, rel=0.05), (two_epochs, one_epochs)
