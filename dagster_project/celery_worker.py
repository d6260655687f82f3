"""Imported by every dagster-celery worker (``dagster-celery worker start -i dagster_project.celery_worker``).

Celery's prefork pool runs each task (a Dagster step) in a daemonic child that billiard forked, with
billiard's own process object as ``multiprocessing.current_process()``. Our steps start process pools
(the tool pool, the evaluation workers, spawn or forkserver), which a daemonic process may not
("daemonic processes are not allowed to have children"), and spawn/forkserver pickle the current
process's authkey, which billiard's type refuses. Each pool child is made an ordinary parent right after
it is forked. Prefork, not ``--pool solo``: a step's process killed (kill -9, out of memory) is then
reported by the worker that survives it, and the run fails at once with a clear event instead of
waiting for a result that never comes.

The worker's main process imports what every step needs before it forks its pool, as the multiprocess
executor's forkserver does (:data:`dagster_project.definitions.PRELOAD`).
"""

from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.process
from typing import Any

from celery.signals import worker_process_init

from dagster_project.definitions import PRELOAD


@worker_process_init.connect
def allow_children(**_: Any) -> None:
    current = multiprocessing.current_process()
    current._config["daemon"] = False  # type: ignore[attr-defined]
    current._config["authkey"] = multiprocessing.process.AuthenticationString(bytes(current.authkey))  # type: ignore[attr-defined]


for _module in PRELOAD:
    importlib.import_module(_module)
