# capfleet's entry points. `make demo` and `make test` do all set-up on a fresh machine themselves.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
UV := uv run --frozen
PYTEST_ARGS ?=

.PHONY: setup demo test lint typecheck crds crds-check unit integration bench-ipam clean

setup:
	bash hack/setup.sh

## demo: start a local control plane with capfleet and show what exists today.
demo: setup
	$(UV) python -m capfleet_e2e.demo

## test: lint, type checks, generated-CRD check, then every test (unit and integration).
test: setup lint crds-check
	$(UV) pytest $(PYTEST_ARGS)

lint:
	$(UV) ruff check .
	$(UV) ruff format --check .
	# One mypy run per member: test modules of different members may share a file name.
	for member in shared e2e operators/*; do $(UV) mypy $$member/src $$member/tests; done
	$(UV) lint-imports

crds:
	$(UV) python -m capfleet.crdgen generate crds

crds-check:
	$(UV) python -m capfleet.crdgen check crds

unit: setup
	$(UV) pytest -m "not integration" $(PYTEST_ARGS)

integration: setup
	$(UV) pytest -m integration $(PYTEST_ARGS)

## bench-ipam: ipam-address against the Go in-cluster IPAM provider, 1,000 claims each (not part of test).
bench-ipam: setup
	$(UV) python -m capfleet_e2e.bench.ipam

clean:
	rm -rf _artifacts .pytest_cache .mypy_cache .ruff_cache
