"""`steer serve`'s application: one loaded model and profile behind an HTTP API and a page.

`POST /v1/rewrite` takes `{"texts": [...], "from": STYLE, "to": STYLE}` plus, optionally, `preset`,
`candidates` (every rerank candidate with its scores) and any `TransferSettings` field, and answers
the records `steer transfer -o x.jsonl` writes for the same inputs — the recipe chosen by the same
policy (`steer.rewriting.recipe`), decoded by the same service (`steer.rewriting.service`). Requests for one
recipe that arrive together are decoded in one batch (`steer.serve.batching`). `GET /v1/styles`
says what the profile offers, `GET /health` that the server is up, `/docs` and `/openapi.json` are
FastAPI's own, and `/` is the page (`steer/serve/static/index.html`, no build step, no CDN).

A bad request gets a 4xx whose body is `{"error": "one line"}` — the same line the CLI prints; the
server keeps serving and writes nothing to disk.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException

from steer.errors import SteerError
from steer.generation.contrast import parse_layers
from steer.model.footprint import ROWS_PER_TEXT, available_bytes, batch_bytes, gib
from steer.model.loading import LoadedModel
from steer.profiling.corpus import visible
from steer.profiling.profile import check_direction
from steer.rewriting.opened import OpenedProfile
from steer.rewriting.recipe import RERANK, recipe_for
from steer.rewriting.service import RewriteService, service_for
from steer.serve.batching import Batcher, QueueFull
from steer.settings import PRESETS, TransferSettings, coerce, field_types

logger = logging.getLogger(__name__)

SETTING_FIELDS = tuple(f.name for f in fields(TransferSettings))
MAX_SERVICES = 8  # loaded services (a steerer, and a probe under rerank) kept, one per recent recipe


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask for, and how the queue is bounded."""

    max_texts: int = 64  # texts per request
    max_chars: int = 2000  # characters per text
    max_batch: int = 16  # texts decoded in one batch (requests joined up to this)
    max_queue: int = 64  # requests waiting; one more is answered 503
    timeout_s: float = 300.0  # per request, queueing included; a batch whose requests all timed out stops
    retry_after_s: int = 5  # the hint a 503 carries
    max_new_tokens: int = 256  # the most `max_new_tokens` (and `min_new_tokens`) a request may ask for
    max_input_tokens: int = 1024  # the most `max_input_tokens` a request may ask for
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")  # Host headers answered (DNS rebinding)
    max_body_bytes: int = 1 << 20  # a request body; more is 413 before it is read


class _RequestBase(BaseModel):
    """What every request has; the recipe fields are generated from `TransferSettings` below."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    texts: list[str] = Field(description="The texts to rewrite (none blank).")
    source: str = Field(alias="from", description="The texts' style (one of GET /v1/styles).")
    target: str = Field(alias="to", description="The style to rewrite them into.")
    preset: str | None = Field(None, description="prompt, paper, guided or rerank; default: steer transfer's choice.")
    candidates: bool = Field(False, description="rerank: every candidate with its scores in the records.")


def _schema_type(hint: Any) -> dict[str, Any]:
    """A recipe field's JSON type for the OpenAPI schema (checked by `_typed`, as run configs are)."""
    import typing

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        return {"type": "string", "enum": list(typing.get_args(hint))}
    kind = hint if hint in (bool, int, float, str) else next((a for a in args if a in (bool, int, float, str)), str)
    return {"type": {bool: "boolean", int: "integer", float: "number", str: "string"}[kind]}


# The request body: every `TransferSettings` field as an optional member with its help, so the OpenAPI
# schema lists them; the values are typed and bounded by `_typed` and the server's limits, one line each.
RewriteRequest = create_model(
    "RewriteRequest",
    __base__=_RequestBase,
    **{  # type: ignore[call-overload]
        f.name: (Any, Field(None, description=f.metadata["help"], json_schema_extra=_schema_type(hint)))
        for f, hint in ((f, field_types()[f.name]) for f in fields(TransferSettings))
    },
)


class ErrorBody(BaseModel):
    """Every error's body: one line saying what was wrong and how to fix it."""

    error: str


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": what}
    for code, what in (
        (400, "a bad field, text, style, limit or Host"),
        (404, "no such path"),
        (405, "method not allowed"),
        (411, "a body sent in chunks, without Content-Length"),
        (413, "a text or body too large"),
        (415, "not JSON"),
        (422, "a body of the wrong shape"),
        (500, "this request's decode failed (other requests are unaffected)"),
        (503, "the queue is full, or the batch would not fit in the memory free now (Retry-After)"),
        (504, "the request took longer than --timeout"),
    )
}


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class MemoryShort(Exception):
    """A batch would need more memory than the machine has free now (answered 503 with a retry hint)."""


