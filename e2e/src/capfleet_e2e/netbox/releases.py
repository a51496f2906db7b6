"""Real NetBox releases for the tests, installed once per machine under $CAPFLEET_CACHE/netbox/<version>/.

capfleet has a code path per NetBox API generation, so the tests run two releases: 4.4.10 (claims are
written, then read back) and 4.6.8 (claims are conditional writes with ETag/If-Match). Each release is
installed the way its own documentation says, minus what serves only its web pages' documentation:

- the source tree, from $CAPFLEET_NETBOX_SOURCES/netbox-<version>.tar.xz when that file exists (CI has
  the releases beside the repository, in ../shared/vendor/netbox), else GitHub's release tarball;
- its pinned Python packages from PyPI, with psycopg's binary wheel instead of a C build;
- a Python it supports: the machine's own 3.11 for 4.4.10; for 4.6.8, which needs 3.12 or later, a Debian
  trixie root file system made by mmdebstrap, which NetBox then runs in (chroot, in a private mount
  namespace, sharing the machine's loopback network);
- its database, migrated once (minutes) and kept as a dump that later test sessions restore in seconds.

Building needs root (mmdebstrap, chroot), as the rest of the lab does. A lock file keeps two sessions
from installing one release at once.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from capfleet_e2e.kubebin import HarnessError, cache_lock, cache_root, repo_root
from capfleet_e2e.netbox.services import Postgres, Redis, run

log = logging.getLogger(__name__)

SOURCES_ENV = "CAPFLEET_NETBOX_SOURCES"
GITHUB_TARBALL = "https://github.com/netbox-community/netbox/archive/refs/tags/v{version}.tar.gz"
# Packages that build NetBox's documentation site, not NetBox.
DOCUMENTATION_ONLY = ("mkdocs", "mkdocstrings", "zensical")
MIGRATION_TIMEOUT = 1800
CONFIGURATION_MODULE = "capfleet_netbox_configuration"
# Read at NetBox's start from its environment, so one installed tree serves any database and port.
CONFIGURATION = '''\
"""NetBox settings for capfleet's tests: everything from the environment the harness starts it with."""
import os

