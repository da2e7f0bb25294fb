"""An A/B test run end to end through the official Python clients: personalization off against
personalization at impact 50 on one index, its users served by Recommend, their conversions
sent to Insights with the answers' queryIDs, and the results read back through AbtestingClient
(the A/B testing API v2). Every check prints what it checked."""

import random
import re
import time
from datetime import datetime, timedelta, timezone

from algoliasearch.http.exceptions import RequestException
from penchant_client import (
    abtesting_client,
    args,
    insights_client,
    personalization_client,
    recommend_client,
    search_client,
)

host, port, app_id, admin_key = args()
search = search_client(host, port, app_id, admin_key)
insights = insights_client(host, port, app_id, admin_key)
personalization = personalization_client(host, port, app_id, admin_key)
recommend = recommend_client(host, port, app_id, admin_key)
abtesting = abtesting_client(host, port, app_id, admin_key)

INDEX = "products"
USERS = [f"u{i:03}" for i in range(200)]
BRANDS = ["Apple", "Samsung", "Google"]


def check(condition, what, detail=None):
    """Assert `condition`; print what was checked."""
    assert condition, f"{what}: {detail!r}"
    print(f"ok: {what}" + ("" if detail is None else f" ({detail})"))


def expect_error(status, call, what):
    """`call()` must raise RequestException with this status; returns its message."""
    try:
        call()
    except RequestException as e:
        check(e.status_code == status, f"{what}: HTTP {status}", f"{e.status_code} {e.message}")
        return e.message
    raise AssertionError(f"{what}: no error")


# A catalog: 12 products, brands in turn.
products = [
    {"objectID": f"p{i:02}", "brand": BRANDS[i % 3], "price": 10 + i} for i in range(12)
]
for r in search.save_objects(index_name=INDEX, objects=products):
    search.wait_for_task(index_name=INDEX, task_id=r.task_id)

# A strategy by brand, then one purchase per user: user u{i} likes brand i % 3, and every
# product is about as trending as every other, so that personalization decides the order.
personalization.set_personalization_strategy({
    "eventsScoring": [
        {"eventName": "Purchased", "eventType": "conversion", "score": 50},
        {"eventName": "Clicked", "eventType": "click", "score": 10},
    ],
    "facetsScoring": [{"facetName": "brand", "score": 100}],
    "personalizationImpact": 100,
})
before = int(time.time() * 1000) - 60_000
history = [
    {"eventType": "conversion", "eventName": "Purchased", "index": INDEX, "userToken": user,
     "objectIDs": [f"p{i % 12:02}"], "timestamp": before}
    for i, user in enumerate(USERS)
]
for k in range(0, len(history), 100):
    response = insights.push_events(insights_events={"events": history[k:k + 100]})
    check(response.status == 200, f"history events {k}..{k + 100} accepted")
profile = personalization.get_user_token_profile(user_token="u004")
check(list(profile.scores["brand"]) == ["Samsung"], "u004 has a profile: it likes Samsung",
      profile.scores)

# --- Create, list, get ---------------------------------------------------------------------
end_at = (datetime.now(timezone.utc) + timedelta(days=14)).strftime("%Y-%m-%dT%H:%M:%SZ")
variants = [
    {"index": INDEX, "trafficPercentage": 50, "description": "off",
     "customSearchParameters": {"enablePersonalization": False}},
    {"index": INDEX, "trafficPercentage": 50, "description": "impact 50",
     "customSearchParameters": {"personalizationImpact": 50}},
]
created = abtesting.add_ab_tests(
    add_ab_tests_request={"name": "perso off vs 50", "variants": variants, "endAt": end_at}
)
ab_id = created.ab_test_id
check(ab_id >= 1 and created.index == INDEX, "add_ab_tests answers the test's id and index",
      created.to_dict())

listed = abtesting.list_ab_tests()
check(listed.total == 1 and listed.count == 1, "list_ab_tests: one test", listed.to_dict())
check(listed.abtests[0].ab_test_id == ab_id, "list_ab_tests lists it")
listed = abtesting.list_ab_tests(index_prefix="prod")
check(listed.total == 1 and listed.abtests[0].ab_test_id == ab_id,
      "list_ab_tests(index_prefix='prod') lists it")
