"""A learned ranker A/B tested through the official Python clients: users who keep to their own
kind of item, a ranker learned from their history, a test of the hand blend (queue for-you)
against the learned queue (for-you-learned) served by Recommend with clickAnalytics (each
answer logged as an impression), clicks and conversions sent with the answers' queryIDs and
counted per variant, then the ranker learned again from the logged impressions, its queues
rewritten. Penchant's own routes are plain HTTP. Every check prints what it checked."""

import random
import re
import time
from datetime import datetime, timedelta, timezone

from penchant_client import (abtesting_client, args, insights_client, penchant,
                             recommend_client, search_client)

host, port, app_id, admin_key = args()
search = search_client(host, port, app_id, admin_key)
insights = insights_client(host, port, app_id, admin_key)
recommend = recommend_client(host, port, app_id, admin_key)
abtesting = abtesting_client(host, port, app_id, admin_key)

INDEX = "products"
KINDS = 4
USERS = [f"u{n}" for n in range(160)]
rng = random.Random(45)


def check(condition, what, detail=None):
    """Assert `condition`; print what was checked."""
    assert condition, f"{what}: {detail!r}"
    print(f"ok: {what}" + ("" if detail is None else f" ({detail})"))


def call(method, path, body=None):
    """One of Penchant's own routes (no Algolia client has them)."""
    return penchant(host, port, app_id, admin_key, method, path, body)


def liked(user):
    """User u{n} keeps to kind k{n % 4}."""
    return f"k{int(user[1:]) % KINDS}"


def push(events):
    """Events to Insights, 1000 a batch."""
    for k in range(0, len(events), 1000):
        response = insights.push_events(insights_events={"events": events[k:k + 1000]})
        assert response.status == 200, response


def wait(path):
    """Poll a job's status (GET `path`) every 0.2 s, at most 120 s, until it no longer runs."""
    deadline = time.time() + 120
    while (status := call("GET", path))["state"] == "running":
        assert time.time() < deadline, (path, "still running after 120 s", status)
        time.sleep(0.2)
    return status


def train(ranker):
    """The ranker job with these settings, to its end; (its last status, the stored ranker)."""
    call("POST", "/1/ranker/train", {"indexName": INDEX, "ranker": ranker})
    status = wait("/1/ranker/train")
    return status, call("GET", f"/1/rankers/{INDEX}")


def serve(user, tracked=True):
    """recommended-for-you for `user`: (the result, its hits, the result as a dict with the
    fields Penchant adds, which the client keeps as extra fields: source, rankerVersion)."""
    params = {"userToken": user, **({"clickAnalytics": True} if tracked else {})}
    response = recommend.get_recommendations(get_recommendations_params={"requests": [{
        "indexName": INDEX, "model": "recommended-for-you", "threshold": 0,
        "maxRecommendations": 10, "queryParameters": params}]})
    result = response.results[0]
    return result, [h.actual_instance for h in result.hits], result.to_dict()


# The schedules off: no ALS training, build or ranker job of their own (a new ranker version)
# starts in the middle of the script, and no queue is refreshed behind its back.
call("PUT", "/1/schedules", {"trainEveryHours": 0, "foldInEveryMinutes": 0,
                             "buildEveryMinutes": 0, "rankEveryHours": 0,
                             "queueStaleAfterMinutes": 0})

# --- A catalog of 60 products in 4 kinds, and each user's history: 14 clicks on their kind ----
products = [{"objectID": f"p{i}", "kind": f"k{i % KINDS}"} for i in range(60)]
for r in search.save_objects(index_name=INDEX, objects=products):
    search.wait_for_task(index_name=INDEX, task_id=r.task_id)
start = int(time.time() * 1000) - 3_600_000
history = []
for n in range(len(USERS) * 14):
    user = USERS[n % len(USERS)]
    rank = min(rng.randrange(15), rng.randrange(15))  # the popular ones more often
    history.append({"eventType": "click", "eventName": "Product Clicked", "index": INDEX,
                    "userToken": user, "objectIDs": [f"p{rank * KINDS + int(user[1:]) % KINDS}"],
                    "timestamp": start + n * 1500})
push(history)
check(True, f"{len(history)} history clicks sent over the last hour, 14 per user")

# --- Queues: the hand blend, built for every user, and the learned queue -----------------------
call("PUT", "/1/queues/for-you",
     {"indexName": INDEX, "size": 20, "sources": [{"source": "trending"}]})
