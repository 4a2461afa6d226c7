"""The SageMaker front over a stand-in container on loopback: what no well-behaved engine shows on demand."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from sagestream_local.container_front import ContainerFront


class _Container:
    """A raw-socket container answering each /invocations with ``script``: (delay_s, bytes) pieces, as given."""

    def __init__(self, script: list[tuple[float, bytes]]) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                connection.recv(65536)
                for delay, data in self.script:
                    time.sleep(delay)
                    connection.sendall(data)

    def close(self) -> None:
        self.listener.close()


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.fixture
def front_over() -> Iterator[Any]:
    opened: list[tuple[_Container, ContainerFront]] = []

    def start(script: list[tuple[float, bytes]]) -> Any:
        container = _Container(script)
        front = ContainerFront(container.url).start()
        opened.append((container, front))
        return boto3.client(
            "sagemaker-runtime",
            region_name="us-east-1",
            endpoint_url=front.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"max_attempts": 1}, proxies={}),
        )

    yield start
    for container, front in opened:
        front.stop()
        container.close()


def test_each_flushed_chunk_is_one_payload_part_as_it_lands(front_over: Any) -> None:
    pieces = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]
    client = front_over([(0, HEAD), *((0.3, _chunk(p)) for p in pieces), (0, b"0\r\n\r\n")])
    response = client.invoke_endpoint_with_response_stream(EndpointName="x", Body=b"{}", ContentType="application/json")
    arrivals = [(time.monotonic(), event["PayloadPart"]["Bytes"]) for event in response["Body"]]
    assert [data for _, data in arrivals] == pieces
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
    assert all(gap > 0.15 for gap in gaps), gaps  # each part as its chunk came, none held for the next
    assert response["ContentType"] == "text/event-stream"


def test_a_container_that_breaks_off_ends_the_stream_with_a_model_stream_error(front_over: Any) -> None:
    client = front_over([(0, HEAD), (0, _chunk(b"data: one\n\n")), (0, b"5\r\nda")])  # then the connection closes
    response = client.invoke_endpoint_with_response_stream(EndpointName="x", Body=b"{}", ContentType="application/json")
    parts = []
    with pytest.raises(EventStreamError) as raised:
        for event in response["Body"]:
            parts.append(event["PayloadPart"]["Bytes"])
    assert parts[0] == b"data: one\n\n"
    assert raised.value.response["Error"]["Code"] == "ModelStreamError"


def test_a_container_5xx_is_a_424_server_error_from_model(front_over: Any) -> None:
    body = b'{"error": "engine died"}'
    answer = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    client = front_over([(0, answer)])
    with pytest.raises(ClientError) as raised:
        client.invoke_endpoint(EndpointName="x", Body=b"{}", ContentType="application/json")
    error = raised.value.response
    assert (error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Code"]) == (424, "ModelError")
    assert (error["OriginalStatusCode"], error["OriginalMessage"]) == (500, body.decode())
    assert "Received server error (500)" in error["Error"]["Message"]
