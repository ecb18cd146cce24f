from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cluster import Cluster


@pytest.fixture
def make_cluster(db_url: str, tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Start the stand-ins (with the given CLI arguments) for a cluster of serve processes; everything
    started is stopped at the end, even when the test failed."""
    started: list[Cluster] = []

    def make(*standin_args: str) -> Cluster:
        cluster = Cluster(db_url, tmp_path, standin_args=standin_args).start()
        started.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in started:
            cluster.stop()


@pytest.fixture
def cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    return make_cluster()
