"""Every YAML example of the book (docs/**/*.md) is an object the real apiserver accepts.

Each fenced ```yaml (or ```yml) block is split into its documents on `---` lines; every document that is
a Kubernetes object (it has `apiVersion` and `kind`) is applied with a server-side dry run
(`kubectl apply --server-side --dry-run=server --validate=strict`: unknown fields are errors) against the
session's apiserver, which serves capfleet's and Cluster API's CRDs. Objects that name no namespace go into
a scratch namespace of the test's; a namespace an object names is created first if it does not exist.
Documents that are not objects (a values file, a snippet of a spec) are skipped.

A block that is not meant to be applied (an API server configuration file, an object that only makes
sense next to another one) opts out with an HTML comment on the line before it (a blank line between is
allowed), giving the reason:

    <!-- not-applied: an API server configuration file, not an object -->
    ```yaml
    ...

No block holds clusterctl's `${VAR}` template syntax, opted out or not: the book shows concrete values.
Every failure names the page and line.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.kubebin import HarnessError, Kubectl, repo_root
from capfleet_e2e.serviceaccounts import NAMESPACE as FLEET_NAMESPACE

FIELD_MANAGER = "capfleet-book-examples"
YAML_INFO = {"yaml", "yml"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
OPT_OUT = re.compile(r"^\s*<!--\s*not-applied\b(?P<rest>.*?)-->\s*$")
SEPARATOR = re.compile(r"^---(\s.*)?$")
# Namespaces a test must never delete: other tests of the session (or the cluster itself) live in them.
KEPT_NAMESPACES = {FLEET_NAMESPACE, "default", "kube-system", "kube-public", "kube-node-lease"}
OPT_OUT_HINT = "not meant to be applied? put `<!-- not-applied: <reason> -->` on the line before the block"


@dataclass(frozen=True)
class Block:
    """A fenced YAML block of a book page."""

    page: str
    """The page, relative to the repository (docs/...)."""
    line: int
    """Line of the opening fence, from 1."""
    text: str
    """The block's content, its fence's indentation removed."""
    not_applied: str | None = None
    """The reason the block gives for not being applied, if it opts out."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True)
class Document:
    """One `---`-separated document of a block, parsed."""

    block: Block
    line: int
    """Line of the document's first line in the page, from 1."""
    content: object

    @property
    def where(self) -> str:
        return f"{self.block.page}:{self.line}"

    @property
    def kubernetes_object(self) -> dict[str, Any] | None:
        """The document if it is a Kubernetes object (a mapping with apiVersion and kind), else None."""
        if isinstance(self.content, dict) and self.content.get("apiVersion") and self.content.get("kind"):
            return self.content
        return None


@dataclass
class Page:
    """What the collector found on a page: its YAML blocks and its malformed opt-outs."""

    blocks: list[Block] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _is_yaml(info: str) -> bool:
    words = info.strip().lstrip("{").split()
    return bool(words) and words[0].lstrip(".").lower() in YAML_INFO


def collect(markdown: str, page: str) -> Page:
    """The fenced YAML blocks of `markdown` (the page `page`), with their opt-outs.

    A fence is three or more backticks or tildes, indented or not (a block in a list item); it closes with
    a line of at least as many of the same character, and an unclosed one runs to the end of the page.
    An opt-out comment is on the nearest non-blank line before the opening fence; one without a reason,
    or before anything but a YAML block, is a problem.
    """
    found = Page()
    lines = markdown.splitlines()
    pending: tuple[int, str | None] | None = None  # (line, reason) of an opt-out not yet used
    i = 0
    while i < len(lines):
        text = lines[i]
        opening = _fence(text)
        if opening is None:
            if pending is not None and text.strip():
                found.problems.append(f"{page}:{pending[0]}: a not-applied comment before no ```yaml block")
                pending = None
            opt_out = OPT_OUT.match(text)
            if opt_out is not None:
                reason = opt_out["rest"].strip()
                if not reason.startswith(":") or not reason[1:].strip():
                    needs = "a not-applied comment needs a reason: <!-- not-applied: <reason> -->"
                    found.problems.append(f"{page}:{i + 1}: {needs}")
                    pending = (i + 1, None)
                else:
                    pending = (i + 1, reason[1:].strip())
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines):
            closing = lines[i].strip()
            if closing.startswith(fence[0] * len(fence)) and set(closing) == {fence[0]}:
                break
            body.append(_dedent(lines[i], indent))
            i += 1
        i += 1  # past the closing fence
        if _is_yaml(opening["info"]):
            reason = pending[1] if pending is not None else None
            found.blocks.append(Block(page, start + 1, "\n".join(body) + "\n", reason))
        elif pending is not None:
            found.problems.append(f"{page}:{pending[0]}: a not-applied comment before no ```yaml block")
        pending = None
    if pending is not None:
        found.problems.append(f"{page}:{pending[0]}: a not-applied comment before no ```yaml block")
    return found


