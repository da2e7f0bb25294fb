"""Every search-client call through the official Python client (algoliasearch v4): what Penchant
answers, and what it refuses with a 4xx whose message names what to use instead; then the
Insights, Personalization and Recommend clients."""

import json
import sys
import urllib.error
import urllib.request

import requests
from algoliasearch.http.exceptions import AlgoliaUnreachableHostException, RequestException
from algoliasearch.search.models.save_object_response import SaveObjectResponse
from penchant_client import (
    args,
    insights_client,
    personalization_client,
    recommend_client,
    search_client,
)

host, port, app_id, admin_key = args()
client = search_client(host, port, app_id, admin_key)
insights = insights_client(host, port, app_id, admin_key)
personalization = personalization_client(host, port, app_id, admin_key)
recommend = recommend_client(host, port, app_id, admin_key)

# Every request the clients send, to see what went over the wire (gzip).
sent = []
_send = requests.Session.send


def _recording_send(self, request, **kwargs):
    sent.append(request)
    return _send(self, request, **kwargs)


requests.Session.send = _recording_send

P = "surface_products"


def fail(what):
    print(f"surface e2e: FAILED: {what}", file=sys.stderr)
    sys.exit(1)


def check(ok, what):
    if not ok:
        fail(what)


def refused(label, call, status, words=()):
    """A call Penchant must refuse: `status` (a number or "4xx") and a message with every word
    (a word in lower case matches in any case)."""
    try:
        call()
    except AlgoliaUnreachableHostException as e:
        # A 5xx is retried as an unreachable host: the server's message is lost, and the host is
        # marked down for 5 minutes, so every later call of this client fails the same way.
        fail(f"{label}: the client gave up as if the host were unreachable ({e}); Penchant must "
             "refuse with a 4xx for its message to reach the caller")
    except RequestException as e:
        message = str(e)
        ok = 400 <= e.status_code < 500 if status == "4xx" else e.status_code == status
        check(ok, f"{label}: status {e.status_code}, expected {status} ({message})")
        check(message, f"{label}: a refusal without a message")
        for word in words:
            check(word.lower() in message.lower() if word.islower() else word in message,
                  f"{label}: the message {message!r} does not name {word!r}")
        return e
    fail(f"{label}: expected a refusal, but the call succeeded")


def ids(hits):
    return sorted(h["objectID"] if isinstance(h, dict) else h.object_id for h in hits)


def browse_all(index_name, browse_params=None):
    hits = []
    client.browse_objects(index_name=index_name, aggregator=lambda r: hits.extend(r.hits),
                          browse_params=browse_params)
    return hits


def facets_of(index_name):
    return client.get_settings(index_name=index_name).attributes_for_faceting


def acl_names(acl):
    return sorted(getattr(a, "value", a) for a in acl)


# An index does not exist until something is written to it.
check(not client.index_exists(index_name=P), f"{P} exists before anything was written")
refused("get_settings of an index that does not exist", lambda: client.get_settings(index_name=P),
        404, ["Index does not exist"])

# Records, then settings: defaults first, then merged.
catalog = [
    {"objectID": "iphone", "brand": "Apple", "category": "Phones", "price": 999},
    {"objectID": "galaxy", "brand": "Samsung", "category": "Phones", "price": 899},
    {"objectID": "airpods", "brand": "Apple", "category": "Audio", "price": 199},
]
for r in client.save_objects(index_name=P, objects=catalog):
    client.wait_for_task(index_name=P, task_id=r.task_id)
check(client.index_exists(index_name=P), f"{P} does not exist after save_objects")
check(facets_of(P) == [], f"default settings: {client.get_settings(index_name=P)}")

facets = ["brand", "searchable(category)"]
r = client.set_settings(index_name=P, index_settings={"attributesForFaceting": facets})
client.wait_for_task(index_name=P, task_id=r.task_id)
r = client.set_settings(index_name=P, index_settings={"customRanking": ["desc(price)"]})
client.wait_for_task(index_name=P, task_id=r.task_id)
settings = client.get_settings(index_name=P)
check(settings.attributes_for_faceting == facets and settings.custom_ranking == ["desc(price)"],
      f"settings were not merged: {settings}")
