"""The book's generated pages (troubleshooting, API reference) and the checks that keep them true: the reason
scanner sees what the code sets (so a reason nobody documented fails `make book-check`), the catalogue and
the code agree, and the pages are what `make book` writes. Unit tests: no lab."""

from __future__ import annotations

import textwrap

from capfleet_e2e import apireference, book, reasonscan
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.reasoncatalogue import GROUPS, RELAYS, Group, Reason, Relay
from capfleet_e2e.reasonscan import Scan, Site, Source

CONDITIONS = """
from dataclasses import dataclass

@dataclass(frozen=True)
class Update:
    type: str
    status: str
    reason: str
    message: str = ""

    @classmethod
    def false(cls, type_: str, reason: str, message: str = "") -> "Update":
        return cls(type_, "False", reason, message)

def summarize(step: str) -> Update:
    return Update("Ready", "Unknown", "WaitingFor" + step)
"""

ERRORS = """
class Failure(Exception):
    default_reason = "Failed"

    def __init__(self, message, *, reason=None):
        self.reason = reason or self.default_reason

SHARED_REASON = "FromAConstant"
"""

OPERATOR = """
from typing import Literal

from sample import errors
from sample.conditions import Update
from sample.errors import SHARED_REASON

Phase = Literal["GoingUp", "GoingDown"]
ACCEPTED_REASONS = frozenset({"Accepted"})
LOCAL = "FromALocalConstant"

def step(done_reason: str) -> Update:
    return Update.false("Step", done_reason)

def choose(ok: bool) -> str:
    return "Chosen" if ok else LOCAL

def work(phase: Phase, exc: errors.Failure) -> None:
    Update.false("Phase", phase)
    step("Forwarded")
    raise errors.Failure(f"Prefixed{phase}", reason=choose(True))

def fail(exc: errors.Failure) -> None:
    Update.false("Ready", exc.reason)
    raise errors.Failure("x", reason=SHARED_REASON)
"""


def sample() -> Scan:
    return reasonscan.scan(
        [
            Source("sample.conditions", "shared", CONDITIONS),
            Source("sample.errors", "shared", ERRORS),
            Source("sample.operator", "an-operator", OPERATOR),
        ]
    )


def test_the_scanner_finds_every_way_a_reason_is_set() -> None:
    found = sample()
    assert found.names("shared") == {"Failed", "WaitingFor*"}
    assert found.names("an-operator") == {
        "Accepted",  # a REASONS constant
        "GoingUp",  # a Literal annotation of a parameter that carries a reason
        "GoingDown",
        "Forwarded",  # through a parameter of a function that passes it on
        "Chosen",  # a function's return, a conditional
        "FromALocalConstant",
        "FromAConstant",  # a constant imported from another module
    }
    (site,) = found.reasons[("an-operator", "Forwarded")]
    assert (site.module, site.function) == ("sample.operator", "work")


def test_the_scanner_reports_what_it_cannot_name_by_module_function_and_expression() -> None:
    assert set(sample().unresolved) == {("sample.operator", "fail", "exc.reason")}


def test_the_scanner_does_not_take_a_message_for_a_reason() -> None:
    found = sample()
    assert not any(name.startswith("Prefixed") for name in found.names())
    assert {"FromAConstant", "WaitingFor"} <= found.words  # what a relay's reasons are checked against


def catalogue(*names: str) -> tuple[Group, ...]:
    reasons = tuple(Reason(n, "on", "means", "do") for n in names)
    return (Group("shared", "Shared", "intro", ()), Group("an-operator", "An operator", "intro", reasons))


def test_the_check_names_a_reason_the_catalogue_lacks_and_one_the_code_no_longer_sets() -> None:
    found = sample()
    relays = {("sample.operator", "fail", "exc.reason"): Relay("an error's reason")}
    everything = catalogue(*found.names("an-operator"))
    shared = (
        Group("shared", "Shared", "", (Reason("Failed", "", "", ""), Reason("WaitingFor*", "", "", ""))),
    )
    assert book.catalogue_problems(found, shared + everything[1:], relays) == []
    lacking = shared + catalogue(*(found.names("an-operator") - {"Chosen"}), "Gone")[1:]
    problems = book.catalogue_problems(found, lacking, relays)
    assert len(problems) == 2
    assert "the code sets reason Chosen at sample.operator" in problems[0]
    assert "documents reason Gone, which the code no longer sets" in problems[1]


