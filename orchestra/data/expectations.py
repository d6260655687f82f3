"""Great Expectations over the verification checks: one row per candidate, one expectation per check."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestra.config import VerifyParams
from orchestra.errors import StageError
from orchestra.schemas import VerificationResult

if TYPE_CHECKING:
    import pandas as pd
    from great_expectations.core import ExpectationSuite

__all__ = ["CHECK_COLUMNS", "GEValidation", "build_suite", "checks_frame", "validate_checks"]

#: check name -> its column in the checks table
CHECK_COLUMNS: dict[str, str] = {
    "anchor_coverage": "anchor_coverage",
    "lexical_similarity": "lexical_similarity",
    "modality_bypass": "modality_bypass_reached",
    "numeric_rederivation": "numeric_rederived",
    "judge": "judge_ok",
}
SUITE = "verify_checks"
_RESULT_FORMAT = {"result_format": "COMPLETE", "unexpected_index_column_names": ["candidate_id"]}


@dataclass
class GEValidation:
    """What the suite decided: passing ids, one reject row per failing candidate, the saved artefacts."""

    success: bool
    passed_ids: list[str]
    rejects: list[dict[str, Any]]
    validation_json: Path
    data_docs_index: Path
    statistics: dict[str, Any] = field(default_factory=dict)


def checks_frame(results: Sequence[VerificationResult]) -> pd.DataFrame:
    """candidate_id and one column per check: the coverage and similarity scores; whether the text-only
    solver reached the answer (null: skipped); whether the answer was re-derived (null: not numeric);
    whether the judge found the candidate consistent and no duplicate."""
    import pandas as pd

    rows = []
    for r in results:
        c = r.checks
        bypass, numeric = c["modality_bypass"], c["numeric_rederivation"]
        rows.append(
            {
                "candidate_id": r.candidate_id,
                "anchor_coverage": float(c["anchor_coverage"].score or 0.0),
                "lexical_similarity": float(c["lexical_similarity"].score or 0.0),
                "modality_bypass_reached": None if bypass.score is None else not bypass.passed,
                "numeric_rederived": None if numeric.score is None else numeric.passed,
                "judge_ok": c["judge"].passed,
            }
        )
    columns = ["candidate_id", *CHECK_COLUMNS.values()]
    frame = pd.DataFrame(rows, columns=columns)
    for col in ("modality_bypass_reached", "numeric_rederived"):
        frame[col] = frame[col].astype(object)  # True/False/None: nulls are "not applicable"
    return frame


def _gx() -> Any:
    """great_expectations, imported with its analytics off (nothing leaves the machine)."""
    os.environ["GX_ANALYTICS_ENABLED"] = "false"
    import great_expectations as gx

    return gx


def build_suite(params: VerifyParams) -> ExpectationSuite:
    """One expectation per check step, each tagged ``meta.check`` with the check's name. Column-map
    expectations skip nulls, so a skipped bypass test or a non-numeric answer is not a failure."""
    gx = _gx()
    e = gx.expectations
    bounds = {
        "anchor_coverage": (params.min_anchor_coverage, 1.0),
        "lexical_similarity": (0.0, params.max_lexical_similarity),
    }
    allowed = {"modality_bypass": [False], "numeric_rederivation": [True], "judge": [True]}
    suite = gx.ExpectationSuite(name=SUITE)
    for check, column in CHECK_COLUMNS.items():
        meta = {"check": check}
        if check in bounds:
            lo, hi = bounds[check]
            suite.add_expectation(
                e.ExpectColumnValuesToBeBetween(column=column, min_value=lo, max_value=hi, meta=meta)
            )
        else:
            suite.add_expectation(
                e.ExpectColumnValuesToBeInSet(column=column, value_set=allowed[check], meta=meta)
            )
    return suite


def validate_checks(
    results: Sequence[VerificationResult], params: VerifyParams, out_dir: Path
) -> GEValidation:
    """Validate the checks table with the suite (result_format COMPLETE, candidate_id as the index
    column) in a file-backed GE project at ``out_dir`` (which must be new or empty), save the
    validation result and build the Data Docs there. A candidate passes when no expectation lists
    it; each reject row names its failed checks and the checks' reasons. Raises StageError if the
    suite and the checks disagree about a candidate (a bug, never a data problem)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise StageError(f"{out_dir} is not empty: Great Expectations writes a fresh project there")
    out_dir.mkdir(parents=True, exist_ok=True)
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    frame = checks_frame(results)
    try:
        context = gx.get_context(mode="file", project_root_dir=str(out_dir))
        context.config.analytics_enabled = False
        context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        context.variables.save()
        batch = (
            context.data_sources.add_pandas("verification")
            .add_dataframe_asset("checks")
            .add_batch_definition_whole_dataframe("all_candidates")
        )
        suite = context.suites.add(build_suite(params))
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name="verify_checks", data=batch, suite=suite)
        )
        outcome = definition.run(batch_parameters={"dataframe": frame}, result_format=_RESULT_FORMAT)
        sites = context.build_data_docs()
    except gx.exceptions.GreatExpectationsError as e:
        raise StageError(f"Great Expectations could not validate the checks table: {e}") from e
    failed: dict[str, list[str]] = {}
    for res in outcome.results:
        check = res.expectation_config.meta["check"]
        for row in res.result.get("unexpected_index_list") or []:
            failed.setdefault(str(row["candidate_id"]), []).append(check)
    by_id = {r.candidate_id: r for r in results}
    disagree = sorted(cid for cid, r in by_id.items() if r.passed == (cid in failed))
    if disagree:
        raise StageError(f"the GE suite and the checks disagree about {disagree[:5]}")
    rejects = [
        {
            "candidate_id": cid,
            "failed_checks": sorted(failed[cid]),
            "reasons": " | ".join(f"{k}: {by_id[cid].checks[k].detail}" for k in sorted(failed[cid])),
        }
        for cid in sorted(failed)
    ]
    stored = sorted((out_dir / "gx" / "uncommitted" / "validations").rglob("*.json"))
    index = out_dir / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    if len(stored) != 1 or not index.is_file():
        raise StageError(
            f"Great Expectations did not save its result and Data Docs under {out_dir} ({sites})"
        )
    return GEValidation(
        success=bool(outcome.success),
        passed_ids=sorted(cid for cid in by_id if cid not in failed),
        rejects=rejects,
        validation_json=stored[0],
        data_docs_index=index,
        statistics=json.loads(json.dumps(outcome.statistics, default=float)),
    )
