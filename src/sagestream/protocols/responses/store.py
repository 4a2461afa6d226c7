"""Stored responses of the Responses API (``store: true``): one DynamoDB table, each response immutable once written.

A stored response is one JSON document: the response object as the client got it, the whole input the model
saw for it (the items of every response it continues, then its own request's), and how many responses its
chain holds. ``previous_response_id`` then reads one document, however long the conversation.

Items: partition key ``id`` (the response id), sort key ``part`` (0, 1, ...). The document is compressed (zlib)
and, past :data:`PART_BYTES`, cut into several items, since a DynamoDB item holds at most 400 KB; a ``Query``
(one page per megabyte) reads them back in order, strongly consistent (a client continues a response the moment
its stream has ended). Each item carries ``owner`` (a SHA-256 of the caller's identity, never the identity
itself) and ``expires_at`` (DynamoDB's TTL attribute; DynamoDB deletes expired items within days, so a read
treats an expired item as gone at once). A response of another owner reads as missing, exactly as one that never
existed. Writes are conditional (``attribute_not_exists``): an id is never written twice, so two requests
continuing the same response at once both read the same document, and neither can change it.

The function's role may only ``GetItem``, ``PutItem``, ``DeleteItem`` and ``Query`` on the table; this module
uses the last three.

Environment variables read: none (``RESPONSES_STORE``, ``RESPONSES_TABLE``, ``RESPONSES_TTL_DAYS`` through
:mod:`sagestream.config`); botocore reads the usual AWS ones, ``AWS_ENDPOINT_URL_DYNAMODB`` included
(moto's server under ``make run``).

Example::

    >>> doc = encode({"response": {"id": "resp_1"}, "input": [], "depth": 1})
    >>> decode(doc) == {"response": {"id": "resp_1"}, "input": [], "depth": 1}
    True
    >>> len(owner_of("key:abc"))
    64
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import zlib
from dataclasses import dataclass
from typing import Any

__all__ = ["PART_BYTES", "DynamoStore", "StoreError", "Stored", "decode", "encode", "owner_of", "valid_response_id"]

# Compressed bytes per item: DynamoDB's 400 KB item limit counts attribute names and values; the other
# attributes of an item are well under a kilobyte.
PART_BYTES = 350_000
# The most parts one response may take (a 6 MB request compresses to far fewer).
MAX_PARTS = 64


class StoreError(Exception):
    """The store could not be read or written (the service failed, or refused)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored response: the object the client got, the input the model saw for it, and its chain's length."""

    response: dict[str, Any]
    input_items: list[Any]
    depth: int


# The ids this function mints for responses (``new_id("resp_")`` in sagestream.protocols._wire): nothing else is
# ever a key of the store or of a run, so nothing else is looked up. An id of another shape would reach items
# that are not responses (a run's ``<id>#state``) or pass DynamoDB's 2,048-byte key limit.
_RESPONSE_ID = re.compile(r"resp_[0-9a-f]{32}")


def valid_response_id(text: object) -> bool:
    """Whether ``text`` has the shape of a response id this function mints; any other is no response's.

    >>> valid_response_id("resp_" + "0a" * 16), valid_response_id("resp_" + "0a" * 16 + "#state")
    (True, False)
    """
    return isinstance(text, str) and _RESPONSE_ID.fullmatch(text) is not None


def owner_of(identity: str) -> str:
    """What an item records of its caller: a digest, so the table holds no key and no subject."""
    return hashlib.sha256(identity.encode()).hexdigest()


def encode(document: dict[str, Any]) -> bytes:
    return zlib.compress(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode(), 6)


def decode(data: bytes) -> Any:
    return json.loads(zlib.decompress(data))


class DynamoStore:
    """The table, through the process's one DynamoDB client (:mod:`sagestream.storage`), made with the store at
    init (:func:`sagestream.protocols.responses.stored.store_for`), never on a request; every call bounded in
    total by that module's deadline rule."""

    def __init__(self, table: str, ttl_s: int, client: Any = None) -> None:
        from sagestream.storage import Table

        self.table = table
        self.ttl_s = ttl_s
        self.db = Table(table, client)

    @property
    def client(self) -> Any:
        return self.db.client

    def put(self, response_id: str, owner: str, response: dict[str, Any], input_items: list[Any], depth: int) -> None:
        """Store a response once; :class:`StoreError` if it cannot be (or was already) written."""
        data = encode({"response": response, "input": input_items, "depth": depth})
        parts = [data[n : n + PART_BYTES] for n in range(0, len(data), PART_BYTES)] or [b""]
        if len(parts) > MAX_PARTS:
            raise StoreError(f"the response is {len(data)} bytes compressed, more than the store takes")
        expires_at = int(time.time()) + self.ttl_s
        for number, part in enumerate(parts):
            item = {
                "id": {"S": response_id},
                "part": {"N": str(number)},
                "owner": {"S": owner},
                "expires_at": {"N": str(expires_at)},
                "data": {"B": part},
            }
            if number == 0:
                item["parts"] = {"N": str(len(parts))}
            self._call(
                "put_item",
                Item=item,
                ConditionExpression="attribute_not_exists(id)",
            )

    def get(self, response_id: str, owner: str) -> Stored | None:
        """The response, or None when there is none for this owner (missing, expired, another's, or cut short)."""
        items = self._items(response_id)
        if not items or not self._visible(items[0], owner):
            return None
        if int(items[0].get("parts", {}).get("N", "1")) != len(items):
            return None  # a write that failed part-way: not a response
        document = decode(b"".join(item["data"]["B"] for item in items))
        return Stored(document["response"], document["input"], int(document["depth"]))

    def delete(self, response_id: str, owner: str) -> bool:
        """Delete the response; False if there is none for this owner."""
        items = self._items(response_id)
        if not items or not self._visible(items[0], owner):
            return False
        for item in items:
            key = {"id": item["id"], "part": item["part"]}
            self._call("delete_item", Key=key)
        return True

    def _items(self, response_id: str) -> list[dict[str, Any]]:
        """Every part of the response, in order (a Query answers at most 1 MB: later pages are asked for)."""
        items: list[dict[str, Any]] = []
        more: dict[str, Any] = {}
        while True:
            answer = self._call(
                "query",
                KeyConditionExpression="id = :id",
                ExpressionAttributeValues={":id": {"S": response_id}},
                ConsistentRead=True,
                **more,
            )
            items += answer.get("Items", [])
            if "LastEvaluatedKey" not in answer or len(items) > MAX_PARTS:
                return sorted(items, key=lambda item: int(item["part"]["N"]))
            more = {"ExclusiveStartKey": answer["LastEvaluatedKey"]}

    @staticmethod
    def _visible(first: dict[str, Any], owner: str) -> bool:
        expired = int(first.get("expires_at", {}).get("N", "0")) <= time.time()
        return first.get("owner", {}).get("S") == owner and not expired

    def _call(self, operation: str, *, deadline: float | None = None, **args: Any) -> Any:
        """One call on the table (:meth:`sagestream.storage.Table.call`); its failure as :class:`StoreError`."""
        from sagestream.storage import StorageError

        args.pop("TableName", None)  # the table is the store's own
        try:
            return self.db.call(operation, deadline=deadline, attempts=3, **args)
        except StorageError as exc:
            raise StoreError(str(exc)) from exc
