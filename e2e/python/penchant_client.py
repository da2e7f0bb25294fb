"""Official Algolia clients pointed at a Penchant server: only the host changes."""

import sys
import warnings

from algoliasearch.abtesting.client import AbtestingClientSync
from algoliasearch.abtesting.config import AbtestingConfig
from algoliasearch.http.hosts import Host, HostsCollection
from algoliasearch.insights.client import InsightsClientSync
from algoliasearch.insights.config import InsightsConfig
from algoliasearch.personalization.client import PersonalizationClientSync
from algoliasearch.personalization.config import PersonalizationConfig
from algoliasearch.recommend.client import RecommendClientSync
from algoliasearch.recommend.config import RecommendConfig
from algoliasearch.search.client import SearchClientSync
from algoliasearch.search.config import SearchConfig


def args():
    """host port app_id api_key, as the Rust test passes them."""
    host, port, app_id, api_key = sys.argv[1:5]
    return host, int(port), app_id, api_key


def hosts(host, port):
    return HostsCollection([Host(url=host, scheme="http", port=port)])


def search_client(host, port, app_id, api_key, compression=None, max_rate_limit_retries=3):
    """compression="gzip": request bodies of 750 bytes or more are sent gzip-compressed.
    max_rate_limit_retries: how many times a 429 is waited out (Retry-After) and retried."""
    config = SearchConfig(app_id, api_key)
    config.hosts = hosts(host, port)
    config.compression_type = compression
    config.max_rate_limit_retries = max_rate_limit_retries
    return SearchClientSync.create_with_config(config)


def insights_client(host, port, app_id, api_key):
    config = InsightsConfig(app_id, api_key, "us")
    config.hosts = hosts(host, port)
    return InsightsClientSync.create_with_config(config)


def personalization_client(host, port, app_id, api_key):
    config = PersonalizationConfig(app_id, api_key, "us")
    config.hosts = hosts(host, port)
    return PersonalizationClientSync.create_with_config(config)


def recommend_client(host, port, app_id, api_key):
    config = RecommendConfig(app_id, api_key)
    config.hosts = hosts(host, port)
    return RecommendClientSync.create_with_config(config)


def abtesting_client(host, port, app_id, api_key):
    """The A/B testing API v2 (`/2/abtests`). Every v2 method of algoliasearch 4.48 warns that
    v3 replaces it (DeprecationWarning): Penchant answers v2, so the warning is silenced."""
    warnings.filterwarnings("ignore", message=r".* /2/abtests.* is deprecated\.",
                            category=DeprecationWarning)
    config = AbtestingConfig(app_id, api_key)
    config.hosts = hosts(host, port)
    return AbtestingClientSync.create_with_config(config)


def penchant(host, port, app_id, api_key, method, path, body=None):
    """A call to one of Penchant's own routes (no Algolia client has them)."""
    import json
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{host}:{port}{path}",
        data=data,
        method=method,
        headers={
            "X-Algolia-Application-Id": app_id,
            "X-Algolia-API-Key": api_key,
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read() or b"null")