e = refused("set_settings with an unknown modifier", lambda: client.set_settings(
    index_name=P, index_settings={"attributesForFaceting": ["sorted(brand)"]}), 400)
check("attributesForFaceting" in str(e) or "sorted(brand)" in str(e),
      f"the message {e} names nothing")
refused("set_settings with a number", lambda: client.set_settings(
    index_name=P, index_settings={"attributesForFaceting": [1]}), 400)
check(facets_of(P) == facets, "a refused set_settings changed the settings")
# Settings are not a record (get_object of "settings" is the settings route itself).
as_record = client.get_objects(
    get_objects_params={"requests": [{"indexName": P, "objectID": "settings"}]})
check(as_record.results == [None], f"the settings were stored as a record: {as_record}")

# get_objects: in request order, None for a missing record, attributesToRetrieve honoured.
results = client.get_objects(get_objects_params={"requests": [
    {"indexName": P, "objectID": "iphone", "attributesToRetrieve": ["brand"]},
    {"indexName": P, "objectID": "nope"},
    {"indexName": P, "objectID": "galaxy"},
]}).results
check(results[0] == {"objectID": "iphone", "brand": "Apple"} and results[1] is None
      and results[2]["price"] == 899 and len(results) == 3, f"get_objects: {results}")

# save_object without an objectID: 201, the objectID generated.
info = client.save_object_with_http_info(
    index_name=P, body={"brand": "Fairphone", "category": "Phones", "price": 599})
check(info.status_code == 201, f"save_object answered {info.status_code}")
saved = SaveObjectResponse.from_json(info.raw_data)
check(saved.object_id, f"save_object: {info.raw_data}")
client.wait_for_task(index_name=P, task_id=saved.task_id)
check(client.get_object(index_name=P, object_id=saved.object_id)["brand"] == "Fairphone",
      "the saved object is not there")

# browse: a page and its cursor, the browse_objects loop, filters, GET, and no query.
page = client.browse(index_name=P, browse_params={"hitsPerPage": 2})
check(len(page.hits) == 2 and isinstance(page.cursor, str), f"browse: {page}")
everything = ids(browse_all(P, {"hitsPerPage": 2}))
check(everything == sorted(["airpods", "galaxy", "iphone", saved.object_id]),
      f"browse_objects: {everything}")
apple = ids(browse_all(P, {"filters": "brand:Apple AND price > 100"}))
check(apple == ["airpods", "iphone"], f"browse_objects with filters: {apple}")
via_get = client.custom_get(path=f"1/indexes/{P}/browse", parameters={"filters": "brand:Samsung"})
check(ids(via_get["hits"]) == ["galaxy"] and "cursor" not in via_get, f"GET browse: {via_get}")
refused("browse with a query",
        lambda: client.browse(index_name=P, browse_params={"query": "phone"}),
        400, ["Penchant does not search"])

# Copy (everything, or some scopes), move, clear, delete.
C, S, M = "surface_copy", "surface_settings_only", "surface_moved"
op = client.operation_index(index_name=P, operation_index_params={
    "operation": "copy", "destination": C})
client.wait_for_task(index_name=P, task_id=op.task_id)
check(ids(browse_all(C)) == everything, "copy: the records differ")
check(facets_of(C) == facets, "copy: the settings differ")

op = client.operation_index(index_name=P, operation_index_params={
    "operation": "copy", "destination": S, "scope": ["settings"]})
client.wait_for_task(index_name=P, task_id=op.task_id)
check(client.index_exists(index_name=S), "copy of the settings: no destination index")
check(browse_all(S) == [], "copy of the settings copied records")
check(facets_of(S) == facets, "copy of the settings: not copied")
op = client.operation_index(index_name=P, operation_index_params={
    "operation": "copy", "destination": S, "scope": ["rules", "synonyms"]})
client.wait_for_task(index_name=P, task_id=op.task_id)
check(facets_of(S) == facets, "a rules/synonyms copy changed the settings")

op = client.operation_index(index_name=C, operation_index_params={
    "operation": "move", "destination": M})
