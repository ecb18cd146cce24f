"""The training file of a fine-tuning job: its examples, checked, and the JSONL OpenAI trains on.

Pure: no I/O. An example is OpenAI's chat fine-tuning format, one JSON object a line:

    {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."},
                  {"role": "assistant", "content": "..."}]}

Examples come from the job's params (`training.examples`) or from the knowledge table (`training.knowledge`:
each issue of a project that carries labels becomes the question "title + body" answered with its
labels). `training.agent` names an agent whose system prompt opens every example, so the model is
trained on the prompt it will be run with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ticketiq.jobs.kinds import params_error

MIN_EXAMPLES = 10  # OpenAI refuses a training file with fewer
MAX_INLINE_EXAMPLES = 5000  # more belongs in the knowledge table than in a request body
KNOWLEDGE_LIMIT = 1000  # issues read when `training.knowledge.limit` is not given
MAX_KNOWLEDGE_LIMIT = 100_000
ROLES = frozenset({"system", "developer", "user", "assistant"})
_PROJECT = re.compile(r"^[A-Z][A-Z0-9_]+$")


def file_name(job_id: str) -> str:
    """The name the training file is uploaded under: the job's id in it, so a resume whose upload was in
    doubt finds it again by listing files."""
    return f"ticketiq-fine-tune-{job_id}.jsonl"


def check_training(raw: Any, agent_exists: Callable[[str], bool]) -> dict[str, Any]:
    """`params.training`, checked and normalised: exactly one of `examples` or `knowledge`, and an
    optional `agent` (`agent_exists(name) -> bool`). RequestError naming the field otherwise."""
    if not isinstance(raw, Mapping):
        raise params_error("training", "must be an object with `examples` or `knowledge`")
    unknown = set(raw) - {"examples", "knowledge", "agent"}
    if unknown:
        raise params_error(f"training.{sorted(unknown)[0]}", "unknown field; use examples, knowledge or agent")
    sources = [name for name in ("examples", "knowledge") if name in raw]
    if len(sources) != 1:
        raise params_error("training", "give exactly one of `examples` (a list) or `knowledge` ({project})")
    checked: dict[str, Any] = {}
    agent = raw.get("agent")
    if agent is not None:
        if not isinstance(agent, str) or not agent_exists(agent):
            raise params_error("training.agent", f"no agent named {agent!r} in the agents file")
        checked["agent"] = agent
    if sources == ["examples"]:
        checked["examples"] = check_examples(raw["examples"])
    else:
        checked["knowledge"] = _check_knowledge(raw["knowledge"])
    return checked


def check_examples(raw: Any) -> list[dict[str, Any]]:
    """Inline examples: at least MIN_EXAMPLES, each `{messages: [...]}` of roles and text, with an
    assistant answer. Only `messages` is kept of each."""
    field = "training.examples"
    if not isinstance(raw, list):
        raise params_error(field, "must be a list of examples, each {messages: [...]}")
    if not MIN_EXAMPLES <= len(raw) <= MAX_INLINE_EXAMPLES:
        bounds = f"OpenAI trains on {MIN_EXAMPLES} or more (at most {MAX_INLINE_EXAMPLES} here)"
        raise params_error(field, f"has {len(raw)} examples; {bounds}")
    examples = []
    for index, example in enumerate(raw):
        where = f"{field}.{index}"
        messages = example.get("messages") if isinstance(example, Mapping) else None
        if not isinstance(messages, list) or not messages:
            raise params_error(f"{where}.messages", "must be a non-empty list of {role, content} messages")
        kept = []
        for number, message in enumerate(messages):
            at = f"{where}.messages.{number}"
            if not isinstance(message, Mapping) or message.get("role") not in ROLES:
                raise params_error(f"{at}.role", f"must be one of {', '.join(sorted(ROLES))}")
            if not isinstance(message.get("content"), str):
                raise params_error(f"{at}.content", "must be text")
            kept.append({"role": message["role"], "content": message["content"]})
        if kept[-1]["role"] != "assistant":
            raise params_error(f"{where}.messages", "must end with the assistant's answer, the text trained on")
        examples.append({"messages": kept})
    return examples


def _check_knowledge(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise params_error("training.knowledge", "must be an object {project, limit?}")
    unknown = set(raw) - {"project", "limit"}
    if unknown:
        raise params_error(f"training.knowledge.{sorted(unknown)[0]}", "unknown field; use project or limit")
    project = raw.get("project")
    if not isinstance(project, str) or not _PROJECT.match(project):
        raise params_error("training.knowledge.project", "must be a Jira project key such as OPS")
    limit = raw.get("limit", KNOWLEDGE_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or not MIN_EXAMPLES <= limit <= MAX_KNOWLEDGE_LIMIT:
        raise params_error(
            "training.knowledge.limit", f"must be a whole number from {MIN_EXAMPLES} to {MAX_KNOWLEDGE_LIMIT}"
        )
    return {"project": project, "limit": limit}


def knowledge_examples(issues: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """An example per issue that carries labels: the question is its title and body, the answer its
    labels, sorted and comma-separated (what a triage model is trained to say)."""
    examples = []
    for issue in issues:
        labels = sorted({str(label) for label in issue.get("labels") or [] if str(label).strip()})
        if not labels:
            continue
        question = "\n\n".join(part for part in (issue.get("title") or "", issue.get("body") or "") if part)
        examples.append({
            "messages": [
                {"role": "user", "content": question or str(issue.get("key", ""))},
                {"role": "assistant", "content": ", ".join(labels)},
            ]
        })  # fmt: skip
    return examples


def training_jsonl(examples: Sequence[Mapping[str, Any]], system_prompt: str | None = None) -> bytes:
    """The file's bytes: one example a line, the system prompt (if any) first in each example that has
    none of its own. The same examples always give the same bytes."""
    lines = []
    for example in examples:
        messages = list(example["messages"])
        if system_prompt and not any(m["role"] in ("system", "developer") for m in messages):
            messages.insert(0, {"role": "system", "content": system_prompt})
        lines.append(json.dumps({"messages": messages}, ensure_ascii=False, separators=(",", ":"), sort_keys=True))
    # Text from the database or a request body holds no lone surrogate (I16); replace one all the same
    # rather than fail the upload on it.
    return ("\n".join(lines) + "\n").encode("utf-8", errors="replace")


def too_few(count: int, source: str) -> str | None:
    """Why a source read at run time cannot be trained on, or None when it has enough examples."""
    if count >= MIN_EXAMPLES:
        return None
    return f"{source} gave only {count} usable examples; OpenAI trains on {MIN_EXAMPLES} or more"