EXAMPLE_TOKENS = 128  # what one few-shot example may add to a prompt, for the memory estimate
TEMPLATE_TOKENS = 1000  # the most a template of at most 4,000 characters may add, for the worst case


def element_bytes(lm: LoadedModel) -> int:
    """Bytes per value of the key/value cache: 2 for a 16-bit model, else 4."""
    return 2 if str(getattr(lm.model, "dtype", "")) in ("torch.float16", "torch.bfloat16") else 4


def memory_note(lm: LoadedModel, limits: ServeLimits) -> str | None:
    """A warning when the largest batch the limits allow may not fit in the memory free now (each
    batch is checked again before it runs, and answered 503 when it does not fit)."""
    tokens = limits.max_input_tokens + TEMPLATE_TOKENS + limits.max_new_tokens
    rows = limits.max_batch * ROWS_PER_TEXT
    worst, free = batch_bytes(lm.model.config, rows, tokens, element_bytes(lm)), available_bytes(lm.device)
    if free is None or worst <= free:
        return None
    return (
        f"the largest batch these limits allow may need {gib(worst)} and {gib(free)} is free; batches that do "
        "not fit are answered 503 (lower --max-batch or --max-new-tokens to avoid it)"
    )


class Server:
    """The loaded state behind the app: one model and profile, a service per (direction, recipe)."""

    def __init__(self, opened: OpenedProfile, lm: LoadedModel, limits: ServeLimits) -> None:
        self.opened, self.lm, self.limits = opened, lm, limits
        self.profile = opened.profile
        self.services: OrderedDict[Hashable, RewriteService] = OrderedDict()  # the last MAX_SERVICES recipes
        self.batcher = Batcher(self._decode, max_batch=limits.max_batch, max_queue=limits.max_queue)

    def recipe_of(self, body: _RequestBase) -> Hashable:
        """The request's recipe as the batching key, checked without decoding anything (a bad
        request is `BadRequest` or `SteerError`: NaN and out-of-range fields are `TransferSettings`')."""
        given = {name: getattr(body, name) for name in SETTING_FIELDS if name in body.model_fields_set}
        extra = {**given, **dict(body.model_extra or {})}
        unknown = sorted(set(extra) - set(SETTING_FIELDS))
        if unknown:
            raise BadRequest(
                f"unknown field {unknown[0]!r}; a request has texts, from, to, preset, candidates and the "
                f"recipe fields {', '.join(SETTING_FIELDS)}"
            )
        extra = {name: _typed(name, value) for name, value in extra.items()}
        limits = self.limits
        if body.preset is not None and body.preset not in (*PRESETS, RERANK):
            raise BadRequest(f"preset {body.preset!r} is not one of {', '.join((*PRESETS, RERANK))}")
        if not body.texts:
            raise BadRequest("`texts` is empty; send one or more texts to rewrite")
        if len(body.texts) > limits.max_texts:
            raise BadRequest(f"{len(body.texts)} texts in one request; send at most {limits.max_texts} per request")
        for i, text in enumerate(body.texts):
            if not visible(text):
                raise BadRequest(f"texts[{i}] is blank (or only invisible characters); send only texts to rewrite")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise BadRequest(
                    f"texts[{i}] holds {err.object[err.start : err.end]!r}, which is not text (a lone "
                    "surrogate); send valid Unicode"
                ) from None
            if len(text) > limits.max_chars:
                raise BadRequest(f"texts[{i}] has {len(text)} characters; the limit is {limits.max_chars}", 413)
        if body.source == body.target:
            raise BadRequest(f"`from` and `to` are both {body.source!r}; pick two different styles")
        check_direction(body.source, body.target)
        self.profile.check_style(body.source)
        self.profile.check_style(body.target)
        recipe = recipe_for(
            self.opened, body.source, body.target, preset=body.preset, keep_candidates=body.candidates, **extra
        )
        settings = recipe.settings  # the resolved recipe, defaults included, within the server's limits
        for name in ("edit_layers", "contrast_layers"):  # blocks checked here, not on the decoding thread
            spec = getattr(settings, name)
            if isinstance(spec, str) and spec and (name == "edit_layers" or settings.contrast):
                parse_layers(spec, self.profile.num_layers, option=f"`{name}`", last_allowed=name == "edit_layers")
        # given or defaulted; `min_new_tokens` ≤ `max_new_tokens` is the recipe's own rule
        most_of = {"max_new_tokens": limits.max_new_tokens, "max_input_tokens": limits.max_input_tokens}
        for name, most in {**most_of, "batch_size": limits.max_batch}.items():
            if getattr(settings, name) > most:
                raise BadRequest(
                    f"`{name}` {getattr(settings, name)} is above this server's limit {most}; ask for at most {most}"
                )
        return (body.source, body.target, recipe, body.candidates)

    def _decode(self, key: Hashable, texts: list[str], interrupted: Callable[[], bool]) -> list[dict[str, Any]]:
        """The records of `texts` under the request key's recipe (on the decoding thread); the decode
        stops at the next step once `interrupted()` (every request of the batch timed out, or shutdown)."""
        service = self.services.get(key)
        if service is None:
            source, target, recipe, keep = cast(tuple[str, str, Any, bool], key)
            service = self.services[key] = service_for(self.opened, self.lm, source, target, recipe, keep)
            if len(self.services) > MAX_SERVICES:  # requests may vary any field: keep the recent ones only
                self.services.popitem(last=False)
        self.services.move_to_end(key)
        need, free = self.memory_needed(service, texts), available_bytes(self.lm.device)
        if free is not None and need > free:  # checked before the batch is formed, never halfway through it
            raise MemoryShort(
                f"this batch would need about {gib(need)} and {gib(free)} is free now; retry later, or send "
                "fewer or shorter texts"
            )
        steerer = service.steerer
        steerer.interrupt = interrupted
        try:
            return [service.record(r).to_dict() for r in service.results(texts)]
        finally:
            steerer.interrupt = None

    def memory_needed(self, service: RewriteService, texts: list[str]) -> int:
        """An estimate of what decoding `texts` under the service's recipe holds at once: every row a
        batch decodes together (rerank's candidates, guidance and instruction-contrast rows) at the
        longest text's length with its template, examples and reply."""
        job, settings = service.job, service.job.settings
        recipes = job.rerank.candidates() if job.rerank is not None else [settings]
        per_text = sum(1 + (r.guidance > 0) + (r.instruction_contrast != 0) for r in recipes)
        count = lambda text: len(self.lm.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        longest = min(max(count(t) for t in texts), settings.max_input_tokens)
        prompt = count(service.template) + max(r.examples for r in recipes) * EXAMPLE_TOKENS
        rows = min(len(texts), settings.batch_size) * per_text
        return batch_bytes(
            self.lm.model.config, rows, longest + prompt + settings.max_new_tokens, element_bytes(self.lm)
        )

    def styles(self) -> dict[str, Any]:
        styles = list(self.profile.styles)
        return {
            "styles": styles,
            "directions": [[a, b] for a in styles for b in styles if a != b],
            "presets": [*PRESETS, RERANK],
            "probe": self.opened.has_probe(),
            "model": self.lm.model_id,
            "profile": self.opened.label,
        }


def _typed(name: str, value: Any) -> Any:
    """A recipe field of a request as its setting's type, the same coercion as a run config's
    (`steer.settings.coerce`: `max_new_tokens: 3.5`, `true` or `"x"` are refused); only JSON scalars."""
    if not isinstance(value, str | int | float | bool) and value is not None:
        raise BadRequest(
            f"`{name}` must be a single value (a string, a number or true/false), not {type(value).__name__}"
        )
    kind = _FIELD_KINDS[name]
    if kind is bool and not isinstance(value, bool):  # "false" is a non-empty string: it would read as true
        raise BadRequest(f"`{name}` must be true or false, got {json.dumps(value)}")
    if name in ("edit_layers", "contrast_layers") and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # one block, as configs take it
    if (kind is str and not isinstance(value, str)) or (kind == "optional str" and not isinstance(value, str | None)):
        raise BadRequest(f"`{name}` must be a string, got {json.dumps(value)}")
    return coerce(name, value)


def _kind(hint: Any) -> Any:
    """A field's kind for `_typed`: bool, str, "optional str" (a string or null), or another type."""
    import typing

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if hint is bool or hint is str:
        return hint
    if typing.get_origin(hint) is typing.Literal:
        return str
    if type(None) in typing.get_args(hint) and str in args:
        return "optional str"
    return hint


_FIELD_KINDS = {name: _kind(hint) for name, hint in field_types().items()}


class _AsciiJSON(JSONResponse):
    """JSON with every non-ASCII character escaped: an error that quotes a client's lone surrogate
    still renders (strict UTF-8 would fail, and the client would get a plain-text 500)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def host_name(host: str) -> str:
    """The name a Host header (or `--host`, `--allow-host`) gives, as names are compared: lower
    case, no port, no trailing dot, an IPv6 literal without brackets."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0].lower()
    name = host if host.count(":") > 1 else host.rsplit(":", 1)[0]  # a bare IPv6 address has no port
    return name.lower().rstrip(".")


# the CLI's spellings the library's messages may use, as a request names them
_REQUEST_NAMES = {"keep-candidates": "candidates", "from": "from", "to": "to", "preset": "preset"}


def api_terms(message: str) -> str:
    """A library message in a request's terms: `--keep-candidates` → `candidates`, `--top-k` → `top_k`
    (flags that are no request field stay as they are)."""
    import re

    def field(match: re.Match[str]) -> str:
        flag = match.group(1)
        name = _REQUEST_NAMES.get(flag, flag.replace("-", "_"))
        return f"`{name}`" if name in _REQUEST_NAMES.values() or name in SETTING_FIELDS else match.group(0)

    return re.sub(r"(?<![\w`-])--([a-z][a-z0-9-]*)", field, message)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return _AsciiJSON({"error": message}, status_code=status, headers=headers)


def _validation_line(err: RequestValidationError) -> str:
    """Pydantic's first complaint as one line naming the field."""
    first = err.errors()[0] if err.errors() else {}
    where = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or "the body"
    shape = 'a request is {"texts": [...], "from": STYLE, "to": STYLE}'
    if first.get("type") == "missing":
        return f"`{where}` is missing; {shape}"
    return f"`{where}`: {first.get('msg', 'not valid')}; {shape}"


def create_app(opened: OpenedProfile, lm: LoadedModel, limits: ServeLimits | None = None) -> FastAPI:
    """The app for an opened profile and its loaded model (`OpenedProfile.load_model`)."""
    server = Server(opened, lm, limits or ServeLimits())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await server.batcher.start()
        try:
            yield
        finally:
            await server.batcher.stop()

    app = FastAPI(title="steer", summary="Rewrite text from one style to another by steering a model's neurons.",
                  lifespan=lifespan)  # fmt: skip
    app.state.server = server

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_line(err))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        if err.status_code == 404:
            return _error(404, f"no such path {request.url.path}; the API is POST /v1/rewrite, GET /v1/styles, /health")
        if err.status_code == 405:
            return _error(405, f"{request.method} is not allowed on {request.url.path}", dict(err.headers or {}))
        return _error(err.status_code, str(err.detail))

    @app.exception_handler(Exception)
    async def failed(_: Request, err: Exception) -> JSONResponse:
        logger.exception("a request failed")
        return _error(500, f"the request failed ({type(err).__name__}); the server keeps serving")

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        """Only the Host names the server was started for (a web page cannot reach it by DNS
        rebinding), bodies of a bounded size, and JSON bodies on the API."""
        host = request.headers.get("host", "")
        if not host:
            return _error(400, "the request has no Host header; send one naming this server (e.g. 127.0.0.1)")
        name = host_name(host)
        if name not in server.limits.hosts:
            return _error(
                400, f"Host {host!r} is not served here; start steer serve with --allow-host {name} to allow it"
            )
        size = request.headers.get("content-length")
        if size is None and request.headers.get("transfer-encoding"):  # a chunked body's size is unknown until read
            return _error(411, "the body was sent in chunks; send it whole, with a Content-Length header")
        size = size or "0"
        if not size.isdigit() or int(size) > server.limits.max_body_bytes:
            return _error(413, f"the body has {size} bytes; at most {server.limits.max_body_bytes} are accepted")
        kind = request.headers.get("content-type", "")
        if request.url.path == "/v1/rewrite" and request.method == "POST":
            if kind.split(";")[0].strip().lower() != "application/json":
                return _error(415, f"the body is {kind or 'untyped'}; send JSON with Content-Type: application/json")
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "queued": server.batcher.queued}

    @app.get("/v1/styles")
    async def styles() -> dict[str, Any]:
        return server.styles()

    @app.post("/v1/rewrite", responses=ERRORS)
    async def rewrite(request: RewriteRequest) -> Any:  # type: ignore[valid-type]
        body = cast(_RequestBase, request)  # the generated model is a `_RequestBase` with the recipe fields
        try:
            key = server.recipe_of(body)
        except BadRequest as err:
            return _error(err.status, str(err))
        except SteerError as err:
            return _error(400, api_terms(str(err)))
        try:
            records = await server.batcher.submit(key, body.texts, server.limits.timeout_s)
        except QueueFull:
            wait = server.limits.retry_after_s
            return _error(503, f"the queue is full; retry in {wait} s", {"Retry-After": str(wait)})
        except MemoryShort as err:
            return _error(503, str(err), {"Retry-After": str(server.limits.retry_after_s)})
        except TimeoutError:
            return _error(504, f"the rewrite took longer than {server.limits.timeout_s:g} s; send fewer texts")
        except SteerError as err:
            return _error(400, api_terms(str(err)))
        except Exception as err:  # noqa: BLE001 - this request's own failure (batch-mates were decoded apart)
            logger.exception("a rewrite request failed")
            return _error(
                500, f"the rewrite failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
            )
        return {"records": records}

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return resources.files("steer.serve").joinpath("static/index.html").read_text(encoding="utf-8")

    return app