def _fence(line: str) -> re.Match[str] | None:
    """The opening fence `line` is, if any (a backtick fence's info string holds no backtick)."""
    found = FENCE.match(line)
    if found is None or (found["fence"][0] == "`" and "`" in found["info"]):
        return None
    return found


def _dedent(line: str, indent: int) -> str:
    """`line` without up to `indent` leading spaces (a fenced block's content is indented as its fence)."""
    return line[min(indent, len(line) - len(line.lstrip(" "))) :]


def documents(block: Block) -> list[Document]:
    """The block's `---`-separated documents (empty ones dropped); a YAML error names its page line."""
    chunks: list[tuple[int, list[str]]] = [(0, [])]
    for n, line in enumerate(block.text.splitlines()):
        if SEPARATOR.match(line):
            chunks.append((n + 1, []))
        else:
            chunks[-1][1].append(line)
    found = []
    for offset, chunk in chunks:
        first = block.line + 1 + offset  # the block's content starts on the line after its fence
        try:
            content = yaml.safe_load("\n".join(chunk))
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = first + mark.line if mark is not None else first
            raise BookError(f"{block.page}:{at}: not valid YAML (block at line {block.line}): {e}") from e
        if content is not None:
            skipped = next((k for k, text in enumerate(chunk) if text.strip()[:1] not in ("", "#")), 0)
            found.append(Document(block, first + skipped, content))
    return found


class BookError(Exception):
    """A book block that is wrong before any apiserver sees it."""


def template_variables(block: Block) -> str | None:
    """Why the block is wrong if it holds clusterctl's `${VAR}` syntax, else None."""
    for n, line in enumerate(block.text.splitlines()):
        if "${" in line:
            return (
                f"{block.page}:{block.line + 1 + n}: `${{` is clusterctl's template-variable syntax; "
                "a book example shows concrete values: write them instead"
            )
    return None


def book() -> list[Page]:
    docs = repo_root() / "docs"
    return [
        collect(path.read_text(), path.relative_to(repo_root()).as_posix())
        for path in sorted(docs.rglob("*.md"))
    ]


BOOK_BLOCKS = [block for page in book() for block in page.blocks]


# Unit tests of the collector.

SAMPLE = """\
# A page

```yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: one}
```

- In a list:

  ```yml
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: two}
  ---

  # a comment

  apiVersion: v1
  kind: Secret
  metadata: {name: three}
  ```

<!-- not-applied: a kubelet configuration file -->
```yaml
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
```

<!-- not-applied:   spaced reason   -->

````YAML title="four backticks"
```
image: ${IMAGE}
````

```console
$ kubectl get hmt
```

~~~yaml
replicas: 3
~~~

<!-- not-applied -->
```yaml
a: b
```

<!-- not-applied: before a shell block -->
```console
$ true
```
"""


def test_the_collector_finds_every_yaml_block_with_its_line_and_opt_out() -> None:
    page = collect(SAMPLE, "docs/sample.md")
    blocks = page.blocks
    assert [(b.line, b.not_applied) for b in blocks] == [
        (3, None),
        (11, None),
        (25, "a kubelet configuration file"),
        (32, "spaced reason"),
        (41, None),
        (46, None),
    ]
    assert blocks[0].where == "docs/sample.md:3"
    assert blocks[1].text.startswith("apiVersion: v1\nkind: ConfigMap\n"), "dedented as its fence"
    assert blocks[3].text == "```\nimage: ${IMAGE}\n", "a longer fence holds a shorter one"
    assert page.problems == [
        "docs/sample.md:45: a not-applied comment needs a reason: <!-- not-applied: <reason> -->",
        "docs/sample.md:50: a not-applied comment before no ```yaml block",
    ]


