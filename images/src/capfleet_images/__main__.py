"""`python -m capfleet_images`: the same as the `capfleet-images` command (cli.py)."""

from __future__ import annotations

from capfleet_images.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
