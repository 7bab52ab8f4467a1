"""Fine-tuning tasks: GLUE, SQuAD v1.1/v2.0, CoNLL-2003 NER, SWAG and the user's own data.

`get_task(name)` returns a `Task` (see `tasks.base`): read files, featurize, collate, decode,
score. The training loop only ever sees the task's head, its collate function and an
evaluation function built from `decode` + `score`.
"""

from __future__ import annotations

from bertkit.errors import BertkitError
from bertkit.tasks.base import FeatureSettings, Task
from bertkit.tasks.custom import ColumnSpec, CustomTask
from bertkit.tasks.glue import GLUE_TASKS, GlueTask
from bertkit.tasks.ner import NerTask
from bertkit.tasks.squad import SquadTask
from bertkit.tasks.swag import SwagTask

TASK_NAMES = (*GLUE_TASKS, "squad1", "squad2", "conll2003", "swag", "custom")


def get_task(name: str, columns: ColumnSpec | None = None) -> Task:
    """The task called `name` (one of TASK_NAMES); `columns` describes a custom data set."""
    if name in GLUE_TASKS:
        return GlueTask(name)
    if name in ("squad1", "squad2"):
        return SquadTask(int(name[-1]))
    if name == "conll2003":
        return NerTask(name)
    if name == "swag":
        return SwagTask()
    if name == "custom":
        return CustomTask(columns)
    raise BertkitError(f"unknown task {name!r}; choose one of {', '.join(TASK_NAMES)}")


__all__ = ["TASK_NAMES", "ColumnSpec", "FeatureSettings", "Task", "get_task"]
