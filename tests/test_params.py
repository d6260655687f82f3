"""params.yaml validation: every params file loads; misspelled keys and bad bounds are named."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestra.cli import app
from orchestra.config import Params, load_params, parse_params
from orchestra.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


PARAMS_FILES = sorted(
    p
    for p in ROOT.rglob("params*.yaml")
    if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
)


def test_the_project_params_file_is_among_them() -> None:
    assert ROOT / "params.yaml" in PARAMS_FILES


@pytest.mark.parametrize("path", PARAMS_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_params_file_loads(path: Path) -> None:
    assert isinstance(load_params(path), Params)


def test_misspelled_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"seed\.sourcee: unknown key"):
        parse_params({"seed": {"sourcee": "world"}})


def test_out_of_range_value_names_bound() -> None:
    with pytest.raises(ConfigError) as e:
        parse_params({"verify": {"max_lexical_similarity": 1.5}})
    assert "verify.max_lexical_similarity" in str(e.value)
    assert "le 1.0" in str(e.value)


def test_bad_literal_lists_allowed_values() -> None:
    with pytest.raises(ConfigError) as e:
        parse_params({"seed": {"source": "imagenet"}})
    assert "seed.source" in str(e.value) and "omnigaia" in str(e.value) and "longvideobench" in str(e.value)


def test_every_problem_reported_at_once() -> None:
    with pytest.raises(ConfigError) as e:
        parse_params({"seed": {"limit": 0}, "train": {"grpo": {"beta": -1}}, "nope": 1})
    msg = str(e.value)
    assert "seed.limit" in msg and "train.grpo.beta" in msg and "nope: unknown key" in msg


def test_cross_field_rules() -> None:
    with pytest.raises(ConfigError, match="multiple of num_generations"):
        parse_params({"train": {"grpo": {"num_generations": 3, "per_device_batch_size": 4}}})
    with pytest.raises(ConfigError, match="anchors.provider"):
        parse_params({"anchors": {"provider": "gpt"}})
    with pytest.raises(ConfigError, match="sqlite"):
        parse_params({"tracking": {"mlflow_uri": "mlruns"}})
    with pytest.raises(ConfigError, match="needs base_url"):
        parse_params({"providers": {"judge": {"kind": "openai"}}})


def test_malformed_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "params.yaml"
    bad.write_text("seed: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_params(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_params(tmp_path / "missing.yaml")


def test_a_key_given_twice_is_an_error_not_the_last_one_silently(tmp_path: Path) -> None:
    text = Path(__file__).parents[1].joinpath("params.yaml").read_text(encoding="utf-8")
    twice = tmp_path / "params.yaml"
    twice.write_text(text.replace("    n_seeds:", "    speech: true\n    n_seeds:", 1), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"found the key 'speech' twice[\s\S]*line \d+"):
        load_params(twice)
    twice.write_text("seed:\n  world: {seed: 3}\n", encoding="utf-8")
    assert load_params(twice).seed.world.seed == 3  # one key in two mappings is no repeat


def test_params_yaml_matches_defaults_where_it_is_silent() -> None:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert parse_params(data).decisions == Params().decisions


def test_cli_params_check(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["params", "check", str(ROOT / "params.yaml")])
    assert ok.exit_code == 0, ok.output
    bad = tmp_path / "params.yaml"
    bad.write_text("seed:\n  sourcee: world\n")
    res = runner.invoke(app, ["params", "check", str(bad)])
    assert res.exit_code != 0
    assert "seed.sourcee" in res.output


OVERLAYS = sorted((ROOT / "configs").glob("own_*.yaml"))


@pytest.mark.parametrize("path", OVERLAYS, ids=lambda p: p.name)
def test_the_own_data_overlays_are_valid_and_configure_an_expert(path: Path) -> None:
    from orchestra.config import data_root

    params = load_params(path)
    assert params.seed.source in ("omnigaia_file", "coco") and params.seed.incoming is None
    expert = params.providers[params.anchors.expert or ""]
    assert expert.kind == "openai" and expert.inputs and params.anchors.provider == params.anchors.expert
    assert any(
        b.kind == "openai" and b.provider == params.anchors.expert for b in params.agent.backends.values()
    )
    assert params.train == load_params(ROOT / "params.yaml").train  # the overlay changes no recipe
    assert data_root(path, params) == ROOT / "out" / path.stem  # beside the project's data, under out/
    assert len(OVERLAYS) == 2


def test_an_overlay_merges_onto_its_base_mapping_by_mapping(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("anchors: {max_facts: 5}\ntrain: {seed: 3, sft: {max_steps: 7}}\n")
    (tmp_path / "mid.yaml").write_text("extends: base.yaml\ntrain: {sft: {learning_rate: 0.01}}\n")
    (tmp_path / "top.yaml").write_text("extends: mid.yaml\nanchors: {attempts: 4}\n")
    p = load_params(tmp_path / "top.yaml")
    assert (p.anchors.max_facts, p.anchors.attempts) == (5, 4)
    assert (p.train.seed, p.train.sft.max_steps, p.train.sft.learning_rate) == (3, 7, 0.01)
    (tmp_path / "base.yaml").write_text("extends: top.yaml\n")
    with pytest.raises(ConfigError, match="extends this file again"):
        load_params(tmp_path / "top.yaml")
    (tmp_path / "lost.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match="nowhere.yaml: cannot read params file"):
        load_params(tmp_path / "lost.yaml")
    (tmp_path / "typo.yaml").write_text("extends: mid.yaml\nanchors: {expertt: x}\n")
    (tmp_path / "base.yaml").write_text("anchors: {max_facts: 5}\n")
    with pytest.raises(ConfigError, match="anchors.expertt: unknown key"):
        load_params(tmp_path / "typo.yaml")
