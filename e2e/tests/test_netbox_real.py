"""The real NetBox harness: releases, a fresh database per test, the session's tokens, the fault proxy."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request

import pytest

from capfleet_e2e.netbox.client import NetboxClient, NetboxError
from capfleet_e2e.netbox.fixtures import NetboxInstance, RealNetboxes

pytestmark = pytest.mark.integration
RELEASES = pytest.mark.parametrize("netbox", ["4.4.10", "4.6.8"], indirect=True)


@RELEASES
def test_each_release_answers_as_itself_through_the_proxy(netbox: NetboxInstance) -> None:
    assert netbox.client.status()["netbox-version"] == netbox.version
    assert netbox.faults.count("GET", "/api/status/") == 1


@RELEASES
def test_links_in_answers_lead_back_through_the_proxy(netbox: NetboxInstance) -> None:
    for n in range(3):
        netbox.client.create("extras/tags/", {"name": f"t{n}", "slug": f"t{n}"})
    page = netbox.client.get("extras/tags/", limit=1)
    assert page["count"] == 3
    following = urllib.parse.urlsplit(page["next"])
    assert f"{following.hostname}:{following.port}" == urllib.parse.urlsplit(netbox.url).netloc
    assert urllib.parse.urlsplit(page["results"][0]["url"]).netloc == urllib.parse.urlsplit(netbox.url).netloc


def test_every_test_starts_from_an_empty_netbox_with_the_same_tokens(
    netbox: NetboxInstance, real_netboxes: RealNetboxes
) -> None:
    netbox.client.create("extras/tags/", {"name": "left-over", "slug": "left-over"})
    real = real_netboxes.get(netbox.version)
    real.reset()
    assert netbox.client.list_all("extras/tags/") == []
    assert netbox.client.status()["netbox-version"] == netbox.version


@RELEASES
def test_the_session_tokens_read_write_and_read_only(netbox: NetboxInstance) -> None:
    assert netbox.read_only_token is not None
    reader = NetboxClient(netbox.url, netbox.read_only_token)
    assert reader.list_all("extras/tags/") == []
    with pytest.raises(NetboxError) as refused:
        reader.create("extras/tags/", {"name": "no", "slug": "no"})
    assert refused.value.status == 403
    with pytest.raises(NetboxError) as unknown:
        NetboxClient(netbox.url, "0" * 40).list_all("extras/tags/")
    assert unknown.value.status == 403
    if netbox.at_least("4.5"):
        assert netbox.v2_token is not None
        assert netbox.v2_token.startswith("nbt_")
        NetboxClient(netbox.url, netbox.v2_token).create("extras/tags/", {"name": "v2", "slug": "v2"})
    else:
        assert netbox.v2_token is None


def test_faults_are_answered_by_the_proxy_and_outages_refuse_connections(netbox: NetboxInstance) -> None:
    netbox.faults.fail(503, path="/api/extras/", count=1)
    with pytest.raises(NetboxError) as failed:
        netbox.client.list_all("extras/tags/")
    assert failed.value.status == 503
    assert netbox.client.list_all("extras/tags/") == []
    injected = [r.injected for r in netbox.faults.requests("GET", "/api/extras/tags/")]
    assert injected == [True, False]
    netbox.faults.down()
    with pytest.raises(urllib.error.URLError):
        netbox.client.status()
    netbox.faults.up()
    assert netbox.client.status()["netbox-version"] == netbox.version


def test_the_web_ui_signs_the_admin_in_and_lists_what_the_api_made(
    netbox: NetboxInstance, real_netboxes: RealNetboxes
) -> None:
    netbox.client.create("dcim/sites/", {"name": "dc-web", "slug": "dc-web"})
    cookies = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(cookies))
    with browser.open(f"{netbox.url}/login/", timeout=60) as page:
        login = page.read().decode()
    stylesheet = re.search(r'href="(/static/[^"]+\.css)', login)
    assert stylesheet is not None, "the login page links its style sheet"
    with browser.open(f"{netbox.url}{stylesheet.group(1)}", timeout=60) as css:
        assert css.status == 200
        assert len(css.read()) > 10_000
    csrf = next(c.value for c in cookies if c.name == "csrftoken")
    form = urllib.parse.urlencode({
        "csrfmiddlewaretoken": csrf,
        "username": "admin",
        "password": real_netboxes.get(netbox.version).admin_password,
        "next": "/dcim/sites/",
    }).encode()  # fmt: skip
    request = urllib.request.Request(
        f"{netbox.url}/login/", data=form, headers={"Referer": f"{netbox.url}/login/"}
    )
    with browser.open(request, timeout=60) as sites:
        assert urllib.parse.urlsplit(sites.url).path == "/dcim/sites/"
        assert "dc-web" in sites.read().decode()
