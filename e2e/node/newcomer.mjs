// A newcomer's models through Algolia's JavaScript client v5, after the schedules ran (see
// e2e/python/newcomer.py, which set the shop up): built, not fallbacks, and personalized.
// Arguments: host port appID adminAPIKey.
import { algoliasearch } from "algoliasearch";

const [host, port, appId, apiKey] = process.argv.slice(2);
const hosts = [{ url: `${host}:${port}`, accept: "readWrite", protocol: "http" }];
const recommend = algoliasearch(appId, apiKey, { hosts }).initRecommend({ options: { hosts } });
const show = (v) => JSON.stringify(v);
function check(ok, what) {
  if (!ok) throw new Error(what);
}
const ask = async (request) =>
  (await recommend.getRecommendations({ requests: [{ indexName: "products", threshold: 0, ...request }] })).results[0];
const built = (result, model) =>
  check(
    result.answeredBy === model && result.fallback === false && Number.isInteger(result.modelBuiltAt),
    `${model}: ${show(result)}`,
  );

const together = await ask({ model: "bought-together", objectID: "t0" });
built(together, "bought-together");
check(together.hits.length > 0 && together.hits.every((h) => h.category === "Tents"), show(together));

const related = await ask({ model: "related-products", objectID: "p0" });
built(related, "related-products");
check(related.hits[0].category === "Phones", show(related));

const forYou = await ask({
  model: "recommended-for-you",
  maxRecommendations: 3,
  queryParameters: { userToken: "caller0", getRankingInfo: true },
});
built(forYou, "recommended-for-you");
const phones = forYou.hits.map((h) => h.objectID);
check(phones.length > 0 && phones.every((id) => id.startsWith("p")) && !phones.includes("p0"), show(forYou));
check(forYou.hits[0]._rankingInfo.personalization.filtersScore > 0, show(forYou));

const personal = await ask({
  model: "trending-items",
  maxRecommendations: 4,
  queryParameters: { userToken: "camper0", enablePersonalization: true },
});
check(personal.hits[0].category === "Tents" && personal.hits[1].category === "Tents", show(personal));
console.log("newcomer: ok");
