"""What every container dialect answers: :class:`Dialect`, the one class a new dialect subclasses.

A dialect turns the chat-shaped request into the container's body (:meth:`Dialect.body`: every field placed
or refused by name), and the container's answer into :class:`~sagestream.delta.Delta` objects (a fresh
:meth:`Dialect.stream_decoder` per streamed answer, :meth:`Dialect.decode_body` for a whole one). A dialect
subclasses its closest relative and overrides only what differs (LMI is TGI's generate format with other
names and fewer parameters).

Example::

    >>> from sagestream.dialects import dialect_named
    >>> tgi = dialect_named("tgi")
    >>> tgi.name, tgi.carries_user, "max_new_tokens" in tgi.computed_fields
    ('tgi', False, True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Protocol

from sagestream.errors import APIError

if TYPE_CHECKING:
    from sagestream.delta import Delta

    # At run time the request models are imported where a request is at hand, so that the function's init
    # does without them (see docs/benchmark.md, cold start).
    from sagestream.protocols.openai.request import ChatCompletionRequest, CompletionRequest

    AnyRequest = ChatCompletionRequest | CompletionRequest

__all__ = ["Dialect", "StreamDecoder"]


class StreamDecoder(Protocol):
    done: bool
    """The dialect's end was seen (``[DONE]``, or the event that carries ``details``)."""

    def decode(self, record: str) -> list[Delta]: ...


class Dialect:
    """One body format a SageMaker model container speaks."""

    name: ClassVar[str]
    # The fields of the upstream body the function sets or limits itself (on the prompt dialects, inside
    # ``parameters``, where the vendor fields go). A vendor field (EXTRA_REQUEST_FIELDS) may never take one of
    # these names: sagestream.config refuses them at init, and the body build never lets one replace them.
    computed_fields: ClassVar[frozenset[str]]
    # Whether the container's body has OpenAI's ``user`` (and ``safety_identifier``): the app binds them to
    # a verified caller, and the Messages API carries ``metadata.user_id`` there.
    carries_user: ClassVar[bool] = False
    # Whether the container takes OpenAI's ``reasoning_effort`` and vendor reasoning switches.
    carries_reasoning: ClassVar[bool] = False

    def body(
        self,
        request: AnyRequest,
        *,
        prompt_template: str | None,
        stream: bool,
        max_tokens_default: int | None,
        in_call: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """The InvokeEndpoint body that asks the container for ``request``.

        Every field the request carries is placed here or refused with a 400 naming it (docs/api.md's
        "OpenAI compatibility" table says which, per dialect). ``prompt_template`` is a
        :mod:`sagestream.dialects.prompts` name, needed for chat on the prompt dialects. ``model`` is left
        out: each endpoint serves one model, and vLLM refuses a name it does not serve. ``in_call`` names the
        fields the call carries outside the body (``prompt_cache_key`` as SageMaker's ``PrefixAwareId``).
        """
        raise NotImplementedError

    def stream_decoder(self, request: AnyRequest | None = None) -> StreamDecoder:
        """A fresh decoder for one streamed answer to ``request`` (its logprobs wish)."""
        raise NotImplementedError

    def decode_body(self, body: bytes, request: AnyRequest | None = None) -> Delta:
        """The whole answer of a non-streaming InvokeEndpoint call as one delta."""
        raise NotImplementedError

    def refuse(self, field: str, reason: str) -> NoReturn:
        """A 400 naming ``field``, which this container cannot be asked for."""
        raise APIError.invalid_request(
            f"'{field}' is not supported by this endpoint (UPSTREAM_FORMAT={self.name}): {reason}.",
            param=field,
            code="unsupported_parameter",
        )

    def add_vendor_fields(self, request: AnyRequest, fields: dict[str, Any]) -> None:
        """The request's EXTRA_REQUEST_FIELDS into ``fields``; never in place of one the function sets or limits."""
        for name, value in request.vendor_fields.items():
            if name in self.computed_fields or name in fields:
                self.refuse(name, "the function sets this field itself, so EXTRA_REQUEST_FIELDS may not name it")
            fields[name] = value

    def __repr__(self) -> str:
        return f"<dialect {self.name}>"
