"""The real gateway's handling of what a busy or forgetful API server answers, against a small
HTTP server that answers as the API server would; and the simulated cluster's watch expiry."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client as k8s_client

from portal.kube import KubeError, ObjectRef
from portal.kube.kubernetes import KubernetesGateway, TokenBucket
from portal.kube.simulated import SimulatedGateway
from portal.kube.simulated.models import SimulatedEvent

DROP = None  # a scripted status that closes the connection without an answer


class FakeApiServer:
    """Answers each request with the next scripted (status, body) or (status, body, headers)
    for its path; a status of DROP hangs up instead."""

    def __init__(self, script: dict[str, list[tuple[Any, ...]]]) -> None:
        self.script = script
        self.seen: list[tuple[str, str]] = []  # (method, path) of each request
        self.slept: list[float] = []  # what the gateway waited between attempts
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                path = self.path.split("?")[0]
                server.seen.append((self.command, self.path))
                status, body, *headers = server.script[path].pop(0)
                if status is DROP:
                    self.close_connection = True
                    return
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_DELETE = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def gateway(self) -> KubernetesGateway:
        configuration = k8s_client.Configuration()
        configuration.host = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        return KubernetesGateway(configuration, max_attempts=3, sleep=self.slept.append)

    def close(self) -> None:
        self.httpd.shutdown()


@pytest.fixture
def api_server() -> Iterator[Any]:
    servers: list[FakeApiServer] = []

    def make(script: dict[str, list[tuple[Any, ...]]]) -> FakeApiServer:
        servers.append(FakeApiServer(script))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


NS_PATH = "/api/v1/namespaces/vision"


def test_overload_and_server_errors_are_retried_then_succeed(api_server):
    server = api_server({
        NS_PATH: [(429, {"message": "slow down"}), (503, "unavailable"), (200, {"metadata": {"name": "vision"}})],
    })
    answer = server.gateway().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision"}})
    assert answer == {"metadata": {"name": "vision"}}
    assert [method for method, _ in server.seen] == ["PATCH", "PATCH", "PATCH"]
    assert "fieldManager=gpu-portal" in server.seen[0][1] and "force=true" in server.seen[0][1]


def test_retries_are_bounded_and_the_last_error_names_the_object(api_server):
    server = api_server({NS_PATH: [(503, {"message": "etcd is down"})] * 3})
    with pytest.raises(KubeError, match="^Namespace vision: etcd is down$") as failed:
        server.gateway().get(ObjectRef("v1", "Namespace", "vision"))
    assert failed.value.status == 503 and len(server.seen) == 3


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_each_transient_status_is_retried_until_the_gateways_budget_is_spent(api_server, status):
    server = api_server({NS_PATH: [(status, {"message": "try later"})] * 3})
    with pytest.raises(KubeError) as failed:
        server.gateway().get(ObjectRef("v1", "Namespace", "vision"))
    assert failed.value.status == status and failed.value.retriable
    assert len(server.seen) == 3 and len(server.slept) == 2


def test_a_dropped_connection_is_retried_then_succeeds(api_server):
    server = api_server({NS_PATH: [(DROP, None), (DROP, None), (200, {"metadata": {"name": "vision"}})]})
    assert server.gateway().get(ObjectRef("v1", "Namespace", "vision")) == {"metadata": {"name": "vision"}}
    assert len(server.seen) == 3 and len(server.slept) == 2


def test_a_server_that_keeps_hanging_up_is_a_retriable_error_after_the_budget(api_server):
    server = api_server({NS_PATH: [(DROP, None)] * 3})
    with pytest.raises(KubeError, match="the API server did not answer") as failed:
        server.gateway().get(ObjectRef("v1", "Namespace", "vision"))
    assert failed.value.status is None and failed.value.retriable
    assert len(server.seen) == 3


def test_retry_after_is_waited_out_never_shortened(api_server):
    server = api_server({
        NS_PATH: [(429, {"message": "slow down"}, {"Retry-After": "3"}), (200, {"metadata": {"name": "vision"}})],
    })
    server.gateway().get(ObjectRef("v1", "Namespace", "vision"))
    (waited,) = server.slept
    assert 3 <= waited <= 4.5


def test_a_retry_after_longer_than_a_caller_should_wait_is_handed_to_the_task_at_once(api_server):
    server = api_server({NS_PATH: [(429, {"message": "slow down"}, {"Retry-After": "120"})]})
    with pytest.raises(KubeError) as failed:
        server.gateway().get(ObjectRef("v1", "Namespace", "vision"))
    assert failed.value.status == 429 and failed.value.retriable
    assert len(server.seen) == 1 and server.slept == []


def test_validation_and_conflict_errors_are_not_retried_and_say_why(api_server):
    invalid = {"kind": "Status", "code": 422, "reason": "Invalid", "message": "long machine text",
               "details": {"causes": [{"field": "spec.resourceGroups[0].flavors[0].name", "message": "Required value"}]}}
    server = api_server({"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/vision": [(422, invalid)]})
    with pytest.raises(KubeError) as refused:
        server.gateway().apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "vision"}})
    assert str(refused.value) == (
        "ClusterQueue vision: rejected as invalid: spec.resourceGroups[0].flavors[0].name: Required value"
    )
    assert not refused.value.retriable
    assert len(server.seen) == 1 and server.slept == []


QUOTA_RACE = {"kind": "Status", "code": 409, "reason": "Conflict",
              "message": 'Operation cannot be fulfilled on resourcequotas "vision-quota": the object has been modified; '
                         "please apply your changes to the latest version and try again",
              "details": {"name": "vision-quota", "kind": "resourcequotas"}}
JOB_PATH = "/apis/batch/v1/namespaces/vision/jobs/train-1"
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train-1", "namespace": "vision"}}


def test_a_job_refused_because_quota_admission_lost_a_race_is_sent_again(api_server):
    """Creating many Jobs at once, the quota plugin's update of the namespace's usage can lose
    to another's: a 409 about the ResourceQuota, not the Job. Seen failing a launch under load."""
    server = api_server({JOB_PATH: [(409, QUOTA_RACE), (200, {"metadata": {"name": "train-1"}})]})
    assert server.gateway().apply(JOB) == {"metadata": {"name": "train-1"}}
    assert len(server.seen) == 2 and len(server.slept) == 1


