"""Every Recommend model through the official Python client's RecommendClient."""

import time

from algoliasearch.http.exceptions import RequestException
from penchant_client import (
    args,
    insights_client,
    penchant,
    personalization_client,
    recommend_client,
    search_client,
)

host, port, app_id, admin_key = args()
search = search_client(host, port, app_id, admin_key)
insights = insights_client(host, port, app_id, admin_key)
recommend = recommend_client(host, port, app_id, admin_key)
personalization = personalization_client(host, port, app_id, admin_key)


def call(method, path, body=None):
    return penchant(host, port, app_id, admin_key, method, path, body)


products = [
    {"objectID": f"p{i}", "brand": "Apple" if i % 2 == 0 else "Samsung", "price": i * 10}
    for i in range(10)
]
for r in search.save_objects(index_name="products", objects=products):
    search.wait_for_task(index_name="products", task_id=r.task_id)

# A strategy before the events: purchases make profiles (by brand).
personalization.set_personalization_strategy({
    "eventsScoring": [{"eventName": "Purchased", "eventType": "conversion", "score": 50}],
    "facetsScoring": [{"facetName": "brand", "score": 100}],
    "personalizationImpact": 50,
})

now = int(time.time() * 1000) - 60_000
events = []
for i, n in enumerate([5, 4, 3, 2, 1]):
    for k in range(n):
        events.append({"eventType": "conversion", "eventName": "Purchased", "index": "products",
                       "userToken": f"buyer{i}-{k}", "objectIDs": [f"p{i}"], "timestamp": now})
events += [
    {"eventType": "conversion", "eventName": "Purchased", "index": "products",
     "userToken": "u1", "objectIDs": ["p0", "p1"], "timestamp": now},
    {"eventType": "click", "eventName": "Clicked", "index": "products",
     "userToken": "u2", "objectIDs": ["p5", "p6"], "timestamp": now},
    {"eventType": "view", "eventName": "Viewed", "index": "products",
     "userToken": "alice", "objectIDs": ["p0"], "timestamp": now},
]
assert insights.push_events(insights_events={"events": events}).status == 200

# The lists and queues: Penchant's build job.
call("PUT", "/1/queues/for-you",
     {"indexName": "products", "size": 100, "sources": [{"source": "trending"}]})
call("POST", "/1/recommend/build")
for _ in range(500):
    status = call("GET", "/1/recommend/build")
    if status["state"] != "running":
        break
    time.sleep(0.02)
assert status["state"] == "done", status


def ask(request):
    """One request; returns (objectIDs or facet values, the raw result)."""
    response = recommend.get_recommendations(get_recommendations_params={"requests": [request]})
    result = response.results[0]
    hits = [h.actual_instance for h in result.hits]
    return hits, result


hits, _ = ask({"indexName": "products", "model": "trending-items", "threshold": 0,
               "maxRecommendations": 3})
assert [h.object_id for h in hits] == ["p0", "p1", "p2"], hits
assert hits[0].score == 100, hits
assert hits[0].to_dict()["brand"] == "Apple", hits[0].to_dict()

hits, _ = ask({"indexName": "products", "model": "trending-items", "threshold": 0,
               "queryParameters": {"filters": "brand:Samsung AND price < 30"}})
assert [h.object_id for h in hits] == ["p1"], hits

hits, _ = ask({"indexName": "products", "model": "trending-facets", "threshold": 0,
               "facetName": "brand"})
assert [(h.facet_name, h.facet_value) for h in hits] == [("brand", "Apple"), ("brand", "Samsung")], hits

hits, _ = ask({"indexName": "products", "model": "bought-together", "threshold": 0,
               "objectID": "p0"})
assert [h.object_id for h in hits] == ["p1"], hits

hits, _ = ask({"indexName": "products", "model": "related-products", "threshold": 0,
               "objectID": "p5"})
assert [h.object_id for h in hits] == ["p6"], hits

call("POST", "/1/vectors", {"name": "images", "dimension": 2, "index": "products"})
call("POST", "/1/vectors/images/items",
     {"vectors": [{"id": f"p{i}", "vector": [1.0, i / 10]} for i in range(10)]})
hits, _ = ask({"indexName": "products", "model": "looking-similar", "threshold": 0,
               "objectID": "p9", "maxRecommendations": 1})
assert [h.object_id for h in hits] == ["p8"], hits

# recommended-for-you is not in the client's model list: a plain dict goes through unchanged.
hits, result = ask({"indexName": "products", "model": "recommended-for-you", "threshold": 0,
                    "queryParameters": {"userToken": "alice"}, "maxRecommendations": 2})
assert [h.object_id for h in hits] == ["p1", "p2"], (hits, "alice saw p0")
assert result.to_dict()["source"] == "queue", result.to_dict()

# A model with no history falls back to trending, and says so.
hits, result = ask({"indexName": "products", "model": "bought-together", "threshold": 0,
                    "objectID": "p9", "maxRecommendations": 1})
assert [h.object_id for h in hits] == ["p0"], hits
assert result.to_dict()["answeredBy"] == "trending-items", result.to_dict()

# queryParameters personalize. buyer1-0 bought a Samsung (p1): with personalization its
# trending items put Samsung first, each hit with its scores under getRankingInfo.
hits, _ = ask({"indexName": "products", "model": "trending-items", "threshold": 0,
               "maxRecommendations": 4})
assert [h.to_dict()["brand"] for h in hits] == ["Apple", "Samsung", "Apple", "Samsung"], hits
hits, _ = ask({"indexName": "products", "model": "trending-items", "threshold": 0,
               "maxRecommendations": 4,
               "queryParameters": {"userToken": "buyer1-0", "enablePersonalization": True,
                                   "personalizationImpact": 100, "getRankingInfo": True}})
brands = [h.to_dict()["brand"] for h in hits]
assert brands[:2] == ["Samsung", "Samsung"], hits
info = hits[0].to_dict()["_rankingInfo"]["personalization"]
assert info["filtersScore"] > 0 and info["score"] > 0, info
# Personalization off for the same user: the model's order.
hits, _ = ask({"indexName": "products", "model": "trending-items", "threshold": 0,
               "maxRecommendations": 1,
               "queryParameters": {"userToken": "buyer1-0", "enablePersonalization": False}})
assert [h.object_id for h in hits] == ["p0"], hits
# optionalFilters boost; hitsPerPage cuts.
hits, _ = ask({"indexName": "products", "model": "trending-items", "threshold": 0,
               "queryParameters": {"optionalFilters": ["brand:Samsung"], "hitsPerPage": 2}})
assert [h.object_id for h in hits] == ["p1", "p3"], hits
# A parameter Recommend does not take is refused by name, never ignored.
try:
    ask({"indexName": "products", "model": "trending-items", "threshold": 0,
         "queryParameters": {"page": 2}})
    raise AssertionError("page was accepted")
except RequestException as e:
    assert "page" in str(e), e

# A malformed filter: the client raises with the server's message.
try:
    ask({"indexName": "products", "model": "trending-items", "threshold": 0,
         "queryParameters": {"filters": "brand:Apple AND"}})
    raise AssertionError("a malformed filter was accepted")
except RequestException as e:
    assert "col" in str(e), e

print("recommend: ok")
