"""deploy/kueue/controller_manager_config.yaml is what the test harness runs Kueue with: the
harness reads the shipped file and changes only its own addresses and waitForPodsReady's timings,
so a setting removed from deploy/ is gone from the real control plane the contract tests use
(tests/contract/test_gang_contract.py fails without waitForPodsReady)."""

from __future__ import annotations

import copy

import yaml

from tests.cluster.harness import SHIPPED_KUEUE_CONFIG, TEST_REQUEUE_BACKOFF, kueue_configuration

LOCAL = {"namespace": "kueue-system", "leaderElection": {"leaderElect": False}}


def shipped() -> dict:
    return yaml.safe_load(SHIPPED_KUEUE_CONFIG.read_text())


def test_the_harness_runs_kueue_with_every_shipped_setting_and_only_the_timings_shortened():
    cfg = kueue_configuration(shipped(), pods_ready_timeout=15, local=LOCAL)
    expected = copy.deepcopy(shipped())
    expected["waitForPodsReady"]["timeout"] = "15s"
    expected["waitForPodsReady"]["requeuingStrategy"].update(TEST_REQUEUE_BACKOFF)
    assert cfg == {**expected, **LOCAL}
    assert cfg["waitForPodsReady"]["blockAdmission"] is False  # as shipped, not the harness's choice
    assert cfg["resources"]["quotaCheckStrategy"] == "IgnoreUndeclared"
    # Fair sharing, by the teams' weights (tests/contract/test_fair_share_contract.py fails without it).
    assert cfg["fairSharing"] == {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
    # Admission by recent use inside a team (tests/contract/test_person_fairness_contract.py fails without it).
    assert cfg["admissionFairSharing"] == {"usageHalfLifeTime": "24h", "usageSamplingInterval": "5m"}
    # NVIDIA's DRA classes, under the names the DRA flavors give as their resource.
    assert cfg["resources"]["deviceClassMappings"] == [
        {"name": "dra.nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]},
        {"name": "dra.nvidia.com/mig", "deviceClassNames": ["mig.nvidia.com"]}]


def test_a_setting_removed_from_the_shipped_file_is_not_put_back_by_the_harness():
    without = {key: value for key, value in shipped().items() if key != "waitForPodsReady"}
    assert "waitForPodsReady" not in kueue_configuration(without, pods_ready_timeout=15, local=LOCAL)


def test_the_harness_leaves_the_shipped_file_as_it_read_it():
    read = shipped()
    kueue_configuration(read, pods_ready_timeout=15, local=LOCAL)
    assert read == shipped()


def test_the_simulated_kueue_decays_recent_use_as_the_shipped_file_configures_kueue():
    from portal.kube.simulated import kueue as simulated

    afs = shipped()["admissionFairSharing"]
    hours = int(afs["usageHalfLifeTime"].removesuffix("h"))
    minutes = int(afs["usageSamplingInterval"].removesuffix("m"))
    assert (hours * 3600, minutes * 60) == (simulated.AFS_HALF_LIFE_SECONDS, simulated.AFS_SAMPLING_SECONDS)
    # A day's use counts half as much a day later: Kueue's calculateAlphaRate.
    assert abs(simulated.afs_alpha(hours * 3600) - 0.5) < 1e-12
