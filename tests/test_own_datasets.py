"""The papers' seed datasets as a user holds them: a tiny COCO-format and a tiny LongVideoBench-format
folder (made here) reach decision_samples, with a scripted OpenAI-compatible endpoint as the expert
orchestrator, the extractor and a vision-language sub-agent that receive the images and frames."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path
from typing import Any

from PIL import Image

from orchestra.agent.serve import ScriptedResponder, start_server
from orchestra.config import Params
from orchestra.io import read_jsonl
from orchestra.pipeline.run import run_stage
from orchestra.schemas import DecisionSample, ReferenceSolution, SubtaskStep, read_tasks_json

SEER = {"kind": "openai", "provider": "llm", "skills": {"counting": 0.95, "video_temporal": 0.9},
        "description": "a vision-language model: reads images and video frames"}  # fmt: skip


def _params(source: dict[str, Any], url: str, inputs: list[str], **extra: Any) -> dict[str, Any]:
    llm = {"kind": "openai", "base_url": url, "model": "scripted", "max_retries": 0, "timeout_s": 20,
           "inputs": inputs, "video_frames": 3}  # fmt: skip
    return {
        "seed": {**source, "incoming": None},
        "providers": {"builtin": {"kind": "builtin"}, "llm": llm},
        "agent": {"backends": {"seer": SEER}},
        "anchors": {"expert": "llm", "provider": "llm", "attempts": 1},
        "decisions": {"split": {"train": 0.6, "val": 0.2, "test": 0.2}},
        **extra,
    }


def _q(text: str) -> str:
    """``text`` as it appears in a JSON-encoded message, escaped for a regular expression."""
    return re.escape(json.dumps(text)[1:-1])


def _expert(question: str, goal: str) -> list[dict[str, Any]]:
    """An orchestrator that hands the whole question to the vision-language sub-agent, then finishes."""
    asked = rf"(?s)You are the orchestrator\..*Question: {re.escape(question)}\n.*Turn "
    node = {"id": "E1", "goal": goal, "modalities": ["M1"], "tools": [], "backend": "seer", "depends_on": []}
    plan = {"kind": "delegate", "subtasks": [node]}
    return [
        {"match": asked + "1 of", "content": json.dumps(plan)},
        {"match": asked + "2 of", "content": json.dumps({"kind": "finish", "answer": "#E1"})},
    ]


def _seer(goal: str, file: str, answer: Any) -> dict[str, Any]:
    """The sub-agent's answer to ``goal`` on ``file``, however often it is asked."""
    said = rf"(?s)Sub-task: {re.escape(goal)}\n.*{re.escape(file)}"
    return {"match": said, "times": 0, "content": f"I looked.\nANSWER: {answer}"}


def _extractor(question: str, facts: list[dict[str, Any]], media: list[dict[str, Any]]) -> dict[str, Any]:
    asked = rf"(?s)You extract the atomic facts.*{_q(question)}"
    return {"match": asked, "content": json.dumps({"facts": facts, "media_facts": media})}


def _parts(requests: list[dict[str, Any]], system: str) -> list[dict[str, Any]]:
    out = []
    for r in requests:
        msgs = r["messages"]
        if system in str(msgs[0]["content"]) and isinstance(msgs[1]["content"], list):
            out += msgs[1]["content"]
    return out


def _run(params: dict[str, Any], tmp: Path, responder: ScriptedResponder) -> Path:
    (tmp / "params.yaml").write_text(json.dumps(params))
    p, root = Params.model_validate(params), tmp / "data"
    for stage in ("seed_tasks", "anchor_facts", "rewrite_candidates", "verified_samples"):
        run_stage(stage, p, root)
    for stage in ("expert_trajectories", "decision_samples"):
        run_stage(stage, p, root)
    return root


COCO = {1: ("cat", 3), 2: ("dog", 2), 3: ("bus", 4), 4: ("kite", 5), 5: ("boat", 2), 6: ("car", 3)}


def _coco(root: Path) -> None:
    """A COCO 2017 val folder: six images, each with its main category counted and one person."""
    (root / "val2017").mkdir(parents=True)
    (root / "annotations").mkdir()
    cats = [{"id": 1, "name": "person"}] + [{"id": i + 1, "name": n} for i, (n, _) in COCO.items()]
    images, anns = [], []
    for i, (_, n) in COCO.items():
        file = f"{i:012d}.jpg"
        Image.new("RGB", (64 + 8 * i, 48), (40 * i, 200 - 20 * i, 90)).save(root / "val2017" / file)
        images.append(
            {"id": i, "file_name": file, "coco_url": f"http://images.cocodataset.org/val2017/{file}"}
        )
        anns += [{"image_id": i, "category_id": i + 1, "iscrowd": 0} for _ in range(n)]
        anns.append({"image_id": i, "category_id": 1, "iscrowd": 0})
    inst = {"images": images, "annotations": anns, "categories": cats}
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(inst))


