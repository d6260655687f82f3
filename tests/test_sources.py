"""Real seed datasets from local copies (data/sources.py): tiny fixtures in each dataset's published
schema (field names and nesting as COCO 2017, FineVideo and LongVideoBench ship them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from orchestra.config import SeedParams
from orchestra.data.seeds import build_seed_tasks
from orchestra.data.store import read_seed_tasks
from orchestra.errors import StageError


def _video(path: Path, seed: int) -> bytes:
    """A real 8-frame MP4 (OpenCV, mp4v)."""
    import cv2

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 8.0, (64, 48))
    rng = np.random.default_rng(seed)
    for _ in range(8):
        writer.write(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    writer.release()
    return path.read_bytes()


def _coco(root: Path) -> Path:
    (root / "annotations").mkdir(parents=True)
    (root / "val2017").mkdir()
    for img_id in (139, 285, 632):
        Image.new("RGB", (32, 24), (img_id % 255, 90, 30)).save(root / "val2017" / f"{img_id:012d}.jpg")
    images = [
        {"license": 4, "file_name": f"{i:012d}.jpg", "coco_url": f"http://images.cocodataset.org/val2017/{i:012d}.jpg",
         "height": 24, "width": 32, "date_captured": "2013-11-14 17:02:52", "flickr_url": "", "id": i}
        for i in (285, 139, 632)
    ]  # fmt: skip
    info = {"description": "COCO 2017 Dataset", "version": "1.0", "year": 2017}
    categories = [{"supercategory": "person", "id": 1, "name": "person"},
                  {"supercategory": "animal", "id": 23, "name": "bear"},
                  {"supercategory": "furniture", "id": 62, "name": "chair"}]  # fmt: skip

    def inst(aid: int, image_id: int, cat: int, crowd: int = 0) -> dict:
        seg = {"counts": [1, 2], "size": [24, 32]} if crowd else [[1.0, 1.0, 5.0, 1.0, 5.0, 5.0]]
        return {"id": aid, "image_id": image_id, "category_id": cat, "segmentation": seg, "area": 16.0,
                "bbox": [1.0, 1.0, 4.0, 4.0], "iscrowd": crowd}  # fmt: skip

    anns = [
        inst(1, 139, 1),
        inst(2, 139, 62),
        inst(3, 139, 62),
        inst(4, 139, 1, crowd=1),
        inst(5, 139, 1, crowd=1),
    ]
    anns += [inst(6, 285, 23)]  # image 632 has no instances: no task
    (root / "annotations" / "instances_val2017.json").write_text(
        json.dumps(
            {"info": info, "licenses": [], "images": images, "annotations": anns, "categories": categories}
        )
    )
    caps = [{"image_id": 139, "id": 10, "caption": "A woman stands in the  dining area."},
            {"image_id": 285, "id": 11, "caption": "A big burly grizzly bear."}]  # fmt: skip
    (root / "annotations" / "captions_val2017.json").write_text(
        json.dumps({"info": info, "licenses": [], "images": images, "annotations": caps})
    )
    return root


def test_coco_images_become_counting_tasks_with_their_captions(tmp_path: Path) -> None:
    root = _coco(tmp_path / "coco")
    out = tmp_path / "seed_tasks"
    summary = build_seed_tasks(SeedParams(source="coco", path=str(root), incoming=None), out)
    tasks = read_seed_tasks(out.parent)
    assert summary["rows"] == 2 and [t.id for t in tasks] == ["coco-139", "coco-285"]
    chairs = tasks[0]  # 2 chairs beat 1 person (the crowd annotations do not count)
    assert chairs.answer == "2" and "'chair'" in chairs.question
    assert chairs.annotated_solution[0] == "Caption: A woman stands in the dining area."
    m = chairs.omni_modal_input[0]
    assert (m.type, m.path) == ("image", "images/000000000139.jpg") and (out / "media" / m.path).is_file()
    assert tasks[1].answer == "1" and "'bear'" in tasks[1].question
    limited = build_seed_tasks(
        SeedParams(source="coco", path=str(root), limit=1, incoming=None), tmp_path / "one"
    )
    assert limited["rows"] == 1 and not (tmp_path / "one" / "media" / "images" / "000000000285.jpg").exists()


def test_finevideo_shards_become_one_task_per_question(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = {
        "resolution": "64x48", "duration_seconds": 1, "content_parent_category": "Sports",
        "content_fine_category": "Climbing", "youtube_title": "Bouldering basics",
        "original_video_filename": "7yY1OWjT4zA.mp4", "original_json_filename": "7yY1OWjT4zA.json",
        "content_metadata": {
            "title": "Bouldering basics", "description": "A climber explains a route.", "fps": 8.0,
            "characterList": [{"characterId": "1", "name": "Climber", "description": "in red"}],
            "scenes": [{"sceneId": 1, "title": "Intro",
                        "timestamps": {"start_timestamp": "00:00:00.000", "end_timestamp": "00:00:01.000"}}],
            "qAndA": [{"question": "What colour is the climber's shirt?", "answer": "Red"},
                      {"question": "How many holds are used?", "answer": "4"}],
        },
        "timecoded_text_to_speech": [{"start": "00:00:00.000", "end": "00:00:01.000", "text": "Hi"}],
    }  # fmt: skip
    no_qa = {**meta, "original_video_filename": "x.mp4", "content_metadata": {"title": "t", "qAndA": []}}
    mp4 = _video(tmp_path / "src.mp4", 1)
    table = pa.table({"mp4": [mp4, mp4], "json": [meta, no_qa]})
    (tmp_path / "finevideo" / "data").mkdir(parents=True)
    pq.write_table(table, tmp_path / "finevideo" / "data" / "train-00000-of-01357.parquet")
    out = tmp_path / "seed_tasks"
    build_seed_tasks(SeedParams(source="finevideo", path=str(tmp_path / "finevideo"), incoming=None), out)
    tasks = read_seed_tasks(out.parent)
    assert [t.id for t in tasks] == ["finevideo-7yY1OWjT4zA-q1", "finevideo-7yY1OWjT4zA-q2"]
    assert [t.answer for t in tasks] == ["Red", "4"] and tasks[0].category == "Sports"
    assert tasks[0].omni_modal_input[0].path == "videos/7yY1OWjT4zA.mp4"
    assert (out / "media" / "videos" / "7yY1OWjT4zA.mp4").read_bytes() == mp4

    (tmp_path / "bad").mkdir()
    pq.write_table(pa.table({"video": [b"x"]}), tmp_path / "bad" / "a.parquet")
    with pytest.raises(StageError, match=r"lacks the FineVideo columns \['json', 'mp4'\]"):
        build_seed_tasks(SeedParams(source="finevideo", path=str(tmp_path / "bad"), incoming=None), out)


def _lvb(root: Path, with_answer: bool = True) -> Path:
    entry = {
        "video_id": "86CxyhFV9MI", "question": "Which subtitles appear with the man in grey?",
        "question_wo_referring_query": "Which subtitles appear?",
        "candidates": ["Hello", "Goodbye", "Thanks"],
        "correct_choice": 1, "position": [854, 948], "topic_category": "NP-News-Programs",
        "question_category": "TOS", "level": "L2-Relation", "id": "86CxyhFV9MI_0",
        "video_path": "86CxyhFV9MI.mp4", "subtitle_path": "86CxyhFV9MI_en.json", "duration_group": 600,
        "starting_timestamp_for_subtitles": 0, "duration": 1.0, "view_count": 259852,
    }  # fmt: skip
    if not with_answer:
        del entry["correct_choice"]
    _video(root / "videos" / "86CxyhFV9MI.mp4", 2)
    (root / "subtitles").mkdir(parents=True, exist_ok=True)
    (root / "subtitles" / "86CxyhFV9MI_en.json").write_text(
        json.dumps([{"timestamp": [0.0, 1.0], "text": "Goodbye"}])
    )
    (root / "lvb_val.json").write_text(json.dumps([entry]))
    return root


def test_longvideobench_entries_become_lettered_choices_and_missing_copies_name_the_param(
    tmp_path: Path,
) -> None:
    root = _lvb(tmp_path / "lvb")
    out = tmp_path / "seed_tasks"
    build_seed_tasks(SeedParams(source="longvideobench", path=str(root), incoming=None), out)
    (task,) = read_seed_tasks(out.parent)
    assert task.id == "lvb-86CxyhFV9MI_0" and task.answer == "B" and task.level == "L2-Relation"
    assert "Options: A. Hello B. Goodbye C. Thanks" in task.question
    assert (out / "media" / "videos" / "86CxyhFV9MI.mp4").is_file()
    assert (out / "media" / "subtitles" / "86CxyhFV9MI_en.json").is_file()

    before = (out / "tasks.json").read_bytes()
    with pytest.raises(StageError, match="seed.path .* is not a folder"):
        build_seed_tasks(SeedParams(source="coco", path=str(tmp_path / "nowhere"), incoming=None), out)
    with pytest.raises(ValueError, match="source 'coco' needs seed.path"):
        SeedParams(source="coco")
    _lvb(tmp_path / "test_split", with_answer=False)
    with pytest.raises(StageError, match="has no correct_choice"):
        build_seed_tasks(
            SeedParams(source="longvideobench", path=str(tmp_path / "test_split"), incoming=None), out
        )
    assert (out / "tasks.json").read_bytes() == before  # a failed build leaves the last output


def test_seed_tasks_stage_materializes_a_dataset_source(tmp_path: Path) -> None:
    root = _coco(tmp_path / "coco")
    params = tmp_path / "params.yaml"
    params.write_text(f"paths: {{data_dir: data}}\nseed: {{source: coco, path: {root}, incoming: null}}\n")
    env = {**os.environ, "ORCHESTRA_PARAMS": str(params)}
    run = [sys.executable, "-m", "orchestra.cli", "stage", "seed_tasks", "--params", str(params)]
    res = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [t.id for t in read_seed_tasks(tmp_path / "data")] == ["coco-139", "coco-285"]
    again = subprocess.run(
        run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert again.returncode == 0 and '"up_to_date": true' in again.stdout, again.stdout + again.stderr
