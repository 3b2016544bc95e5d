# gpufleet — the two commands a newcomer needs: `make validate` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha256sum requirements.txt | cut -c1-12)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup validate lab lab-down bench test lint sanity unit integration fuzz molecule docker image ee clean

setup: $(STAMP)

$(STAMP): requirements.txt
	bash scripts/setup.sh "$(VENV)"
	touch "$@"

## Main job: validate this machine (inventories/local) and print a readiness result.
validate: setup
	$(BIN)/ansible-playbook -i inventories/local/hosts.yml playbooks/validate.yml

## Main job: a 3-container lab with simulated GPU/RDMA hardware, site.yml, validation, HTML report.
lab: setup
	bash scripts/lab-up.sh

lab-down:
	bash scripts/lab-down.sh

## Fleet validation benchmark (N = 50, 200; BENCH_ARGS=--large adds 1000).
bench: setup
	$(PY) bench/fleet_validate.py $(BENCH_ARGS)

## Everything CI runs: lint, unit + integration tests, molecule scenarios.
test: setup
	bash scripts/test.sh

sanity: setup
	bash scripts/sanity.sh

lint: setup
	bash scripts/lint.sh

unit: setup
	$(BIN)/pytest -q tests/unit

integration: setup
	$(BIN)/pytest -q tests/integration

## Fuzz target (not in `make test`): 10,000 hostile sysfs trees + 10,000 parser inputs, 2 s watchdog each.
fuzz: setup
	$(PY) tests/fuzz/run_fuzz.py $(FUZZ_ARGS)

molecule: setup
	bash scripts/molecule-all.sh

docker:
	bash scripts/docker-up.sh

image: docker
	bash scripts/build-test-image.sh

## The execution environment image, built here with ansible-builder (docs/awx.md); prints its name.
ee: setup docker
	bash scripts/ee-build.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis reports