listed = abtesting.list_ab_tests(index_suffix="ucts")
check(listed.total == 1, "list_ab_tests(index_suffix='ucts') lists it")
listed = abtesting.list_ab_tests(index_prefix="other")
check(listed.total == 0 and listed.count == 0 and not listed.abtests,
      "list_ab_tests(index_prefix='other') lists nothing", listed.to_dict())
listed = abtesting.list_ab_tests(offset=1, limit=10)
check(listed.total == 1 and listed.count == 0 and not listed.abtests,
      "list_ab_tests(offset=1): an empty page of a total of 1", listed.to_dict())

test = abtesting.get_ab_test(id=ab_id)
check(test.ab_test_id == ab_id and test.name == "perso off vs 50", "get_ab_test: id and name")
check(test.status == "active", "get_ab_test: status active", test.status)
check(test.end_at.startswith(end_at[:19]), "get_ab_test: endAt as given", test.end_at)
check(test.stopped_at is None, "get_ab_test: not stopped", test.stopped_at)
shown = [v.to_dict() for v in test.variants]
check([v["index"] for v in shown] == [INDEX, INDEX], "both variants on the index", shown)
check([v["trafficPercentage"] for v in shown] == [50, 50], "traffic 50/50")
check([v.get("description") for v in shown] == ["off", "impact 50"], "descriptions kept")
check([v.get("variantID") for v in shown] == [1, 2], "variantIDs 1 and 2")
check([v.get("customSearchParameters") for v in shown]
      == [{"enablePersonalization": False}, {"personalizationImpact": 50}],
      "customSearchParameters echoed")
check(all(v["conversionCount"] == 0 and v["clickCount"] == 0 for v in shown),
      "no clicks or conversions yet")
check(test.conversion_significance is None, "no conversion significance without users",
      test.conversion_significance)

message = expect_error(400, lambda: abtesting.add_ab_tests(add_ab_tests_request={
    "name": "second", "variants": variants, "endAt": end_at}),
    "a second test on the same index is refused")
check("already in the running A/B test" in message, "the refusal says why", message)
check(abtesting.list_ab_tests().total == 1, "still one test")

# --- Serve -----------------------------------------------------------------------------------


def recommend_for(user, **params):
    """trending-items for `user` (personalization asked for; the variant may turn it off)."""
    response = recommend.get_recommendations(get_recommendations_params={"requests": [{
        "indexName": INDEX, "model": "trending-items", "threshold": 0, "maxRecommendations": 6,
        "queryParameters": {"userToken": user, "enablePersonalization": True, **params},
    }]})
    return response.results[0]


served = {}  # user -> (variant, queryID, objectIDs)
searches = {1: 0, 2: 0}
tracked = {1: 0, 2: 0}
for user in USERS:
    result = recommend_for(user, clickAnalytics=True)
    hits = [h.actual_instance.object_id for h in result.hits]
    assert result.ab_test_id == ab_id, (user, result.to_dict())
    assert result.ab_test_variant_id in (1, 2), (user, result.to_dict())
    assert re.fullmatch(r"[0-9a-f]{32}", result.query_id or ""), (user, result.to_dict())
    assert hits, (user, result.to_dict())
    served[user] = (result.ab_test_variant_id, result.query_id, hits)
    searches[result.ab_test_variant_id] += 1
    tracked[result.ab_test_variant_id] += 1
check(True, f"{len(USERS)} users served, every answer with abTestID {ab_id}, an "
      "abTestVariantID and a 32-hex queryID")
users = {v: [u for u in USERS if served[u][0] == v] for v in (1, 2)}
check(len(users[1]) + len(users[2]) == len(USERS) and min(len(users[1]), len(users[2])) >= 70,
      "the users split about 50/50", {v: len(u) for v, u in users.items()})
check(len({q for _, q, _ in served.values()}) == len(USERS), "every queryID differs")

