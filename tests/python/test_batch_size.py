# SPDX-License-Identifier: Apache-2.0
"""joule.BatchSizeClient and joule.BatchSizeOptimizer against a real `joule serve` (in-memory store)."""

from __future__ import annotations

import pytest

import joule


def spec(**overrides: object) -> dict:
    options: dict = {"target_metric": 0.9, "max_epochs": 5, "mab_seed": 1, **overrides}
    return joule.job_spec("mlp", [16, 32, 64], 32, **options)


def test_client_round_trip(serve: str) -> None:
    client = joule.BatchSizeClient(serve)
    assert client.health()["status"] == "ok"
    registered = client.register_job(spec(), max_power_w=250, number_of_gpus=1, gpu_model="V100")
    job_id = registered["job_id"]
    assert job_id.startswith("mlp-") and registered["created"]
    trial = client.next_batch_size(job_id)
    assert trial == {"job_id": job_id, "batch_size": 32, "trial_number": 1}
    response = client.report(job_id, 32, 1, time_s=10.0, energy_j=2000.0, metric=0.5, current_epoch=1)
    assert response["stop_train"] is False
    response = client.report(job_id, 32, 1, time_s=20.0, energy_j=4000.0, metric=0.95, current_epoch=2)
    assert response["converged"] is True and response["stop_train"] is True
    client.end_trial(job_id, 32, 1)
    assert client.job_status(job_id)["job_id"] == job_id
    client.delete_job(job_id)
    with pytest.raises(joule.NotFoundError):
        client.delete_job(job_id)


def test_server_validation_errors_keep_the_message(serve: str) -> None:
    client = joule.BatchSizeClient(serve)
    with pytest.raises(joule.InvalidArgumentError, match="eta_knob"):
        client.register_job(spec(eta_knob=2.0), 250, 1, "V100")
    with pytest.raises(joule.InvalidArgumentError, match="default_batch_size"):
        client.register_job(joule.job_spec("mlp", [16, 32], 64), 250, 1, "V100")


def test_unreachable_server_is_an_io_error() -> None:
    with pytest.raises(joule.IoError):
        joule.BatchSizeClient("http://127.0.0.1:9", attempts=1, connect_timeout_s=0.5).health()
    with pytest.raises(joule.InvalidArgumentError):
        joule.BatchSizeClient("not a url")


def test_optimizer_reports_every_epoch(serve: str) -> None:
    devices = joule.devices(sim="v100:cifar100", virtual_clock=True, cpus=False)
    monitor = joule.Monitor(devices=devices)
    optimizer = joule.BatchSizeOptimizer(monitor, serve, spec())
    assert optimizer.job["max_power"] == 250.0 and optimizer.job["number_of_gpus"] == 1
    batch_size = optimizer.get_batch_size()
    assert batch_size == 32 and optimizer.get_batch_size() == 32
    optimizer.on_train_begin()
    for epoch, metric in enumerate([0.5, 0.8, 0.95], start=1):
        devices.advance(10)
        optimizer.on_evaluate(metric)
        assert optimizer.epoch == epoch
        if optimizer.stop_train:
            break
    assert optimizer.converged and optimizer.epoch == 3
    assert optimizer.time_s == pytest.approx(30)
    assert optimizer.energy_j == pytest.approx(30 * devices.gpus[0].power_w(), rel=1e-3)
    assert not monitor.is_open(optimizer.WINDOW)
    optimizer.on_train_end()  # already ended: no second PATCH


def test_optimizer_raises_when_stopped_unconverged(serve: str) -> None:
    devices = joule.devices(sim="v100:cifar100", virtual_clock=True, cpus=False)
    optimizer = joule.BatchSizeOptimizer(joule.Monitor(devices=devices), serve, spec(max_epochs=2))
    optimizer.on_train_begin()
    devices.advance(1)
    optimizer.on_evaluate(0.1)
    devices.advance(1)
    with pytest.raises(joule.TrainFailError, match="without converging"):
        optimizer.on_evaluate(0.2)
    with pytest.raises(joule.StateError):
        optimizer.on_evaluate(0.3)