call("PUT", "/1/queues/for-you-learned",
     {"indexName": INDEX, "size": 20, "ranker": "learned", "sources": [{"source": "trending"}]})
call("POST", "/1/recommend/build")
built = wait("/1/recommend/build")
check(built["state"] == "done", "the build job wrote every user's queues", built)

# --- A first ranker, from history ------------------------------------------------------------
done, ranker = train({"examples": "history", "maxQueries": 160, "cuts": 2,
                      "params": {"trees": 30}})
check(done["state"] == "done" and done["queues"] == ["for-you-learned"]
      and done["users"] == len(USERS), "the ranker job wrote every user's learned queue", done)
learned = ranker["learned"]
check(learned.get("examples") == "history", "stored ranker: learned.examples = history",
      learned.get("examples"))
check(learned.get("impressions") == 0, "stored ranker: no impression with an outcome yet",
      learned.get("impressions"))
first = ranker["version"]
check(done.get("version") == first, "the job's version is the stored one", first)

result, hits, _ = serve("u0")
check(result.query_id and hits, "a tracked answer before the test: an impression, no click")
failed, ranker = train({"examples": "impressions", "cuts": 2, "params": {"trees": 30}})
check(failed["state"] == "failed", "examples impressions without an outcome: the job fails",
      failed)
check("no logged impression" in (failed.get("error") or ""), "its error says why",
      failed.get("error"))
check(ranker["version"] == first, "the stored ranker is still the first", ranker["version"])

# --- The A/B test: hand blend against learned ranker -----------------------------------------
end_at = (datetime.now(timezone.utc) + timedelta(days=14)).strftime("%Y-%m-%dT%H:%M:%SZ")
variants = [
    {"index": INDEX, "trafficPercentage": 50, "description": "hand blend",
     "customSearchParameters": {"queue": "for-you"}},
    {"index": INDEX, "trafficPercentage": 50, "description": "learned ranker",
     "customSearchParameters": {"queue": "for-you-learned"}},
]
created = abtesting.add_ab_tests(add_ab_tests_request={
    "name": "hand blend vs learned ranker", "variants": variants, "endAt": end_at})
ab_id = created.ab_test_id
check(ab_id >= 1 and created.index == INDEX, "add_ab_tests started the test", created.to_dict())

