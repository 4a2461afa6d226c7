"""Quotas as DynamoDB counts them: moto's server on loopback (the table as the template makes it), reached over
HTTP through botocore as the function reaches DynamoDB. Reservations never together pass a limit, however many
callers race; a settle charges what was used, once, however often it is retried; a refusal says which limit,
how much is used and when it resets, with the headers the SDKs read."""

from __future__ import annotations

import datetime
import hashlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream import quotas
from sagestream.errors import APIError
from sagestream.quotas import DynamoQuotas, Limits, Policy, QuotaUnavailable, Subject, parse_policy, windows
from sagestream_local.dynamodb import LocalDynamoDB

NOON = datetime.datetime(2026, 12, 31, 12, 0, 30, 500000, tzinfo=datetime.UTC).timestamp()


@pytest.fixture(scope="module")
def db() -> Iterator[LocalDynamoDB]:
    with LocalDynamoDB() as local:
        yield local


def meter(db: LocalDynamoDB, policy: Policy | str) -> DynamoQuotas:
    return DynamoQuotas(db.quotas_table, parse_policy(policy) if isinstance(policy, str) else policy, db.client())


def someone() -> Subject:
    name = f"key:{uuid.uuid4().hex[:16]}"  # a caller of its own per test: the server's counts outlive a test
    return Subject(name, (name,))


def counts(db: LocalDynamoDB, pk: str) -> tuple[int, int]:
    item = db.client().get_item(TableName=db.quotas_table, Key={"pk": {"S": pk}}, ConsistentRead=True)["Item"]
    return int(item["tokens"]["N"]), int(item["requests"]["N"])


def race(db: LocalDynamoDB, policy: Policy, who: Subject, callers: int = 32) -> list[str]:
    """``callers`` threads, each with a client of its own (environments share nothing), reserving 50 + 50 for
    ``who`` at the same moment: what each got, ``held`` or the refusal's ``code:type``."""
    go = threading.Barrier(callers)
    outcomes: list[str] = []
    lock = threading.Lock()

    def one(n: int) -> None:
        mine = DynamoQuotas(db.quotas_table, policy, db.client())
        # moto's server answers one request at a time: 32 racers' 96 writes queue there far longer than on
        # DynamoDB, and the bound of a call in total (storage.CALL_CAP_S, 3 s) would make some of them
        # unavailable on a busy machine. This test is about exact counts under a race; the bound has its own.
        mine.db.cap_s = 60.0
        go.wait()
        try:
            mine.reserve(who, 50, 50, f"r{n}", now=NOON)
            result = "held"
        except APIError as err:
            result = f"{err.code}:{err.type}"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def item_key(who: Subject, window: quotas.Window) -> str:
    """The table's key of ``who``'s item for ``window``: a digest of the caller, never its name."""
    return f"{hashlib.sha256(who.key.encode()).hexdigest()[:32]}#{window.name}#{window.start}"


# --- the policy ---------------------------------------------------------------------------------------------


