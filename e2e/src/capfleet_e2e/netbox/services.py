"""PostgreSQL and Redis for a real NetBox, started by the tests on loopback from Debian's packages.

Each is a private instance (its own data directory, a free port on 127.0.0.1, no system service), made
for throw-away data: PostgreSQL runs without fsync, Redis keeps nothing on disk. PostgreSQL refuses to run
as root, so when the tests are root its processes run as `nobody`.

A database can be cloned from another (`clone`, PostgreSQL's `CREATE DATABASE … TEMPLATE`), which is what
makes a fresh NetBox database per test cost a fraction of a second instead of a migration.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from capfleet_e2e.processes import Component, ComponentError, free_port, wait_for


def postgres_bin() -> Path:
    """Debian's PostgreSQL server programs (the newest major version installed), or $CAPFLEET_POSTGRES_BIN."""
    configured = os.environ.get("CAPFLEET_POSTGRES_BIN")
    if configured:
        return Path(configured)
    installed = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name)
    )
    return installed[-1].parent if installed else Path("/usr/lib/postgresql/15/bin")


POSTGRES_BIN = postgres_bin()
DATABASE_USER = "netbox"
START_TIMEOUT = 60.0
COMMAND_TIMEOUT = 300.0


def unprivileged(argv: Sequence[str]) -> list[str]:
    """`argv` run as `nobody` when we are root (PostgreSQL will not run as root), else as it is."""
    if os.geteuid() != 0:
        return list(argv)
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]


def give_to_nobody(path: Path) -> None:
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(path, nobody.pw_uid, nobody.pw_gid)


class Postgres:
    """A PostgreSQL server on 127.0.0.1 whose superuser is `netbox`, trusted from loopback only."""

    def __init__(self, workdir: Path, log_dir: Path, name: str = "postgres"):
        self.name = name
        self.data = workdir / "postgres"
        self.log_dir = log_dir
        self.port = 0
        self.component: Component | None = None

    def start(self) -> Postgres:
        if not (POSTGRES_BIN / "postgres").exists():
            raise ComponentError(f"PostgreSQL is not installed ({POSTGRES_BIN}); run hack/setup.sh")
        self.data.mkdir(parents=True)
        give_to_nobody(self.data)
        if os.geteuid() == 0:
            self.data.parent.chmod(0o711)  # nobody must reach its data directory
        initdb = [str(POSTGRES_BIN / "initdb"), "-D", str(self.data), "-U", DATABASE_USER]
        initdb += ["--auth=trust", "--encoding=UTF8", "--no-sync", "--locale=C"]
        run(unprivileged(initdb), "initdb")
        self.port = free_port()
        argv = [str(POSTGRES_BIN / "postgres"), "-D", str(self.data), "-h", "127.0.0.1", "-p", str(self.port)]
        argv += ["-k", str(self.data)]  # its UNIX socket stays in its own directory
        for setting in ("fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=200"):
            argv += ["-c", setting]
        self.component = Component(self.name, unprivileged(argv), self.log_dir, inherit_env=False)
        wait_for("PostgreSQL to accept connections", self._ready, START_TIMEOUT, watch=[self.component])
        return self

    def _ready(self) -> bool | None:
        ready = subprocess.run(
            [str(POSTGRES_BIN / "pg_isready"), "-q", *self.client("pg_isready")[1:]], check=False
        )
        return True if ready.returncode == 0 else None

    def client(self, program: str, *args: str) -> list[str]:
        """The command line of a PostgreSQL client program (psql, pg_dump, …) connected to this server."""
        return [
            str(POSTGRES_BIN / program),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            DATABASE_USER,
            *args,
        ]

    def sql(self, statement: str, database: str = "postgres") -> str:
        return run(
            self.client("psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", database, "-c", statement),
            "psql",
        )

    def create(self, name: str) -> None:
        self.sql(f'CREATE DATABASE "{name}"')

    def drop(self, name: str) -> None:
        """Drop database `name` (if it exists), closing whatever connections it still has."""
        self.sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
        self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def clone(self, template: str, name: str) -> None:
        """Replace database `name` with a copy of `template` (which must have no open connections)."""
        self.drop(name)
        self.sql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')

    def dump(self, database: str, path: Path) -> None:
        run(self.client("pg_dump", "--format=custom", "--no-owner", f"--file={path}", database), "pg_dump")

    def restore(self, path: Path, database: str) -> None:
        self.create(database)
        run(
            self.client("pg_restore", "--no-owner", "--exit-on-error", f"--dbname={database}", str(path)),
            "pg_restore",
        )

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()
            self.component = None
        shutil.rmtree(self.data, ignore_errors=True)


class Redis:
    """A Redis server on 127.0.0.1 that keeps nothing on disk."""

    def __init__(self, workdir: Path, log_dir: Path, name: str = "redis"):
        self.name = name
        self.workdir = workdir
        self.log_dir = log_dir
        self.port = 0
        self.component: Component | None = None

    def start(self) -> Redis:
        server = shutil.which("redis-server")
        if server is None:
            raise ComponentError("redis-server is not installed; run hack/setup.sh")
        self.port = free_port()
        argv = [server, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(self.workdir)]
        self.component = Component(self.name, argv, self.log_dir, inherit_env=False)
        wait_for("Redis to answer PING", self._ready, START_TIMEOUT, watch=[self.component])
        return self

    def command(self, *args: str) -> str:
        return run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), *args], "redis-cli")

    def _ready(self) -> bool | None:
        try:
            return True if self.command("PING").strip() == "PONG" else None
        except ComponentError:
            return None

    def flush(self) -> None:
        self.command("FLUSHALL")

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()
            self.component = None


def run(argv: Sequence[str], what: str, env: dict[str, str] | None = None) -> str:
    """Run a short command; its output, or `ComponentError` with it when it fails."""
    result = subprocess.run(
        list(argv), capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT, env=env
    )
    if result.returncode != 0:
        raise ComponentError(
            f"{what} failed ({result.returncode}): {(result.stderr or result.stdout)[-2000:]}"
        )
    return result.stdout
