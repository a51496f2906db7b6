"""Entry point: `python -m capi_machine_glue` starts the capi-machine-glue operator, as its container image
does.
"""

from capfleet import runtime
from capi_machine_glue import handlers
from capi_machine_glue.settings import GlueSettings


def main() -> None:
    runtime.run(handlers.IDENTITY, GlueSettings, connected=handlers.start_engines)


if __name__ == "__main__":
    main()
