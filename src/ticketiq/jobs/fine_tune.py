"""The fine-tuning job (issue 10; I13: resumable): a training file uploaded and a fine-tuning job made
through the OpenAI API (the official client, at TICKETIQ_MODEL_BASE_URL), then followed to its end.

    POST /v1/jobs {"kind": "fine_tune", "params": {
        "model": "gpt-4o-mini-2024-07-18",                     # the base model
        "training": {"examples": [{"messages": [...]}, ...]}   # or {"knowledge": {"project": "OPS"}}
                                                               # and optionally "agent": "triage"
        "suffix": "triage",                                    # optional, in the model's name
        "poll_s": 10}}                                         # optional: how often to look

Each remote object is made exactly once, whatever the job's process goes through (`in_doubt.py`):

1. The training file (`training_file.py`), named after the job. Marked in doubt before it is sent; its
   id saved the moment the answer names it. A resume with the upload in doubt lists the files and
   matches the name, once the upload can no longer be in flight (I14).
2. The remote job, carrying the job's id in its `metadata` (`ticketiq_job`). Marked in doubt with the
   latest moment the request can be in flight (I14: `job.settings.write_budget_s`); its id saved the
   moment the answer names it. A resume with the create in doubt lists jobs by that metadata, only once
   the request can no longer be in flight: found, it is followed; absent, it is created once.
3. Followed every `poll_s` until it ends, each look saved (progress, and a person's cancel seen): the
   result names `fine_tuned_model`; a remote failure fails the job with the remote error; a cancel of
   the job cancels the remote job too.

Every request is sent after `job.check()` (I3: not once the job's lease is lost or its deadline passed).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import httpx2
import openai

from ticketiq.engine import in_doubt as engine_in_doubt
from ticketiq.engine.in_doubt import Settled, Unknown
from ticketiq.engine.settlement import CallRow, Route, ToolNow, route
from ticketiq.errors import TicketIQError
from ticketiq.jobs import in_doubt, training_file
from ticketiq.jobs.in_doubt import Mark, Next, Sent
from ticketiq.jobs.kinds import Job, JobCancelled, JobFailed, JobKind, params_error
from ticketiq.model.client import backoff_s, is_retryable_status, parse_retry_after
from ticketiq.runtime.faults import Faults
from ticketiq.runtime.user_agent import user_agent
from ticketiq.tools.base import Outcome, ReadBack, SendWindow, ToolClass

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine

log = logging.getLogger(__name__)
T = TypeVar("T")

METADATA_KEY = "ticketiq_job"  # what the remote job carries to be found again by
STEPS = 4  # progress: file uploaded, remote job made, training running, ended
POLL_S, MIN_POLL_S, MAX_POLL_S = 10.0, 0.05, 3600.0
ENDED = frozenset({"succeeded", "failed", "cancelled"})
# OpenAI takes up to 64 characters; only these, so the model's name (`ft:base:org:suffix:id`) stays
# readable and splittable on its colons.
_SUFFIX = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# --- params --------------------------------------------------------------------------------------


def check(params: Mapping[str, Any], engine: Engine) -> dict[str, Any]:
    """Pure: the params, checked and normalised; a 422 naming the field otherwise."""
    unknown = set(params) - {"model", "training", "suffix", "poll_s"}
    if unknown:
        raise params_error(sorted(unknown)[0], "not a parameter of fine_tune; use model, training, suffix, poll_s")
    model = params.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 200:
        raise params_error("model", "required: the base model to fine-tune, e.g. gpt-4o-mini-2024-07-18")
    suffix = params.get("suffix")
    if suffix is not None and (not isinstance(suffix, str) or not _SUFFIX.match(suffix)):
        raise params_error("suffix", "at most 64 letters, digits, '-' or '_'")
    poll_s = params.get("poll_s", POLL_S)
    if isinstance(poll_s, bool) or not isinstance(poll_s, int | float) or not MIN_POLL_S <= poll_s <= MAX_POLL_S:
        raise params_error("poll_s", f"seconds between looks at the remote job, from {MIN_POLL_S} to {MAX_POLL_S:g}")
    if "training" not in params:
        raise params_error("training", "required: {examples: [...]} or {knowledge: {project}}")
    training = training_file.check_training(params["training"], lambda name: engine.deps.catalog.get(name) is not None)
    return {"model": model.strip(), "training": training, "suffix": suffix, "poll_s": float(poll_s)}


def steps_done(state: Mapping[str, Any]) -> int:
    """Progress from the saved state: of STEPS, how many are behind the job."""
    remote = state.get("remote") or {}
    if remote.get("status") in ENDED:
        return 4
    if remote.get("status") == "running":
        return 3
    if remote.get("id"):
        return 2
    return 1 if (state.get("file") or {}).get("id") else 0


# --- the run -------------------------------------------------------------------------------------


async def run(job: Job) -> dict[str, Any]:
    return await FineTune(job).run()


class Unsent(TicketIQError):
    """A send whose answer left it not made (429) or in doubt; `sent` says which. Caught by `make_once`,
    which settles it; never leaves this module."""

    def __init__(self, sent: Sent, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.sent = sent
        self.reason = reason
        self.retry_after_s = retry_after_s


class FineTune:
    """One attempt's driver. `state` is the job's state as last saved, kept in step with every save."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.settings = job.settings
        self.params = job.params
        self.state: dict[str, Any] = dict(job.state)
        self.filename = training_file.file_name(job.id)
        self.api = openai.AsyncOpenAI(
            base_url=self.settings.model_base_url,
            api_key=self.settings.model_api_key,
            timeout=self.settings.model_timeout_s,
            max_retries=0,  # retries are decided here: a create is never blindly sent again
            default_headers={"User-Agent": user_agent()},
            # The process's client (its pool, its User-Agent); the openai package takes the legacy httpx
            # client at run time though its annotation names only httpx2.
            http_client=cast(httpx2.AsyncClient, job.http),
        )

    async def run(self) -> dict[str, Any]:
        try:
            remote_id = (self.state.get("remote") or {}).get("id")
            if remote_id is None:
                file_id = await self.training_file()
                remote_id = await self.remote_job(file_id)
            return await self.follow(remote_id)
        except JobCancelled:
            await self.cancel_remote()
            raise

    # ----- 1. the training file ----------------------------------------------------------------------

    async def training_file(self) -> str:
        known = (self.state.get("file") or {}).get("id")
        if known:
            return str(known)
        content = await self.training_content()

        async def send(timeout_s: float) -> str:
            made = await self.api.files.create(
                file=(self.filename, content, "application/jsonl"), purpose="fine-tune", timeout=timeout_s
            )
            return made.id

        file_id = await self.make_once("upload", send, self.find_file)
        self.state.pop("upload", None)
        self.state["file"] = {"id": file_id, "name": self.filename}
        await self.save()
        return file_id

    async def training_content(self) -> bytes:
        training = self.params["training"]
        system_prompt = None
        if training.get("agent"):
            agent = self.job.engine.deps.catalog.get(training["agent"])
            if agent is None:
                raise JobFailed(f"the agent {training['agent']!r} is no longer in the agents file")
            system_prompt = agent.system_prompt
        if "examples" in training:
            examples = training["examples"]
        else:
            source = training["knowledge"]
            rows = await self.job.knowledge.labelled_issues(source["project"], source["limit"])
            examples = training_file.knowledge_examples(rows)
            short = training_file.too_few(len(examples), f"the knowledge of project {source['project']}")
            if short:
                raise JobFailed(short)
        return training_file.training_jsonl(examples, system_prompt)

    async def find_file(self) -> str | None:
        async def look() -> str | None:
            async for found in self.api.files.list(purpose="fine-tune", order="desc", timeout=self.read_timeout_s()):
                if found.filename == self.filename:
                    return found.id
            return None

        return await self.read("list files", look)

    # ----- 2. the remote job -----------------------------------------------------------------------

    async def remote_job(self, file_id: str) -> str:
        suffix = self.params.get("suffix")

        async def send(timeout_s: float) -> str:
            made = await self.api.fine_tuning.jobs.create(
                model=self.params["model"],
                training_file=file_id,
                suffix=suffix if suffix else openai.omit,
                metadata={METADATA_KEY: self.job.id},
                timeout=timeout_s,
            )
            return made.id

        remote_id = await self.make_once("create", send, self.find_remote_job)
        self.state.pop("create", None)
        self.state["remote"] = {"id": remote_id, "status": None}
        await self.save()  # the moment the answer (or the look-up) named it
        return remote_id

    async def find_remote_job(self) -> str | None:
        async def look() -> str | None:
            found = [
                remote.id
                async for remote in self.api.fine_tuning.jobs.list(
                    metadata={METADATA_KEY: self.job.id}, limit=100, timeout=self.read_timeout_s()
                )
                if (remote.metadata or {}).get(METADATA_KEY) == self.job.id
            ]
            if len(found) > 1:  # never made twice by this code; say so if it happened all the same
                log.error("fine_tune job %s: %d remote jobs carry its key: %s; following the oldest",
                          self.job.id, len(found), found)  # fmt: skip
            return found[-1] if found else None  # listed newest first

        return await self.read("list fine-tuning jobs", look)

    # ----- 3. following it -------------------------------------------------------------------------

    async def follow(self, remote_id: str) -> dict[str, Any]:
        while True:
            remote = await self.read(
                "look at the fine-tuning job",
                lambda: self.api.fine_tuning.jobs.retrieve(remote_id, timeout=self.read_timeout_s()),
                patient=True,
            )
            self.state["remote"] = {"id": remote_id, "status": remote.status}
            await self.save()  # progress, and a person's cancel seen (JobCancelled)
            if remote.status == "succeeded":
                return {
                    "fine_tuned_model": remote.fine_tuned_model,
                    "remote_job": remote_id,
                    "training_file": remote.training_file,
                    "base_model": remote.model,
                    "trained_tokens": remote.trained_tokens,
                }
            if remote.status == "failed":
                error = remote.error
                why = f"{error.code}: {error.message}" if error else "no reason given"
                raise JobFailed(self.scrub(f"the fine-tuning job {remote_id} failed ({why})"))
            if remote.status == "cancelled":
                raise JobFailed(f"the fine-tuning job {remote_id} was cancelled at the provider")
            await asyncio.sleep(float(self.params["poll_s"]))

    async def cancel_remote(self) -> None:
        """A cancelled job cancels its remote job, if it has one that may still run."""
        remote = self.state.get("remote") or {}
        if not remote.get("id") or remote.get("status") in ENDED:
            return
        self.job.check()
        try:
            await self.api.fine_tuning.jobs.cancel(remote["id"], timeout=self.read_timeout_s())
        except openai.OpenAIError as exc:  # it may have ended meanwhile (400); the job ends cancelled anyway
            log.warning("fine_tune job %s: cancelling remote job %s failed: %s",
                        self.job.id, remote["id"], self.scrub(str(exc)))  # fmt: skip
        else:
            log.info("fine_tune job %s: cancelled remote job %s", self.job.id, remote["id"])

    # ----- making a remote object once (in_doubt.py) -----------------------------------------------

    async def make_once(
        self, what: str, send: Callable[[float], Awaitable[str]], find: Callable[[], Awaitable[str | None]]
    ) -> str:
        """Make `what` (upload, create) exactly once, by the in-doubt protocol (engine/in_doubt.py): settle
        a mark left in doubt by looking it up once the request can no longer be in flight (I14);
        otherwise (or absent) mark it and send it."""
        request = RemoteRequest(self, what, send, find)
        # Found again by what it carries (the job's id, in the file's name or the job's metadata), and no
        # dedupe at the provider: any other write with a reader, read back (I9).
        now = ToolNow(exists=True, has_reader=True, dedupe_window_s=None)
        taken = route(CallRow("in_doubt", request.marked, self.job.id), now)
        while True:
            try:
                if Mark.of(self.state.get(what)) is not None:
                    return (await engine_in_doubt.settle(request, taken)).done
                if request.sends >= request.limit:
                    raise JobFailed(f"the {what} was not taken after {request.sends} tries; giving up")
                return await engine_in_doubt.send(request)
            except Unsent as unsent:
                log.warning("fine_tune job %s: %s: %s", self.job.id, what, unsent.reason)
                if unsent.sent is Sent.NOT_TAKEN:
                    self.state.pop(what, None)  # not made: nothing to look up (a stale mark only costs a look)
                    wait = backoff_s(request.sends - 1, unsent.retry_after_s, random.random())
                    if wait is None:
                        raise JobFailed(f"the {what} was refused: {unsent.reason}") from None
                    await asyncio.sleep(wait)

    # ----- plumbing --------------------------------------------------------------------------------

    async def save(self) -> None:
        await self.job.save(self.state, steps_done(self.state), STEPS)

    async def read(self, what: str, look: Callable[[], Awaitable[T]], *, patient: bool = False) -> T:
        """A read (a look-up, a status): made again on a 429, a 5xx or no answer, with backoff, up to
        TICKETIQ_MODEL_MAX_RETRIES times; the job fails with the reason after that. A `patient` read
        (following a remote job that trains on regardless) keeps trying, saving between tries so a
        person's cancel is still seen."""
        retries = 0
        while True:
            self.job.check()
            try:
                return await look()
            except openai.APIStatusError as exc:
                reason = self.refusal(exc)
                if not is_retryable_status(exc.status_code):
                    raise JobFailed(f"could not {what}: {reason}") from None
                headers = {k.lower(): v for k, v in exc.response.headers.items()}
                retry_after = parse_retry_after(headers, datetime.now(UTC))
            except openai.APIConnectionError as exc:
                reason, retry_after = f"no answer ({type(exc).__name__})", None
            # The backoff stops growing at its cap long before 10 retries; a patient read counts on.
            wait = backoff_s(min(retries, 10), retry_after, random.random())
            if patient:
                await self.save()
                wait = wait if wait is not None else (retry_after or float(self.params["poll_s"]))
            elif retries >= self.settings.model_max_retries or wait is None:
                raise JobFailed(f"could not {what} after {retries + 1} tries: {reason}")
            log.warning("fine_tune job %s: could not %s (%s); again in %.2f s", self.job.id, what, reason, wait)
            await asyncio.sleep(wait)
            retries += 1

    def read_timeout_s(self) -> float:
        return self.settings.model_timeout_s

    def refusal(self, exc: openai.APIStatusError) -> str:
        detail = exc.message
        # The openai package hands over the body's "error" object; some servers send the whole body.
        if isinstance(exc.body, dict):
            inner = exc.body.get("error", exc.body)
            if isinstance(inner, dict) and isinstance(inner.get("message"), str):
                detail = inner["message"]
        return self.scrub(f"{exc.status_code} {detail}")

    def scrub(self, text: str) -> str:
        # Servers echo a rejected key back ("Incorrect API key provided: sk-..."); it never goes on.
        for secret in self.settings.secrets():
            text = text.replace(secret, "***")
        return text


