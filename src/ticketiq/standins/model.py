"""The scripted model stand-in: the chat-completions protocol answered from a YAML script per agent.

The request's `model` names the script (`triage` -> scripts/triage.yaml); a folder of your own
(`ticketiq standins --scripts DIR`, TICKETIQ_STANDIN_SCRIPTS) adds scripts, one of a shipped name
replacing the shipped one. Which step answers is a function of the conversation alone: the number of
assistant messages it already holds. So a run that is resumed on another process, asking for its next
step with the conversation it checkpointed, gets the same answer the lost process would have got; the
stand-in keeps no memory of runs.

A script file:

    steps:
      - calls:                       # one step asking for one or more tool calls
          - tool: jira_get_issue
            arguments: {issue_key: "{jira_key}"}
      - text: "Done with {jira_key}."   # the final answer; a script ends with one

Placeholders in argument strings and text: `{jira_key}` (the first `ABC-123` in the first user
message), `{input}` (the first user message), `{result:<tool>.<dotted.path>}` (a value from the JSON
of the latest result of a call to that tool, `|fallback` after the path for when there is none). A
string that is one placeholder only keeps the value's JSON type.

`ScriptedModel` is the decision without HTTP, for benchmarks; `create_router` serves it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ticketiq.errors import ConfigError, TicketIQError

SCRIPTS_DIR = Path(__file__).parent / "scripts"
LATENCY_HEADER = "X-Standin-Latency-Ms"
# What `{jira_key}` becomes when the input names no issue: shaped like a key, named like no issue.
NO_JIRA_KEY = "UNKNOWN-0"

_JIRA_KEY = re.compile(r"\b[A-Z][A-Z0-9]+-\d+\b")
_PLACEHOLDER = re.compile(
    r"\{(?:(?P<fact>jira_key|input)"
    r"|result:(?P<tool>[^{}|.]+)(?P<path>[^{}|]*)(?:\|(?P<fallback>[^{}]*))?)\}"
)
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


class RequestRejected(TicketIQError):
    """The stand-in refuses a request the way the OpenAI API would: status and error object."""

    def __init__(
        self, status: int, message: str, *, type: str, code: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _invalid(message: str, param: str | None = None) -> RequestRejected:
    return RequestRejected(400, message, type="invalid_request_error", param=param)


# --- scripts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScriptCall:
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ScriptStep:
    """Either tool calls (one or more, asked for in one step) or the final text."""

    calls: tuple[ScriptCall, ...] = ()
    text: str | None = None


@dataclass(frozen=True)
class Script:
    name: str
    steps: tuple[ScriptStep, ...]

    def step(self, answered: int) -> ScriptStep:
        # Past the end the final text is answered again: asking once more is not an error.
        return self.steps[min(answered, len(self.steps) - 1)]


def parse_script(name: str, data: Any) -> Script:
    """A script from its YAML data; ConfigError naming the step when it is malformed."""

    def bad(why: str) -> ConfigError:
        return ConfigError(f"model script {name!r}: {why}")

    if not isinstance(data, dict) or not isinstance(data.get("steps"), list) or not data["steps"]:
        raise bad("needs a non-empty `steps` list")
    steps: list[ScriptStep] = []
    for number, raw in enumerate(data["steps"], start=1):
        if not isinstance(raw, dict) or len(raw.keys() & {"calls", "text"}) != 1 or len(raw) != 1:
            raise bad(f"step {number} must have exactly one of `calls` or `text`")
        if "text" in raw:
            if not isinstance(raw["text"], str):
                raise bad(f"step {number}: `text` must be a string")
            steps.append(ScriptStep(text=raw["text"]))
            continue
        calls = raw["calls"]
        if not isinstance(calls, list) or not calls:
            raise bad(f"step {number}: `calls` must be a non-empty list")
        parsed: list[ScriptCall] = []
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
                raise bad(f"step {number}: each call needs a `tool` name")
            arguments = call.get("arguments", {})
            if not isinstance(arguments, dict) or set(call) - {"tool", "arguments"}:
                raise bad(f"step {number}: call {call['tool']} takes `tool` and an `arguments` mapping only")
            parsed.append(ScriptCall(call["tool"], arguments))
        steps.append(ScriptStep(calls=tuple(parsed)))
    if steps[-1].text is None:
        raise bad("the last step must be a `text` answer")
    return Script(name, tuple(steps))


def load_scripts(folder: Path) -> dict[str, Script]:
    scripts = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"model script {path}: not valid YAML: {exc}") from exc
        scripts[path.stem] = parse_script(path.stem, data)
    return scripts


def load_own_scripts(folder: Path) -> dict[str, Script]:
    """The scripts of your own folder; ConfigError at start when it is no folder (a typo would otherwise
    show only as every model name answered 404)."""
    if not folder.is_dir():
        raise ConfigError(
            f"stand-in scripts folder {folder} is not a folder; create it with a <model>.yaml per model, "
            "or fix --scripts / TICKETIQ_STANDIN_SCRIPTS"
        )
    return load_scripts(folder)


def no_script_message(model: str, own: Path | None) -> str:
    """What a model name without a script is answered: the folder and the file to write there."""
    file = f"{model}.yaml"
    if own is None:
        where = (f"write {file} in a folder of your own (the format of {SCRIPTS_DIR}/triage.yaml) and start the "
                 "stand-ins with --scripts FOLDER or TICKETIQ_STANDIN_SCRIPTS=FOLDER")  # fmt: skip
    else:
        where = f"write {own.resolve() / file} (the format of {SCRIPTS_DIR}/triage.yaml) and restart the stand-ins"
    missing = f"The model `{model}` does not exist or you do not have access to it: the stand-ins have no script {file}"
    return f"{missing}; {where}."


# --- what a conversation says --------------------------------------------------------------------


def message_text(message: dict[str, Any]) -> str:
    """A message's content as text: a string, or the text parts of a content list joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def steps_answered(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


