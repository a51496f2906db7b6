"""Entry point of the sample operator: `python -m capfleet_e2e.sample`."""

from capfleet import reconciling, runtime
from capfleet_e2e.sample import handlers


def main() -> None:
    runtime.run(handlers.IDENTITY, reconciling.Settings)


if __name__ == "__main__":
    main()