client.wait_for_task(index_name=C, task_id=op.task_id)
check(not client.index_exists(index_name=C), "move: the source still exists")
check(ids(browse_all(M)) == everything, "move: the records differ")

r = client.clear_objects(index_name=M)
client.wait_for_task(index_name=M, task_id=r.task_id)
check(browse_all(M) == [], "clear_objects left records")
check(client.index_exists(index_name=M), "clear_objects deleted the index")
check(facets_of(M) == facets, "clear_objects dropped the settings")

deleted = client.delete_index(index_name=M)
check(deleted.deleted_at, f"delete_index: {deleted}")
client.wait_for_task(index_name=M, task_id=deleted.task_id)
check(not client.index_exists(index_name=M), "delete_index: the index still exists")
client.delete_index(index_name=S)

# replace_all_objects: copy (settings, rules, synonyms) to a temporary index, batches there,
# copy again, move back; every task waited for on the temporary index.
fresh = [
    {"objectID": "iphone", "brand": "Apple", "category": "Phones", "price": 949},
    {"objectID": "galaxy", "brand": "Samsung", "category": "Phones", "price": 899},
    {"objectID": "airpods", "brand": "Apple", "category": "Audio", "price": 179},
    {"objectID": "pixel", "brand": "Google", "category": "Phones", "price": 599},
]
replaced = client.replace_all_objects(index_name=P, objects=fresh, batch_size=2)
check(len(replaced.batch_responses) == 2, f"replace_all_objects: {replaced}")
check(ids(browse_all(P)) == ids(fresh), "replace_all_objects: the records were not replaced")
check(client.get_object(index_name=P, object_id="iphone")["price"] == 949,
      "replace_all_objects: old record")
check(facets_of(P) == facets, "replace_all_objects dropped the settings")
# Into an index that does not exist yet (a first import): Algolia copies a missing index as an
# empty one.
IMPORTED = "surface_imported"
client.replace_all_objects(index_name=IMPORTED, objects=fresh)
check(ids(browse_all(IMPORTED)) == ids(fresh), "replace_all_objects into a new index")

# Tasks: a made-up task ID is not found.
refused("get_task of a made-up task", lambda: client.get_task(index_name=P, task_id=12345), 404,
        ["Task does not exist"])
refused("wait_for_task of a made-up task",
        lambda: client.wait_for_task(index_name=P, task_id=12345), 404)

# Penchant does not search: a 4xx naming what to use instead.
no_search = ["Penchant does not search", "/rerank", "optionalFilters"]
refused("search_single_index", lambda: client.search_single_index(
    index_name=P, search_params={"query": "phone"}), "4xx", no_search)
refused("search", lambda: client.search(
    search_method_params={"requests": [{"indexName": P, "query": "phone"}]}), "4xx", no_search)
refused("search_for_facet_values", lambda: client.search_for_facet_values(
    index_name=P, facet_name="category", search_for_facet_values_request={"facetQuery": "Pho"}),
    "4xx", no_search)
# No rules, no synonyms.
refused("get_rule", lambda: client.get_rule(index_name=P, object_id="r1"), "4xx", ["rule"])
refused("save_rule", lambda: client.save_rule(index_name=P, object_id="r1", rule={
    "objectID": "r1", "consequence": {"params": {"filters": "brand:Apple"}}}), "4xx", ["rule"])
refused("search_rules", lambda: client.search_rules(
    index_name=P, search_rules_params={"query": ""}), "4xx", ["rule"])
refused("search_synonyms", lambda: client.search_synonyms(index_name=P), "4xx", ["synonym"])
refused("save_synonym", lambda: client.save_synonym(index_name=P, object_id="s1", synonym_hit={
    "objectID": "s1", "type": "synonym", "synonyms": ["phone", "mobile"]}), "4xx", ["synonym"])
# Any other unknown route: a 404 with a message.
refused("an unknown route", lambda: client.custom_get(path="1/surface/unknown"), 404)

# API keys: any Algolia ACL; the admin key is not listed. (The client's Acl enum has no
# "admin": a listed admin key would make list_api_keys fail to parse.)
acl = ["browse", "listIndexes", "settings"]
key = client.add_api_key(api_key={"acl": acl, "description": "surface e2e"}).key
got = client.get_api_key(key=key)
check(acl_names(got.acl) == acl and got.description == "surface e2e"
      and isinstance(got.created_at, int), f"get_api_key: {got}")
