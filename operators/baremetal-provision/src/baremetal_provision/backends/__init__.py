"""The external systems baremetal-provision drives: servers' BMCs, each behind a small Protocol."""