# The variants answer differently: variant 1 (personalization off) gives every user the same
# order; variant 2 re-ranks by each user's brand.
orders = {v: {tuple(served[u][2]) for u in users[v]} for v in (1, 2)}
check(len(orders[1]) == 1, "variant 1: one order for every user", orders[1])
check(len(orders[2]) >= 3, "variant 2: orders by the users' brands", len(orders[2]))
for user in users[2][:10]:
    liked = BRANDS[int(user[1:]) % 3]
    top = next(p for p in products if p["objectID"] == served[user][2][0])
    assert top["brand"] == liked, (user, liked, served[user][2])
check(True, "variant 2: each user's first hit is of the brand they bought")

# Sticky: asked again (without clickAnalytics: no queryID), the same variant.
for user in USERS[:20]:
    result = recommend_for(user)
    assert result.ab_test_variant_id == served[user][0], (user, result.to_dict())
    assert result.query_id is None, (user, result.to_dict())
    searches[served[user][0]] += 1
check(True, "20 users asked again get the same variant, and no queryID without clickAnalytics")

# The rerank route (Penchant's own, through the client's custom_post) assigns the same variant.
for user in USERS[:10]:
    answer = search.custom_post(path=f"1/indexes/{INDEX}/rerank", body={
        "userToken": user, "hits": products, "clickAnalytics": True})
    assert answer.get("abTestID") == ab_id, (user, answer)
    assert answer.get("abTestVariantID") == served[user][0], (user, served[user][0], answer)
    assert re.fullmatch(r"[0-9a-f]{32}", answer.get("queryID", "")), (user, answer)
    searches[served[user][0]] += 1
    tracked[served[user][0]] += 1
check(True, "rerank through custom_post answers each user's variant too")

# --- Events ----------------------------------------------------------------------------------
# Variant 2's users convert more often (50% against 15%), drawn from a seeded random; every
# converting user clicked first, at position 1.
rng = random.Random(7)
rates = {1: 0.15, 2: 0.5}
converted = {
    user for user in USERS if rng.random() < rates[served[user][0]]
}
events = []
for user in sorted(converted):
    variant, query_id, hits = served[user]
    events.append({"eventType": "click", "eventName": "Clicked", "index": INDEX,
                   "userToken": user, "objectIDs": [hits[0]], "positions": [1],
                   "queryID": query_id})
    events.append({"eventType": "conversion", "eventName": "Purchased", "index": INDEX,
                   "userToken": user, "objectIDs": [hits[0]], "queryID": query_id})
for k in range(0, len(events), 100):
    response = insights.push_events(insights_events={"events": events[k:k + 100]})
    assert response.status == 200, response
expected = {v: len([u for u in converted if served[u][0] == v]) for v in (1, 2)}
check(expected[2] > 2 * expected[1], "variant 2's users converted more often", expected)


def counts():
    test = abtesting.get_ab_test(id=ab_id)
    return test, [v.to_dict() for v in test.variants]


# Counts are saved every 5 s: poll up to 15 s.
deadline = time.time() + 15
while True:
    test, shown = counts()
    if [v["conversionCount"] for v in shown] == [expected[1], expected[2]]:
        break
    assert time.time() < deadline, ("conversions not counted", expected, shown)
    time.sleep(0.5)
check(True, "get_ab_test counts each variant's conversions", expected)
check([v["clickCount"] for v in shown] == [expected[1], expected[2]],
      "get_ab_test counts each variant's clicks", [v["clickCount"] for v in shown])
check([v.get("averageClickPosition") for v in shown] == [1, 1], "average click position 1",
      [v.get("averageClickPosition") for v in shown])
check(shown[1]["conversionCount"] > shown[0]["conversionCount"],
      "variant 2's conversionCount is larger",
      [v["conversionCount"] for v in shown])
check([v["userCount"] for v in shown] == [len(users[1]), len(users[2])],
      "userCount per variant = the users served in it", [v["userCount"] for v in shown])
