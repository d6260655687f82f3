"""Dagster resources: the params file (validated into orchestra.config.Params) and the data root."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from orchestra.config import Params, data_root, load_params


class ParamsResource(dg.ConfigurableResource):
    """Provides the validated params.yaml and the folder every asset writes ``<asset>/`` under."""

    path: str = "params.yaml"

    def load(self) -> Params:
        return load_params(self.path)

    def root(self, params: Params) -> Path:
        return data_root(self.path, params)
