"""Defining jobs: Worker kinds, WorkerRegistry, payload round trips, JobContext (no database)."""

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar

import pytest

import pgqueue
from pgqueue.jobs import snake_case

# -- kinds -------------------------------------------------------------------------------------


def test_kind_defaults_to_snake_case_of_class_name() -> None:
    @dataclass
    class SendEmail(pgqueue.Worker):
        to: str

    @dataclass
    class SendHTTPEmail(pgqueue.Worker):
        to: str

    @dataclass
    class Job2Go(pgqueue.Worker):
        pass

    assert SendEmail.kind == "send_email"
    assert SendHTTPEmail.kind == "send_http_email"
    assert Job2Go.kind == "job2_go"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Resize", "resize"),
        ("HTTPServer", "http_server"),
        ("GetURLForID", "get_url_for_id"),
        ("already_snake", "already_snake"),
        ("V2Import", "v2_import"),
    ],
)
def test_snake_case(name: str, expected: str) -> None:
    assert snake_case(name) == expected


def test_explicit_kind_wins() -> None:
    @dataclass
    class SendEmail(pgqueue.Worker):
        kind = "x"
        to: str

    assert SendEmail.kind == "x"
    # kind is a class setting, not a dataclass field / job argument
    assert SendEmail(to="a").to_payload() == {"to": "a"}


def test_subclass_gets_its_own_default_kind() -> None:
    @dataclass
    class Parent(pgqueue.Worker):
        kind = "parent.kind"

    @dataclass
    class ChildJob(Parent):
        pass

    assert Parent.kind == "parent.kind"
    assert ChildJob.kind == "child_job"


@pytest.mark.parametrize("bad", ["bad kind!", "", "k" * 200, "-leading", "a\n", "ü"])
def test_invalid_kind_rejected_at_class_definition(bad: str) -> None:
    with pytest.raises(pgqueue.InvalidName, match="invalid job kind"):

        class Bad(pgqueue.Worker):
            kind = bad


def test_kind_length_limit_is_128() -> None:
    class Ok(pgqueue.Worker):
        kind = "k" * 128

    assert Ok.kind == "k" * 128
    with pytest.raises(pgqueue.InvalidName):

        class TooLong(pgqueue.Worker):
            kind = "k" * 129


@pytest.mark.parametrize("good", ["a", "emails.send", "a:b-c_1", "_private", "Mixed.Case"])
def test_valid_explicit_kinds(good: str) -> None:
    class Good(pgqueue.Worker):
        kind = good

    assert Good.kind == good


# -- registry ----------------------------------------------------------------------------------


@dataclass
class SendEmail(pgqueue.Worker):
    to: str
    subject: str = "hi"
    tags: list[str] = field(default_factory=list)

    def process(self, ctx: pgqueue.JobContext) -> None:
        pass


@dataclass
class Resize(pgqueue.Worker):
    kind = "images.resize"
    width: int

    def process(self, ctx: pgqueue.JobContext) -> None:
        pass


def test_register_a_class() -> None:
    registry = pgqueue.WorkerRegistry()
    assert registry.register(SendEmail) is SendEmail
    assert registry.get("send_email") is SendEmail
    assert "send_email" in registry
    assert "images.resize" not in registry
    assert len(registry) == 1
    assert list(registry) == [SendEmail]


def test_register_an_instance_means_its_class() -> None:
    registry = pgqueue.WorkerRegistry()
    assert registry.register(SendEmail(to="a@example.com")) is SendEmail
    assert registry.get("send_email") is SendEmail


def test_constructor_registers_classes_and_instances() -> None:
    registry = pgqueue.WorkerRegistry(SendEmail, Resize(width=3))
    assert registry.kinds() == ["images.resize", "send_email"]
    assert registry.get("images.resize") is Resize


def test_register_as_decorator_returns_the_class() -> None:
    registry = pgqueue.WorkerRegistry()

    @registry.register
    @dataclass
    class Thumbnail(pgqueue.Worker):
        size: int

    assert isinstance(Thumbnail, type)
    assert Thumbnail(size=3).size == 3
    assert registry.get("thumbnail") is Thumbnail


def test_registering_the_same_class_twice_is_fine() -> None:
    registry = pgqueue.WorkerRegistry()
    registry.register(SendEmail)
    registry.register(SendEmail)
    registry.register(SendEmail(to="b"))
    assert registry.kinds() == ["send_email"]
    assert registry.get("send_email") is SendEmail


def test_second_class_with_same_kind_raises_duplicate_kind() -> None:
    @dataclass
    class FirstSender(pgqueue.Worker):
        kind = "mail"

    @dataclass
    class SecondSender(pgqueue.Worker):
        kind = "mail"

    registry = pgqueue.WorkerRegistry(FirstSender)
    with pytest.raises(pgqueue.DuplicateKind) as info:
        registry.register(SecondSender)
    message = str(info.value)
    assert "FirstSender" in message
    assert "SecondSender" in message
    assert "'mail'" in message
    # the first registration is kept
    assert registry.get("mail") is FirstSender


