"""A newcomer through the official Python clients: events before the catalog, the strategy and
nothing else set up; after the schedules ran (the Rust test moves the server's clock), every
model answers, built, fresh and personalized.

Phases (the last argument): `setup` sends the events, then the catalog and the strategy;
`check` asks every model.
"""

import sys

from penchant_client import (
    args,
    insights_client,
    personalization_client,
    recommend_client,
    search_client,
)

host, port, app_id, admin_key = args()
phase = sys.argv[5]
search = search_client(host, port, app_id, admin_key)
insights = insights_client(host, port, app_id, admin_key)
personalization = personalization_client(host, port, app_id, admin_key)
recommend = recommend_client(host, port, app_id, admin_key)

TENTS = [f"t{i}" for i in range(6)]
PHONES = [f"p{i}" for i in range(6)]


def bought(user, items):
    return {"eventType": "conversion", "eventName": "Purchased", "index": "products",
            "userToken": user, "objectIDs": items}


if phase == "setup":
    # Campers buy two tents at once, phone buyers two phones: events before any record.
    events = []
    for i in range(10):
        events.append(bought(f"camper{i}", [TENTS[i % 6], TENTS[(i + 1) % 6]]))
        events.append(bought(f"caller{i}", [PHONES[i % 6], PHONES[(i + 1) % 6]]))
    assert insights.push_events(insights_events={"events": events}).status == 200
    # The catalog arrives later, as a shop's sync does.
    records = [{"objectID": t, "brand": "Nordic", "category": "Tents"} for t in TENTS]
    records += [{"objectID": p, "brand": "Apple" if int(p[1]) % 2 == 0 else "Samsung",
                 "category": "Phones"} for p in PHONES]
    for r in search.save_objects(index_name="products", objects=records):
        search.wait_for_task(index_name="products", task_id=r.task_id)
    personalization.set_personalization_strategy({
        "eventsScoring": [{"eventName": "Purchased", "eventType": "conversion", "score": 50}],
        "facetsScoring": [{"facetName": "brand", "score": 100},
                          {"facetName": "category", "score": 50}],
        "personalizationImpact": 100,
    })
    print("setup: ok")
    sys.exit(0)

assert phase == "check", phase

# The events sent before their records count: camper0's profile says Nordic.
profile = personalization.get_user_token_profile(user_token="camper0")
assert profile.scores["brand"]["Nordic"] > 0, profile


def ask(request):
    response = recommend.get_recommendations(get_recommendations_params={"requests": [request]})
    result = response.results[0].to_dict()
    return [h.actual_instance for h in response.results[0].hits], result


def built(result, model):
    """Answered by the model asked, from what a build or training made (not a fallback)."""
    assert result["answeredBy"] == model and result["fallback"] is False, result
    assert isinstance(result["modelBuiltAt"], int), result


hits, result = ask({"indexName": "products", "model": "bought-together", "threshold": 0,
                    "objectID": "t0"})
built(result, "bought-together")
assert {h.object_id for h in hits} <= set(TENTS) and hits, hits

hits, result = ask({"indexName": "products", "model": "related-products", "threshold": 0,
                    "objectID": "p0"})
built(result, "related-products")
assert hits[0].object_id in PHONES, hits

hits, result = ask({"indexName": "products", "model": "trending-items", "threshold": 0})
assert len(hits) == 12 and result["fallback"] is False, result

hits, _ = ask({"indexName": "products", "model": "trending-facets", "threshold": 0,
               "facetName": "brand"})
assert {h.facet_value for h in hits} == {"Nordic", "Apple", "Samsung"}, hits

# recommended-for-you with no queue defined: the user's ALS vector (the scheduled training),
# never what they bought, re-ranked by their profile.
hits, result = ask({"indexName": "products", "model": "recommended-for-you", "threshold": 0,
                    "maxRecommendations": 3,
                    "queryParameters": {"userToken": "camper0", "getRankingInfo": True}})
built(result, "recommended-for-you")
assert result["source"] != "trending", result
ids = [h.object_id for h in hits]
assert ids and all(i in TENTS for i in ids) and not {"t0", "t1"} & set(ids), ids
info = hits[0].to_dict()["_rankingInfo"]["personalization"]
assert info["filtersScore"] > 0, info

# Any model personalizes on request: trending for a phone buyer starts with phones.
hits, _ = ask({"indexName": "products", "model": "trending-items", "threshold": 0,
               "maxRecommendations": 4,
               "queryParameters": {"userToken": "caller0", "enablePersonalization": True}})
assert [h.to_dict()["category"] for h in hits[:2]] == ["Phones", "Phones"], hits

print("check: ok")