keys = client.list_api_keys().keys
check(any(k.description == "surface e2e" and acl_names(k.acl) == acl for k in keys),
      f"list_api_keys: {keys}")
check(not any(admin_key.startswith(k.value.rstrip("…")) for k in keys),
      f"the admin key is listed: {keys}")
client.delete_api_key(key=key)
refused("get_api_key of a deleted key", lambda: client.get_api_key(key=key), 404,
        ["Key does not exist"])

# A gzip-compressed write: with compression_type "gzip" the client compresses bodies of 750
# bytes or more.
gz = search_client(host, port, app_id, admin_key, compression="gzip")
G = "surface_bulk"
bulk = [{"objectID": f"bulk-{i}", "brand": "Apple" if i % 2 else "Samsung", "rank": i}
        for i in range(1200)]
sent.clear()
for r in gz.save_objects(index_name=G, objects=bulk):
    gz.wait_for_task(index_name=G, task_id=r.task_id)
batches = [s for s in sent if s.url.endswith(f"/1/indexes/{G}/batch")]
check(len(batches) == 2 and all(s.headers.get("content-encoding") == "gzip" for s in batches),
      "the batches were not gzip-compressed")
pages = []
client.browse_objects(index_name=G, aggregator=lambda r: pages.append(len(r.hits)))
check(pages == [1000, 200], f"browse_objects of 1200 records: pages of {pages}")

# Every response has an x-request-id header, the request's own when it sent one.
plain = client.get_settings_with_http_info(index_name=P)
check(plain.headers.get("x-request-id"), f"no x-request-id: {plain.headers}")
mine = client.get_settings_with_http_info(
    index_name=P, request_options={"headers": {"x-request-id": "surface-py-1"}})
check(mine.headers.get("x-request-id") == "surface-py-1",
      f"x-request-id not echoed: {mine.headers}")
try:  # an error's too (the client's exception does not carry headers)
    urllib.request.urlopen(urllib.request.Request(
        f"http://{host}:{port}/1/surface/unknown",
        headers={"X-Algolia-Application-Id": app_id, "X-Algolia-API-Key": admin_key}))
    fail("an unknown route was answered")
except urllib.error.HTTPError as error:
    check(error.code == 404 and error.headers.get("x-request-id"),
          f"{error.code} {dict(error.headers)}")
    check(json.loads(error.read())["status"] == 404, "an error that is not Algolia's JSON")

# Records one at a time.
r = client.partial_update_object(index_name=G, object_id="bulk-1", attributes_to_update={"rank": 0})
client.wait_for_task(index_name=G, task_id=r.task_id)
check(client.get_object(index_name=G, object_id="bulk-1")["rank"] == 0, "partial_update_object")
r = client.delete_object(index_name=G, object_id="bulk-0")
client.wait_for_task(index_name=G, task_id=r.task_id)
refused("get_object of a deleted record",
        lambda: client.get_object(index_name=G, object_id="bulk-0"), 404,
        ["ObjectID does not exist"])
r = client.add_or_update_object(index_name=G, object_id="bulk-2",
                                body={"brand": "Nokia", "rank": 2})
client.wait_for_task(index_name=G, task_id=r.task_id)
check(client.get_object(index_name=G, object_id="bulk-2")["brand"] == "Nokia",
      "add_or_update_object")
for r in client.partial_update_objects(index_name=G, objects=[{"objectID": "bulk-3", "rank": -3}]):
    client.wait_for_task(index_name=G, task_id=r.task_id)
check(client.get_object(index_name=G, object_id="bulk-3")["rank"] == -3, "partial_update_objects")
for r in client.delete_objects(index_name=G, object_ids=["bulk-4", "bulk-5"]):
    client.wait_for_task(index_name=G, task_id=r.task_id)
left = client.get_objects(get_objects_params={"requests": [
    {"indexName": G, "objectID": o} for o in ["bulk-4", "bulk-5", "bulk-6"]]}).results
