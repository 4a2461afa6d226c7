"""sagestream.own_routes: the model list and cards, health, and the page's routes when it is served."""

from __future__ import annotations

import json

import pytest

from sagestream.call import Call
from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.http import Request, Routes
from sagestream.own_routes import health, model, models, own_routes, unknown_model
from tests.fakes import call_of

TWO = '{"a": {"endpoint": "e-a"}, "b": {"endpoint": "e-b"}}'


class App:
    def __init__(self, config: Config) -> None:
        self.config = config


def call(path: str) -> Call:
    request = Request(method="GET", path=path, headers={}, body=b"")
    return call_of(request)


def answered(handler: object, app: App, path: str) -> object:
    asked = call(path)
    handler(app, asked)  # type: ignore[operator]
    return json.loads(asked.writer.stream.body)


def test_each_model_has_a_card_route_and_the_list_and_the_unknown_ones_need_the_key() -> None:
    routes = Routes(own_routes(Config.from_env({"MODELS": TWO})))
    assert routes.match("/v1/models/a").handler is model and routes.match("/v1/models/b").handler is model
    assert routes.match("/v1/models/c").handler is unknown_model and routes.match("/v1/models").handler is models
    assert all(routes.match(p).keyed for p in ("/v1/models", "/v1/models/a", "/v1/models/c"))
    assert not routes.match("/health").keyed and routes.match("/") is None


def test_the_page_is_routed_only_when_it_is_served() -> None:
    served = Routes(own_routes(Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "llm", "SERVE_UI": "true"})))
    assert served.match("/") is not None and served.match("/index.html") is not None


def test_the_list_names_every_model_in_openais_shape() -> None:
    listed = answered(models, App(Config.from_env({"MODELS": TWO})), "/v1/models")
    assert listed == {
        "object": "list",
        "data": [
            {"id": "a", "object": "model", "created": 0, "owned_by": "sagemaker"},
            {"id": "b", "object": "model", "created": 0, "owned_by": "sagemaker"},
        ],
    }
    assert answered(model, App(Config.from_env({"MODELS": TWO})), "/v1/models/b/")["id"] == "b"


def test_an_unknown_model_is_a_404_naming_it() -> None:
    with pytest.raises(APIError) as unknown:
        unknown_model(App(Config.from_env({"MODELS": TWO})), call("/v1/models/gpt-9"))
    assert (unknown.value.status, unknown.value.code, unknown.value.param) == (404, "model_not_found", "model")
    assert "'gpt-9'" in unknown.value.message


def test_health_names_neither_the_endpoint_nor_the_model() -> None:
    app = App(Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "secret-endpoint"}))
    assert answered(health, app, "/health") == {"status": "ok"}
