"""The previous release's tests start clusters as the acceptance tests do."""

from tests.acceptance.conftest import make_cluster

__all__ = ["make_cluster"]
