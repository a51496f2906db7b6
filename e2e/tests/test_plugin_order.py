"""The plugin's scheduling of NetBox's background install (netbox/preinstall.py): the tests that use
NetBox run after the others, those that start Cluster API's managers after everything else, and the wait
for the install before the first NetBox test is not counted against that test's timeout."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""


def test_netbox_tests_run_after_the_others_and_capi_tests_last(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    # Local fixtures with the plugin's names: collection only looks at the names a test asks for.
    pytester.makepyfile(
        test_order="""
        import pytest

        @pytest.fixture
        def netbox(): ...

        @pytest.fixture
        def capi(): ...

        def test_capi_and_netbox(capi, netbox): ...
        def test_netbox(netbox): ...
        def test_capi(capi): ...
        def test_neither(): ...
        @pytest.mark.parametrize("netbox", ["4.6.8"], indirect=True)
        def test_netbox_4_6(netbox): ...
        def test_neither_again(): ...
        """
    )
    result = pytester.runpytest_inprocess("--collect-only", "-q")
    order = [line.split("::", 1)[1] for line in result.outlines if "::" in line]
    assert order == [
        "test_neither",
        "test_neither_again",
        "test_netbox",
        "test_netbox_4_6[4.6.8]",
        "test_capi",
        "test_capi_and_netbox",
    ]


def test_the_wait_for_the_install_is_outside_the_tests_timeout(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    # An install that takes 3 s to finish, before a test whose timeout is 1 s.
    pytester.makeconftest(
        """
        import time
        import pytest
        from capfleet_e2e.plugin import PREINSTALL

        class SlowInstall:
            waits = 0
            def wait(self):
                SlowInstall.waits += 1
                time.sleep(3)
            def stop(self): ...

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_finish(session):
            session.config.stash[PREINSTALL] = SlowInstall()

        def pytest_sessionfinish(session):
            print(f"waits={SlowInstall.waits}")
        """
    )
    pytester.makepyfile(
        test_wait="""
        import pytest

        @pytest.fixture
        def netbox(): ...

        def test_without_netbox(): ...

        @pytest.mark.timeout(1)
        def test_with_netbox(netbox): ...
        """
    )
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*waits=1*"])