class RemoteRequest:
    """A request that makes a remote object (the upload, the create), as the in-doubt protocol's write
    (engine/in_doubt.py): marked in the job's state by `Job.mark_in_doubt`, fenced by the job's
    attempt (I3), with the latest moment it can be in flight on the database clock (I14); read back by
    looking it up by what it carries. An answer that leaves it open raises `Unsent`: `make_once` settles
    it. `sends`: how often this attempt sent it (`in_doubt.after_look` gives up past `limit`)."""

    marked = ToolClass.WRITE
    faults = Faults(None)  # no kill point of the trials is a fine-tune's

    def __init__(
        self, tune: FineTune, what: str, send: Callable[[float], Awaitable[str]],
        find: Callable[[], Awaitable[str | None]],
    ) -> None:  # fmt: skip
        self.tune = tune
        self.job = tune.job
        self.what = what
        self.request = send
        self.find = find
        self.sends = 0
        self.limit = tune.settings.model_max_retries + 1
        self.next = Next.SEND

    @property
    def budget_s(self) -> float:
        return self.tune.settings.write_budget_s

    @property
    def lost(self) -> asyncio.Event:
        return self.job.lost

    def check(self) -> None:
        self.job.check()

    def lease_deadline(self) -> float:
        return float("inf")  # I3 is checked at the last moment before the request (job.check)

    async def mark(self) -> None:
        """I2: mark it in doubt (one fenced statement); a send begins with its mark."""
        self.sends += 1
        settings = self.tune.settings
        self.tune.state = await self.job.mark_in_doubt(
            self.tune.state, self.what, settings.write_budget_s, settings.model_timeout_s
        )

    async def send(self, window: SendWindow) -> str:
        """The object's id; `Unsent` when the answer left it not made (429) or in doubt."""
        timeout_s = window.try_timeout(time.monotonic(), self.tune.settings.model_timeout_s)
        self.job.check()  # I3: nothing sent once the lease is lost
        if timeout_s <= 0:
            raise Unsent(Sent.IN_DOUBT, "its window closed before it could be sent")
        try:
            async with asyncio.timeout(timeout_s):
                return await self.request(timeout_s)
        except openai.APIStatusError as exc:
            sent = in_doubt.sent_as(exc.status_code)
            reason = self.tune.refusal(exc)
            if sent is Sent.REFUSED:
                raise JobFailed(f"the {self.what} was refused: {reason}") from None
            headers = {k.lower(): v for k, v in exc.response.headers.items()}
            raise Unsent(sent, reason, parse_retry_after(headers, datetime.now(UTC))) from None
        except (openai.APIConnectionError, TimeoutError) as exc:
            raise Unsent(Sent.IN_DOUBT, f"no answer ({type(exc).__name__})") from None

    def reopens(self, answer: str, how: str | None) -> Route | None:
        return None  # an answer names the object; one that does not raised Unsent

    async def record(self, answer: str, how: str | None) -> str:
        return answer  # the caller saves it with the state that moves past the mark

    async def in_flight_s(self) -> float:
        """I14: until the marked request can no longer be in flight, by the database clock."""
        mark = Mark.of(self.tune.state.get(self.what))
        assert mark is not None
        return in_doubt.wait_before_look_s(mark, await self.job.clock())

    async def read_back(self) -> ReadBack:
        found = await self.find()
        self.next = in_doubt.after_look(found, self.sends, self.limit)
        mark = Mark.of(self.tune.state.get(self.what))
        log.info("fine_tune job %s: the %s in doubt (marked by attempt %d) was looked up: %s",
                 self.job.id, self.what, mark.attempt if mark else 0, self.next.value)  # fmt: skip
        return ReadBack(found=found is not None, outcome=Outcome(ok=True, result=found))

    async def found(self, read: ReadBack) -> str:
        assert read.outcome is not None
        return str(read.outcome.result)

    async def unknown(self, why: Unknown) -> str:
        # Not reached: a look-up answers found or absent, or fails the job itself (`FineTune.read`).
        raise JobFailed(f"the {self.what} is in doubt and {why.value}; not sent again")

    async def gate(self) -> Settled[str] | None:
        if self.next is Next.GIVE_UP:
            raise JobFailed(f"the {self.what} was sent {self.sends} times and never made; giving up")
        return None


KIND = JobKind(
    name="fine_tune",
    resumable=True,
    description="Upload a training file and fine-tune a model through the OpenAI API; resumed after a crash, "
    "never creating the remote job twice",
    check=check,
    run=run,
    unit="steps",
)