def test_a_quota_race_that_does_not_clear_ends_after_the_budget_in_words(api_server):
    server = api_server({JOB_PATH: [(409, QUOTA_RACE)] * 3})
    said = "^Job vision/train-1: conflict: Operation cannot be fulfilled on resourcequotas"
    with pytest.raises(KubeError, match=said) as failed:
        server.gateway().apply(JOB)
    assert failed.value.status == 409 and len(server.seen) == 3


def test_a_conflict_on_the_object_itself_is_not_sent_again(api_server):
    mine = {**QUOTA_RACE, "details": {"name": "train-1", "kind": "jobs"}}
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "vision-quota", "namespace": "vision"}}
    server = api_server({JOB_PATH: [(409, mine)], "/api/v1/namespaces/vision/resourcequotas/vision-quota": [(409, QUOTA_RACE)]})
    for obj in (JOB, quota):
        with pytest.raises(KubeError) as refused:
            server.gateway().apply(obj)
        assert refused.value.status == 409
    assert len(server.seen) == 2 and server.slept == []


def test_a_watch_whose_version_expired_lists_afresh_and_goes_on(api_server):
    expired = json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}) + "\n"
    modified = json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": "b", "resourceVersion": "12"}}}) + "\n"
    listing = {"metadata": {"resourceVersion": "11"}, "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    server = api_server({"/api/v1/namespaces": [(200, expired), (200, listing), (200, modified)]})

    events = list(itertools.islice(server.gateway().watch("v1", "Namespace", resource_version="5", timeout_seconds=30), 2))

    assert events[0].type == "RELISTED"
    assert [item["metadata"]["name"] for item in events[0].object["items"]] == ["a", "b"]
    assert events[0].object["items"][0]["kind"] == "Namespace"
    assert (events[1].type, events[1].object["metadata"]["name"]) == ("MODIFIED", "b")
    assert "resourceVersion=11" in server.seen[2][1]


def test_a_list_sends_its_field_selector_beside_the_label_selector(api_server):
    listing = {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "wl-1-abcde.1"}}]}
    server = api_server({"/api/v1/namespaces/vision/events": [(200, listing)]})
    items, version = server.gateway().list("v1", "Event", namespace="vision", labels={"a": "b"},
                                           fields={"involvedObject.name": "wl-1-abcde", "type": "Warning"})
    assert ([item["metadata"]["name"] for item in items], version) == (["wl-1-abcde.1"], "7")
    query = parse_qs(urlsplit(server.seen[0][1]).query)
    assert query["fieldSelector"] == ["involvedObject.name=wl-1-abcde,type=Warning"] and query["labelSelector"] == ["a=b"]