def test_the_check_wants_every_relay_accounted_for() -> None:
    found = sample()
    stale = {("sample.operator", "gone", "x.reason"): Relay("", yields=("NowhereInTheCode",))}
    problems = book.relay_problems(found, stale)
    assert any("'exc.reason', which the scanner cannot name" in p for p in problems)
    assert any("which the code no longer has" in p for p in problems)
    assert any("yields NowhereInTheCode, which no string in the code contains" in p for p in problems)


def test_a_relay_yields_reasons_the_code_names_in_a_string() -> None:
    site = Site("an-operator", "m", "f", 1, "failure.split(':')[0]")
    found = Scan({}, {site.key: (site,)}, frozenset({"TimedOut"}))
    relays = {site.key: Relay("the reason in a failure text", yields=("TimedOut",))}
    assert book.set_by_code(found, relays) == {"an-operator": {"TimedOut"}}


def test_the_deploy_ramdisk_may_report_only_reasons_the_operator_takes() -> None:
    script = textwrap.dedent(
        """
        [ -n "$image" ] || fail InvalidArguments "no image"
        dhcp || { callback=; fail NetworkFailed "no lease"; }
        write || fail WriteTwice "dd failed"
        """
    )
    assert reasonscan.ramdisk_reasons(script) == {
        "InvalidArguments": True,
        "NetworkFailed": False,  # it cannot call back: only on the console
        "WriteTwice": True,
    }
    (problem,) = book.ramdisk_problems(script, {"InvalidArguments"})
    assert "reports reason WriteTwice, which baremetal-provision does not accept" in problem


def test_the_catalogue_and_the_code_agree() -> None:
    assert book.code_problems(repo_root()) == []


def test_every_relay_of_the_code_is_catalogued_and_every_section_has_reasons() -> None:
    found = reasonscan.scan(reasonscan.sources_in(repo_root()))
    assert set(found.unresolved) == set(RELAYS)
    assert {g.name for g in GROUPS} == {group for group, _ in found.reasons}
    assert all(g.reasons for g in GROUPS)


def test_the_generated_pages_are_current() -> None:
    root = repo_root()
    assert book.stale_pages(root, book.pages(root)) == []


def test_every_reason_has_its_own_anchor_and_every_entry_says_what_to_do() -> None:
    page = book.troubleshooting(GROUPS, [])
    for group in GROUPS:
        for reason in group.reasons:
            assert page.count(f"{{#{book.anchor(group.name, reason.name)}}}") == 1
            assert all(text.strip() for text in (reason.on, reason.means, reason.do)), reason.name


SCHEMA = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["name"],
            "x-kubernetes-validations": [
                {"rule": "self.name == oldSelf.name", "message": "name is immutable"},
            ],
            "properties": {
                "name": {"type": "string", "maxLength": 63, "pattern": "^[a-z]+(-[a-z]+)*|x$"},
                "size": {"type": "integer", "minimum": 1, "maximum": 8, "default": 2},
                "mode": {"type": "string", "enum": ["fast", "safe"], "description": "How: <fast> or *safe*."},
                "tags": {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1}},
                "disks": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"sizeGiB": {"type": "integer"}}},
                },
            },
        },
    },
}


def test_the_api_reference_lists_every_field_with_its_checks() -> None:
    rows = {f.path: f for f in apireference.root_fields(SCHEMA)}
    assert list(rows) == [
        "spec",
        "spec.disks",
        "spec.disks[].sizeGiB",
        "spec.mode",
        "spec.name",
        "spec.size",
        "spec.tags",
    ]
    assert [rows[p].required for p in ("spec", "spec.name", "spec.size")] == [True, True, False]
    assert rows["spec"].validation == ("on update: name is immutable",)
    assert rows["spec.name"].validation == ("matches `^[a-z]+(-[a-z]+)*|x$`", "length ≤ 63")
    assert (rows["spec.size"].validation, rows["spec.size"].default) == (("value 1-8",), "`2`")
    assert rows["spec.mode"].validation == ("one of `fast`, `safe`",)
    assert rows["spec.mode"].description == "How: &lt;fast&gt; or \\*safe\\*."
    assert rows["spec.tags"].type == "[]string"
    table = "\n".join(apireference.field_table(SCHEMA))
    assert "items ≤ 4; each: length ≥ 1" in table
    assert apireference.update_rules(SCHEMA) == [
        "Checked on every update (what cannot change, or changes one way only):",
        "",
        "- `spec`: name is immutable",
    ]


def test_prose_keeps_code_and_escapes_the_rest() -> None:
    assert apireference.prose("a `x_y|z` b_c | <d>") == "a `x_y|z` b\\_c \\| &lt;d&gt;"
    assert apireference.prose("an odd ` backtick") == "an odd ' backtick"
