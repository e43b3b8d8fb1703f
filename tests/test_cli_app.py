"""The ``pgqueue`` command's shape, without a database: its commands, ``--version``, shell
completion, usage errors, exit statuses, and option defaults from the environment (the CLI
library reads them)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pgqueue
from pgqueue.cli import main
from pgqueue.cli import schema as schema_command
from pgqueue.cli import worker as worker_command
from pgqueue.cli.worker import WorkerOptions

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("sql", "migrate", "worker", "demo", "completion")
RUNTIME_OPTIONS = {
    "--poll-interval": "PGQUEUE_POLL_INTERVAL",
    "--heartbeat-interval": "PGQUEUE_HEARTBEAT_INTERVAL",
    "--rescue-after": "PGQUEUE_RESCUE_AFTER",
    "--leader-interval": "PGQUEUE_LEADER_INTERVAL",
    "--shutdown-timeout": "PGQUEUE_SHUTDOWN_TIMEOUT",
    "--listener-reconnect-max": "PGQUEUE_LISTENER_RECONNECT_MAX",
    "--claim-retry-max": "PGQUEUE_CLAIM_RETRY_MAX",
    "--outcome-retry-max": "PGQUEUE_OUTCOME_RETRY_MAX",
}


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env.pop("DATABASE_URL", None)
    return env


@pytest.fixture
def no_pgqueue_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("PGQUEUE_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture
def parsed_worker(no_pgqueue_env: pytest.MonkeyPatch) -> list[WorkerOptions]:
    """``pgqueue worker`` parses its options, then hands them to this list instead of running."""
    seen: list[WorkerOptions] = []

    def record(options: WorkerOptions) -> int:
        seen.append(options)
        return 0

    no_pgqueue_env.setattr(worker_command, "run_worker", record)
    return seen


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"pgqueue {importlib.metadata.version('pgqueue')}\n"


def test_help_lists_the_commands_and_what_the_library_adds() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pgqueue", "--help"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for command in COMMANDS:
        assert f" {command} " in result.stdout, command
    assert "run jobs until SIGTERM/SIGINT" in result.stdout
    assert "print the shell's tab completion script" in result.stdout
    for option in ("--version", "--help"):
        assert option in result.stdout, option


def test_help_loads_no_database_library() -> None:
    # The help is what a user runs first, and completion runs the command at every <Tab>: it
    # must not pay for importing a driver library (speed itself is not a test's business).
    probe = (
        "import sys\n"
        "from pgqueue.cli import main\n"
        "code = main(['worker', '--help'])\n"
        "libs = {'psycopg', 'psycopg_pool', 'asyncpg', 'sqlalchemy'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & libs))\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "MODULE:REGISTRY" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"


def complete(words: str, shell: str = "bash") -> str:
    """What ``pgqueue`` answers a shell completing ``words`` (its script asks the same way)."""
    parts = words.split(" ")
    env = {
        **clean_env(),
        "_PGQUEUE_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(parts) - 1),
    }
    result = subprocess.run(
        [sys.executable, "-m", "pgqueue"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_shell_completion_completes_commands_options_and_values() -> None:
    assert complete("pgqueue wor").split() == ["plain,worker", "plain,workers"]
    assert complete("pgqueue mig").split() == ["plain,migrate"]
    assert "plain,--poll-interval" in complete("pgqueue worker --poll").split()
    assert complete("pgqueue worker app:registry --log-level d").split() == ["plain,DEBUG"]
    assert complete("pgqueue completion ").split() == ["plain,bash", "plain,zsh", "plain,fish"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_script_that_asks_pgqueue(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert f"_PGQUEUE_COMPLETE={shell}_complete" in script
    # the script click itself prints for the variable (docs/jobs.md says so)
    result = subprocess.run(
        [sys.executable, "-m", "pgqueue"],
        cwd=ROOT,
        env={**clean_env(), "_PGQUEUE_COMPLETE": f"{shell}_source"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == script


def test_completion_of_an_unknown_shell_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["completion", "tcsh"]) == 2
    assert "Usage: pgqueue completion" in capsys.readouterr().err


def test_worker_help_lists_every_runtime_option_and_its_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["worker", "-h"]) == 0
    out = capsys.readouterr().out
    for option, variable in RUNTIME_OPTIONS.items():
        assert option in out, option
        assert variable in out, variable
    for variable in ("PGQUEUE_QUEUES", "PGQUEUE_DSN", "DATABASE_URL", "PGQUEUE_SCHEMA"):
        assert variable in out, variable


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "Missing command"),
        (["nope"], "No such command"),
        (["worker"], "Missing argument"),
        (["sql", "--from-version", "two"], "--from-version"),
        (["migrate", "--no-such-option"], "No such option"),
    ],
    ids=["no-command", "unknown-command", "missing-registry", "bad-int", "unknown-option"],
)
def test_usage_errors_exit_with_2_and_show_the_usage(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Usage: pgqueue" in captured.err
    assert says in captured.err


def test_a_usage_error_is_status_2_for_the_process_too() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pgqueue", "sql", "--no-such-option"],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_worker_defaults(parsed_worker: list[WorkerOptions]) -> None:
    assert main(["worker", "app.jobs:registry"]) == 0
    (options,) = parsed_worker
    assert options.registry == "app.jobs:registry"
    assert options.queues == "default=10"
    assert (options.migrate, options.use_asyncio, options.log_level) == (False, False, "INFO")
    assert options.config == pgqueue.RuntimeConfig()
    assert options.target.url is None
    assert options.target.driver is None
    assert options.target.settings == pgqueue.Settings()


def test_worker_options_come_from_the_environment(
    parsed_worker: list[WorkerOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://fallback/db")
    monkeypatch.setenv("PGQUEUE_QUEUES", "default=3,emails=1")
    monkeypatch.setenv("PGQUEUE_POLL_INTERVAL", "0.25")
    monkeypatch.setenv("PGQUEUE_SHUTDOWN_TIMEOUT", "7")
    monkeypatch.setenv("PGQUEUE_CLAIM_RETRY_MAX", "11")
    monkeypatch.setenv("PGQUEUE_OUTCOME_RETRY_MAX", "12.5")
    monkeypatch.setenv("PGQUEUE_MIGRATE", "yes")
    monkeypatch.setenv("PGQUEUE_ASYNCIO", "1")
    monkeypatch.setenv("PGQUEUE_LOG_LEVEL", "debug")
    monkeypatch.setenv("PGQUEUE_SCHEMA", "jobs")
    monkeypatch.setenv("PGQUEUE_PREFIX", "q_")
    # $PGQUEUE_DRIVER is no default of --driver: it comes after a URL's scheme (see below)
    monkeypatch.setenv("PGQUEUE_DRIVER", "asyncpg")
    assert main(["worker", "app.jobs:registry"]) == 0
    (options,) = parsed_worker
    assert options.queues == "default=3,emails=1"
    assert options.config.poll_interval == 0.25
    assert options.config.shutdown_timeout == 7.0
    assert options.config.claim_retry_max == 11.0
    assert options.config.outcome_retry_max == 12.5
    assert options.config.heartbeat_interval == pgqueue.RuntimeConfig().heartbeat_interval
    assert (options.migrate, options.use_asyncio, options.log_level) == (True, True, "DEBUG")
    assert options.target.url == "postgresql://fallback/db"
    assert options.target.driver is None
    assert options.target.asyncio_only  # the driver resolves to $PGQUEUE_DRIVER's asyncpg
    assert options.target.settings == pgqueue.Settings(schema="jobs", prefix="q_")


def test_options_beat_the_environment_and_pgqueue_dsn_beats_database_url(
    parsed_worker: list[WorkerOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://fallback/db")
    monkeypatch.setenv("PGQUEUE_DSN", "postgresql://first/db")
    monkeypatch.setenv("PGQUEUE_POLL_INTERVAL", "0.25")
    monkeypatch.setenv("PGQUEUE_LOG_LEVEL", "debug")
    monkeypatch.setenv("PGQUEUE_MIGRATE", "0")
    argv = ["worker", "app.jobs:registry", "--poll-interval", "2", "--log-level", "error"]
    assert main([*argv, "--migrate"]) == 0
    assert main([*argv, "--dsn", "postgresql://flag/db", "--driver", "psycopg"]) == 0
    first, second = parsed_worker
    assert first.target.url == "postgresql://first/db"
    assert (first.config.poll_interval, first.log_level, first.migrate) == (2.0, "ERROR", True)
    assert second.target.url == "postgresql://flag/db"
    assert second.migrate is False
    assert second.target.driver == "psycopg"
    assert not second.target.asyncio_only


def test_sql_reads_schema_and_prefix_from_the_environment(
    no_pgqueue_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    no_pgqueue_env.setenv("PGQUEUE_SCHEMA", "env_schema")
    no_pgqueue_env.setenv("PGQUEUE_PREFIX", "env_")
    assert main(["sql"]) == 0
    expected = pgqueue.Settings(schema="env_schema", prefix="env_")
    assert capsys.readouterr().out == pgqueue.migrations_script(expected)
    assert main(["sql", "--prefix", "flag_"]) == 0
    expected = pgqueue.Settings(schema="env_schema", prefix="flag_")
    assert capsys.readouterr().out == pgqueue.migrations_script(expected)


def test_a_bad_flag_value_in_the_environment_is_a_usage_error(
    parsed_worker: list[WorkerOptions],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PGQUEUE_MIGRATE", "maybe")
    assert main(["worker", "app.jobs:registry"]) == 2
    assert "'--migrate'" in capsys.readouterr().err
    assert parsed_worker == []


def test_a_pgqueue_error_is_one_line_and_status_1(
    no_pgqueue_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate", "--dsn", "postgresql://x/y", "--driver", "nosuch"]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("pgqueue: error: unknown driver 'nosuch'"), captured.err
    assert captured.err.count("\n") == 1


def test_an_empty_variable_counts_as_unset(
    parsed_worker: list[WorkerOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", "")
    monkeypatch.setenv("DATABASE_URL", "postgresql://fallback/db")
    for variable in ("PGQUEUE_POLL_INTERVAL", "PGQUEUE_QUEUES", "PGQUEUE_MIGRATE"):
        monkeypatch.setenv(variable, "")
    assert main(["worker", "app.jobs:registry"]) == 0
    (options,) = parsed_worker
    assert options.target.url == "postgresql://fallback/db"
    assert options.config == pgqueue.RuntimeConfig()
    assert (options.queues, options.migrate) == ("default=10", False)


def test_every_runtime_option_reaches_the_runtime_config(
    parsed_worker: list[WorkerOptions],
) -> None:
    # a value of its own for each (a heartbeat short enough for RuntimeConfig's rescue check)
    values = {option: 100 + n for n, option in enumerate(RUNTIME_OPTIONS)}
    values["--heartbeat-interval"] = 1.5
    argv = ["worker", "app.jobs:registry"]
    for option, value in values.items():
        argv += [option, str(value)]
    assert main(argv) == 0
    (options,) = parsed_worker
    for option, value in values.items():
        name = option.removeprefix("--").replace("-", "_")
        assert getattr(options.config, name) == value, name


def test_ctrl_c_in_a_command_is_status_130(
    no_pgqueue_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    no_pgqueue_env.setattr(schema_command, "migrations_script", interrupted)
    assert main(["sql"]) == 130
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "error", [KeyboardInterrupt(), SystemExit(3)], ids=["KeyboardInterrupt", "SystemExit"]
)
def test_a_jobs_keyboard_interrupt_or_system_exit_leaves_main_uncaught(
    error: BaseException, no_pgqueue_env: pytest.MonkeyPatch
) -> None:
    # run_worker raises again the KeyboardInterrupt or SystemExit a job raised: it must end the
    # process as it would without the CLI library (killed by SIGINT; SystemExit's status).
    def job_ends_the_process(options: WorkerOptions) -> int:
        raise error

    no_pgqueue_env.setattr(worker_command, "run_worker", job_ends_the_process)
    with pytest.raises(type(error)) as raised:
        main(["worker", "app.jobs:registry"])
    assert raised.value is error
