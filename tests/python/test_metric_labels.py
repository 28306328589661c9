# SPDX-License-Identifier: Apache-2.0
"""joule.set_metric_labels / joule.metric_labels: workload identity labels on every sample this process
renders (docs/operators.md)."""

from __future__ import annotations

from typing import Iterator

import pytest

import joule


IDENTITY_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_USER", "SLURM_JOB_PARTITION", "JOULE_POD_NAME",
                      "JOULE_POD_NAMESPACE", "JOULE_CONTAINER_NAME", "JOULE_NODE_NAME")


@pytest.fixture(autouse=True)
def _no_labels_after(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The machine's own job or pod must not change what these tests see.
    for name in IDENTITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield
    joule.set_metric_labels(detect=False)


def test_labels_on_every_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOULE_POD_NAME", "llm-0")
    monkeypatch.setenv("JOULE_POD_NAMESPACE", "serving")
    labels = joule.set_metric_labels({"team": "vision", "pod": "llm-override"})
    assert labels == {"namespace": "serving", "pod": "llm-override", "team": "vision"}
    assert joule.metric_labels() == labels
    metrics = joule.InferenceMetrics(gpu="h100")
    metrics.add_iterations("llama", 3)
    lines = [line for line in metrics.render().splitlines() if line and not line.startswith("#")]
    assert lines
    for line in lines:
        assert 'team="vision"' in line and 'pod="llm-override"' in line and 'namespace="serving"' in line, line


def test_detection_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert joule.set_metric_labels() == {"slurm_job_id": "42"}
    assert joule.set_metric_labels(detect=False) == {}
    assert "slurm_job_id" not in joule.InferenceMetrics().render()


@pytest.mark.parametrize("labels, message", [
    ({"gpu": "0"}, "label name 'gpu' is one of the exporters' own labels"),
    ({"team": ""}, "label 'team' has an empty value"),
    ({"a=b": "c"}, 'label name "a=b" is not a Prometheus label name'),
    ({"__x": "c"}, "label name '__x' starts with '__'"),
])
def test_bad_labels(labels: dict[str, str], message: str) -> None:
    before = joule.metric_labels()
    with pytest.raises(joule.InvalidArgumentError, match=message):
        joule.set_metric_labels(labels)
    assert joule.metric_labels() == before
