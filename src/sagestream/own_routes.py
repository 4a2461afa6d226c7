"""The app's own routes, beside the client protocols': the model list and each model's card
(``/v1/models``, keyed as the completions are), ``/health`` and, with ``SERVE_UI``, the chat page.

Each handler is called as a route's are, with the app and the invocation's :class:`~sagestream.call.Call`.

Example::

    >>> from sagestream.config import Config
    >>> [route.path for route in own_routes(Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "llm"}))]
    ['/v1/models', '/v1/models/llm', '/v1/models', '/health']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sagestream import page
from sagestream.errors import APIError
from sagestream.http import Route

if TYPE_CHECKING:
    from sagestream.call import Call
    from sagestream.config import Config

__all__ = ["own_routes"]


def own_routes(config: Config) -> list[Route[Any]]:
    """The routes for ``config``'s models, and the page's when it is served."""
    routes: list[Route[Any]] = [
        Route("/v1/models", ("GET",), models, keyed=True),
        *(Route(f"/v1/models/{model_id}", ("GET",), model, keyed=True) for model_id in config.model_ids),
        Route("/v1/models", (), unknown_model, keyed=True, prefix=True),
        Route("/health", ("GET",), health),
    ]
    if config.serve_ui:
        routes += [Route("/", ("GET",), page.serve), Route("/index.html", ("GET",), page.serve)]
    return routes


def model_card(model_id: str) -> dict[str, Any]:
    """A model as OpenAI's ``/v1/models`` lists it.

    >>> model_card("qwen")["object"]
    'model'
    """
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "sagemaker"}


def models(app: Any, call: Call) -> None:
    call.writer.json({"object": "list", "data": [model_card(m) for m in app.config.model_ids]})


def model(app: Any, call: Call) -> None:
    call.writer.json(model_card(call.request.path.rstrip("/").removeprefix("/v1/models/")))


def unknown_model(app: Any, call: Call) -> None:
    name = call.request.path.rstrip("/").removeprefix("/v1/models/")
    raise APIError.not_found(f"The model '{name}' does not exist.", code="model_not_found", param="model")


def health(app: Any, call: Call) -> None:
    # Nothing unauthenticated names the endpoint or the model.
    call.writer.json({"status": "ok"})
