"""Where kopf keeps what it knows of each object, and how to keep it from writing when it need not.

kopf records, on every object it handles, the spec it last handled (an annotation) and the progress of
handlers that are retrying (more annotations, branded with a `kopf-managed` mark). For objects created by
the thousand, each of those is one more API write per object; these storages leave out what is not needed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import kopf

Handled = Callable[[Mapping[str, Any]], bool | None]
"""For objects that show by their own state whether they were handled (True or False), that answer;
None for every other object."""


class SelfRecordingDiffBase(kopf.DiffBaseStorage):
    """kopf's record of the spec it last handled (an annotation it writes after every handling), except
    for objects whose spec never changes and whose own state shows that they were handled: for those kopf
    writes nothing, which saves one write per object (IPAddressClaims, thousands of them in a burst).

    Such an object is new to kopf (its creation handlers run) until its state shows it handled, and
    unchanged ever after (resume handlers still run at startup).
    """

    def __init__(self, recorded: kopf.DiffBaseStorage, handled: Handled) -> None:
        super().__init__()
        self.recorded, self.handled = recorded, handled

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return self.recorded.build(body=body, extra_fields=extra_fields)

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        handled = self.handled(body)
        if handled is None:
            return self.recorded.fetch(body=body)
        return self.build(body=body) if handled else None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if self.handled(body) is None:
            self.recorded.store(body=body, patch=patch, essence=essence)


class ProgressStorage(kopf.AnnotationsProgressStorage):
    """kopf's progress annotations, without the mark that brands them (`<prefix>/kopf-managed`) when
    nothing of ours is left to mark: a handler that succeeds at once leaves no progress behind, and an
    object whose spec kopf need not record (`SelfRecordingDiffBase`) then needs no write of kopf's."""

    def purge(self, *, key: kopf.HandlerId, body: kopf.Body, patch: kopf.Patch) -> None:
        super().purge(key=key, body=body, patch=patch)
        ours = f"{self.prefix}/"
        marker = f"{ours}kopf-managed"
        annotations = patch.get("metadata", {}).get("annotations", {})
        if marker not in annotations or any(k.startswith(ours) for k in body.metadata.annotations):
            return
        if all(k == marker for k in annotations if k.startswith(ours)):
            del annotations[marker]
            if not annotations:
                del patch["metadata"]["annotations"]
            if not patch["metadata"]:
                del patch["metadata"]