def test_a_paged_list_returns_every_item_across_continue_tokens_and_the_first_pages_version(api_server):
    pages = [
        (200, {"metadata": {"resourceVersion": "40", "continue": "t1"}, "items": [{"metadata": {"name": "a"}}]}),
        (200, {"metadata": {"resourceVersion": "40", "continue": "t2"}, "items": [{"metadata": {"name": "b"}}]}),
        (200, {"metadata": {"resourceVersion": "40"}, "items": [{"metadata": {"name": "c"}}]}),
    ]
    server = api_server({"/api/v1/namespaces": pages})
    items, version = server.gateway().list("v1", "Namespace", labels={"app.kubernetes.io/managed-by": "gpu-portal"})
    assert ([item["metadata"]["name"] for item in items], version) == (["a", "b", "c"], "40")
    assert {(item["apiVersion"], item["kind"]) for item in items} == {("v1", "Namespace")}
    queries = [parse_qs(urlsplit(path).query) for _, path in server.seen]
    assert [query.get("continue") for query in queries] == [None, ["t1"], ["t2"]]
    assert all(query["labelSelector"] == ["app.kubernetes.io/managed-by=gpu-portal"] for query in queries)


def test_listing_several_kinds_at_once_answers_each_kind_with_all_its_pages(api_server):
    server = api_server({
        "/api/v1/namespaces": [(200, {"metadata": {"continue": "t1"}, "items": [{"metadata": {"name": "a"}}]}),
                               (200, {"metadata": {}, "items": [{"metadata": {"name": "b"}}]})],
        "/api/v1/resourcequotas": [(200, {"metadata": {}, "items": [{"metadata": {"name": "quota", "namespace": "a"}}]})],
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues": [(200, {"metadata": {}, "items": []})],
    })
    kinds = [("v1", "Namespace"), ("v1", "ResourceQuota"), ("kueue.x-k8s.io/v1beta2", "ClusterQueue")]
    listed = server.gateway().list_kinds(kinds, labels={"team": "vision"})
    assert {kind: [item["metadata"]["name"] for item in items] for (_, kind), items in listed.items()} == {
        "Namespace": ["a", "b"], "ResourceQuota": ["quota"], "ClusterQueue": []}
    assert all("labelSelector=team%3Dvision" in path for _, path in server.seen)


