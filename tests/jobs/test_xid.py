"""XID errors on a workload's GPU: recorded once by the sweep, told to the owner and platform
admins, shown with their meaning on the workload page, and a hardware XID's GPU time credited."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from billing import metering
from billing.models import Adjustment
from billing.statements.services import statement_close
from jobs import sync, xid
from jobs.models import GpuXidEvent, Workload
from portal.models import AuditEvent, Notification
from tests.billing.factories import rate
from tests.billing.metering_helpers import make_interval, make_workload
from tests.conftest import login
from tests.helpers import launch

pytestmark = pytest.mark.django_db
UTC = dt.UTC


@pytest.fixture
def running_job(ready_team, member, training, flavor, simulated, gpu_metrics, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = launch(member, ready_team, training, flavor)
    simulated.advance(1)
    sync.sync_all()
    job.refresh_from_db()
    assert job.phase == Workload.Phase.RUNNING
    return job


def _xid(gpu_metrics, workload: Workload, code: int) -> None:
    pod = workload.intervals.get(ended_at__isnull=True).pod_name
    gpu_metrics.set_xid(namespace=workload.team.namespace, pod=pod, code=code)


def test_a_hardware_xid_is_recorded_once_told_to_owner_and_admins_and_shown_with_its_meaning(
        running_job, gpu_metrics, member, admin_user, django_capture_on_commit_callbacks):
    _xid(gpu_metrics, running_job, 79)
    with django_capture_on_commit_callbacks(execute=True):
        (event,) = xid.xid_sweep()
    assert xid.xid_sweep() == []  # the next sweep sees the same change: still one event
    assert (event.code, event.hardware, event.workload_id) == (79, True, running_job.pk)
    for person in (member, admin_user):
        (note,) = Notification.objects.filter(recipient=person)
        assert "XID 79 (the GPU fell off the bus" in note.message and "not billed" in note.message
    assert AuditEvent.objects.filter(action="workload.gpu_xid").count() == 1
    page = login(member).get(f"/workloads/{running_job.pk}/").content.decode()
    assert "GPU errors (XID)" in page and "the GPU fell off the bus" in page and "not billed" in page


def test_an_application_xid_is_shown_as_the_programs_fault_and_stays_billed(running_job, gpu_metrics, member):
    _xid(gpu_metrics, running_job, 13)
    (event,) = xid.xid_sweep()
    assert not event.hardware
    page = login(member).get(f"/workloads/{running_job.pk}/").content.decode()
    assert "usually the application&#x27;s own fault" in page and "Billed: usually the program" in page


def test_another_team_never_sees_the_xids_of_a_workload(running_job, gpu_metrics, outsider):
    _xid(gpu_metrics, running_job, 48)
    xid.xid_sweep()
    assert login(outsider).get(f"/workloads/{running_job.pk}/").status_code == 404


def test_an_exporter_outage_records_nothing(running_job, gpu_metrics):
    _xid(gpu_metrics, running_job, 79)
    gpu_metrics.set_outage(True)
    assert xid.xid_sweep() == [] and not GpuXidEvent.objects.exists()


def test_closing_the_month_credits_the_gpu_time_after_a_hardware_xid_and_nothing_for_an_application_one(
        team, member, flavor, finance_user):
    rate(flavor, "2.00", effective_from=dt.datetime(2026, 9, 1, tzinfo=UTC))
    broken = make_workload(team=team, owner=member, flavor=flavor, units=2, name="broken")
    pod = make_interval(broken, dt.datetime(2026, 10, 10, 8, tzinfo=UTC), dt.datetime(2026, 10, 10, 14, tzinfo=UTC))
    GpuXidEvent.objects.create(workload=broken, pod_name=pod.pod_name, gpu="GPU-1", code=79, hardware=True,
                               at=dt.datetime(2026, 10, 10, 11, 30, tzinfo=UTC))
    buggy = make_workload(team=team, owner=member, flavor=flavor, name="buggy")
    other = make_interval(buggy, dt.datetime(2026, 10, 11, 8, tzinfo=UTC), dt.datetime(2026, 10, 11, 9, tzinfo=UTC))
    GpuXidEvent.objects.create(workload=buggy, pod_name=other.pod_name, gpu="GPU-2", code=13, hardware=False,
                               at=dt.datetime(2026, 10, 11, 8, 30, tzinfo=UTC))
    broken.delete()  # the credit outlives the workload, as its usage does
    metering.rollups_refresh()

    statement = statement_close(actor=finance_user, month=dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 2, tzinfo=UTC))

    (credit,) = Adjustment.objects.filter(statement=statement)
    assert credit.amount == Decimal("-10.000")  # 2 GPUs × 2.5 h after the XID × 2.00 USD
    assert credit.account_slug == "vision"
    assert credit.reason.startswith(f"Credit: 5.00 GPU-hours of pod {pod.pod_name}")
    assert "XID 79 on GPU-1 at 2026-10-10 11:30 UTC" in credit.reason
    assert "1 credits for GPU time after hardware XIDs" in AuditEvent.objects.get(action="statement.closed").message
