"""The HTTP API (FastAPI; OpenAPI docs at /docs) and the explorer page at /.

Every endpoint takes JSON, checks it (422 for a malformed body, 413 over a limit, 404 for an
unknown model, 400 for what the model cannot do, 503 when the queue is full), then hands the work
to the `DynamicBatcher`: embeddings of concurrent requests share one forward pass, everything else
runs alone, all of it on one worker thread off the event loop. Nothing here reads a file named in
a request: the models are the folders given at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.exceptions import HTTPException as StarletteHTTPException

from bertkit.errors import BertkitError
from bertkit.serve import predict as predict_mod
from bertkit.serve import views
from bertkit.serve.batcher import BatchSettings, DynamicBatcher, QueueFull, unbatched_key
from bertkit.serve.models import CapabilityError, ServedModel
from bertkit.serve.safety import (
    BodyLimit,
    BodyTimeout,
    Limits,
    TooLarge,
    check_count,
    check_tokens,
    truncations,
)

MAX_TEXT_CHARS = 100_000
Text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS)]
STATIC = resources.files("bertkit.serve") / "static"


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    model: str | None = Field(None, description="model name from /models (default: the first "
                              "that can do it)")


class TextIn(Body):
    text: Text
    pair: Text | None = None


TRUNCATE = Field(True, description="cut texts longer than the model reads, and say so in the "
                 "answer (`truncated`); false: such a request is refused (413)")


class TextsIn(Body):
    texts: list[Text] = Field(min_length=1)
    truncate: bool = TRUNCATE


class EmbedIn(TextsIn):
    pooling: Literal["cls", "mean", "max"] | None = None
    normalize: bool = False
    precision: Literal["auto", "fp32", "bf16", "int8"] = "auto"  # auto: hardware.choose_precision


class FillMaskIn(Body):
    text: Text
    top_k: int = Field(5, ge=1, le=100)


class NspIn(Body):
    text: Text
    pair: Text


class PredictIn(Body):
    inputs: list[dict[str, Any]] = Field(min_length=1)
    truncate: bool = TRUNCATE


class LayersIn(Body):
    text: Text | None = None
    texts: list[Text] | None = Field(None, min_length=2, max_length=2)
    word: Text | None = None


def create_app(models: dict[str, ServedModel], limits: Limits | None = None,
               batching: BatchSettings | None = None) -> FastAPI:
    limits, batching = limits or Limits(), batching or BatchSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.batcher = DynamicBatcher(batching)
        yield
        await app.state.batcher.stop()

    # docs_url=None: FastAPI's /docs loads Swagger UI from a CDN, a blank page offline; /docs is
    # a page of the package's own, drawn from /openapi.json
    app = FastAPI(title="bertkit serve", version="1", lifespan=lifespan, docs_url=None,
                  redoc_url=None,
                  description="BERT over HTTP: tokenization, embeddings, similarity, fill-mask, "
                  "NSP, fine-tuned predictions, attention maps and per-layer vectors.")
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    app.add_middleware(BodyTimeout, seconds=limits.body_timeout_s)  # outermost: times every read
    add_error_handlers(app)
    infos = {name: m.info() for name, m in models.items()}
    api = Api(models, limits)
    api.routes(app, infos)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"))

    @app.get("/docs", include_in_schema=False)
    def docs() -> FileResponse:
        return FileResponse(str(STATIC / "api.html"))

    return app


class Api:
    """The endpoints, over the loaded models and the limits."""

    def __init__(self, models: dict[str, ServedModel], limits: Limits):
        self.models, self.limits = models, limits

    def pick(self, name: str | None, need: str | None = None, what: str = "") -> ServedModel:
        """The named model, else the first one that has `need` ("mlm", "nsp", "task")."""
        if name is not None:
            if name not in self.models:
                raise UnknownModel(f"no model {name!r}; this server has "
                                   f"{', '.join(self.models)}")
            model = self.models[name]
            if need:
                model.require(need, what)
            return model
        for model in self.models.values():
            if need is None or need in model.heads or (need == "task" and model.task):
                return model
        raise CapabilityError(f"no model on this server can do {what}")

    async def run_unbatched(self, request: Request, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn(*args) as a forward pass of its own (shared with no other request) on the
        batcher's worker thread, through the bounded queue."""
        return await request.app.state.batcher.submit(unbatched_key(), lambda p: [fn(*p[0])], args)

    def routes(self, app: FastAPI, infos: dict[str, dict[str, Any]]) -> None:
        limits = self.limits

        @app.get("/health")
        def health(request: Request) -> dict[str, Any]:
            batcher = request.app.state.batcher
            return {"status": "ok", "models": list(self.models),
                    "queued": batcher.queue.qsize(), "batches": vars(batcher.stats)}

        @app.get("/models")
        def list_models() -> dict[str, Any]:
            return {"models": list(infos.values())}

        @app.post("/tokenize")
        async def tokenize(body: TextIn, request: Request) -> dict[str, Any]:
            model = self.pick(body.model)
            check_tokens(views.count_tokens(model, [body.text], pair_list(body.pair)), limits.max_tokens)
            return {"model": model.name, **views.tokenize(model, body.text, body.pair)}

        @app.post("/embed")
        async def embed(body: EmbedIn, request: Request) -> dict[str, Any]:
            model = self.pick(body.model)
            vectors, notes = await self.embeddings(request, model, body.texts, body.pooling,
                                                   body.normalize, body.precision, body.truncate)
            return {"model": model.name, **notes, "dim": int(vectors.shape[1]),
                    "embeddings": vectors.tolist()}

        @app.post("/similarity")
        async def similarity(body: TextsIn, request: Request) -> dict[str, Any]:
            model = self.pick(body.model)
            vectors, notes = await self.embeddings(request, model, body.texts, None, True,
                                                   "fp32", body.truncate)
            return {"model": model.name, **notes, "texts": body.texts,
                    "matrix": views.similarity_matrix(vectors)}

        self.head_routes(app)
        self.view_routes(app)

    async def embeddings(self, request: Request, model: ServedModel, texts: list[str],
                         pooling: str | None, normalize: bool, precision: str, truncate: bool
                         ) -> tuple[Any, dict[str, Any]]:
        """The texts' vectors, and what the answer must say about them: the precision that
        computed them, the model's length limit and the texts cut to it."""
        check_count(len(texts), self.limits.max_texts, "texts")
        counts = views.count_tokens(model, texts)
        check_tokens(counts, self.limits.max_tokens)
        length = model.encoder().max_length  # every precision's copy reads the same length
        cut = truncations(counts, length, truncate)
        key = ("embed", model.name, pooling, normalize, precision)
        vectors = await request.app.state.batcher.submit(
            key, views.embed_batch(model, precision, pooling, normalize), texts, len(texts))
        # the forward thread made the encoder at `precision` (a bf16/int8 copy on first use):
        # read what "auto" resolved to from it, rather than build a copy on the event loop
        notes = {**model.encoders[precision].precision_record(), "max_length": length,
                 "truncated": cut}
        return vectors, notes

    def head_routes(self, app: FastAPI) -> None:
        limits = self.limits

        @app.post("/fill-mask")
        async def fill_mask(body: FillMaskIn, request: Request) -> dict[str, Any]:
            model = self.pick(body.model, "mlm", "fill-mask")
            check_tokens(views.count_tokens(model, [body.text]), limits.max_tokens)
            return {"model": model.name,
                    **await self.run_unbatched(request, views.fill_masks, model, body.text, body.top_k)}

        @app.post("/nsp")
        async def nsp(body: NspIn, request: Request) -> dict[str, Any]:
            model = self.pick(body.model, "nsp", "next-sentence prediction")
            check_tokens(views.count_tokens(model, [body.text], [body.pair]), limits.max_tokens)
            return {"model": model.name,
                    **await self.run_unbatched(request, views.next_sentence, model, body.text, body.pair)}

        @app.post("/predict")
        async def predict(body: PredictIn, request: Request) -> dict[str, Any]:
            model = self.pick(body.model, "task", "predict (it needs a fine-tuned model)")
            check_count(len(body.inputs), limits.max_texts, "inputs")
            predict_mod.check_record_sizes(body.inputs, MAX_TEXT_CHARS)
            counts, length = predict_mod.token_counts(model, body.inputs)
            check_tokens(counts, limits.max_tokens)
            cut = truncations(counts, length, body.truncate)
            results = await self.run_unbatched(request, predict_mod.predict, model, body.inputs)
            for note in cut:
                results[note["index"]]["truncated"] = {"tokens": note["tokens"],
                                                       "kept": note["kept"]}
            return {"model": model.name, "task": model.task.name, "max_length": length,
                    "predictions": results}

    def view_routes(self, app: FastAPI) -> None:
        limits = self.limits

        @app.post("/attention")
        async def attention(body: TextIn, request: Request) -> dict[str, Any]:
            model = self.pick(body.model)
            check_tokens(views.count_tokens(model, [body.text], pair_list(body.pair)),
                         min(limits.attention_tokens, model.config.max_position_embeddings),
                         "for attention maps")
            return {"model": model.name,
                    **await self.run_unbatched(request, views.attention, model, body.text, body.pair)}

        @app.post("/layers")
        async def layers(body: LayersIn, request: Request) -> dict[str, Any]:
            model = self.pick(body.model)
            if (body.text is None) == (body.texts is None) or (body.texts is None) != (
                    body.word is None):
                raise BadRequest('give either "text" (per-layer vectors) or "texts" (two) and '
                                 '"word" (its layer-wise similarity)')
            texts = body.texts or [body.text]
            check_tokens(views.count_tokens(model, texts), limits.attention_tokens,
                         "for per-layer vectors")
            if body.word is None:
                out = await self.run_unbatched(request, views.layer_vectors, model, body.text)
            else:
                out = await self.run_unbatched(request, views.word_drift, model, body.texts, body.word)
            return {"model": model.name, **out}


