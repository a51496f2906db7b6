"""The scale lab's fake ramdisk, its pure half: it reads what the boot server serves as iPXE would, and signs
its reports exactly as the deploy ramdisk's own shell does (deploy_lib.sh's `sign`, run here with the
host's sha256sum and openssl), so baremetal-provision's check is the real one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from capfleet_e2e.baremetal.fakeramdisk import (
    callback_url,
    chain_url,
    kernel_args,
    report,
    seed_base,
    signature,
)

DEPLOY_LIB = (
    Path(__file__).parents[2] / "images" / "src" / "capfleet_images" / "deployramdisk" / "deploy_lib.sh"
)
BOOT = "#!ipxe\nchain http://boot.example/ipxe?mac=${net0/mac:hexhyp}&uuid=${uuid}\n"
DEPLOY = (
    "#!ipxe\nkernel http://boot.example/deploy/vmlinuz quiet capfleet.mode=deploy "
    "ds=nocloud-net;s=http://boot.example/seed/tok/ capfleet.callback=http://boot.example/callback/tok "
    "capfleet.key=http://boot.example/key/tok\ninitrd http://boot.example/deploy/initrd.img\nboot\n"
)


def test_the_boot_script_chains_to_the_per_mac_script_with_the_nic_and_the_system() -> None:
    assert (
        chain_url(BOOT, "52:54:00:aa:bb:cc", "u-1")
        == "http://boot.example/ipxe?mac=52-54-00-aa-bb-cc&uuid=u-1"
    )
    assert chain_url("#!ipxe\nexit\n", "52:54:00:aa:bb:cc", "u-1") is None


def test_the_per_mac_script_gives_the_kernel_arguments_or_none_when_it_exits_to_disk() -> None:
    args = kernel_args(DEPLOY)
    assert args is not None
    assert args["capfleet.mode"] == "deploy"
    assert args["quiet"] == ""
    assert args["capfleet.callback"] == "http://boot.example/callback/tok"
    assert seed_base(args) == "http://boot.example/seed/tok/"
    assert kernel_args("#!ipxe\necho capfleet: already deployed\nexit\n") is None


def test_the_callback_carries_the_report_query_and_a_signature_only_with_a_key() -> None:
    url = callback_url("http://boot.example/callback/tok", "52:54:00:aa:bb:cc", "u-1", "deployed", "ab12")
    assert url == "http://boot.example/callback/tok?mac=52:54:00:aa:bb:cc&uuid=u-1&result=deployed&sig=ab12"
    assert "sig=" not in callback_url("http://boot.example/callback/tok", "m", "u", "cleaned", None)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the host's openssl, as the ramdisk has")
@pytest.mark.parametrize(("result", "reason"), [("deployed", ""), ("failed", "BadChecksum")])
def test_reports_are_signed_as_the_deploy_ramdisks_shell_signs_them(
    tmp_path: Path, result: str, reason: str
) -> None:
    key, body = "k3y-from-the-boot-server", report(result, 1.5)
    (tmp_path / "key").write_text(key)
    (tmp_path / "report").write_bytes(body)
    script = f'. "{DEPLOY_LIB}"; sign "$1" "$2" "$3" "$4"'
    shell = subprocess.run(
        ["sh", "-c", script, "sh", str(tmp_path / "key"), result, reason, str(tmp_path / "report")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert signature(key, result, reason, body) == shell.stdout.strip()