@pytest.mark.parametrize("failing", [0, 2])
def test_listing_several_kinds_at_once_raises_what_any_kind_failed_with(api_server, failing):
    kinds = [("v1", "Namespace"), ("v1", "ResourceQuota"), ("kueue.x-k8s.io/v1beta2", "ClusterQueue")]
    paths = ["/api/v1/namespaces", "/api/v1/resourcequotas", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"]
    forbidden = (403, {"kind": "Status", "reason": "Forbidden", "message": "cannot list this kind"})
    server = api_server({path: [forbidden if index == failing else (200, {"metadata": {}, "items": []})]
                         for index, path in enumerate(paths)})
    with pytest.raises(KubeError, match="cannot list this kind") as raised:
        server.gateway().list_kinds(kinds)
    assert raised.value.status == 403
    assert sorted(path.split("?")[0] for _, path in server.seen) == sorted(paths)  # every kind was still asked


def test_the_simulated_cluster_lists_several_kinds_as_it_lists_each(db):
    cluster = SimulatedGateway()
    for name in ("vision", "speech"):
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": name}}})
    kinds = [("v1", "Namespace"), ("v1", "ResourceQuota")]
    listed = cluster.list_kinds(kinds, labels={"team": "vision"})
    assert listed == {kind: cluster.list(*kind, labels={"team": "vision"})[0] for kind in kinds}
    assert [item["metadata"]["name"] for item in listed[("v1", "Namespace")]] == ["vision"]


class FakeClock:
    """Time that passes only when someone sleeps, or the test moves it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_rate_limit_lets_a_burst_through_then_paces_calls():
    clock = FakeClock()
    bucket = TokenBucket(qps=50, burst=5, clock=clock, sleep=clock.sleep)

    for _ in range(5):
        bucket.take()
    assert clock.slept == []
    for _ in range(5):
        bucket.take()
    assert clock.slept == pytest.approx([0.02] * 5)  # five more at 50 per second


def test_the_rate_limit_refills_with_idle_time_up_to_the_burst_only():
    clock = FakeClock()
    bucket = TokenBucket(qps=50, burst=5, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        bucket.take()

    clock.now += 60  # a quiet minute earns 3000 tokens, but the bucket holds five
    for _ in range(6):
        bucket.take()

    assert clock.slept == pytest.approx([0.02])


@pytest.mark.django_db
def test_the_simulated_watch_lists_afresh_when_its_version_was_trimmed():
    cluster = SimulatedGateway()
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision"}})
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "speech"}})
    _, version = cluster.list("v1", "Namespace")
    old = int(version) - 1
    SimulatedEvent.objects.filter(id__lte=int(version)).delete()  # what trimming does to old events
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nlp"}})

    (relisted,) = cluster.watch("v1", "Namespace", resource_version=str(old), timeout_seconds=0)

    assert relisted.type == "RELISTED"
    assert [item["metadata"]["name"] for item in relisted.object["items"]] == ["nlp", "speech", "vision"]


def test_a_whole_log_is_asked_without_tail_lines_and_capped_by_the_api_server(api_server):
    path = f"{NS_PATH}/pods/wl-1-0/log"
    server = api_server({path: [(200, "one\ntwo\n"), (200, "two\n")]})
    gateway = server.gateway()
    assert gateway.pod_logs(namespace="vision", name="wl-1-0", tail_lines=None, limit_bytes=1024) == "one\ntwo\n"
    assert gateway.pod_logs(namespace="vision", name="wl-1-0", tail_lines=1) == "two\n"
    (_, whole), (_, tail) = server.seen
    assert parse_qs(urlsplit(whole).query) == {"limitBytes": ["1024"]}
    assert parse_qs(urlsplit(tail).query) == {"tailLines": ["1"]}


def test_the_simulated_cluster_serves_a_whole_log_and_honours_the_byte_cap():
    from portal.kube.simulated.kubelet import pod_logs

    class Pod:
        body = {"status": {"phase": "Running"}, "spec": {"nodeName": "gpu-1"}}

    pod: Any = Pod()
    assert pod_logs(pod, name="p", tail_lines=None).splitlines() == ["[simulated] pod p scheduled on gpu-1",
                                                                       "[simulated] phase Running"]
    assert pod_logs(pod, name="p", tail_lines=1) == "[simulated] phase Running\n"
