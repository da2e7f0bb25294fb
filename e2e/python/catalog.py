"""Catalog and API keys through the official Python client (algoliasearch v4)."""

from penchant_client import args, search_client

host, port, app_id, admin_key = args()
client = search_client(host, port, app_id, admin_key)

# save_objects + wait_for_task, as a user indexes a catalog.
records = [
    {"objectID": "iphone", "brand": "Apple", "categories": {"lvl0": "Phones"}, "price": 999},
    {"objectID": "galaxy", "brand": "Samsung", "categories": {"lvl0": "Phones"}, "price": 899},
    {"objectID": "airpods", "brand": "Apple", "categories": {"lvl0": "Audio"}, "price": 199},
]
responses = client.save_objects(index_name="products", objects=records)
for response in responses:
    client.wait_for_task(index_name="products", task_id=response.task_id)
got = client.get_object(index_name="products", object_id="iphone")
assert got["brand"] == "Apple" and got["categories"]["lvl0"] == "Phones", got

# Partial update, then delete, each waited for.
r = client.partial_update_object(
    index_name="products", object_id="galaxy", attributes_to_update={"price": 799}
)
client.wait_for_task(index_name="products", task_id=r.task_id)
assert client.get_object(index_name="products", object_id="galaxy")["price"] == 799
r = client.delete_object(index_name="products", object_id="airpods")
client.wait_for_task(index_name="products", task_id=r.task_id)
try:
    client.get_object(index_name="products", object_id="airpods")
    raise AssertionError("airpods should be gone")
except Exception as e:  # the client raises RequestException with status 404
    assert "ObjectID does not exist" in str(e), e

# API keys: create, read, delete.
created = client.add_api_key(api_key={"acl": ["search"], "description": "e2e"})
key = client.get_api_key(key=created.key)
assert key.acl == ["search"] or [a.value for a in key.acl] == ["search"], key
assert key.description == "e2e", key
client.delete_api_key(key=created.key)
print("catalog e2e: ok")
