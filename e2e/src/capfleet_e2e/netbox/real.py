"""A real NetBox, served by gunicorn on 127.0.0.1 over its own PostgreSQL and Redis, for a test session.

Start-up restores the release's migrated database (releases.py) as a template, adds a superuser and API
tokens made up for this session (nothing is kept or committed), and serves a copy of the template.
`reset()` swaps in a fresh copy (about half a second), so every test starts from an empty NetBox with
the same tokens; NetBox opens a database connection per request, so the running server follows the swap.
"""

from __future__ import annotations

import concurrent.futures
import json
import secrets
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from capfleet_e2e.netbox.releases import Release, command, environment, manage_py, static_dir
from capfleet_e2e.netbox.services import Postgres, Redis
from capfleet_e2e.processes import Component, ComponentError, free_port, wait_for

TEMPLATE = "netbox_template"
DATABASE = "netbox"
START_TIMEOUT = 300.0
WORKERS = 2
THREADS = 4
WARM_UP_ENDPOINTS = (
    "extras/custom-fields", "extras/tags", "extras/journal-entries", "tenancy/tenants", "dcim/devices",
    "dcim/interfaces", "dcim/mac-addresses", "ipam/vrfs", "ipam/prefixes", "ipam/ip-ranges",
    "ipam/ip-addresses", "virtualization/virtual-machines", "virtualization/interfaces",
)  # fmt: skip

# Run by `manage.py shell` in the template database: the admin user and the session's tokens.
CREATE_TOKENS = """
import json, os
from users.models import Token, User
admin = User.objects.create_superuser("admin", "admin@example.invalid", os.environ["NETBOX_ADMIN_PASSWORD"])
versioned = any(f.name == "version" for f in Token._meta.get_fields())
for spec in json.loads(os.environ["NETBOX_TOKENS"]):
    if not versioned:
        Token.objects.create(user=admin, key=spec["secret"], write_enabled=spec["write"])
    else:
        version = 2 if spec["key"] else 1
        extra = {"key": spec["key"]} if spec["key"] else {}
        Token(version=version, user=admin, token=spec["secret"], write_enabled=spec["write"], **extra).save()
"""


@dataclass(frozen=True)
class SessionTokens:
    """What clients put after `Token ` (v1) or `Bearer ` (v2, NetBox ≥ 4.5)."""

    read_write: str = field(default_factory=lambda: secrets.token_hex(20))
    read_only: str = field(default_factory=lambda: secrets.token_hex(20))
    v2_key: str = field(default_factory=lambda: secrets.token_hex(6))
    v2_secret: str = field(default_factory=lambda: secrets.token_hex(20))

    @property
    def v2(self) -> str:
        return f"nbt_{self.v2_key}.{self.v2_secret}"

    def specs(self, with_v2: bool) -> list[dict[str, object]]:
        specs: list[dict[str, object]] = [
            {"key": "", "secret": self.read_write, "write": True},
            {"key": "", "secret": self.read_only, "write": False},
        ]
        if with_v2:
            specs.append({"key": self.v2_key, "secret": self.v2_secret, "write": True})
        return specs


