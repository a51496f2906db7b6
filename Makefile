# capfleet's entry points. `make demo` and `make test` do all set-up on a fresh machine themselves.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
UV := uv run --frozen
# The slowest tests are listed at the end of every run: what to trim when a run nears CI's budget.
PYTEST_ARGS ?= --durations=25

.PHONY: help setup demo test lint typecheck crds crds-check clusterctl-components clusterctl-components-check \
	images release docs book book-check unit integration bench-ipam bench-fleet bench-console clean node-image \
	deploy-ramdisk test-full

## help: this list (every target documented with a `## target:` comment above it).
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); split($$0, part, ": "); printf "  %-28s %s\n", part[1], substr($$0, length(part[1]) + 3); next } \
	  /^## / { sub(/^## /, ""); printf "  %-28s %s\n", "", $$0 }' $(MAKEFILE_LIST)

## setup: what every other target needs on a fresh Debian machine, as root: packages, uv, the workspace,
## the Kubernetes and Cluster API binaries (hack/setup.sh; cached in ~/.cache/capfleet).
setup:
	bash hack/setup.sh

## node-image: build capfleet's node image (Debian + kubelet/kubeadm + preloaded images) into ~/.cache/capfleet.
node-image: setup
	$(UV) capfleet-images node

## deploy-ramdisk: build the ramdisk that writes an OS image to a bare-metal server's disk into ~/.cache/capfleet.
deploy-ramdisk: setup
	$(UV) capfleet-images ramdisk

## demo: a cluster of real nodes on VMs, from kubectl apply to Nodes Ready, then torn down and checked.
demo: setup
	$(UV) python -m capfleet_e2e.demo

## test: lint, type checks, generated-file checks (CRDs, clusterctl components), then every test but the
## slowest (marker `full`: the real-node suites, a three-node control plane with a rolling update,
## MachineHealthCheck remediation, bare-metal workers, a bare-metal server booting the node image from disk).
test: setup lint crds-check clusterctl-components-check docs
	$(UV) pytest -m "not full" $(PYTEST_ARGS)

## test-full: everything `make test` runs, plus the suites marked `full` (about an hour more without KVM).
test-full: setup lint crds-check clusterctl-components-check docs
	$(UV) pytest $(PYTEST_ARGS)

## docs: the book (docs/) with MkDocs into _site/, strict: a broken link, anchor or page left out of the
## navigation fails the build (after book-check).
docs: setup book-check
	NO_MKDOCS_2_WARNING=1 $(UV) mkdocs build --strict --quiet

## book: regenerate the book's generated pages: troubleshooting (every condition reason, from
## e2e/src/capfleet_e2e/reasoncatalogue/) and the API reference (from crds/).
book:
	$(UV) python -m capfleet_e2e.book generate

## book-check: fail when a generated page is stale, or the code sets a condition reason the catalogue
## does not document (or the catalogue documents one the code no longer sets).
book-check:
	$(UV) python -m capfleet_e2e.book check

## lint: ruff, mypy --strict (per workspace member) and import-linter's contracts.
lint: typecheck
	$(UV) ruff check .
	$(UV) ruff format --check .
	$(UV) lint-imports

## typecheck: mypy --strict alone, one run per workspace member (test modules of different members may
## share a file name).
typecheck:
	for member in shared e2e images console operators/*/; do $(UV) mypy $$member/src $$member/tests; done

crds:
	$(UV) python -m capfleet.crdgen generate crds

crds-check:
	$(UV) python -m capfleet.crdgen check crds

## clusterctl-components: regenerate deploy/clusterctl/: the providers' components from the kustomize overlays,
## and the cluster templates from deploy/clusterctl/parts/.
clusterctl-components: setup
	$(UV) python -m capfleet_e2e.clusterctl_components generate
	$(UV) python -m capfleet_e2e.clusterctl_templates generate

clusterctl-components-check: setup
	$(UV) python -m capfleet_e2e.clusterctl_components check
	$(UV) python -m capfleet_e2e.clusterctl_templates check

## images: build the five operator images and the console's (docker, podman or buildah, whichever is found first;
## here from a base made of Debian's packages) and write them as OCI archives (hack/images.sh).
OPERATORS := ipam-address netbox-device libvirt-vm baremetal-provision capi-machine-glue console
IMAGE_REGISTRY ?= capfleet
IMAGE_VERSION := $(shell sed -n 's/^VERSION = "\(.*\)"$$/\1/p' shared/src/capfleet/runtime.py)
IMAGE_TAG ?= v$(IMAGE_VERSION)
IMAGE_SOURCE ?= https://capfleet.dev/source
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
images:
	OPERATORS="$(OPERATORS)" $(if $(filter undefined,$(origin CONTAINER_ENGINE)),,CONTAINER_ENGINE="$(CONTAINER_ENGINE)") IMAGE_REGISTRY="$(IMAGE_REGISTRY)" IMAGE_TAG="$(IMAGE_TAG)" VERSION="$(IMAGE_VERSION)" \
	  REVISION="$(IMAGE_REVISION)" SOURCE="$(IMAGE_SOURCE)" bash hack/images.sh

## release: a release in dist/ (VERSION=x.y.z): clusterctl's repository layout for infrastructure-capfleet
## and ipam-capfleet with every image pinned by digest, the six images as OCI archives, an SBOM per image
## (CycloneDX, from uv.lock), a clusterctl.yaml pointing at it and SHA256SUMS.
release: setup
	@test -n "$(VERSION)" || { echo "make release: set VERSION=x.y.z" >&2; exit 2; }
	$(UV) python -m capfleet_e2e.release --version $(VERSION) $(if $(DIST),--dist $(DIST))

## unit: the tests that need no lab (marker `not integration`): only uv and the Python workspace, no
## Debian packages; a test that renders manifests builds kustomize from Go modules on first use.
unit:
	command -v uv >/dev/null || python3 -m pip install --quiet uv
	uv sync --frozen --quiet
	$(UV) pytest -m "not integration" $(PYTEST_ARGS)

## integration: the integration tests but the slowest (what `make test` runs after `make unit`'s).
integration: setup
	$(UV) pytest -m "integration and not full" $(PYTEST_ARGS)

## bench-ipam: ipam-address against the Go in-cluster IPAM provider, CLAIMS claims each (default 1,000; up
## to 16,381; not part of test).
CLAIMS ?= 1000
bench-ipam: setup
	$(UV) python -m capfleet_e2e.bench.ipam --claims $(CLAIMS)

## bench-fleet: N workers (default 100; VMS of them VMs, default half) through Cluster API and capfleet's
## fleet, side by side with CAPI's floor for N Machines (CAPD's in-memory backend) on one control plane
## (not part of test).
N ?= 100
VMS ?=
bench-fleet: setup
	$(UV) python -m capfleet_e2e.bench.fleet --machines $(N) $(if $(VMS),--vms $(VMS))

## bench-console: the console's VM list page load with 500 VMs in a namespace, and with 50 (not part of test).
bench-console: setup
	$(UV) python -m capfleet_e2e.bench.console

clean:
	rm -rf _artifacts .pytest_cache .mypy_cache .ruff_cache