check(sum(v["userCount"] for v in shown) == len(USERS), "the users sum to the users served")
check([v.get("convertedUserCount") for v in shown] == [expected[1], expected[2]],
      "convertedUserCount per variant", [v.get("convertedUserCount") for v in shown])
check([v.get("trackedSearchCount") for v in shown] == [tracked[1], tracked[2]],
      "trackedSearchCount = the searches with clickAnalytics",
      ([v.get("trackedSearchCount") for v in shown], tracked))
check([v["searchCount"] for v in shown] == [searches[1], searches[2]],
      "searchCount = every search", ([v["searchCount"] for v in shown], searches))
rates_shown = [v.get("conversionRate") for v in shown]
check(all(abs(rates_shown[i] - expected[i + 1] / tracked[i + 1]) < 1e-9 for i in (0, 1)),
      "conversionRate = conversions / tracked searches", rates_shown)
check(test.conversion_significance is not None and test.conversion_significance > 0.95,
      "conversionSignificance > 0.95", test.conversion_significance)
check(test.click_significance is not None and test.click_significance > 0.95,
      "clickSignificance > 0.95", test.click_significance)
check(test.status == "active", "still active")

# --- Stop ------------------------------------------------------------------------------------
stopped = abtesting.stop_ab_test(id=ab_id)
check(stopped.ab_test_id == ab_id and stopped.index == INDEX, "stop_ab_test answers the test",
      stopped.to_dict())
test, before_stop = counts()
significance = test.conversion_significance
check(test.status == "stopped", "get_ab_test: status stopped", test.status)
check(test.stopped_at is not None, "get_ab_test: stoppedAt set", test.stopped_at)
expect_error(400, lambda: abtesting.stop_ab_test(id=ab_id), "stopping it again is refused")
result = recommend_for(USERS[0], clickAnalytics=True)
check(result.ab_test_id is None and result.ab_test_variant_id is None,
      "a stopped test no longer routes users", result.to_dict().get("abTestID"))

# Conversions after the stop, with the test's queryIDs, are not counted.
late = [
    {"eventType": "conversion", "eventName": "Purchased", "index": INDEX, "userToken": user,
     "objectIDs": [served[user][2][1]], "queryID": served[user][1]}
    for user in USERS[:50]
]
check(insights.push_events(insights_events={"events": late}).status == 200,
      "50 conversions sent after the stop")
time.sleep(6)
test, after_stop = counts()
for key in ("conversionCount", "clickCount", "userCount", "convertedUserCount"):
    check([v.get(key) for v in after_stop] == [v.get(key) for v in before_stop],
          f"after the stop, {key} unchanged", [v.get(key) for v in after_stop])
check(test.conversion_significance == significance, "after the stop, the significance unchanged",
      test.conversion_significance)

# A stopped test no longer holds the index: a new one may start, and be stopped.
second = abtesting.add_ab_tests(
    add_ab_tests_request={"name": "second", "variants": variants, "endAt": end_at}
)
check(second.ab_test_id > ab_id, "a new test on the index after the stop", second.to_dict())
listed = abtesting.list_ab_tests()
check([t.ab_test_id for t in listed.abtests] == [second.ab_test_id, ab_id],
      "list_ab_tests: newest first", [t.ab_test_id for t in listed.abtests])
abtesting.stop_ab_test(id=second.ab_test_id)

# --- Delete ----------------------------------------------------------------------------------
deleted = abtesting.delete_ab_test(id=ab_id)
check(deleted.ab_test_id == ab_id and deleted.index == INDEX, "delete_ab_test answers the test",
      deleted.to_dict())
expect_error(404, lambda: abtesting.get_ab_test(id=ab_id), "get_ab_test after the delete")
expect_error(404, lambda: abtesting.stop_ab_test(id=ab_id), "stop_ab_test after the delete")
listed = abtesting.list_ab_tests()
check([t.ab_test_id for t in listed.abtests] == [second.ab_test_id],
      "list_ab_tests no longer lists it")
abtesting.delete_ab_test(id=second.ab_test_id)
check(not abtesting.list_ab_tests().abtests, "no tests left")

print("abtests: ok")
