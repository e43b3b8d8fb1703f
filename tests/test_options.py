"""JobOptions merging and validation, naming rules, Settings, payload encoding (no database)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue.enqueue import encode_payload
from pgqueue.names import validate_queue

T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)

# -- merged_with -------------------------------------------------------------------------------


def test_merged_with_none_returns_the_same_options() -> None:
    base = pgqueue.JobOptions(queue="a", priority=3)
    assert base.merged_with(None) == base


def test_none_fields_never_override() -> None:
    base = pgqueue.JobOptions(
        queue="a",
        priority=3,
        run_at=T0,
        max_attempts=4,
        job_id="k",
        unique=timedelta(minutes=1),
        timeout=timedelta(seconds=9),
    )
    assert base.merged_with(pgqueue.JobOptions()) == base


def test_set_fields_override() -> None:
    base = pgqueue.JobOptions(queue="a", priority=3, max_attempts=4)
    merged = base.merged_with(pgqueue.JobOptions(priority=-1, timeout=timedelta(seconds=2)))
    assert merged == pgqueue.JobOptions(
        queue="a", priority=-1, max_attempts=4, timeout=timedelta(seconds=2)
    )


def test_partial_options_never_blank_the_queue() -> None:
    base = pgqueue.JobOptions(queue="emails")
    merged = base.merged_with(pgqueue.JobOptions(priority=5))
    assert merged.queue == "emails"
    assert merged.priority == 5
    assert merged.resolve().queue == "emails"


def test_falsy_but_set_values_do_override() -> None:
    # 0 is a real choice, unlike None
    merged = pgqueue.JobOptions(priority=7).merged_with(pgqueue.JobOptions(priority=0))
    assert merged.priority == 0


def test_run_in_replaces_run_at() -> None:
    base = pgqueue.JobOptions(run_at=T0, queue="q")
    merged = base.merged_with(pgqueue.JobOptions(run_in=timedelta(seconds=30)))
    assert merged.run_at is None
    assert merged.run_in == timedelta(seconds=30)
    assert merged.queue == "q"
    assert merged.resolve().run_in_seconds == 30.0


def test_run_at_replaces_run_in() -> None:
    base = pgqueue.JobOptions(run_in=timedelta(seconds=30))
    merged = base.merged_with(pgqueue.JobOptions(run_at=T0))
    assert merged.run_in is None
    assert merged.run_at == T0
    resolved = merged.resolve()
    assert resolved.run_at == T0
    assert resolved.run_in_seconds is None


def test_schedule_untouched_when_override_sets_neither() -> None:
    base = pgqueue.JobOptions(run_at=T0)
    assert base.merged_with(pgqueue.JobOptions(priority=1)).run_at == T0
    base = pgqueue.JobOptions(run_in=timedelta(seconds=5))
    assert base.merged_with(pgqueue.JobOptions(queue="x")).run_in == timedelta(seconds=5)


def test_layers_strongest_last() -> None:
    defaults = pgqueue.JobOptions(queue="d", priority=1, max_attempts=2)
    class_opts = pgqueue.JobOptions(queue="c", priority=5)
    call = pgqueue.JobOptions(priority=9)
    merged = defaults.merged_with(class_opts).merged_with(call)
    assert (merged.queue, merged.priority, merged.max_attempts) == ("c", 9, 2)


# -- resolve -----------------------------------------------------------------------------------


def test_resolve_defaults() -> None:
    resolved = pgqueue.JobOptions().resolve()
    assert resolved.queue == "default"
    assert resolved.priority == 0
    assert resolved.max_attempts == 25
    assert resolved.run_at is None
    assert resolved.run_in_seconds is None
    assert resolved.job_id is None
    assert resolved.unique_seconds is None
    assert resolved.timeout_seconds is None


def test_resolve_keeps_values() -> None:
    resolved = pgqueue.JobOptions(
        queue="emails.high",
        priority=-32768,
        run_in=timedelta(minutes=2),
        max_attempts=1,
        job_id="order-17",
        unique=timedelta(hours=1),
        timeout=timedelta(milliseconds=1500),
    ).resolve()
    assert resolved.queue == "emails.high"
    assert resolved.priority == -32768
    assert resolved.run_in_seconds == 120.0
    assert resolved.max_attempts == 1
    assert resolved.job_id == "order-17"
    assert resolved.unique_seconds == 3600.0
    assert resolved.timeout_seconds == 1.5


def test_zero_run_in_is_allowed() -> None:
    assert pgqueue.JobOptions(run_in=timedelta(0)).resolve().run_in_seconds == 0.0


@pytest.mark.parametrize("priority", [-32768, 0, 32767])
def test_priority_smallint_bounds_accepted(priority: int) -> None:
    assert pgqueue.JobOptions(priority=priority).resolve().priority == priority


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"run_at": T0, "run_in": timedelta(seconds=1)}, "either run_at or run_in"),
        ({"run_at": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"run_in": timedelta(seconds=-1)}, "run_in"),
        ({"run_in": 5}, "run_in must be a datetime.timedelta"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "run_at must be a datetime"),
        ({"priority": 32768}, "out of range"),
        ({"priority": -32769}, "out of range"),
        ({"priority": True}, "priority must be an int"),
        ({"priority": 1.0}, "priority must be an int"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": -3}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"job_id": ""}, "job_id must be a non-empty string"),
        ({"job_id": "x" * 256}, "job_id"),
        ({"job_id": "a\x00b"}, "job_id must not contain a NUL"),
        ({"job_id": "a\ud800b"}, "job_id must be valid Unicode text: it holds a lone surrogate"),
        ({"job_id": 7}, "job_id must be a non-empty string"),
        ({"timeout": timedelta(0)}, "timeout"),
        ({"timeout": timedelta(seconds=-1)}, "timeout"),
        ({"unique": timedelta(0)}, "unique"),
        ({"unique": 60}, "unique must be a datetime.timedelta"),
        ({"retry_backoff": timedelta(seconds=-1)}, "retry_backoff"),
        ({"retry_backoff_max": timedelta(0)}, "retry_backoff_max"),
        ({"queue": ""}, "invalid queue name"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_invalid_options_raise_where_they_are_built(fields: dict[str, Any], match: str) -> None:
    # One error type for every bad option, raised by the JobOptions(...) that holds it (and so
    # by add_job's keywords, which build one), not later at enqueue.
    with pytest.raises(pgqueue.InvalidJobOptions, match=match):
        pgqueue.JobOptions(**fields)


def test_invalid_job_options_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        pgqueue.JobOptions(max_attempts=0)


def test_bad_queue_option_is_both_invalid_options_and_invalid_name() -> None:
    with pytest.raises(pgqueue.InvalidQueueName) as caught:
        pgqueue.JobOptions(queue="")
    assert isinstance(caught.value, pgqueue.InvalidJobOptions)
    assert isinstance(caught.value, pgqueue.InvalidName)
    # merging a blank queue over a good one fails where the blank one is built
    with pytest.raises(pgqueue.InvalidJobOptions):
        pgqueue.JobOptions(queue="good").merged_with(pgqueue.JobOptions(queue=""))


# -- queue names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "emails.high", "a:b-c_1", "0", "Q" * 64, "_x"])
def test_valid_queue_names(name: str) -> None:
    assert validate_queue(name) == name
    assert pgqueue.JobOptions(queue=name).resolve().queue == name


@pytest.mark.parametrize(
    "name",
    ["", " ", "a b", "x" * 65, "'; DROP TABLE x; --", "ü", "a\n", ".hidden", "-x", 3],
)
def test_invalid_queue_names(name: Any) -> None:
    with pytest.raises(pgqueue.InvalidName, match="invalid queue name"):
        validate_queue(name)
    with pytest.raises(pgqueue.InvalidQueueName, match="invalid queue name"):
        pgqueue.JobOptions(queue=name)


def test_none_is_not_a_queue_name() -> None:
    # (in JobOptions, None means "not set": the default queue)
    with pytest.raises(pgqueue.InvalidName):
        validate_queue(None)
    assert pgqueue.JobOptions(queue=None).resolve().queue == "default"


# -- Settings ----------------------------------------------------------------------------------


def test_settings_defaults() -> None:
    settings = pgqueue.Settings()
    assert settings.schema == "public"
    assert settings.prefix == "pgqueue_"
    assert settings.max_payload_bytes == 1024 * 1024
    assert settings.job_defaults == pgqueue.JobOptions()


@pytest.mark.parametrize("schema", ["public", "s1", "_x", "a" * 63, "my_app"])
def test_valid_schema_names(schema: str) -> None:
    assert pgqueue.Settings(schema=schema).schema == schema


@pytest.mark.parametrize(
    "schema", ["Public", "a-b", 'x"; drop', "", "1abc", "a b", "abc\n", "a" * 64, "é"]
)
def test_invalid_schema_names(schema: str) -> None:
    with pytest.raises(pgqueue.InvalidName, match="schema name"):
        pgqueue.Settings(schema=schema)


@pytest.mark.parametrize("prefix", ["pgqueue_", "p_", "q", "a" * 30])
def test_valid_prefixes(prefix: str) -> None:
    assert pgqueue.Settings(prefix=prefix).prefix == prefix


@pytest.mark.parametrize("prefix", ["Public", "a-b", 'x"; drop', "", "a" * 31, "p\n"])
def test_invalid_prefixes(prefix: str) -> None:
    with pytest.raises(pgqueue.InvalidName, match="table prefix"):
        pgqueue.Settings(prefix=prefix)


def test_blank_default_queue_rejected() -> None:
    with pytest.raises(pgqueue.InvalidName, match="queue"):
        pgqueue.Settings(job_defaults=pgqueue.JobOptions(queue=""))


def test_default_queue_from_settings_is_used() -> None:
    settings = pgqueue.Settings(job_defaults=pgqueue.JobOptions(queue="bulk"))
    merged = settings.job_defaults.merged_with(pgqueue.JobOptions(priority=1))
    assert merged.resolve().queue == "bulk"


@pytest.mark.parametrize("size", [0, -1, True, 1.5])
def test_max_payload_bytes_must_be_positive(size: int) -> None:
    with pytest.raises(pgqueue.ConfigurationError, match="max_payload_bytes"):
        pgqueue.Settings(max_payload_bytes=size)


def test_advisory_key_is_stable_across_calls() -> None:
    a = pgqueue.Settings(schema="s1", prefix="p_")
    b = pgqueue.Settings(schema="s1", prefix="p_")
    assert a.advisory_key("migrate") == a.advisory_key("migrate")
    assert a.advisory_key("migrate") == b.advisory_key("migrate")


def test_advisory_key_is_stable_across_processes() -> None:
    # unlike hash(str), the key must not depend on the process's hash seed: every process of
    # an installation has to wait on the same lock
    script = (
        "import pgqueue; print(pgqueue.Settings(schema='s1', prefix='p_').advisory_key('migrate'))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2", "random")
    }
    assert outputs == {str(pgqueue.Settings(schema="s1", prefix="p_").advisory_key("migrate"))}


def test_advisory_key_differs_per_schema_prefix_and_purpose() -> None:
    keys = {
        pgqueue.Settings().advisory_key("migrate"),
        pgqueue.Settings(schema="other").advisory_key("migrate"),
        pgqueue.Settings(prefix="other_").advisory_key("migrate"),
        pgqueue.Settings().advisory_key("maintenance"),
        pgqueue.Settings(schema="other", prefix="other_").advisory_key("maintenance"),
    }
    assert len(keys) == 5


@pytest.mark.parametrize("purpose", ["migrate", "maintenance", "", "x" * 1000])
def test_advisory_key_fits_in_signed_64_bits(purpose: str) -> None:
    for settings in (pgqueue.Settings(), pgqueue.Settings(schema="z", prefix="y_")):
        key = settings.advisory_key(purpose)
        assert isinstance(key, int)
        assert -(2**63) <= key < 2**63


def test_advisory_keys_use_the_whole_signed_range() -> None:
    # a key derived from 8 digest bytes is negative about half the time; if it never were,
    # the conversion would be unsigned and half the keys would overflow a bigint
    keys = [pgqueue.Settings().advisory_key(f"p{i}") for i in range(64)]
    assert any(k < 0 for k in keys)
    assert any(k > 0 for k in keys)


# -- encode_payload ----------------------------------------------------------------------------


@dataclass
class Args(pgqueue.Worker):
    kind = "test.args"
    value: Any = None
    other: Any = None


@dataclass
class Named(pgqueue.Worker):
    kind = "test.named"
    when: Any = None
    tags: Any = field(default_factory=list)


def encode(job: pgqueue.Worker, **settings: Any) -> str:
    return encode_payload(job, pgqueue.Settings(**settings))


def test_encode_plain_values() -> None:
    text = encode(Args(value={"a": [1, 2.5, True, None]}, other="x"))
    assert json.loads(text) == {"value": {"a": [1, 2.5, True, None]}, "other": "x"}
    assert " " not in text  # compact separators


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, [1.0, math.nan], {"k": math.inf}])
def test_non_finite_floats_rejected(bad: Any) -> None:
    with pytest.raises(pgqueue.JobSerializationError, match="'value'"):
        encode(Args(value=bad))


def test_set_field_rejected_with_its_name() -> None:
    with pytest.raises(pgqueue.JobSerializationError) as info:
        encode(Named(tags={"a", "b"}))
    assert "field 'tags' (set)" in str(info.value)


def test_datetime_field_rejected_with_its_name() -> None:
    with pytest.raises(pgqueue.JobSerializationError) as info:
        encode(Named(when=T0))
    assert "field 'when' (datetime)" in str(info.value)
    assert "Named" in str(info.value)


def test_nested_unserializable_value_names_the_field() -> None:
    with pytest.raises(pgqueue.JobSerializationError, match="field 'other'"):
        encode(Args(value=1, other={"inner": {1, 2}}))


@pytest.mark.parametrize(
    "bad",
    ["\x00", "a\x00b", ["ok", "x\x00"], {"k\x00": 1}, "\\\x00", "\\\\\x00"],
    ids=["bare", "inside", "in-list", "in-key", "after-backslash", "after-two-backslashes"],
)
def test_nul_character_rejected(bad: Any) -> None:
    with pytest.raises(pgqueue.JobSerializationError, match="NUL"):
        encode(Args(value=bad))


@pytest.mark.parametrize("ok", ["\\u0000", "x\\u0000y", "\\\\u0000", "u0000", "\\U0000"])
def test_literal_backslash_u0000_text_accepted(ok: str) -> None:
    text = encode(Args(value=ok))
    assert json.loads(text) == {"value": ok, "other": None}


def test_payload_over_limit_raises_payload_too_large() -> None:
    with pytest.raises(pgqueue.PayloadTooLarge, match="100") as info:
        encode(Args(value="x" * 200), max_payload_bytes=100)
    assert isinstance(info.value, pgqueue.JobSerializationError)


def test_payload_limit_is_inclusive_and_in_utf8_bytes() -> None:
    # '{"value":"<s>","other":null}' is 25 bytes of JSON around <s>
    assert len(encode(Args(value=""))) == 25
    assert len(encode(Args(value="x" * 75), max_payload_bytes=100)) == 100
    with pytest.raises(pgqueue.PayloadTooLarge):
        encode(Args(value="x" * 76), max_payload_bytes=100)
    # 38 two-byte characters: 63 characters of JSON but 101 bytes
    assert len(encode(Args(value="é" * 38))) == 63
    with pytest.raises(pgqueue.PayloadTooLarge, match="101 bytes"):
        encode(Args(value="é" * 38), max_payload_bytes=100)


def test_unicode_is_kept_unescaped() -> None:
    text = encode(Args(value="héllo ☃ 日本", other={"ключ": "€"}))
    assert "héllo ☃ 日本" in text
    assert '"ключ":"€"' in text
    assert "\\u" not in text


def test_lone_surrogate_rejected_with_serialization_error() -> None:
    with pytest.raises(pgqueue.JobSerializationError):
        encode(Args(value="\ud800"))


def test_channel_names_fit_and_stay_distinct() -> None:
    short = pgqueue.Settings(schema="app")
    assert short.channel == "pgqueue_jobs.app"
    a = pgqueue.Settings(schema="s" * 60 + "a")
    b = pgqueue.Settings(schema="s" * 60 + "b")
    assert len(a.channel) <= 63
    assert len(b.channel) <= 63
    assert a.channel != b.channel
