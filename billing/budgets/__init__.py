"""Budgets: a team's monthly budget, the periodic check that alerts once per threshold per month
and holds a hard-stopped team's LocalQueue, the daily digest, and their pages and API."""
