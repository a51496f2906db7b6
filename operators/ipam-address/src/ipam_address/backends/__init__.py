"""External systems ipam-address talks to, each behind a small Protocol."""