def test_the_words_form_sets_the_default_limits() -> None:
    policy = parse_policy("tokens_per_minute=1000, requests_per_minute=10 tokens_per_month=0")
    limits = policy.limits_for(someone())
    assert (limits.requests_per_minute, limits.tokens_per_minute, limits.tokens_per_day, limits.tokens_per_month) == (
        10,
        1000,
        None,
        0,
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("tokens_per_minute=lots", "name=N"),
        ("tokens_per_minute=-5", "name=N"),
        ("rpm=5", "'rpm' is not a limit"),
        ("", "no limit is set"),
        ('{"default": {"tokens_per_minute": -1}}', ">= 0"),
        ('{"default": {}, "callers": {"key:ci": "batch"}}', "group 'batch'"),
        ('{"defaults": {}}', "defaults"),
        ("{nope", "not JSON"),
    ],
)
def test_a_policy_that_cannot_be_read_is_refused_by_name(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_policy(text)


def test_a_caller_takes_its_own_limits_then_its_group_then_the_default() -> None:
    policy = parse_policy(
        '{"default": {"tokens_per_minute": 100, "tokens_per_day": 1000},'
        ' "groups": {"pro": {"tokens_per_minute": 500, "tokens_per_day": null}, "staff": {"tokens_per_minute": 900}},'
        ' "callers": {"key:ci": "pro", "jwt:alice": {"requests_per_minute": 2}}}'
    )
    ci = policy.limits_for(Subject("key:0123", ("key:ci", "key:0123")))
    assert (ci.tokens_per_minute, ci.tokens_per_day) == (500, None), "a group's null is no limit"
    alice = policy.limits_for(Subject("jwt:alice", ("jwt:alice",), ("staff",)))
    assert (alice.requests_per_minute, alice.tokens_per_minute, alice.tokens_per_day) == (2, 100, 1000)
    bob = policy.limits_for(Subject("jwt:bob", ("jwt:bob",), ("other", "staff", "pro")))
    assert bob.tokens_per_minute == 500, "the first group in the policy's own order"
    nobody = policy.limits_for(someone())
    assert (nobody.requests_per_minute, nobody.tokens_per_minute, nobody.tokens_per_day) == (None, 100, 1000)


def test_who_a_request_counts_against() -> None:
    digest = "ab" * 32
    assert quotas.subject("jwt", issuer="https://id", sub="u1", groups=("pro",)) == Subject(
        "jwt:https://id:u1", ("jwt:u1",), ("pro",)
    )
    assert quotas.subject("api_key", key=(digest, None)).names == ("key:" + digest[:16],)
    assert quotas.subject("api_key", caller="apikey:k9").key == "apikey:k9"
    assert quotas.subject("iam", caller="arn:aws:iam::1:user/x").key == "iam:arn:aws:iam::1:user/x"
    role = "arn:aws:sts::1:assumed-role/app"
    assert quotas.subject("iam", caller=role + "/session-a") == quotas.subject("iam", caller=role + "/session-b")
    federated = {quotas.subject("iam", caller=f"arn:aws:sts::1:federated-user/user-{n}") for n in range(5)}
    assert federated == {Subject("iam:arn:aws:sts::1:federated-user", ("iam:arn:aws:sts::1:federated-user",))}
    assert quotas.subject("iam", caller="arn:aws:sts::2:federated-user/user-0") not in federated, "another account"
    assert (
        quotas.subject("jwt", issuer="https://a", sub="u1").key
        != quotas.subject("jwt", issuer="https://b", sub="u1").key
    )
    assert quotas.subject("none", source_ip="203.0.113.9").key == "ip:203.0.113.9"
    assert quotas.subject("iam").key == "anyone"


def test_the_federated_users_of_one_account_share_its_quota(db: LocalDynamoDB) -> None:
    m = meter(db, "requests_per_minute=2")
    account = f"{uuid.uuid4().int % 10**12:012d}"  # an account of its own per run: the server's counts outlive it
    outcomes = []
    for n in range(5):  # five names minted by GetFederationToken: each the minter's choice
        who = quotas.subject("iam", caller=f"arn:aws:sts::{account}:federated-user/user-{n}")
        try:
            m.reserve(who, 1, 1, f"r{n}", now=NOON)
            outcomes.append("held")
        except APIError as err:
            outcomes.append(str(err.code))
    assert outcomes == ["held", "held"] + ["rate_limit_exceeded"] * 3


def test_the_windows_are_the_utc_minute_day_and_month() -> None:
    found = windows(Limits(requests_per_minute=1, tokens_per_day=1, tokens_per_month=1), NOON)
    assert [(w.name, w.start) for w in found] == [
        ("minute", str(int(NOON // 60))),
        ("day", "2026-12-31"),
        ("month", "2026-12"),
    ]
    assert [round(w.reset_s, 1) for w in found] == [29.5, 12 * 3600 - 30.5, 12 * 3600 - 30.5], "December ends with 31st"
    assert all(w.expires_at > NOON + w.reset_s for w in found)
    assert windows(Limits(tokens_per_day=5), NOON)[0].name == "day", "no minute item without a per-minute limit"


def test_what_a_request_is_charged() -> None:
    assert quotas.tokens_used(10, 5, 4, 99) == 15
    assert quotas.tokens_used(None, 5, 4, 99) == 104, "a prompt the container did not count is the estimate"
    assert quotas.tokens_used(None, None, 3, 99) == 102
    assert quotas.tokens_used(None, None, 0, 99) == 0, "nothing generated, nothing charged"
    assert quotas.estimate_tokens(b"x" * 10) == 4
    image = b'"url": "data:image/jpeg;base64,' + b"/9j/" * 250_000 + b'"'
    assert quotas.estimate_tokens(b'{"text": "hi", ' + image + b"}") == 9 + quotas.MEDIA_TOKENS, "not a million bytes"


# --- reserving and settling against DynamoDB ------------------------------------------------------------------


def test_a_reservation_holds_the_worst_case_and_the_settle_charges_the_use(db: LocalDynamoDB) -> None:
    m = meter(db, "tokens_per_minute=1000 requests_per_minute=10 tokens_per_day=5000")
    who = someone()
    held = m.reserve(who, 30, 170, "req-1", now=NOON)
    assert held is not None and [h.window.name for h in held.held] == ["minute", "day"]
    minute, day = held.held
    assert counts(db, minute.pk) == (200, 1) and counts(db, day.pk) == (200, 1)
    headers = held.headers("openai", now=NOON)
    assert headers["x-ratelimit-limit-tokens"] == "1000" and headers["x-ratelimit-remaining-tokens"] == "800"
    assert headers["x-ratelimit-limit-requests"] == "10" and headers["x-ratelimit-remaining-requests"] == "9"
    assert headers["x-ratelimit-reset-tokens"] == headers["x-ratelimit-reset-requests"] == "29.5s"
    assert headers["x-ratelimit-remaining-tokens-day"] == "4800"
    assert m.settle(held.items, "req-1", 42) == 1
    assert counts(db, minute.pk) == (42, 1) and counts(db, day.pk) == (42, 1)
    assert who.key not in minute.pk, "the table keeps a digest of the caller, never its name"


def test_anthropic_headers_name_the_reset_as_a_time() -> None:
    held = quotas.Held(quotas.Window("minute", "1", 29.5, 0), "p", 10, 100, 3)
    headers = quotas.rate_headers(Limits(10, 1000, None, None), {"minute": held}, "anthropic", NOON)
    assert headers == {
        "anthropic-ratelimit-requests-limit": "10",
        "anthropic-ratelimit-requests-remaining": "7",
        "anthropic-ratelimit-requests-reset": "2026-12-31T12:01:00Z",
        "anthropic-ratelimit-tokens-limit": "1000",
        "anthropic-ratelimit-tokens-remaining": "900",
        "anthropic-ratelimit-tokens-reset": "2026-12-31T12:01:00Z",
    }


def test_a_window_without_room_is_a_429_that_says_which_limit(db: LocalDynamoDB) -> None:
    m = meter(db, "tokens_per_minute=1000 requests_per_minute=2")
    who = someone()
    m.reserve(who, 0, 700, "a", now=NOON)
    with pytest.raises(APIError) as tokens:
        m.reserve(who, 0, 400, "b", now=NOON)
    err = tokens.value
    assert (err.status, err.type, err.code) == (429, "tokens", "rate_limit_exceeded")
    assert "Limit 1000, Used 700, Requested 400" in err.message
    assert err.headers["retry-after"] == "30" and err.headers["retry-after-ms"] == "29500"
    assert err.headers["x-ratelimit-remaining-tokens"] == "300"
    m.reserve(who, 0, 300, "c", now=NOON)  # exactly what is left still fits
    with pytest.raises(APIError) as requests:
        m.reserve(who, 0, 1, "d", now=NOON)
    assert requests.value.type == "requests" and "requests per minute (RPM): Limit 2, Used 2" in requests.value.message
    assert m.reserve(who, 0, 1000, "e", now=NOON + 60) is not None, "the next minute starts empty"


def test_a_request_larger_than_the_minute_still_runs_alone(db: LocalDynamoDB) -> None:
    m = meter(db, "tokens_per_minute=1000")
    who = someone()
    held = m.reserve(who, 100, 5000, "big", now=NOON)
    assert held is not None and held.held[0].tokens == 1000, "capped at the limit"
    with pytest.raises(APIError):
        m.reserve(who, 1, 0, "small", now=NOON)


def test_a_spent_budget_says_so_and_that_retrying_will_not_help(db: LocalDynamoDB) -> None:
    m = meter(db, "tokens_per_minute=1000 tokens_per_day=500")
    who = someone()
    m.reserve(who, 0, 400, "a", now=NOON)
    with pytest.raises(APIError) as refused:
        m.reserve(who, 0, 200, "b", now=NOON)
    err = refused.value
    assert (err.status, err.type, err.code) == (429, "insufficient_quota", "insufficient_quota")
    assert err.headers["x-should-retry"] == "false" and int(err.headers["retry-after"]) == 12 * 3600 - 30
    assert "Limit 500, Used 400, Requested 200" in err.message
    # The minute, reserved at the same time as the day refused, was given back: 400 held in it, not 600.
    assert counts(db, item_key(who, windows(Limits(tokens_per_minute=1), NOON)[0])) == (400, 1)


def test_a_zero_limit_refuses_without_asking_dynamodb() -> None:
    m = DynamoQuotas("no-table", parse_policy("requests_per_minute=0"), client=object())
    with pytest.raises(APIError) as refused:
        m.reserve(someone(), 1, 1, "r", now=NOON)
    assert refused.value.status == 429


def test_a_caller_without_limits_reserves_nothing() -> None:
    policy = parse_policy('{"default": {}, "callers": {"key:x": {"tokens_per_minute": 5}}}')
    assert DynamoQuotas("no-table", policy, client=object()).reserve(someone(), 1, 1, "r") is None


def test_32_callers_on_one_key_never_pass_the_limit_together(db: LocalDynamoDB) -> None:
    m = meter(db, "tokens_per_minute=1000 requests_per_minute=1000")
    who = someone()
    outcomes = race(db, m.policy, who)
    assert outcomes.count("held") == 10 and outcomes.count("rate_limit_exceeded:tokens") == 22
    assert counts(db, item_key(who, windows(Limits(tokens_per_minute=1), NOON)[0])) == (1000, 10)


class Flaky:
    """A client whose ``update_item`` fails with ``errors`` first (each an exception, or a DynamoDB error code),
    before they reach DynamoDB; it keeps what each call asked."""

    def __init__(self, inner: Any, errors: list[Any]) -> None:
        self.inner, self.errors = inner, list(errors)
        self.asked: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update_item(self, **args: Any) -> Any:
        import botocore.exceptions

        self.asked.append(args)
        if self.errors:
            error = self.errors.pop(0)
            if isinstance(error, str):
                raise botocore.exceptions.ClientError({"Error": {"Code": error, "Message": error}}, "UpdateItem")
            raise error
        return self.inner.update_item(**args)


def settle_args(flaky: Flaky) -> list[str]:
    return [a["ExpressionAttributeValues"][":d"]["N"] for a in flaky.asked if ":d" in a["ExpressionAttributeValues"]]


def test_a_settle_is_asked_again_only_when_dynamodb_did_not_apply_it(db: LocalDynamoDB) -> None:
    import botocore.exceptions

    m = meter(db, "tokens_per_minute=1000")
    held = m.reserve(someone(), 0, 500, "req-retried", now=NOON)
    assert held is not None
    not_sent = botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
    flaky = Flaky(db.client(), ["ThrottlingException", not_sent])
    slept: list[float] = []
    attempts = DynamoQuotas(db.quotas_table, m.policy, flaky).settle(held.items, "req-retried", 20, sleep=slept.append)
    assert attempts == 3 and len(slept) == 2 and settle_args(flaky) == ["-480"] * 3
    assert counts(db, held.held[0].pk) == (20, 1), "applied once"


def test_a_settle_whose_answer_was_lost_is_not_repeated_and_says_what_it_did_not_apply(db: LocalDynamoDB) -> None:
    import botocore.exceptions

    m = meter(db, "tokens_per_minute=1000")
    held = m.reserve(someone(), 0, 500, "req-lost", now=NOON)
    assert held is not None
    lost = botocore.exceptions.ReadTimeoutError(endpoint_url="http://127.0.0.1:9")
    flaky = Flaky(db.client(), [lost])
    with pytest.raises(QuotaUnavailable, match=r"req-lost was not applied to \[\('[0-9a-f]+#minute#\d+', -480"):
        DynamoQuotas(db.quotas_table, m.policy, flaky).settle(held.items, "req-lost", 20, sleep=lambda s: None)
    assert len(flaky.asked) == 1, "it may have been applied: asking again could count it twice"


def test_a_settle_starts_no_write_it_has_no_time_for(db: LocalDynamoDB) -> None:
    m = meter(db, "tokens_per_minute=1000")
    held = m.reserve(someone(), 0, 500, "req-late", now=NOON)
    assert held is not None
    flaky = Flaky(db.client(), [])
    with pytest.raises(QuotaUnavailable, match="no time left"):
        DynamoQuotas(db.quotas_table, m.policy, flaky).settle(held.items, "req-late", 20, time_left=lambda: 1.0)
    assert flaky.asked == [] and counts(db, held.held[0].pk) == (500, 1)


def test_a_settle_after_its_window_is_gone_writes_nothing(db: LocalDynamoDB) -> None:
    m = meter(db, "tokens_per_minute=1000")
    held = m.reserve(someone(), 0, 500, "req-old", now=NOON)
    assert held is not None
    db.client().delete_item(TableName=db.quotas_table, Key={"pk": {"S": held.held[0].pk}})  # as TTL deletes it
    assert m.settle(held.items, "req-old", 20) == 0
    assert "Item" not in db.client().get_item(TableName=db.quotas_table, Key={"pk": {"S": held.held[0].pk}})


def test_a_reservation_that_meets_a_transactions_lock_is_asked_again(db: LocalDynamoDB) -> None:
    m = meter(db, "tokens_per_minute=1000")
    flaky = Flaky(db.client(), ["TransactionConflictException"])
    held = DynamoQuotas(db.quotas_table, m.policy, flaky).reserve(someone(), 0, 100, "r", now=NOON)
    assert held is not None and len(flaky.asked) == 2 and counts(db, held.held[0].pk) == (100, 1)


def test_a_reservation_whose_answer_was_lost_is_unavailable_not_repeated(db: LocalDynamoDB) -> None:
    import botocore.exceptions

    flaky = Flaky(db.client(), [botocore.exceptions.ReadTimeoutError(endpoint_url="x"), ValueError("odd")])
    quota = DynamoQuotas(db.quotas_table, parse_policy("tokens_per_minute=1000"), flaky)
    with pytest.raises(QuotaUnavailable):
        quota.reserve(someone(), 0, 100, "r", now=NOON)
    with pytest.raises(QuotaUnavailable, match="odd"):  # anything unforeseen is unavailable too, never a 500
        quota.reserve(someone(), 0, 100, "r", now=NOON)
    assert len(flaky.asked) == 2


def test_a_zero_budget_refuses_before_any_window_is_written(db: LocalDynamoDB) -> None:
    flaky = Flaky(db.client(), [])
    quota = DynamoQuotas(db.quotas_table, parse_policy("tokens_per_minute=1000 tokens_per_day=0"), flaky)
    with pytest.raises(APIError) as refused:
        quota.reserve(someone(), 1, 1, "r", now=NOON)
    assert refused.value.code == "insufficient_quota" and flaky.asked == []
    rpm = DynamoQuotas(db.quotas_table, parse_policy("tokens_per_minute=1000 requests_per_minute=0"), flaky)
    with pytest.raises(APIError) as by_requests:
        rpm.reserve(someone(), 1, 1, "r", now=NOON)
    assert by_requests.value.type == "requests" and "requests per minute (RPM): Limit 0" in by_requests.value.message


def test_32_callers_over_three_windows_never_pass_the_day(db: LocalDynamoDB) -> None:
    m = meter(db, "tokens_per_minute=100000 tokens_per_day=1000 tokens_per_month=100000")
    who = someone()
    outcomes = race(db, m.policy, who)
    assert outcomes.count("held") == 10 and outcomes.count("insufficient_quota:insufficient_quota") == 22
    # The day refused 22; what their minute and month took was given back: every window holds the 10's 1000.
    for window in windows(m.policy.default, NOON):
        assert counts(db, item_key(who, window)) == (1000, 10)


def test_dynamodb_unreachable_is_unavailable_not_a_refusal() -> None:
    import botocore.config
    import botocore.session

    client = botocore.session.get_session().create_client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",  # nothing listens on the discard port
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(connect_timeout=0.5, retries={"max_attempts": 1}),
    )
    with pytest.raises(QuotaUnavailable, match="UpdateItem"):
        DynamoQuotas("t", parse_policy("tokens_per_minute=5"), client).reserve(someone(), 1, 1, "r")


def test_a_missing_table_is_unavailable_too(db: LocalDynamoDB) -> None:
    with pytest.raises(QuotaUnavailable, match="ResourceNotFound"):
        DynamoQuotas("no-such-table", parse_policy("tokens_per_minute=5"), db.client()).reserve(someone(), 1, 1, "r")


def test_reset_durations_read_as_openai_writes_them() -> None:
    assert [quotas.duration(s) for s in (0.0004, 0.25, 7, 59.5, 60, 3600 * 5 + 1)] == [
        "1ms",
        "250ms",
        "7s",
        "59.5s",
        "1m0s",
        "5h0m1s",
    ]