def first_user_text(messages: list[dict[str, Any]]) -> str:
    return next((message_text(m) for m in messages if m.get("role") == "user"), "")


def find_jira_key(text: str) -> str | None:
    found = _JIRA_KEY.search(text)
    return found.group(0) if found else None


def check_conversation(messages: Any) -> list[dict[str, Any]]:
    """The messages, if OpenAI would take them: every tool message answers a call of the assistant
    message before it, and every call of an assistant message is answered before the next turn."""
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty array", "messages")
    pending: dict[str, int] = {}  # call id -> index of the assistant message that asked for it
    for index, message in enumerate(messages):
        param = f"messages.[{index}]"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise _invalid(f"{param} must be an object with a role among {sorted(_ROLES)}", f"{param}.role")
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in pending:
                raise _invalid(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceding "
                    f"message with 'tool_calls' (tool_call_id {call_id!r} answers no open call).",
                    f"{param}.role",
                )
            del pending[call_id]
            continue
        if pending:
            raise _unanswered(pending)
        if role == "assistant":
            for number, call in enumerate(message.get("tool_calls") or []):
                call_param = f"{param}.tool_calls.[{number}]"
                function = call.get("function") if isinstance(call, dict) else None
                if (
                    not isinstance(call, dict)
                    or not isinstance(call.get("id"), str)
                    or not isinstance(function, dict)
                    or not isinstance(function.get("name"), str)
                    or not isinstance(function.get("arguments"), str)
                ):
                    raise _invalid(f"{call_param} needs an id and a function name and arguments string", call_param)
                pending[call["id"]] = index
    if pending:
        raise _unanswered(pending)
    return messages


def _unanswered(pending: dict[str, int]) -> RequestRejected:
    index = min(pending.values())
    return _invalid(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
        f"messages.[{index}].role",
    )


_MISSING = object()


@dataclass(frozen=True)
class RunFacts:
    """What placeholders are filled from, read once from the conversation."""

    input: str
    jira_key: str
    # (tool name, result content) of every tool message, oldest first
    results: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def of(cls, messages: list[dict[str, Any]]) -> RunFacts:
        text = first_user_text(messages)
        tool_of: dict[str, str] = {}
        results = []
        for message in messages:
            if message.get("role") == "assistant":
                for call in message.get("tool_calls") or []:
                    tool_of[call["id"]] = call["function"]["name"]
            elif message.get("role") == "tool" and message.get("tool_call_id") in tool_of:
                results.append((tool_of[message["tool_call_id"]], message_text(message)))
        return cls(input=text, jira_key=find_jira_key(text) or NO_JIRA_KEY, results=results)

    def result(self, tool: str, path: str) -> Any:
        """The value at `path` (dotted, list positions as numbers) of the latest result of `tool`."""
        content = next((c for name, c in reversed(self.results) if name == tool), None)
        if content is None:
            return _MISSING
        try:
            value: Any = json.loads(content)
        except json.JSONDecodeError:
            return content if not path else _MISSING
        for part in filter(None, path.split(".")):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return _MISSING
        return value