def test_duplicate_kind_is_a_configuration_error() -> None:
    assert issubclass(pgqueue.DuplicateKind, pgqueue.ConfigurationError)
    assert issubclass(pgqueue.DuplicateKind, pgqueue.PgQueueError)


def test_registering_a_non_dataclass_worker_raises_type_error() -> None:
    class Plain(pgqueue.Worker):
        def __init__(self, x: int) -> None:
            self.x = x

    registry = pgqueue.WorkerRegistry()
    with pytest.raises(TypeError, match="Plain must be a @dataclass"):
        registry.register(Plain)
    with pytest.raises(TypeError, match="Plain must be a @dataclass"):
        registry.register(Plain(1))
    assert len(registry) == 0


def test_registering_something_that_is_not_a_worker_raises_type_error() -> None:
    @dataclass
    class NotAWorker:
        x: int

    registry = pgqueue.WorkerRegistry()
    with pytest.raises(TypeError, match=r"not a pgqueue\.Worker subclass"):
        registry.register(NotAWorker)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"not a pgqueue\.Worker subclass"):
        registry.register(int)  # type: ignore[arg-type]


def test_get_unknown_kind_raises_unknown_job_kind() -> None:
    registry = pgqueue.WorkerRegistry(SendEmail)
    with pytest.raises(pgqueue.UnknownJobKind, match="'nope'") as info:
        registry.get("nope")
    assert "send_email" in str(info.value)  # lists the known kinds
    with pytest.raises(pgqueue.UnknownJobKind):
        registry.build("nope", {})
    # also a LookupError for generic handlers
    assert isinstance(info.value, LookupError)


def test_build_returns_a_fresh_instance_each_call() -> None:
    registry = pgqueue.WorkerRegistry(SendEmail)
    payload = {"to": "a@example.com", "subject": "Hello"}
    first = registry.build("send_email", payload)
    second = registry.build("send_email", payload)
    assert isinstance(first, SendEmail)
    assert isinstance(second, SendEmail)
    assert first is not second
    assert (first.to, first.subject, first.tags) == ("a@example.com", "Hello", [])
    first.subject = "changed"
    first.tags.append("x")
    assert second.subject == "Hello"
    assert second.tags == []
    assert payload == {"to": "a@example.com", "subject": "Hello"}


def test_build_uses_payload_fields_and_defaults() -> None:
    registry = pgqueue.WorkerRegistry(SendEmail, Resize)
    job = registry.build("send_email", {"to": "z", "tags": ["a", "b"]})
    assert job == SendEmail(to="z", subject="hi", tags=["a", "b"])
    assert registry.build("images.resize", {"width": 640}) == Resize(width=640)


# -- payloads ----------------------------------------------------------------------------------


def test_to_payload_of_a_dataclass_has_init_fields_only() -> None:
    @dataclass
    class WithDerived(pgqueue.Worker):
        a: int
        b: str = "x"
        derived: int = field(init=False, default=0)
        counter: ClassVar[int] = 7

        def __post_init__(self) -> None:
            self.derived = self.a * 2

    job = WithDerived(a=21)
    assert job.derived == 42
    assert job.to_payload() == {"a": 21, "b": "x"}
    rebuilt = WithDerived.from_payload(job.to_payload())
    assert rebuilt == job
    assert rebuilt.derived == 42


def test_to_payload_of_a_plain_worker_raises_serialization_error() -> None:
    class Plain(pgqueue.Worker):
        pass

    with pytest.raises(pgqueue.JobSerializationError, match="@dataclass"):
        Plain().to_payload()


def test_default_process_raises_not_implemented() -> None:
    @dataclass
    class Lazy(pgqueue.Worker):
        pass

    ctx = _context(attempt=1, max_attempts=1)
    with pytest.raises(NotImplementedError, match="Lazy must implement process"):
        Lazy().process(ctx)


# -- pydantic ----------------------------------------------------------------------------------


def test_pydantic_worker_with_classvar_settings() -> None:
    # pydantic refuses plain class attributes on a model, so pydantic workers annotate them
    # as ClassVar (documented in docs/jobs.md).
    pydantic = pytest.importorskip("pydantic")

    class P(pgqueue.Worker, pydantic.BaseModel):
        kind: ClassVar[str] = "p"
        job_options: ClassVar[pgqueue.JobOptions | None] = pgqueue.JobOptions(queue="emails")
        x: int
        label: str = "a"

    assert P.kind == "p"
    assert P.job_options == pgqueue.JobOptions(queue="emails")
    assert set(P.model_fields) == {"x", "label"}
    job = P(x=1, label="b")
    assert job.to_payload() == {"x": 1, "label": "b"}
    assert P.from_payload({"x": 1, "label": "b"}) == job
    registry = pgqueue.WorkerRegistry(P)
    assert registry.build("p", {"x": 5}) == P(x=5)