def test_a_coco_folder_reaches_decision_samples_with_its_images_sent(tmp_path: Path) -> None:
    coco = tmp_path / "coco"
    _coco(coco)
    script: list[dict[str, Any]] = []
    for i, (name, n) in COCO.items():
        file, question = (
            f"{i:012d}.jpg",
            f"How many objects of the COCO category '{name}' does the image show?",
        )
        goal, person = f"count the {name} objects in #M1", "count the person objects in #M1"
        script += _expert(question, goal)
        script += [_seer(goal, file, n), _seer(person, file, 1)]
        media = [{"goal": person, "value": 1, "statement": "One person is in the picture."}]
        script.append(_extractor(question, [{"step": "v1", "statement": f"It shows {n} {name}s."}], media))
    responder = ScriptedResponder(script)
    with start_server(responder) as srv:
        root = _run(_params({"source": "coco", "path": str(coco)}, srv.url, ["image"]), tmp_path, responder)
    solutions = read_jsonl(root / "anchor_facts" / "solutions.jsonl", ReferenceSolution)
    assert len(solutions) == len(COCO)
    for sol in solutions:  # the model backend's sub-task is the reference solution, run on that backend
        (step,) = sol.program
        assert isinstance(step, SubtaskStep) and step.backend == "seer" and step.skill == "counting"
        assert step.value == COCO[int(sol.task_id.split("-")[1])][1]
    material = [json.loads(x) for x in (root / "anchor_facts" / "material.jsonl").open()]
    assert len(material) == len(COCO) and all(
        m["goal"] == "count the person objects in #M1" for m in material
    )
    samples = read_jsonl(root / "decision_samples" / "samples.jsonl", DecisionSample)
    assert samples and any(st.backend == "seer" for d in samples if d.decision.kind == "delegate"
                           for st in d.decision.subtasks)  # type: ignore[union-attr]  # fmt: skip
    images = {t.id: t.omni_modal_input[0].path for t in read_tasks_json(root / "seed_tasks" / "tasks.json")}
    sent = [p for p in _parts(responder.requests, "You extract the atomic facts") if p["type"] == "image_url"]
    sent += [p for p in _parts(responder.requests, "You are a sub-agent") if p["type"] == "image_url"]
    files = {(root / "seed_tasks" / "media" / p).read_bytes() for p in images.values()}
    assert sent and {base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for p in sent} == files


SHAPES = {f"q{k}": 2 + k for k in range(5)}  # what the sub-agent counts in each clip
WRITTEN = {  # the openai rewriter's candidates: a new reading of the clip, and arithmetic on it
    "multi_hop_chaining": ("Multiply the number of shapes seen in the clip by three.", "n1 * 3"),
    "entity_obfuscation": (
        "What do you get when you add four to how many shapes appear in the video?",
        "n1 + 4",
    ),
}


def _lvb(root: Path, world: Path) -> list[dict[str, Any]]:
    """A LongVideoBench val folder over the small world's videos: one lettered question each."""
    (root / "videos").mkdir(parents=True)
    tasks = [
        t for t in read_tasks_json(world / "tasks.json") if any(m.type == "video" for m in t.omni_modal_input)
    ]
    entries = []
    for k, t in enumerate(tasks[:5]):
        video = next(m for m in t.omni_modal_input if m.type == "video")
        shutil.copy2(world / "media" / video.path, root / "videos" / Path(video.path).name)
        entries.append({
            "id": f"q{k}", "video_id": f"v{k}", "video_path": Path(video.path).name,
            "question": f"Which shape moves first in clip {k}?",
            "candidates": ["a circle", "a square", "a star"],
            "correct_choice": k % 3, "topic_category": "shapes",
        })  # fmt: skip
    (root / "lvb_val.json").write_text(json.dumps(entries))
    return entries


def test_a_longvideobench_folder_reaches_decision_samples_with_its_frames_sent(
    small_world: Path, tmp_path: Path
) -> None:
    lvb = tmp_path / "lvb"
    entries = _lvb(lvb, small_world)
    script: list[dict[str, Any]] = []
    for e in entries:
        letters = " ".join(f"{'ABC'[i]}. {c}" for i, c in enumerate(e["candidates"]))
        question = f"{e['question']} Options: {letters} Answer with the option's letter."
        goal, count = "name the option letter that answers the question for #M1", "count the shapes in #M1"
        file = e["video_path"]
        script += _expert(question, goal)
        script += [_seer(goal, file, "ABC"[e["correct_choice"]]), _seer(count, file, SHAPES[e["id"]])]
        script.append(_extractor(question, [{"step": "v1", "statement": "the letter"}], []))
    for strategy, (question, expression) in WRITTEN.items():
        steps = [{"id": "n1", "op": "subtask", "arg": "count the shapes in #M1", "field": ""},
                 {"id": "n2", "op": "compute", "arg": expression, "field": ""}]  # fmt: skip
        written = {"question": question, "steps": steps}
        line = {
            "match": rf'You write harder questions.*"strategy": "{strategy}"',
            "content": json.dumps(written),
        }
        script.append({**line, "match": "(?s)" + line["match"], "times": 0})
    responder = ScriptedResponder(script)
    source = {"source": "longvideobench", "path": str(lvb)}
    with start_server(responder) as srv:
        params = _params(source, srv.url, ["video"], rewrite={"provider": "llm"})
        root = _run(params, tmp_path, responder)
    assert len(read_jsonl(root / "anchor_facts" / "solutions.jsonl", ReferenceSolution)) == len(entries)
    cands = [json.loads(x) for x in (root / "rewrite_candidates" / "candidates.jsonl").open()]
    answers = {(c["seed_id"], c["strategy"]): c["task"]["answer"] for c in cands}
    for e in entries:  # the shapes the sub-agent counted, times three and plus four
        assert answers[(f"lvb-{e['id']}", "multi_hop_chaining")] == str(3 * SHAPES[e["id"]])
        assert answers[(f"lvb-{e['id']}", "entity_obfuscation")] == str(SHAPES[e["id"]] + 4)
    samples = read_jsonl(root / "decision_samples" / "samples.jsonl", DecisionSample)
    assert samples
    frames = [p for p in _parts(responder.requests, "You are a sub-agent") if p["type"] == "image_url"]
    assert frames and len(frames) % 3 == 0  # three frames per video sent
    assert any(
        p["type"] == "text" and p["text"].startswith("frame at")
        for p in _parts(responder.requests, "You are a sub-agent")
    )
