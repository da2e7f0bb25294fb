"""Events, strategy, profiles and deletion through the official Python clients."""

import time

from penchant_client import args, insights_client, personalization_client, search_client

host, port, app_id, admin_key = args()
search = search_client(host, port, app_id, admin_key)
insights = insights_client(host, port, app_id, admin_key)
personalization = personalization_client(host, port, app_id, admin_key)

# A catalog, so that item events resolve to facets.
responses = search.save_objects(
    index_name="products",
    objects=[
        {"objectID": "iphone", "brand": "Apple", "category": "Phones"},
        {"objectID": "pixel", "brand": "Google", "category": "Phones"},
        {"objectID": "airpods", "brand": "Apple", "category": "Audio"},
    ],
)
for r in responses:
    search.wait_for_task(index_name="products", task_id=r.task_id)

strategy = {
    "eventsScoring": [
        {"eventName": "Product Viewed", "eventType": "view", "score": 10},
        {"eventName": "Product Purchased", "eventType": "conversion", "score": 50},
    ],
    "facetsScoring": [
        {"facetName": "brand", "score": 100},
        {"facetName": "category", "score": 10},
    ],
    "personalizationImpact": 75,
}
set_response = personalization.set_personalization_strategy(strategy)
assert set_response.message, set_response
got = personalization.get_personalization_strategy()
assert got.personalization_impact == 75, got
assert [f.facet_name for f in got.facets_scoring] == ["brand", "category"], got

now = int(time.time() * 1000)
response = insights.push_events(
    insights_events={
        "events": [
            {"eventType": "view", "eventName": "Product Viewed", "index": "products",
             "userToken": "alice", "objectIDs": ["iphone", "airpods"], "timestamp": now - 5000},
            {"eventType": "conversion", "eventSubtype": "purchase",
             "eventName": "Product Purchased", "index": "products", "userToken": "alice",
             "objectIDs": ["pixel"], "objectData": [{"price": 599, "quantity": 1}],
             "value": 599, "currency": "USD", "timestamp": now - 1000},
            {"eventType": "click", "eventName": "Product Clicked", "index": "products",
             "userToken": "alice", "objectIDs": ["iphone"],
             "queryID": "0123456789abcdef0123456789abcdef", "positions": [3]},
        ]
    }
)
assert response.status == 200 and response.message == "OK", response

profile = personalization.get_user_token_profile(user_token="alice")
assert profile.user_token == "alice", profile
assert profile.last_event_at.endswith("Z"), profile
scores = profile.scores
# Google: 50*100 = 5000 (20); Apple: 2*10*100 = 2000 (8); Phones: 10*10 + 50*10 = 600 (2);
# Audio: 10*10 = 100 (round(0.4) -> at least 1).
assert scores == {
    "brand": {"Google": 20, "Apple": 8},
    "category": {"Phones": 2, "Audio": 1},
}, scores

deleted = personalization.delete_user_profile(user_token="alice")
assert deleted.user_token == "alice" and deleted.deleted_until.endswith("Z"), deleted
try:
    personalization.get_user_token_profile(user_token="alice")
    raise AssertionError("alice's profile should be gone")
except Exception as e:
    assert "not found" in str(e), e

insights.push_events(
    insights_events={"events": [{"eventType": "view", "eventName": "Product Viewed",
                                 "index": "products", "userToken": "bob",
                                 "objectIDs": ["pixel"]}]}
)
assert personalization.get_user_token_profile(user_token="bob").scores["brand"] == {"Google": 20}
insights.delete_user_token(user_token="bob")
try:
    personalization.get_user_token_profile(user_token="bob")
    raise AssertionError("bob should be gone")
except Exception as e:
    assert "not found" in str(e), e
print("personalization e2e: ok")