check(left[0] is None and left[1] is None and left[2] is not None, f"delete_objects: {left}")

# list_indices (the client checks every field's type); deleted and moved indexes gone, no
# temporary one.
listed = client.list_indices()
by_name = {i.name: i for i in listed.items}
check(sorted(by_name) == sorted([G, IMPORTED, P]), f"list_indices: {listed}")
check(by_name[P].entries == 4 and by_name[G].entries == 1197, f"list_indices: {listed}")

# Insights, Personalization and Recommend.
personalization.set_personalization_strategy(personalization_strategy_params={
    "eventsScoring": [
        {"eventName": "Product Viewed", "eventType": "view", "score": 10},
        {"eventName": "Product Purchased", "eventType": "conversion", "score": 50},
    ],
    "facetsScoring": [{"facetName": "brand", "score": 100}],
    "personalizationImpact": 50,
})
check(personalization.get_personalization_strategy().personalization_impact == 50,
      "get_personalization_strategy")
pushed = insights.push_events(insights_events={"events": [
    {"eventType": "view", "eventName": "Product Viewed", "index": P, "userToken": "alice",
     "objectIDs": ["iphone"]},
    {"eventType": "conversion", "eventName": "Product Purchased", "index": P, "userToken": "alice",
     "objectIDs": ["pixel"]},
]})
check(pushed.status == 200, f"push_events: {pushed}")
profile = personalization.get_user_token_profile(user_token="alice")
check(profile.scores["brand"]["Google"] == 20 and profile.scores["brand"]["Apple"] > 0,
      f"profile: {profile}")

# What to use instead of search: re-rank another engine's hits, or give it optionalFilters.
reranked = client.custom_post(path=f"1/indexes/{P}/rerank", body={
    "userToken": "alice", "personalizationImpact": 100,
    "hits": [{"objectID": "galaxy"}, {"objectID": "iphone"}, {"objectID": "pixel"}]})
check([h["objectID"] for h in reranked["hits"]] == ["pixel", "iphone", "galaxy"],
      f"rerank: {reranked}")
filters = client.custom_get(path="1/profiles/personalization/alice/optionalFilters")
check(filters["optionalFilters"][0] == "brand:Google<score=20>", f"optionalFilters: {filters}")

recommended = recommend.get_recommendations(get_recommendations_params={"requests": [
    {"indexName": P, "model": "trending-items", "threshold": 0, "maxRecommendations": 2}]})
check(recommended.results[0].hits[0].actual_instance.object_id == "pixel",
      f"get_recommendations: {recommended}")

gone = personalization.delete_user_profile(user_token="alice")
check(gone.user_token == "alice" and gone.deleted_until, f"delete_user_profile: {gone}")
refused("get_user_token_profile after delete_user_profile",
        lambda: personalization.get_user_token_profile(user_token="alice"), 404)
insights.delete_user_token(user_token="alice")

# A key's maxQueriesPerIPPerHour: past it, a 429 the client raises with Penchant's message.
limited = client.add_api_key(api_key={"acl": ["search"], "maxQueriesPerIPPerHour": 2}).key
check(client.get_api_key(key=limited).max_queries_per_ip_per_hour == 2, "the limit is not shown")
# The client waits Retry-After (to the end of the hour) and tries again, up to
# max_rate_limit_retries times (3); 0 makes it fail at once.
limited_client = search_client(host, port, app_id, limited, max_rate_limit_retries=0)
for _ in range(2):
    refused("get_object under the limit", lambda: limited_client.get_object(
        index_name=P, object_id="nope"), 404)
e = refused("get_object past the limit", lambda: limited_client.get_object(
    index_name=P, object_id="nope"), 429, ["Too many requests"])
client.delete_api_key(key=limited)

# Secured API keys cannot be checked (keys are stored hashed): refused, saying so.
secured = client.generate_secured_api_key(
    parent_api_key=admin_key, restrictions={"filters": "brand:Apple"})
refused("a secured API key", lambda: search_client(host, port, app_id, secured).get_object(
    index_name=P, object_id="iphone"), 401, ["secured API keys"])

print("surface e2e: ok")
