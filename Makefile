# The two commands of the README, and the local real control plane.
.PHONY: demo test setup cluster-build cluster-up portal-on-cluster bench

demo:            ## run the portal on its embedded defaults with demo data
	scripts/demo.sh

test:            ## run the whole suite on PostgreSQL, Redis, the real control plane and Chromium
	scripts/test.sh

setup:
	scripts/setup.sh