def pair_list(pair: str | None) -> list[str] | None:
    """One text's optional pair as `count_tokens` takes pairs: [pair], or None without one."""
    return None if pair is None else [pair]


class UnknownModel(BertkitError):
    pass


class BadRequest(BertkitError):
    pass


def error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status, headers=headers or None)


def add_error_handlers(app: FastAPI) -> None:
    """Every failure is one JSON object {"detail": "one line"} with the right status; none
    takes the server down."""
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        parts = [("/".join(str(x) for x in e.get("loc", ()) if x != "body") or "body") + ": "
                 + e["msg"] for e in err.errors()]
        return error(422, "invalid request: " + "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        # a body that is not UTF-8 JSON (or nests past the parser's depth) is as malformed as
        # broken JSON, which FastAPI answers 422: one status for both, as the README says
        if err.status_code == 400 and "parsing the body" in str(err.detail):
            return error(422, "invalid request: the body is not JSON in UTF-8 (or nests too "
                         "deeply to parse)")
        return error(err.status_code, str(err.detail), **(err.headers or {}))

    @app.exception_handler(TooLarge)
    async def too_large(request: Request, err: TooLarge) -> JSONResponse:
        return error(413, str(err))

    @app.exception_handler(UnknownModel)
    async def unknown(request: Request, err: UnknownModel) -> JSONResponse:
        return error(404, str(err))

    @app.exception_handler(BertkitError)
    async def bad(request: Request, err: BertkitError) -> JSONResponse:
        return error(400, str(err))

    @app.exception_handler(ValueError)  # the library's input checks (e.g. model.check_inputs)
    async def bad_value(request: Request, err: ValueError) -> JSONResponse:
        return error(400, str(err))

    @app.exception_handler(Exception)
    async def failed(request: Request, err: Exception) -> JSONResponse:
        return error(500, f"internal error ({type(err).__name__}); the server keeps running")

    @app.exception_handler(QueueFull)
    async def busy(request: Request, err: QueueFull) -> JSONResponse:
        return error(503, str(err), **{"Retry-After": "1"})
