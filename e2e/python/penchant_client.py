"""Official Algolia clients pointed at a Penchant server: only the host changes."""

import sys

from algoliasearch.http.hosts import Host, HostsCollection
from algoliasearch.search.client import SearchClientSync
from algoliasearch.search.config import SearchConfig


def args():
    """host port app_id api_key, as the Rust test passes them."""
    host, port, app_id, api_key = sys.argv[1:5]
    return host, int(port), app_id, api_key


def hosts(host, port):
    return HostsCollection([Host(url=host, scheme="http", port=port)])


def search_client(host, port, app_id, api_key):
    config = SearchConfig(app_id, api_key)
    config.hosts = hosts(host, port)
    return SearchClientSync.create_with_config(config)
