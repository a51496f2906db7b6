"""capfleet's shared kit. Importing it first makes kubernetes_asyncio lazy (see lean_imports.py)."""

from capfleet import lean_imports

lean_imports.install()
