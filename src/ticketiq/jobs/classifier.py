"""The classifier-training job (issue 10; I13): learn the knowledge table's labels from its text.

It reads the knowledge rows (of one project, or all), learns each row's label from its title and body
(a multinomial logistic regression in plain Python, `jobs/text_classifier.py`), one progress report per
epoch, measures the model on the rows it held out, and writes the model to `classifiers` in one
statement fenced by its attempt. It is never resumed: whose process stops mid-training is failed
`interrupted` by the sweep, and a person restarts it (`POST /v1/jobs/{id}/restart`) from scratch.
Nothing is written before the end, so an interrupted job leaves no model behind.

Params: `project` (a Jira project key; all rows when absent), `labels` (the labels to learn: a row is
learnt as the first of its labels that is one of them; default: as its first label), `epochs` (1-200,
default 20), `holdout` (the share of rows kept out to measure the model, 0-0.5, default 0.2), `pace_s`
(a pause after each epoch, 0-10 s, default 0: for demos and tests, so a kill can land mid-training).
"""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ticketiq.jobs.kinds import Job, JobFailed, JobKind, params_error
from ticketiq.jobs.text_classifier import (
    Classifier,
    Example,
    LabelledRow,
    TooFewClasses,
    TooManyClasses,
    accuracy,
    epoch_order,
    learning_rate,
    majority_share,
    training_set,
)
from ticketiq.values.storable import is_storable

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine

FIELDS = ("project", "labels", "epochs", "holdout", "pace_s")
MAX_EPOCHS = 200
DEFAULT_EPOCHS = 20
MAX_HOLDOUT = 0.5
DEFAULT_HOLDOUT = 0.2
MAX_PACE_S = 10.0
# Bounds on the model, which is stored (and shown in the job's result): classes x features weights.
MAX_CLASSES = 20
MAX_FEATURES = 300
# Training examples per slice of an epoch run off the event loop (a few tens of milliseconds each).
EPOCH_SLICE = 2000
_PROJECT = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,99}$")
_MAX_LABEL = 200


def _number(params: Mapping[str, Any], field: str, default: float, low: float, high: float) -> float:
    value = params.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise params_error(field, f"must be a number from {low:g} to {high:g}")
    if not low <= value <= high:
        raise params_error(field, f"must be from {low:g} to {high:g}, got {value:g}")
    return float(value)


def _labels(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_CLASSES:
        raise params_error("labels", f"must be a list of 2 to {MAX_CLASSES} labels to learn")
    for position, label in enumerate(value):
        if not isinstance(label, str) or not 0 < len(label) <= _MAX_LABEL or not is_storable(label):
            raise params_error("labels", f"label {position} must be text of 1 to {_MAX_LABEL} characters")
    if len(set(value)) != len(value):
        raise params_error("labels", "names a label twice")
    return list(value)


def check(params: Mapping[str, Any], engine: Engine) -> dict[str, Any]:
    """The params, checked and with their defaults; a 422 naming the first bad field. Pure."""
    unknown = sorted(set(params) - set(FIELDS))
    if unknown:
        raise params_error(unknown[0], f"is not a parameter of classifier_training; it takes {', '.join(FIELDS)}")
    project = params.get("project")
    if project is not None and (not isinstance(project, str) or not _PROJECT.fullmatch(project)):
        raise params_error("project", "must be a project key (letters, digits and _, starting with a letter)")
    epochs = params.get("epochs", DEFAULT_EPOCHS)
    if isinstance(epochs, bool) or not isinstance(epochs, int) or not 1 <= epochs <= MAX_EPOCHS:
        raise params_error("epochs", f"must be a whole number from 1 to {MAX_EPOCHS}")
    return {
        "project": project,
        "labels": _labels(params.get("labels")),
        "epochs": epochs,
        "holdout": _number(params, "holdout", DEFAULT_HOLDOUT, 0.0, MAX_HOLDOUT),
        "pace_s": _number(params, "pace_s", 0.0, 0.0, MAX_PACE_S),
    }


async def _epoch(job: Job, model: Classifier, train: list[Example], epoch: int) -> float:
    """One epoch, off the event loop (which renews the leases) in slices: a job whose lease is lost
    stops within a slice, not at the end of an epoch over a large table. Returns its mean loss."""
    order = epoch_order(len(train), epoch)
    total = 0.0
    for start in range(0, len(order), EPOCH_SLICE):
        job.check()  # I3
        part = order[start : start + EPOCH_SLICE]
        total += await asyncio.to_thread(model.train_pass, train, part, learning_rate(epoch)) * len(part)
    return total / len(order)


async def run(job: Job) -> dict[str, Any]:
    params = job.params
    project: str | None = params["project"]
    rows = await job.knowledge.labelled_rows(project)
    if not rows:
        where = f" for project {project}" if project else ""
        raise JobFailed(f"the knowledge table has no rows{where} to learn from; sync a source first (source_sync)")
    labelled = [LabelledRow(r["key"], r["text"], tuple(r["labels"])) for r in rows]
    try:
        # Tokenising thousands of tickets is CPU work: off the event loop, which renews the leases.
        data = await asyncio.to_thread(
            training_set, labelled, wanted=params["labels"], holdout=params["holdout"],
            max_features=MAX_FEATURES, max_classes=MAX_CLASSES,
        )  # fmt: skip
    except (TooFewClasses, TooManyClasses) as exc:
        raise JobFailed(f"cannot train on {len(rows)} knowledge rows: {exc}") from None
    model = Classifier(data.classes, data.features)
    epochs: int = params["epochs"]
    await job.progress(0, epochs)
    loss = math.nan
    for epoch in range(epochs):
        loss = await _epoch(job, model, data.train, epoch)
        if params["pace_s"]:
            await asyncio.sleep(params["pace_s"])
        await job.progress(epoch + 1, epochs)  # I3: fenced; a job swept meanwhile stops here
    held_accuracy = accuracy(model, data.held)
    stored = model.to_json()
    classifier_id = await job.record_classifier(
        str(uuid.uuid4()), project, data.classes, len(data.train), len(data.held), held_accuracy, epochs, stored
    )
    return {
        "classifier_id": classifier_id,
        "project": project,
        "classes": data.classes,
        "rows": len(rows),
        "rows_trained": len(data.train),
        "rows_held_out": len(data.held),
        "rows_unlabelled": data.unlabelled,
        "features": len(data.features),
        "epochs": epochs,
        "final_loss": round(loss, 6),
        "accuracy": held_accuracy,
        # What always answering the commonest class scores on the same held-out rows.
        "majority_baseline": majority_share(data.train, data.held),
        "model": stored,
    }


KIND = JobKind(
    name="classifier_training",
    resumable=False,
    description="Train a text classifier on the knowledge table's labels; interrupted if its process stops.",
    check=check,
    run=run,
    unit="epochs",
)