def _lookup(match: re.Match[str], facts: RunFacts) -> Any:
    fact = match.group("fact")
    if fact == "jira_key":
        return facts.jira_key
    if fact == "input":
        return facts.input
    tool, path, fallback = match.group("tool"), match.group("path"), match.group("fallback")
    value = facts.result(tool, path)
    if value is _MISSING:
        return fallback if fallback is not None else f"<no result:{tool}{path}>"
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def fill(value: Any, facts: RunFacts) -> Any:
    """`value` with its placeholders filled, through nested mappings and lists."""
    if isinstance(value, dict):
        return {key: fill(item, facts) for key, item in value.items()}
    if isinstance(value, list):
        return [fill(item, facts) for item in value]
    if not isinstance(value, str):
        return value
    whole = _PLACEHOLDER.fullmatch(value)
    if whole:
        return _lookup(whole, facts)
    return _PLACEHOLDER.sub(lambda m: _as_text(_lookup(m, facts)), value)


def call_id(model: str, first_user: str, step: int, index: int, *, position_ids: bool) -> str:
    """A provider-looking id derived from what identifies the call, or only its position in the step."""
    if position_ids:
        return f"call_{index}"
    digest = hashlib.sha256(f"{model}\x1f{first_user}\x1f{step}\x1f{index}".encode()).digest()
    number = int.from_bytes(digest, "big")
    chars = []
    for _ in range(24):
        number, rest = divmod(number, 62)
        chars.append(_BASE62[rest])
    return "call_" + "".join(chars)


