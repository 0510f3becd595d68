# spot-broker — the two commands a new user needs: `make demo` and `make test`.
# Both install what they need on a fresh machine (a venv in .venv; Debian
# packages for the test suite) and are safe to run again.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip -q --disable-pip-version-check
CONSTRAINTS := requirements/constraints.txt
CHECKOV_VENV ?= .venv-checkov
CHECKOV_VERSION := 3.3.30

DEMO_EXTRAS := torch
TEST_EXTRAS := redis,s3,gcs,skypilot,slack,torch,dev

.PHONY: demo test install-demo install-test apt-deps checkov-venv serve clean bench

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# A stamp per extras set, redone when pyproject.toml changes.
# Versions come from $(CONSTRAINTS): the same set on every machine, resolved without backtracking.
$(VENV)/.demo-installed: pyproject.toml $(CONSTRAINTS) | $(VENV)/bin/python
	$(PIP) install -c $(CONSTRAINTS) -e '.[$(DEMO_EXTRAS)]'
	touch $@

$(VENV)/.test-installed: pyproject.toml $(CONSTRAINTS) | $(VENV)/bin/python
	$(PIP) install -c $(CONSTRAINTS) -e '.[$(TEST_EXTRAS)]'
	touch $@ $(VENV)/.demo-installed

install-demo: $(VENV)/.demo-installed
install-test: $(VENV)/.test-installed apt-deps checkov-venv

# Debian packages the tests drive for real: redis-server (own AOF instances),
# chromium (dashboard test through Playwright), rsync (SkyPilot file mounts), and the
# aws CLI (the real SkyPilot API server runs `aws configure list` in its cloud check),
# prometheus (a real Prometheus scrapes the broker in one test), systemd (systemd-analyze verifies
# deploy/spot-broker.service), faketime (a broker whose clock is off the store's). apt waits up to 10 minutes for
# another apt (an unattended upgrade, a second checkout's install) to let go of its lock; apt-get
# update's list lock does not honour DPkg::Lock::Timeout (apt 2.6), so update is tried again itself.
apt-deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v rsync >/dev/null || missing="$$missing rsync"; \
	command -v aws >/dev/null || missing="$$missing awscli"; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	command -v systemd-analyze >/dev/null || missing="$$missing systemd"; \
	command -v faketime >/dev/null || missing="$$missing faketime"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  tries=0; until apt-get -o DPkg::Lock::Timeout=600 update -qq; do \
	    tries=$$((tries + 1)); [ $$tries -lt 60 ] || exit 1; \
	    echo "apt's list lock is held (another apt-get update): trying again in 10 s"; sleep 10; \
	  done && \
	  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $$missing >/dev/null; \
	fi

# checkov pins an old boto3 that breaks s3fs, so it lives in its own venv.
$(CHECKOV_VENV)/bin/checkov:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip -q --disable-pip-version-check install 'checkov==$(CHECKOV_VERSION)'
checkov-venv: $(CHECKOV_VENV)/bin/checkov

demo: install-demo
	$(PY) examples/demo.py

# Two pytest-xdist workers, a file each at a time (a file's module fixtures stay in one process): most
# tests wait on real processes and servers, so two workers on two cores take well under the serial
# time (measured on a 2-core host: 770 s serial, 448 s on two workers). TEST_WORKERS=0 runs the suite
# in this one process.
TEST_WORKERS ?= 2
test: install-test
	CHECKOV=$(abspath $(CHECKOV_VENV))/bin/checkov $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

serve: install-demo
	$(VENV)/bin/broker serve

# benchmarks/policy.py as docs/benchmarks.md's policy tables were measured (its own default is --robust-windows 300)
bench: install-test
	$(PY) benchmarks/api.py
	$(PY) benchmarks/recovery.py
	$(PY) benchmarks/checkpoint.py
	nice -n 10 $(PY) benchmarks/policy.py --robust-windows 100

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .pytest_cache