ALLOWED_HOSTS = ["*"]
DATABASES = {
    "default": {
        "NAME": os.environ["NETBOX_DATABASE"],
        "USER": "netbox",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": os.environ["NETBOX_DATABASE_PORT"],
        # A connection per request: the harness swaps the database under a running NetBox between tests.
        "CONN_MAX_AGE": 0,
    }
}
REDIS = {
    name: {"HOST": "127.0.0.1", "PORT": int(os.environ["NETBOX_REDIS_PORT"]), "USERNAME": "", "PASSWORD": "",
           "DATABASE": number, "SSL": False}
    for number, name in enumerate(("tasks", "caching"))
}
SECRET_KEY = os.environ["NETBOX_SECRET_KEY"]
API_TOKEN_PEPPERS = {1: os.environ["NETBOX_TOKEN_PEPPER"]}
RELEASE_CHECK_URL = None
CENSUS_REPORTING_ENABLED = False
LOGIN_REQUIRED = True
'''


@dataclass(frozen=True)
class Release:
    """A NetBox release and the Python it runs on."""

    version: str
    python: str
    trixie: bool = False  # runs in a Debian trixie root file system (its Python is newer than the host's)

    @property
    def directory(self) -> Path:
        return cache_root() / "netbox" / self.version

    @property
    def root(self) -> Path:
        """What NetBox sees as /: the host, or the trixie tree."""
        return self.directory / "rootfs" if self.trixie else Path("/")

    @property
    def opt(self) -> Path:
        """Where the source tree (netbox/), the packages (site/) and the settings (conf/) are, on the host."""
        return self.directory / "rootfs" / "opt" if self.trixie else self.directory / "opt"

    def seen_by_netbox(self, path: Path) -> str:
        """`path` (under `opt`) as NetBox sees it."""
        return "/" + str(path.relative_to(self.root)) if self.trixie else str(path)

    @property
    def dump(self) -> Path:
        return self.directory / "migrated.dump"

    @property
    def stamp(self) -> Path:
        return self.directory / "installed"


RELEASES = {
    "4.4.10": Release("4.4.10", python="3.11"),
    "4.6.8": Release("4.6.8", python="3.13", trixie=True),
}
DEFAULT_RELEASE = "4.4.10"


def parse_version(version: str) -> tuple[int, int, int]:
    """'4.4.10' → (4, 4, 10); a missing patch level counts as 0, suffixes like '-beta1' are ignored."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not match:
        raise ValueError(f"not a NetBox version: {version!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def release(version: str) -> Release:
    try:
        return RELEASES[version]
    except KeyError:
        raise HarnessError(f"no NetBox {version} in the harness; it has {', '.join(RELEASES)}") from None


def command(rel: Release, argv: Sequence[str]) -> list[str]:
    """`argv` (a Python command line as NetBox sees it, `python3 …`) run with the release's Python.

    The trixie tree is entered through a private mount namespace, so /dev and /proc mounted into it go
    away with the process; SIGTERM to the returned command reaches the Python process itself (each step
    exec()s the next).
    """
    if not rel.trixie:
        # -S: none of the harness's own packages, only NetBox's pinned ones (PYTHONPATH).
        return [sys.executable, "-S", *argv[1:]]
    enter = 'mount --rbind /dev "$1/dev" && mount -t proc proc "$1/proc" && exec chroot "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", enter, "sh", str(rel.root), *argv]


def environment(rel: Release, settings: Mapping[str, str]) -> dict[str, str]:
    """The environment NetBox runs with: its packages and settings module, and `settings`."""
    path = f"{rel.seen_by_netbox(rel.opt / 'site')}:{rel.seen_by_netbox(rel.opt / 'conf')}"
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": path,
        "PYTHONDONTWRITEBYTECODE": "1",
        "NETBOX_CONFIGURATION": CONFIGURATION_MODULE,
        "LANG": "C.UTF-8",
        **settings,
    }


def manage_py(rel: Release) -> str:
    return rel.seen_by_netbox(rel.opt / "netbox" / "netbox" / "manage.py")


def sources_dir() -> Path:
    configured = os.environ.get(SOURCES_ENV)
    return Path(configured) if configured else repo_root().parent / "shared" / "vendor" / "netbox"


def fetch_source(rel: Release, into: Path) -> None:
    """Unpack the release's source tree into `into`/netbox (from the local copy, else from GitHub)."""
    local = sources_dir() / f"netbox-{rel.version}.tar.xz"
    with tempfile.TemporaryDirectory(dir=into) as scratch:
        if local.is_file():
            archive = local
        else:
            archive = Path(scratch) / "netbox.tar.gz"
            with urllib.request.urlopen(GITHUB_TARBALL.format(version=rel.version), timeout=300) as reply:
                archive.write_bytes(reply.read())
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        (top,) = [p for p in Path(scratch).iterdir() if p.is_dir()]
        top.rename(into / "netbox")


def requirements(tree: Path) -> str:
    """The release's pinned requirements, without documentation tooling, with psycopg's binary wheel."""
    lines = []
    for line in (tree / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith(DOCUMENTATION_ONLY):
            lines.append(line.replace("psycopg[c,pool]", "psycopg[binary,pool]"))
    return "\n".join(lines) + "\n"


def install_packages(rel: Release, tree: Path, site: Path) -> None:
    """NetBox's packages for the release's Python into `site`, by uv (which need not run that Python)."""
    uv = shutil.which("uv")
    if uv is None:
        raise HarnessError("uv is needed to install NetBox's packages (hack/setup.sh installs it)")
    pinned = tree.parent / "requirements-capfleet.txt"
    pinned.write_text(requirements(tree))
    argv = [uv, "pip", "install", "--quiet", "--target", str(site), "--python-version", rel.python]
    argv += ["--python-platform", "x86_64-manylinux_2_36", "-r", str(pinned)]
    run(argv, f"installing NetBox {rel.version}'s packages")


def compile_bytecode(rel: Release) -> None:
    """Byte-compile NetBox and its packages with the release's Python, once: each start is faster."""
    paths = [rel.seen_by_netbox(rel.opt / "site"), rel.seen_by_netbox(rel.opt / "netbox" / "netbox")]
    run(
        command(rel, ["python3", "-m", "compileall", "-q", "-j", "0", *paths]),
        "compileall",
        env=environment(rel, {}),
    )


def make_trixie(root: Path) -> None:
    argv = ["mmdebstrap", "--mode=root", "--variant=minbase", "--format=directory", "--include=python3"]
    argv += ['--customize-hook=rm -f "$1/etc/hostname" "$1/etc/resolv.conf"', "trixie", str(root)]
    run(argv, "mmdebstrap (Debian trixie, for NetBox's Python)")


def recipe(rel: Release) -> str:
    """What the installed tree is made of: a change to any of it installs the release afresh."""
    return hashlib.sha256(f"{rel}\n{CONFIGURATION}\n{DOCUMENTATION_ONLY}".encode()).hexdigest()[:16]


def ensure_release(
    version: str, log_dir: Path, migration_timeout: float | None = MIGRATION_TIMEOUT
) -> Release:
    """The release installed and its database migrated and dumped, doing whatever is missing."""
    rel = release(version)
    with cache_lock(rel.directory.parent / f"{version}.lock"):
        if rel.stamp.is_file() and rel.stamp.read_text().strip() == recipe(rel) and rel.dump.is_file():
            if not static_dir(rel).is_dir():
                collect_static(rel)
            return rel
        if os.geteuid() != 0:
            raise HarnessError(f"installing NetBox {version} for the tests needs root")
        started = time.monotonic()
        log.info("installing NetBox %s into %s", version, rel.directory)
        shutil.rmtree(rel.directory, ignore_errors=True)
        rel.directory.mkdir(parents=True)
        if rel.trixie:
            make_trixie(rel.root)
        rel.opt.mkdir(parents=True, exist_ok=True)
        fetch_source(rel, rel.opt)
        install_packages(rel, rel.opt / "netbox", rel.opt / "site")
        compile_bytecode(rel)
        (rel.opt / "conf").mkdir()
        (rel.opt / "conf" / f"{CONFIGURATION_MODULE}.py").write_text(CONFIGURATION)
        collect_static(rel)
        migrated = time.monotonic()
        migrate_and_dump(rel, log_dir, migration_timeout)
        rel.stamp.write_text(recipe(rel) + "\n")
        log.info("NetBox %s installed in %.0f s (its migration %.0f s)", version, time.monotonic() - started,
                 time.monotonic() - migrated)  # fmt: skip
        return rel


def static_dir(rel: Release) -> Path:
    """The web pages' style sheets, scripts and images, gathered by collectstatic (NetBox's STATIC_ROOT)."""
    return rel.opt / "netbox" / "netbox" / "static"


def collect_static(rel: Release) -> None:
    """Gather the web UI's static files, which NetBox leaves to a web server in front of it (the proxy)."""
    unused = dict.fromkeys(("NETBOX_DATABASE", "NETBOX_DATABASE_PORT", "NETBOX_REDIS_PORT"), "0")
    settings = {
        **unused,
        "NETBOX_SECRET_KEY": os.urandom(32).hex() * 2,
        "NETBOX_TOKEN_PEPPER": os.urandom(32).hex() * 2,
    }
    argv = command(rel, ["python3", manage_py(rel), "collectstatic", "--no-input", "--verbosity", "0"])
    run(argv, f"NetBox {rel.version}'s collectstatic", env=environment(rel, settings))


def migrate_and_dump(rel: Release, log_dir: Path, timeout: float | None) -> None:
    with tempfile.TemporaryDirectory(prefix="capfleet-netbox-migrate-") as scratch:
        work = Path(scratch)
        postgres = Postgres(work, log_dir, f"postgres-{rel.version}-migrate").start()
        redis = Redis(work, log_dir, f"redis-{rel.version}-migrate").start()
        try:
            postgres.create("netbox")
            settings = {
                "NETBOX_DATABASE": "netbox",
                "NETBOX_DATABASE_PORT": str(postgres.port),
                "NETBOX_REDIS_PORT": str(redis.port),
                "NETBOX_SECRET_KEY": os.urandom(32).hex() * 2,
                "NETBOX_TOKEN_PEPPER": os.urandom(32).hex() * 2,
            }
            log = log_dir / f"netbox-{rel.version}-migrate.log"
            with log.open("wb") as out:
                done = subprocess.run(
                    command(rel, ["python3", manage_py(rel), "migrate", "--no-input"]),
                    env=environment(rel, settings), stdout=out, stderr=subprocess.STDOUT,
                    timeout=timeout, check=False,
                )  # fmt: skip
            if done.returncode != 0:
                raise HarnessError(f"NetBox {rel.version}'s migration failed; see {log}")
            postgres.dump("netbox", rel.dump)
        finally:
            redis.stop()
            postgres.stop()


def ensure_releases(versions: Sequence[str], log_dir: Path, migration_timeout: float | None) -> None:
    """Install the releases side by side: each migration keeps one core busy."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(versions) or 1) as pool:
        for done in [pool.submit(ensure_release, v, log_dir, migration_timeout) for v in versions]:
            done.result()


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m capfleet_e2e.netbox.releases --log-dir DIR VERSION…`: what the test session runs in
    the background (preinstall.py). Its migrations have no time limit of their own: at idle priority
    they last as long as the tests keep the machine busy, and the session bounds its wait instead."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("versions", nargs="+", choices=sorted(RELEASES))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    ensure_releases(args.versions, args.log_dir, migration_timeout=None)


if __name__ == "__main__":
    main()
