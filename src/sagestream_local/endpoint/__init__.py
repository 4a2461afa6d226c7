"""A simulated SageMaker Runtime endpoint on loopback, speaking its real restJson1 + event-stream protocol.

Laptop only, never deployed. boto3 reaches it through its own endpoint override
(``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME=http://127.0.0.1:PORT``), so the botocore path under test is the
real one. It answers ``InvokeEndpointWithResponseStream`` with event-stream frames at the model's token
cadence, ``InvokeEndpoint`` with the whole answer, and ``/_sim/scenario`` and ``/_sim/records`` so other
processes (browser test, benchmark) can steer and observe it.

What the "model container" emits is chosen by :class:`Scenario`: its ``dialect`` (``openai`` = TGI Messages
API / vLLM / LMI chat SSE, ``tgi`` = TGI ``generate_stream`` SSE, ``lmi`` = LMI/DJL jsonlines), token timing,
how the bytes are cut into PayloadParts, the HTTP framing and one injected fault.

One module per concern; every public name is importable from here:

==================== ======================================================================================
``eventstream``      the event-stream wire format: an encoder independent of botocore's decoder (frames,
                     string headers, CRCs)
``scenario``         :class:`Scenario`, its choices and their validation
``generation``       the tokens a request gets (:func:`generate`), on :mod:`sagestream_local.model`'s
                     decisions (tool choice, JSON from schemas)
``answers``          per dialect, the container's streamed events and whole answer (text, tools, JSON,
                     reasoning, logprobs)
``payload_parts``    how the container's bytes are cut into PayloadParts (``Scenario.split``)
``faults``           the fault table, SageMaker's service errors and the containers' refusals
``records``          :class:`Record`, what the endpoint remembers of each request
``server``           :class:`SimulatedEndpoint`: the HTTP server, its ``/_sim`` routes, prefix-aware routing
==================== ======================================================================================

Environment variables read: none (the CLI takes flags; clients read ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``).

Example::

    >>> import boto3
    >>> from sagestream_local.endpoint import SimulatedEndpoint, Scenario
    >>> with SimulatedEndpoint(Scenario(dialect="tgi", ttft_ms=0, cadence_ms=0, tokens=4)) as sim:
    ...     client = boto3.client("sagemaker-runtime", region_name="us-east-1", endpoint_url=sim.url,
    ...                           aws_access_key_id="testing", aws_secret_access_key="testing")
    ...     resp = client.invoke_endpoint_with_response_stream(
    ...         EndpointName="llm", ContentType="application/json",
    ...         Body=b'{"inputs": "Hello there", "stream": true}')
    ...     body = b"".join(e["PayloadPart"]["Bytes"] for e in resp["Body"])
    ...     sim.wait_for_record(lambda r: r.outcome != "streaming").outcome  # noted just after the last byte
    'completed'
    >>> body.startswith(b'data:{"index":1,"token":')
    True

Standalone: ``python -m sagestream_local.endpoint --port 8089 --dialect openai --cadence-ms 30``.
"""

from sagestream_local.endpoint.answers import FINISH, ModelEvent, stream_events, token_id, whole_answer
from sagestream_local.endpoint.eventstream import (
    EVENTSTREAM_CONTENT_TYPE,
    encode_message,
    exception_frame,
    iter_frames,
    payload_part_frame,
    with_bad_crc,
)
from sagestream_local.endpoint.faults import (
    ACCOUNT_ID,
    NO_CAPACITY_MESSAGE,
    REGION,
    ServiceError,
    auth_error,
    container_error,
    context_length_error,
    model_error,
    no_capacity_error,
    not_found_message,
    service_error,
    stream_fault_frame,
)
from sagestream_local.endpoint.generation import WORDS, Generation, generate, prompt_of, prompt_size, readable_tokens
from sagestream_local.endpoint.payload_parts import Piece, pieces
from sagestream_local.endpoint.records import Outcome, Record, TokenSend
from sagestream_local.endpoint.scenario import CHOICES, Dialect, Fault, Framing, Scenario, Split
from sagestream_local.endpoint.server import PREFIX_CACHE_IDS, SimulatedEndpoint

__all__ = [
    "ACCOUNT_ID",
    "CHOICES",
    "EVENTSTREAM_CONTENT_TYPE",
    "FINISH",
    "NO_CAPACITY_MESSAGE",
    "PREFIX_CACHE_IDS",
    "REGION",
    "WORDS",
    "Dialect",
    "Fault",
    "Framing",
    "Generation",
    "ModelEvent",
    "Outcome",
    "Piece",
    "Record",
    "Scenario",
    "ServiceError",
    "SimulatedEndpoint",
    "Split",
    "TokenSend",
    "auth_error",
    "container_error",
    "context_length_error",
    "encode_message",
    "exception_frame",
    "generate",
    "iter_frames",
    "model_error",
    "no_capacity_error",
    "not_found_message",
    "payload_part_frame",
    "pieces",
    "prompt_of",
    "prompt_size",
    "readable_tokens",
    "service_error",
    "stream_events",
    "stream_fault_frame",
    "token_id",
    "whole_answer",
    "with_bad_crc",
]