# --- Traffic: 2 rounds, every user served and clicking the first hit of their kind -----------
served = {}  # user -> variant
clicks, conversions = {1: 0, 2: 0}, {1: 0, 2: 0}
for round_ in (1, 2):
    events = []
    for n, user in enumerate(USERS):
        result, hits, shown = serve(user)
        variant = result.ab_test_variant_id
        assert result.ab_test_id == ab_id and variant in (1, 2), (user, shown)
        assert re.fullmatch(r"[0-9a-f]{32}", result.query_id or ""), (user, shown)
        assert served.setdefault(user, variant) == variant, (user, "changed variant", shown)
        assert hits, (user, shown)
        if variant == 2:
            assert shown.get("source") == "learned-queue", (user, shown)
            assert shown.get("rankerVersion") == first, (user, first, shown)
        else:
            assert shown.get("source") == "queue", (user, shown)
        mine = [i for i, h in enumerate(hits) if h.to_dict()["kind"] == liked(user)]
        if not mine:
            continue
        item = hits[mine[0]].object_id
        events.append({"eventType": "click", "eventName": "Product Clicked", "index": INDEX,
                       "userToken": user, "objectIDs": [item], "positions": [mine[0] + 1],
                       "queryID": result.query_id})
        clicks[variant] += 1
        if (n // 4) % 4 == 0:  # one user in four, every kind among them
            events.append({"eventType": "conversion", "eventName": "Product Purchased",
                           "index": INDEX, "userToken": user, "objectIDs": [item],
                           "queryID": result.query_id})
            conversions[variant] += 1
    push(events)
    check(True, f"round {round_}: {len(USERS)} users served, each with a queryID and a "
          "variant; variant 2 from the learned queue with the first ranker's version, variant "
          f"1 from the hand blend; clicks so far {clicks}, conversions {conversions}")
users = {v: [u for u in USERS if served[u] == v] for v in (1, 2)}
check(min(len(users[1]), len(users[2])) >= 40, "the users split between the variants",
      {v: len(u) for v, u in users.items()})
clicked = clicks[1] + clicks[2]  # impressions with an outcome: one click each at most
check(clicked >= 100, "at least 100 of the 320 impressions had a click", clicked)

# Counts are saved every 5 s: poll up to 30 s.
deadline = time.time() + 30
while True:
    shown = [v.to_dict() for v in abtesting.get_ab_test(id=ab_id).variants]
    if ([v["clickCount"] for v in shown] == [clicks[1], clicks[2]]
            and [v["conversionCount"] for v in shown] == [conversions[1], conversions[2]]):
        break
    assert time.time() < deadline, ("counts not saved", clicks, conversions, shown)
    time.sleep(0.5)
check(True, "get_ab_test counts each variant's clicks and conversions", (clicks, conversions))
check(clicks[1] > 0 and clicks[2] > 0, "both variants have clicks", clicks)
check([v["userCount"] for v in shown] == [len(users[1]), len(users[2])],
      "userCount per variant = its users", [v["userCount"] for v in shown])

# --- The ranker again: auto below minImpressions, auto, then from the impressions -----------
versions = [first]
for ranker_settings, examples in [
    ({"minImpressions": 100000, "cuts": 2, "params": {"trees": 30}}, "history"),
    ({"cuts": 2, "params": {"trees": 30}}, "impressions"),
    ({"examples": "impressions", "cuts": 2, "params": {"trees": 30}}, "impressions"),
]:
    done, ranker = train(ranker_settings)
    learned = ranker["learned"]
    check(done["state"] == "done" and done["queues"] == ["for-you-learned"],
          f"ranker {ranker_settings}: done, the learned queue written", done)
    check(learned.get("examples") == examples, f"  learned from {examples}",
          learned.get("examples"))
    check(learned.get("impressions") == clicked,
          "  learned.impressions = the impressions that had a click", learned.get("impressions"))
    check(ranker["version"] > versions[-1], "  a newer version", ranker["version"])
    versions.append(ranker["version"])
queries = learned["trainQueries"] + learned["validationQueries"]
check(queries == clicked, "from impressions: one training query per impression with a click",
      (learned["trainQueries"], learned["validationQueries"], clicked))
latest = versions[-1]

# --- The learned queues now answer with the impressions ranker's version --------------------
for user in users[2]:
    result, hits, shown = serve(user, tracked=False)
    assert result.ab_test_variant_id == 2 and shown.get("source") == "learned-queue", shown
    assert shown.get("rankerVersion") == latest, (user, latest, shown)
check(True, f"every variant-2 user is served the learned queue of version {latest}")
result, hits, shown = serve(users[1][0], tracked=False)
check(shown.get("source") == "queue" and shown.get("rankerVersion") is None,
      "a variant-1 user still gets the hand blend", shown.get("source"))

user = users[2][0]
result, hits, shown = serve(user, tracked=False)
kinds = [h.to_dict()["kind"] for h in hits[:5]]
check(kinds.count(liked(user)) >= 3,
      f"{user} (likes {liked(user)}): at least 3 of the learned queue's first 5 are of it",
      kinds)

# --- At request time: a second test, trending items in their own order vs the learned ranker --
abtesting.stop_ab_test(id=ab_id)
variants = [
    {"index": INDEX, "trafficPercentage": 50, "description": "trending order",
     "customSearchParameters": {"enablePersonalization": False}},
    {"index": INDEX, "trafficPercentage": 50, "description": "learned ranker at request time",
     "customSearchParameters": {"ranker": "learned"}},
]
created = abtesting.add_ab_tests(add_ab_tests_request={
    "name": "trending order vs learned ranker", "variants": variants, "endAt": end_at})
check(created.ab_test_id == ab_id + 1, "add_ab_tests started the request-time test",
      created.to_dict())
on_kind = {1: 0, 2: 0}
for user in USERS:
    response = recommend.get_recommendations(get_recommendations_params={"requests": [{
        "indexName": INDEX, "model": "trending-items", "threshold": 0,
        "maxRecommendations": 5, "queryParameters": {"userToken": user}}]})
    result = response.results[0]
    shown = result.to_dict()
    variant = result.ab_test_variant_id
    if variant == 2:
        assert shown.get("ranker") == "learned" and shown.get("rankerVersion") == latest, shown
    else:
        assert shown.get("ranker") is None and shown.get("rankerVersion") is None, shown
    kinds = [h.actual_instance.to_dict()["kind"] for h in result.hits]
    on_kind[variant] += kinds.count(liked(user))
check(True, "variant 2's trending items are ordered by the learned ranker (its version), "
      "variant 1's are not")
check(on_kind[2] > on_kind[1] * 1.5,
      "the learned ranker puts each user's kind in their top 5 far more often", on_kind)

print("ranker: ok")
