"""Where kopf keeps what it knows of each object, and how to keep it from writing when it need not.

kopf records, on every object it handles, the spec it last handled (an annotation) and the progress of
handlers that are retrying (more annotations, branded with a `kopf-managed` mark). For objects created by
the thousand, each of those is one more API write per object; these storages leave out what is not needed.
"""

from __future__ import annotations

import kopf


class ProgressStorage(kopf.AnnotationsProgressStorage):
    """kopf's progress annotations, without the mark that brands them (`<prefix>/kopf-managed`) when
    nothing of ours is left to mark: a handler that succeeds at once leaves no progress behind."""

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
