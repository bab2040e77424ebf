"""Full-weight sync for a vLLM server that Ratchet feeds (trainer.mode = "full"; docs/gpu.md, "Full fine-tuning").

Two hooks vLLM loads by name, both on PYTHONPATH (infra/vllm):

  --worker-extension-cls ratchet_weights.WeightsWorker   every worker (each tensor-parallel rank) gains
      ratchet_load_weights(path): reload its weights in place from a local checkpoint directory
      (safetensors + config.json), through vLLM's own reload_weights; and ratchet_weights_path():
      the directory its weights came from last.
  --middleware ratchet_weights.WeightsRoute                adds one route, /v1/ratchet/weights:
      GET   {"base": <the served model's directory>, "paths": [<each worker's weights directory>]}
      POST  {"path": <directory>|null} (null: the base model again): every worker reloads from it, then the
            prefix cache is reset, running requests preempted (their KV came from the old weights; they go
            on with the new ones), and the answer is GET's, read back from the workers.

Why not vLLM's own endpoints: /collective_rpc, /update_weights and /reset_prefix_cache are served only
with VLLM_SERVER_DEV_MODE=1, which also opens /sleep, /reset_weights and arbitrary worker RPCs. This
route does one thing, loads only what a local directory holds (as /v1/load_lora_adapter does with
VLLM_ALLOW_RUNTIME_LORA_UPDATING), and lives under /v1, so vLLM's --api-key guards it like the rest.
"""

import os
from typing import TYPE_CHECKING, Any

# Imported at the top, not inside the route's factory: FastAPI resolves the handlers' annotations
# (Request, Body) from this module's globals, and one it cannot resolve becomes a query parameter.
from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse

ROUTE = "/v1/ratchet/weights"

if TYPE_CHECKING:  # the extension's methods run as the worker's own (vLLM mixes the class in)
    from vllm.v1.worker.gpu_worker import Worker as _Base
else:
    _Base = object


class WeightsWorker(_Base):
    def ratchet_load_weights(self, path: str) -> str:
        # reload_weights points model_config.model at the path, so ratchet_weights_path() answers it from here on.
        self.reload_weights(weights_path=path, is_checkpoint_format=True)
        return self.ratchet_weights_path()

    def ratchet_weights_path(self) -> str:
        return str(self.model_runner.vllm_config.model_config.model)


async def _state(app: Any) -> dict[str, Any]:
    paths = await app.state.engine_client.collective_rpc("ratchet_weights_path")
    return {"base": app.state.ratchet_base, "paths": [str(p) for p in paths]}


def _router() -> APIRouter:
    router = APIRouter()

    @router.get(ROUTE)
    async def served(request: Request) -> JSONResponse:
        return JSONResponse(await _state(request.app))

    @router.post(ROUTE)
    async def load(request: Request, path: str | None = Body(default=None, embed=True)) -> JSONResponse:
        engine = request.app.state.engine_client
        target = os.path.realpath(path) if path else request.app.state.ratchet_base
        if not os.path.isdir(target):
            return JSONResponse({"error": f"{target} is not a directory on the inference host"}, status_code=400)
        # Between two engine steps: no forward pass sees half the weights.
        await engine.collective_rpc("ratchet_load_weights", args=(target,))
        if not await engine.reset_prefix_cache(reset_running_requests=True):
            return JSONResponse({"error": "weights loaded but the prefix cache could not be reset"}, status_code=500)
        return JSONResponse(await _state(request.app))

    return router


class WeightsRoute:
    """An ASGI middleware (vLLM's --middleware) that adds the route to the app at its first request, so the
    route sits behind vLLM's own middleware (the --api-key check) like any /v1 route, and no request
    pays for a wrapper after that. The base directory is read then too, before any load could move it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.added = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not self.added and scope["type"] == "http":
            self.added = True
            fastapi_app = scope["app"]
            fastapi_app.state.ratchet_base = str(fastapi_app.state.engine_client.model_config.model)
            fastapi_app.include_router(_router())
        await self.app(scope, receive, send)
