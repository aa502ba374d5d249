# The two commands of the README, and the local real control plane.
.PHONY: demo test lint setup cluster-build cluster-up portal-on-cluster bench soak image fuzz chart-rules

demo:            ## run the portal on its embedded defaults with demo data
	scripts/demo.sh

test:            ## run the whole suite on PostgreSQL, Redis, the real control plane and Chromium
	scripts/test.sh

lint:            ## ruff and mypy, as `make test` runs them first
	scripts/setup.sh && scripts/lint.sh

setup:
	scripts/setup.sh

cluster-build:   ## build (or reuse) the real control plane binaries, Volcano and helm in ~/.cache/gpu-portal
	scripts/setup.sh && .venv/bin/python -m tests.cluster build && bash tests/cluster/build-volcano.sh && bash tests/cluster/build-helm.sh

cluster-up:      ## start the local real control plane with the demo GPU nodes (Ctrl-C stops it)
	scripts/setup.sh && mkdir -p var && .venv/bin/python -m tests.cluster up --kubeconfig-out var/kubeconfig

portal-on-cluster: ## the demo portal against the control plane that `make cluster-up` runs
	PORTAL_CLUSTER=kubernetes KUBECONFIG=$(CURDIR)/var/kubeconfig PORTAL_VAR_DIR=$(CURDIR)/var/on-cluster scripts/demo.sh

bench:           ## the benchmarks, against a control plane they start themselves
	scripts/setup.sh && .venv/bin/python benchmarks/onboarding.py
	scripts/with-services.sh .venv/bin/python benchmarks/workloads.py --sweep 10,20,30,40,60
	scripts/with-services.sh .venv/bin/python benchmarks/scale_envelope.py --launched 1000 --pods-ready-timeout 3600 --settle-timeout 3600
	.venv/bin/python benchmarks/live_page.py
	.venv/bin/python benchmarks/cli.py
	scripts/with-services.sh .venv/bin/python benchmarks/billing_rollups.py
	scripts/with-services.sh .venv/bin/python benchmarks/billing_pages.py
	scripts/with-services.sh .venv/bin/python benchmarks/billing_close.py
	scripts/with-services.sh .venv/bin/python benchmarks/nodes_page.py
	scripts/with-services.sh .venv/bin/python benchmarks/capacity_calendar.py
	PORTAL_FAULT_SCALE=full scripts/with-services.sh .venv/bin/pytest -q -s -p no:cacheprovider tests/portal/test_worker_killed.py tests/portal/test_redis_outage.py
	scripts/with-services.sh .venv/bin/python benchmarks/load_pages.py
	scripts/apt.sh haproxy && scripts/with-services.sh .venv/bin/python benchmarks/scale_out.py
	.venv/bin/python benchmarks/telemetry.py

soak:            ## the demo's processes under steady launches for 30 minutes (SQLite, file-system broker)
	scripts/setup.sh && .venv/bin/python benchmarks/soak_demo.py --minutes 30

image:           ## build the container image from Dockerfile without Docker (buildah on an mmdebstrap base), then smoke-run it
	scripts/build-image.sh
fuzz:            ## Schemathesis over the whole API as every role, 25 cases per operation, role and mode, on PostgreSQL
	scripts/setup.sh && PORTAL_FUZZ_EXAMPLES=25 scripts/with-services.sh .venv/bin/pytest -q -s -p no:cacheprovider tests/portal/test_api_fuzz.py

chart-rules:     ## copy deploy/prometheus's recording and alerting rules into the chart's PrometheusRule file
	.venv/bin/python scripts/chart_rules.py
