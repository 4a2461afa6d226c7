"""DynamoDB on a laptop: moto's server mode on loopback, with the tables the template makes for stored responses
and for quotas' counts.

``make run`` keeps the Responses API's stored responses here, so that ``previous_response_id`` works with no
AWS account, and with ``QUOTAS`` set the per-caller counts (:mod:`sagestream.quotas`); the function reaches
it as it would the real service, over HTTP through botocore, pointed at it by ``AWS_ENDPOINT_URL_DYNAMODB``.
Nothing is kept across runs.

Example::

    >>> with LocalDynamoDB() as db:                     # doctest: +SKIP
    ...     env = db.function_env()                     # RESPONSES_STORE, RESPONSES_TABLE, the endpoint URL
"""

from __future__ import annotations

import logging
import threading
from typing import Any

TABLE = "sagestream-responses"
QUOTAS_TABLE = "sagestream-quotas"
_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}  # moto checks nothing


def _one_at_a_time(app: Any) -> Any:
    """The WSGI ``app``, answering one request at a time.

    DynamoDB applies each write to an item atomically, conditions included: that is what quotas' reservations
    rest on (two requests racing for the last room in a window: one gets it). moto's backend does not lock: its
    threaded server, under concurrent ``UpdateItem``s of one item, lost updates in the tests (900 counted where
    1000 were written). Serialised, every request sees the one before it whole, as DynamoDB promises per item.
    """
    lock = threading.Lock()

    def serialised(environ: Any, start_response: Any) -> Any:
        with lock:
            return list(app(environ, start_response))  # the body read inside the lock too

    return serialised


class LocalDynamoDB:
    """moto's DynamoDB on 127.0.0.1 (a free port), and the responses and quotas tables in it."""

    def __init__(self, table: str = TABLE, region: str = "us-east-1", quotas_table: str = QUOTAS_TABLE) -> None:
        from moto.moto_server import threaded_moto_server
        from moto.server import ThreadedMotoServer

        class Serialised(ThreadedMotoServer):
            """moto's threaded server, its app answering one request at a time (:func:`_one_at_a_time`);
            ``_server_entry`` is moto's own, with the app wrapped (moto takes no app or middleware)."""

            def _server_entry(self) -> None:
                app = threaded_moto_server.DomainDispatcherApplication(threaded_moto_server.create_backend_app)
                self._server = threaded_moto_server.make_server(
                    self._ip_address,
                    self._port,
                    _one_at_a_time(app),
                    True,
                    request_handler=threaded_moto_server.MotoRequestHandler,
                )
                self._server_ready_event.set()
                self._server.serve_forever()

        self.table = table
        self.quotas_table = quotas_table
        self.region = region
        self._server = Serialised(ip_address="127.0.0.1", port=0, verbose=False)
        self.url = ""

    def start(self) -> LocalDynamoDB:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request on the terminal
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        client = self.client()
        tables = client.list_tables()["TableNames"]
        if self.quotas_table not in tables:  # as the template makes it: one string key, on demand
            client.create_table(
                TableName=self.quotas_table,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
        if self.table in tables:
            return self  # moto keeps one set of tables per process: a second server in it serves the same
        client.create_table(
            TableName=self.table,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}, {"AttributeName": "part", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "id", "AttributeType": "S"},
                {"AttributeName": "part", "AttributeType": "N"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        return self

    def client(self) -> Any:
        import botocore.session

        session = botocore.session.get_session()
        return session.create_client("dynamodb", region_name=self.region, endpoint_url=self.url, **_CREDENTIALS)

    def function_env(self) -> dict[str, str]:
        """What the function needs to keep its responses here."""
        return {"RESPONSES_STORE": "dynamodb", "RESPONSES_TABLE": self.table, "AWS_ENDPOINT_URL_DYNAMODB": self.url}

    def quotas_env(self) -> dict[str, str]:
        """What the function needs to keep quotas' counts here."""
        return {"QUOTAS_TABLE": self.quotas_table, "AWS_ENDPOINT_URL_DYNAMODB": self.url}

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> LocalDynamoDB:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