class ScriptedModel:
    """The stand-in's answers without HTTP: the same assistant message the router would send."""

    def __init__(self, scripts: Path = SCRIPTS_DIR, *, position_ids: bool = False, own: Path | None = None) -> None:
        self.scripts = load_scripts(scripts)
        if own is not None:
            self.scripts.update(load_own_scripts(own))
        self.own = own
        self.position_ids = position_ids

    def reply(self, model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The assistant message answering `messages`; RequestRejected where OpenAI would refuse."""
        script = self.scripts.get(model)
        if script is None:
            raise RequestRejected(
                404,
                no_script_message(model, self.own),
                type="invalid_request_error",
                code="model_not_found",
            )
        messages = check_conversation(messages)
        answered = steps_answered(messages)
        step = script.step(answered)
        facts = RunFacts.of(messages)
        if step.text is not None:
            return {"role": "assistant", "content": _as_text(fill(step.text, facts)), "refusal": None}
        calls = [
            {
                "id": call_id(model, facts.input, answered, number, position_ids=self.position_ids),
                "type": "function",
                "function": {"name": call.tool, "arguments": json.dumps(fill(call.arguments, facts))},
            }
            for number, call in enumerate(step.calls)
        ]
        return {"role": "assistant", "content": None, "refusal": None, "tool_calls": calls}


def completion(model: str, messages: list[dict[str, Any]], answer: dict[str, Any]) -> dict[str, Any]:
    """The ChatCompletion body around an assistant message. Token counts are a rough 4 characters a
    token, enough for the engine's counters to move."""
    # orjson: the whole conversation is read on every step, and the benchmarks run this model in process.
    asked = orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)
    said = orjson.dumps(answer, option=orjson.OPT_SORT_KEYS)
    prompt_tokens, completion_tokens = max(1, len(asked) // 4), max(1, len(said) // 4)
    return {
        "id": "chatcmpl-" + hashlib.sha256(model.encode() + b"\x1f" + asked).hexdigest()[:29],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_standin",
        "choices": [
            {
                "index": 0,
                "message": answer,
                "logprobs": None,
                "finish_reason": "tool_calls" if answer.get("tool_calls") else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


# --- HTTP ----------------------------------------------------------------------------------------


class FaultPlan(BaseModel):
    mode: Literal["429", "500"]
    count: int = Field(default=1, ge=0)
    retry_after_s: float = Field(default=1.0, ge=0)


@dataclass
class _Faults:
    """Refusals still to answer, in place of the next `remaining` chat-completion requests."""

    mode: str | None = None
    remaining: int = 0
    retry_after_s: float = 1.0

    def take(self) -> str | None:
        if self.mode is None or self.remaining <= 0:
            return None
        self.remaining -= 1
        return self.mode

    def state(self) -> dict[str, Any]:
        return {"mode": self.mode, "remaining": self.remaining, "retry_after_s": self.retry_after_s}


def _fault_response(mode: str, retry_after_s: float) -> JSONResponse:
    if mode == "429":
        refusal = RequestRejected(
            429,
            "Rate limit reached for requests (stand-in fault). Please try again later.",
            type="requests",
            code="rate_limit_exceeded",
        )
        seconds = f"{retry_after_s:g}"
        return JSONResponse(refusal.body(), status_code=429, headers={"Retry-After": seconds})
    refusal = RequestRejected(
        500,
        "The server had an error while processing your request (stand-in fault).",
        type="server_error",
    )
    return JSONResponse(refusal.body(), status_code=500)


# Told of every completion answered: the script's name, the conversation's hash and the step asked.
RequestLog = Callable[[str, str, int], Awaitable[None]]


def conversation_of(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """(hash of the first user message, assistant messages so far): which conversation asks which step."""
    first = next((m.get("content") for m in messages if m.get("role") == "user"), "")
    step = sum(1 for m in messages if m.get("role") == "assistant")
    return hashlib.sha256(json.dumps(first, sort_keys=True).encode()).hexdigest()[:32], step


def create_router(
    latency_ms: int,
    position_ids: bool,
    *,
    scripts: Path = SCRIPTS_DIR,
    own_scripts: Path | None = None,
    log_request: RequestLog | None = None,
) -> APIRouter:
    """`POST /v1/chat/completions`, `GET /v1/models`, and `/_standin/model/faults` to arrange refusals.
    Each router keeps its own faults, so two apps in one process do not share them. `log_request`, when
    given, is told of every completion answered (the stand-ins record them, to show a step was never
    asked twice)."""
    model = ScriptedModel(scripts, position_ids=position_ids, own=own_scripts)
    faults = _Faults()
    router = APIRouter()

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> JSONResponse:
        try:
            delay_ms = _latency(request, latency_ms)
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000.0)
            fault = faults.take()
            if fault is not None:
                return _fault_response(fault, faults.retry_after_s)
            body = await _json_body(request)
            name = body.get("model")
            if not isinstance(name, str):
                raise _invalid("'model' must be a string naming a script", "model")
            if body.get("stream"):
                raise _invalid("the stand-in does not stream; send stream false or leave it out", "stream")
            messages: Any = body.get("messages")
            answer = model.reply(name, messages)
        except RequestRejected as refusal:
            return JSONResponse(refusal.body(), status_code=refusal.status)
        if log_request is not None:
            await log_request(name, *conversation_of(messages))
        return JSONResponse(completion(name, messages, answer))

    @router.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "ticketiq-standin"} for name in model.scripts
            ],
        }

    @router.post("/_standin/model/faults")
    async def arrange_faults(plan: FaultPlan) -> dict[str, Any]:
        faults.mode, faults.remaining, faults.retry_after_s = plan.mode, plan.count, plan.retry_after_s
        return faults.state()

    @router.get("/_standin/model/faults")
    async def show_faults() -> dict[str, Any]:
        return faults.state()

    @router.delete("/_standin/model/faults")
    async def clear_faults() -> dict[str, Any]:
        faults.mode, faults.remaining = None, 0
        return faults.state()

    return router


def _latency(request: Request, default_ms: int) -> int:
    raw = request.headers.get(LATENCY_HEADER)
    if raw is None:
        return default_ms
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise _invalid(f"header {LATENCY_HEADER} must be a whole number of milliseconds, got {raw!r}")
    return value


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _invalid(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _invalid("the request body must be a JSON object")
    return body