class RealNetbox:
    """One release of NetBox serving a throw-away database on 127.0.0.1."""

    def __init__(self, release: Release, log_dir: Path):
        self.release = release
        self.log_dir = log_dir
        self.workdir = Path(tempfile.mkdtemp(prefix=f"capfleet-netbox-{release.version}-"))
        self.postgres = Postgres(self.workdir, log_dir, f"postgres-{release.version}")
        self.redis = Redis(self.workdir, log_dir, f"redis-{release.version}")
        self.tokens = SessionTokens()
        self.admin_password = secrets.token_urlsafe(18)
        self.port = 0
        self.server: Component | None = None

    @property
    def version(self) -> str:
        return self.release.version

    @property
    def static(self) -> Path:
        return static_dir(self.release)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def v2_tokens(self) -> bool:
        return self.release.version >= "4.5"

    def settings(self) -> dict[str, str]:
        return {
            "NETBOX_DATABASE": DATABASE,
            "NETBOX_DATABASE_PORT": str(self.postgres.port),
            "NETBOX_REDIS_PORT": str(self.redis.port),
            "NETBOX_SECRET_KEY": self._secret("secret-key"),
            "NETBOX_TOKEN_PEPPER": self._secret("token-pepper"),
        }

    def _secret(self, name: str) -> str:
        path = self.workdir / name
        if not path.exists():
            path.write_text(secrets.token_urlsafe(48))
        return path.read_text()

    def start(self) -> RealNetbox:
        self.postgres.start()
        self.redis.start()
        self.postgres.restore(self.release.dump, TEMPLATE)
        self._manage("shell", "-c", CREATE_TOKENS, extra={
            "NETBOX_DATABASE": TEMPLATE,
            "NETBOX_ADMIN_PASSWORD": self.admin_password,
            "NETBOX_TOKENS": json.dumps(self.tokens.specs(self.v2_tokens)),
        })  # fmt: skip
        self.postgres.clone(TEMPLATE, DATABASE)
        self.port = free_port()
        source = self.release.seen_by_netbox(self.release.opt / "netbox" / "netbox")
        gunicorn = ["python3", "-m", "gunicorn", "--chdir", source, "--bind", f"127.0.0.1:{self.port}"]
        gunicorn += ["--workers", str(WORKERS), "--threads", str(THREADS), "--timeout", "120", "--preload"]
        gunicorn += ["--access-logfile", "-", "netbox.wsgi"]
        env = environment(self.release, self.settings())
        self.server = Component(
            f"netbox-{self.version}", command(self.release, gunicorn), self.log_dir, env, inherit_env=False
        )
        wait_for(f"NetBox {self.version} to answer", self._answers, START_TIMEOUT, watch=[self.server])
        self._warm_up()
        return self

    def _warm_up(self) -> None:
        """A few rounds of concurrent reads, so that every worker has loaded the API's views and serializers
        (seconds of CPU each on a busy machine) before a test's client, with its timeout, is first served."""
        paths = ["status/", *(f"{endpoint}/?limit=1" for endpoint in WARM_UP_ENDPOINTS)]
        headers = {"Authorization": f"Token {self.tokens.read_write}"}

        def read(path: str) -> None:
            request = urllib.request.Request(f"{self.url}/api/{path}", headers=headers)
            with urllib.request.urlopen(request, timeout=START_TIMEOUT) as reply:
                reply.read()

        with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS * THREADS) as pool:
            for _ in range(WORKERS):
                list(pool.map(read, paths))

    def _manage(self, *args: str, extra: dict[str, str]) -> None:
        argv = command(self.release, ["python3", manage_py(self.release), *args])
        env = environment(self.release, {**self.settings(), **extra})
        log = self.log_dir / f"netbox-{self.version}-manage.log"
        with log.open("ab") as out:
            done = subprocess.run(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=600, check=False
            )
        if done.returncode != 0:
            raise ComponentError(f"NetBox {self.version}: manage.py {args[0]} failed; see {log}")

    def _answers(self) -> bool | None:
        request = urllib.request.Request(
            f"{self.url}/api/status/", headers={"Authorization": f"Token {self.tokens.read_write}"}
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            status = json.loads(reply.read())
        return True if status.get("netbox-version") == self.version else None

    def reset(self) -> None:
        """An empty NetBox again (the session's tokens stay): a fresh copy of the template, caches flushed."""
        self.postgres.clone(TEMPLATE, DATABASE)
        self.redis.flush()

    def stop(self) -> None:
        if self.server is not None:
            self.server.process.send_signal(signal.SIGINT)  # gunicorn's quick shutdown, not the graceful one
            self.server.stop()
            self.server = None
        self.redis.stop()
        self.postgres.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_real_netbox(release: Release, log_dir: Path) -> RealNetbox:
    netbox = RealNetbox(release, log_dir)
    try:
        return netbox.start()
    except BaseException:
        netbox.stop()
        raise