def test_pydantic_worker_with_derived_kind_round_trips() -> None:
    pydantic = pytest.importorskip("pydantic")

    class ChargeCard(pgqueue.Worker, pydantic.BaseModel):
        amount_cents: int
        when: datetime
        note: str | None = None

    assert ChargeCard.kind == "charge_card"
    assert set(ChargeCard.model_fields) == {"amount_cents", "when", "note"}
    when = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    job = ChargeCard(amount_cents=1250, when=when)
    payload = job.to_payload()
    # JSON mode: the datetime becomes a string that json can store
    assert payload == {"amount_cents": 1250, "when": "2024-05-06T07:08:09Z", "note": None}
    rebuilt = ChargeCard.from_payload(payload)
    assert rebuilt == job
    assert rebuilt is not job

    registry = pgqueue.WorkerRegistry(ChargeCard)
    built = registry.build("charge_card", payload)
    assert built == job
    assert built is not registry.build("charge_card", payload)


def test_pydantic_worker_with_classvar_kind_round_trips() -> None:
    pydantic = pytest.importorskip("pydantic")

    class P(pgqueue.Worker, pydantic.BaseModel):
        kind: ClassVar[str] = "p"
        x: int

    assert P.kind == "p"
    assert set(P.model_fields) == {"x"}
    assert P(x=3).to_payload() == {"x": 3}
    assert P.from_payload({"x": 3}) == P(x=3)
    assert pgqueue.WorkerRegistry(P).get("p") is P


def test_pydantic_worker_invalid_payload_is_rejected() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Typed(pgqueue.Worker, pydantic.BaseModel):
        x: int

    with pytest.raises(pydantic.ValidationError):
        Typed.from_payload({"x": "not a number"})


# -- msgspec ----------------------------------------------------------------------------------


def test_msgspec_struct_worker_round_trips() -> None:
    msgspec = pytest.importorskip("msgspec")  # in the dev extra

    class ChargeCard(pgqueue.Worker, msgspec.Struct):
        job_options = pgqueue.JobOptions(queue="billing")
        amount_cents: int
        when: datetime
        note: str | None = None

    assert ChargeCard.kind == "charge_card"  # class settings are not fields
    assert ChargeCard.job_options == pgqueue.JobOptions(queue="billing")
    assert ChargeCard.__struct_fields__ == ("amount_cents", "when", "note")
    when = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    job = ChargeCard(amount_cents=1250, when=when)
    payload = job.to_payload()
    # msgspec.to_builtins: the datetime becomes a string that json can store
    assert payload == {"amount_cents": 1250, "when": "2024-05-06T07:08:09Z", "note": None}
    rebuilt = ChargeCard.from_payload(payload)  # msgspec.convert
    assert rebuilt == job
    assert rebuilt is not job
    registry = pgqueue.WorkerRegistry(ChargeCard)
    assert registry.get("charge_card") is ChargeCard
    assert registry.build("charge_card", payload) == job
    assert registry.build("charge_card", payload) is not registry.build("charge_card", payload)


def test_msgspec_struct_worker_with_explicit_kind_and_a_bad_payload() -> None:
    msgspec = pytest.importorskip("msgspec")

    class Typed(pgqueue.Worker, msgspec.Struct):
        kind: ClassVar[str] = "typed.job"
        x: int

    assert Typed.kind == "typed.job"
    assert Typed.__struct_fields__ == ("x",)
    assert Typed(x=3).to_payload() == {"x": 3}
    with pytest.raises(msgspec.ValidationError):
        Typed.from_payload({"x": "not a number"})


# -- JobContext --------------------------------------------------------------------------------


def _context(*, attempt: int, max_attempts: int) -> pgqueue.JobContext:
    return pgqueue.JobContext(
        id=1,
        job_id=None,
        kind="send_email",
        queue="default",
        attempt=attempt,
        max_attempts=max_attempts,
        scheduled_for=datetime(2024, 1, 1, tzinfo=UTC),
        cancelled=threading.Event(),
        logger=logging.LoggerAdapter(logging.getLogger("pgqueue.test"), {}),
    )


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "expected"),
    [(1, 3, False), (2, 3, False), (3, 3, True), (4, 3, True), (1, 1, True)],
)
def test_is_last_attempt(attempt: int, max_attempts: int, expected: bool) -> None:
    assert _context(attempt=attempt, max_attempts=max_attempts).is_last_attempt is expected


def test_job_context_is_frozen() -> None:
    ctx = _context(attempt=1, max_attempts=2)
    with pytest.raises(AttributeError):
        ctx.attempt = 2  # type: ignore[misc]
