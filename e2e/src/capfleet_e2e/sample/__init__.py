"""A minimal operator on capfleet's shared runtime, used to test the runtime itself.

It reconciles `Sample` objects (a test-only CRD in `crd.yaml`): it copies `spec.message` to
`status.echo` and reports Ready with the object's generation, honouring the CAPI paused annotation,
exactly as the real operators do. Tests run it as a subprocess: `python -m capfleet_e2e.sample`.
"""

from pathlib import Path

CRD_PATH = Path(__file__).with_name("crd.yaml")
