"""Usage and cost as the pages and the API show them, read from the hourly rollups: a team's month
and its forecast, a person's month, the finance overview, any grouping over any period, and a
workload's own figures."""