def test_documents_are_split_on_separators_and_keep_their_page_lines() -> None:
    blocks = collect(SAMPLE, "docs/sample.md").blocks
    found = documents(blocks[1])
    assert [(d.line, d.kubernetes_object is not None) for d in found] == [(12, True), (19, True)]
    assert [d.where for d in found] == ["docs/sample.md:12", "docs/sample.md:19"]
    assert found[1].content == {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "three"}}
    assert [d.kubernetes_object for d in documents(blocks[4])] == [None], "not an object: skipped"
    broken = Block("docs/sample.md", 10, "a: [b\nc: d\n")
    with pytest.raises(BookError, match=r"^docs/sample\.md:12: not valid YAML"):
        documents(broken)


def test_template_variables_are_found_with_their_line() -> None:
    blocks = collect(SAMPLE, "docs/sample.md").blocks
    assert template_variables(blocks[0]) is None
    assert (problem := template_variables(blocks[3])) is not None
    assert problem.startswith("docs/sample.md:34: `${` is clusterctl's template-variable syntax")
    assert "concrete values" in problem


def test_the_book_has_yaml_blocks_and_its_opt_outs_give_reasons() -> None:
    pages = book()
    assert [b for p in pages for b in p.blocks], "no ```yaml block found in docs/"
    assert [problem for p in pages for problem in p.problems] == []


# The book against the real apiserver.


@dataclass
class Namespaces:
    """The scratch namespace, and those the book's objects name that this module created."""

    kubectl: Kubectl
    scratch: str
    created: list[str] = field(default_factory=list)

    def ensure(self, name: str) -> None:
        if name in self.created or self.kubectl("get", "namespace", name, "--ignore-not-found", "-o", "name"):
            return
        self.kubectl("create", "namespace", name)
        self.created.append(name)


@pytest.fixture(scope="module")
def namespaces(control_plane: Cluster) -> Iterator[Namespaces]:
    kubectl = control_plane.kubectl
    found = Namespaces(kubectl, f"book-{secrets.token_hex(3)}")
    found.ensure(found.scratch)
    yield found
    for name in found.created:
        if name not in KEPT_NAMESPACES:
            kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def dry_run(namespaces: Namespaces, document: Document, obj: dict[str, Any]) -> None:
    """Apply `obj` with a server-side dry run; raise naming the document's page line if refused."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    if namespace:
        namespaces.ensure(str(namespace))
    where = ["-n", namespaces.scratch] if not namespace else []
    if metadata.get("name"):
        verb = ["apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}"]
    else:  # generateName: apply needs a name, create makes one up
        verb = ["create", f"--field-manager={FIELD_MANAGER}"]
    try:
        namespaces.kubectl(
            *verb, "--dry-run=server", "--validate=strict", *where, "-f", "-", stdin=json.dumps(obj)
        )
    except HarnessError as e:
        name = metadata.get("name") or metadata.get("generateName") or "(no name)"
        raise BookError(
            f"{document.where}: the apiserver refused {obj['kind']} {name} (block at line "
            f"{document.block.line}): {e}\n({OPT_OUT_HINT})"
        ) from None


@pytest.mark.integration
@pytest.mark.parametrize("block", BOOK_BLOCKS, ids=lambda b: b.where)
def test_every_yaml_block_of_the_book_is_accepted_by_the_apiserver(
    namespaces: Namespaces, block: Block
) -> None:
    if (problem := template_variables(block)) is not None:
        pytest.fail(problem, pytrace=False)
    if block.not_applied is not None:
        pytest.skip(f"not applied: {block.not_applied}")
    try:
        objects = [(d, o) for d in documents(block) if (o := d.kubernetes_object) is not None]
        if not objects:
            pytest.skip("no Kubernetes object in the block")
        refused = []
        for document, obj in objects:
            try:
                dry_run(namespaces, document, obj)
            except BookError as e:
                refused.append(str(e))
    except BookError as e:
        pytest.fail(str(e), pytrace=False)
    if refused:
        pytest.fail("\n\n".join(refused), pytrace=False)
