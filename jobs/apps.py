from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"

    def ready(self) -> None:
        from jobs import checks, kinds, selectors, signals  # noqa: F401 - connects the receivers, registers the check
        from jobs.observability import WorkloadCollector
        from jobs.person_limits import by_person
        from jobs.selectors import flavor_of_pods, queues_in_use, team_contents, workloads_on_nodes, xids_on_node
        from portal.metrics.simulated import KIND_PROFILES
        from portal.observability import scrape_collector_register
        from tenants.cluster_selectors import CPU_UNITS_IN_USE
        from tenants.desired import QUEUES_IN_USE, WORKLOAD_KINDS
        from tenants.nodes import WORKLOADS_ON_NODES, XIDS_ON_NODE
        from tenants.selectors import PERSON_GPUS, TEAM_RECORDS_GOING
        from tenants.telemetry_selectors import FLAVOR_OF_PODS

        TEAM_RECORDS_GOING.subscribe(team_contents)
        FLAVOR_OF_PODS.fill(flavor_of_pods)
        KIND_PROFILES.fill(kinds.telemetry)
        WORKLOAD_KINDS.fill(kinds.network_reach)
        QUEUES_IN_USE.fill(queues_in_use)
        CPU_UNITS_IN_USE.fill(selectors.cpu_units_in_use)
        PERSON_GPUS.fill(by_person)
        WORKLOADS_ON_NODES.fill(workloads_on_nodes)
        XIDS_ON_NODE.fill(xids_on_node)
        scrape_collector_register(WorkloadCollector())
