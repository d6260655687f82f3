"""The pipeline over the stage table: the runner, the params scope, DVC in step, the lineage audit."""
