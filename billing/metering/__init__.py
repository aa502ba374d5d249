"""The metering engine: run intervals become hourly rollups (UsageHour, CapacityHour, GuaranteeHour,
LentHour).

How a second is counted
    An interval [started_at, ended_at) is cut at whole seconds (instants are truncated, so two
    intervals that meet share no second), then split at every local hour boundary of the billing
    time zone, at every rate change of its flavor (Rate.effective_from) and at every moment its
    workload moved between guaranteed and borrowed quota (RunIntervalSwitch). Each piece lands in
    exactly one UsageHour row: the hour it lies in, the interval's account, flavor, owner,
    borrowed state, rate and fraction. A still-open interval counts up to the refresh's `until`.

How the rollups stay current (incremental, idempotent)
    `MeteringState.metered_until` is the watermark W. A refresh up to `until` recomputes from
    scratch every hour from the one holding W up to `until` (the open hour is always recomputed),
    plus, in any older hour an interval changed since it was metered, the rows of that interval's
    account (a row holds one account's intervals, so the other accounts' rows there are exact
    already). An interval a refresh has seen (`metered_until` set) is in the rollups up to W while
    it is open; one that appeared late marks the hours from its start as dirty, and one that closed
    before W marks the hours between its end and W. An interval metered to its end is `settled` and
    never read again, so a refresh reads only new and newly closed intervals to find its hours (the
    open ones are in the hours it recomputes anyway), not the month. Recomputing an hour, or an
    account's rows in it, makes them equal a computation from scratch, so running a refresh twice,
    or after a crash, gives the same rows.

Capacity and guarantees are recorded as time passes
    A flavor's capacity has no history in the catalog, and a deleted team's grants are gone with
    it, so CapacityHour and GuaranteeHour rows are written for the hours a refresh moves the
    watermark across (the open hour up to `until`) and kept afterwards. Rows of an account
    whose team is deleted are never rewritten.

The monthly level and each flavor's hourly use (UsageMonth, FlavorHour)
    hold exactly the hourly rows of the complete hours: those before `MeteringState.months_through`,
    the hour holding the watermark. A refresh folds into them what it changed in complete hours
    (the difference between the rows it read and the rows it wrote: late intervals) and the hours
    its watermark crossed, so the open hour, rewritten every minute, never touches them; readers
    add the open hours' UsageHour rows in the same statement. A state without `months_through`
    (rows made before this level existed) is filled from the hourly rows once.

Lent hours follow the usage
    Every hour a refresh recomputes gets its LentHour rows again from that hour's usage (every
    account's: summed from the stored rows where only some accounts' were recomputed) and the
    stored guarantees, by `billing.ledger.lent_rows` (the one rule), so the ledger reads who lent
    what without reading every team's hours.

The modules: `rows` (from scratch), `store` and `sql` (the writes), `months` (the monthly level),
`refresh` (the refresh and the watermark), `verify` (`manage.py billing_verify`).
"""


from billing.metering.months import months_rebuild
from billing.metering.refresh import rollups_refresh, watermark
from billing.metering.rows import Window, usage_rows
from billing.metering.verify import pending, recompute

__all__ = ["Window", "months_rebuild", "pending", "recompute", "rollups_refresh", "usage_rows", "watermark"]
