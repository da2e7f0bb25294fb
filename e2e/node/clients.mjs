// Algolia's JavaScript client v5 (`algoliasearch`), unchanged but for its hosts, against a
// Penchant server: every call of the search client Penchant answers, and every call it refuses
// (with a 4xx whose message names what to use instead), then the Insights, Personalization and
// Recommend clients. Arguments: host port appID adminAPIKey.
import { algoliasearch } from "algoliasearch";

const [host, port, appId, apiKey] = process.argv.slice(2);
// The search client takes custom hosts; the per-API clients do not inherit them (each gets its
// own), and the personalization client needs a region even with custom hosts.
const hosts = [{ url: `${host}:${port}`, accept: "readWrite", protocol: "http" }];
const client = algoliasearch(appId, apiKey, { hosts });
const insights = client.initInsights({ options: { hosts } });
const personalization = client.initPersonalization({ region: "us", options: { hosts } });
const recommend = client.initRecommend({ options: { hosts } });

const P = "surface_products";
const show = (v) => JSON.stringify(v);
// Equal as JSON values: objects compared whatever their key order.
const canonical = (v) =>
  Array.isArray(v)
    ? v.map(canonical)
    : v && typeof v === "object"
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]))
      : v;
const same = (a, b) => show(canonical(a)) === show(canonical(b));
const ids = (hits) => hits.map((h) => h.objectID).sort();
function check(ok, what) {
  if (!ok) throw new Error(what);
}

// The error the client raised for an HTTP answer. A 5xx never gets here as such: the client
// retries it as an unreachable host and throws a RetryError without the server's message.
function apiError(label, e) {
  if (e?.name === "RetryError") {
    const last = e.stackTrace?.at(-1)?.response;
    throw new Error(
      `${label}: Penchant answered ${last?.status} ${last?.content}; the client treats a 5xx as an ` +
        `unreachable host and throws "Unreachable hosts", so a refusal must be a 4xx for its ` +
        `message to reach the caller`,
    );
  }
  if (e?.name !== "ApiError" && e?.name !== "DetailedApiError") throw e;
  return e;
}

// A call Penchant must refuse: `status` (a number or "4xx") and a message with every word.
async function refused(label, call, { status, words = [] }) {
  let error;
  try {
    await call();
  } catch (e) {
    error = apiError(label, e);
  }
  check(error, `${label}: expected a refusal, but the call succeeded`);
  const okStatus = status === "4xx" ? error.status >= 400 && error.status < 500 : error.status === status;
  check(okStatus, `${label}: status ${error.status}, expected ${status} (${error.message})`);
  check(error.message, `${label}: a refusal without a message`);
  for (const w of words) {
    const found = w instanceof RegExp ? w.test(error.message) : error.message.includes(w);
    check(found, `${label}: the message "${error.message}" does not name ${w}`);
  }
  const headers = error.stackTrace?.at(-1)?.response?.headers ?? {};
  check(headers["x-request-id"], `${label}: the error response has no x-request-id header`);
  return error;
}

async function browseAll(indexName, browseParams) {
  const hits = [];
  await client.browseObjects({ indexName, browseParams, aggregator: (r) => hits.push(...r.hits) });
  return hits;
}

// An index does not exist until something is written to it.
check(!(await client.indexExists({ indexName: P })), `${P} exists before anything was written`);
await refused("getSettings of an index that does not exist", () => client.getSettings({ indexName: P }), {
  status: 404,
  words: ["Index does not exist"],
});

// Records, then settings: defaults first, then merged.
const catalog = [
  { objectID: "iphone", brand: "Apple", category: "Phones", price: 999 },
  { objectID: "galaxy", brand: "Samsung", category: "Phones", price: 899 },
  { objectID: "airpods", brand: "Apple", category: "Audio", price: 199 },
];
await client.saveObjects({ indexName: P, objects: catalog, waitForTasks: true });
check(await client.indexExists({ indexName: P }), `${P} does not exist after saveObjects`);
let settings = await client.getSettings({ indexName: P });
check(same(settings.attributesForFaceting, []), `default settings: ${show(settings)}`);

const facets = ["brand", "searchable(category)"];
let task = await client.setSettings({ indexName: P, indexSettings: { attributesForFaceting: facets } });
check(Number.isInteger(task.taskID) && typeof task.updatedAt === "string", `setSettings: ${show(task)}`);
await client.waitForTask({ indexName: P, taskID: task.taskID });
task = await client.setSettings({ indexName: P, indexSettings: { customRanking: ["desc(price)"] } });
await client.waitForTask({ indexName: P, taskID: task.taskID });
settings = await client.getSettings({ indexName: P });
check(
  same(settings.attributesForFaceting, facets) && same(settings.customRanking, ["desc(price)"]),
  `settings were not merged: ${show(settings)}`,
);
await refused(
  "setSettings with an unknown modifier",
  () => client.setSettings({ indexName: P, indexSettings: { attributesForFaceting: ["sorted(brand)"] } }),
  { status: 400, words: [/attributesForFaceting|sorted\(brand\)/] },
);
const notAString = { attributesForFaceting: [1] };
await refused("setSettings with a number", () => client.setSettings({ indexName: P, indexSettings: notAString }), {
  status: 400,
});
check(
  same((await client.getSettings({ indexName: P })).attributesForFaceting, facets),
  "a refused setSettings changed the settings",
);
// Settings are not a record (getObject of "settings" is the settings route, GET
// /1/indexes/{index}/settings; getObjects and browse tell).
const asRecord = await client.getObjects({ requests: [{ indexName: P, objectID: "settings" }] });
check(asRecord.results[0] === null, `the settings were stored as a record: ${show(asRecord)}`);

// getObjects: in request order, null for a missing record, attributesToRetrieve honoured.
const { results } = await client.getObjects({
  requests: [
    { indexName: P, objectID: "iphone", attributesToRetrieve: ["brand"] },
    { indexName: P, objectID: "nope" },
    { indexName: P, objectID: "galaxy" },
  ],
});
check(
  results.length === 3 &&
    same(results[0], { objectID: "iphone", brand: "Apple" }) &&
    results[1] === null &&
    results[2].price === 899,
  `getObjects: ${show(results)}`,
);

// saveObject without an objectID: 201, the objectID generated.
const savedInfo = await client.saveObjectWithHTTPInfo({
  indexName: P,
  body: { brand: "Fairphone", category: "Phones", price: 599 },
});
const saved = savedInfo.data;
check(savedInfo.status === 201, `saveObject answered ${savedInfo.status}`);
check(typeof saved.objectID === "string" && saved.objectID.length > 0, `saveObject: ${show(saved)}`);
check(Number.isInteger(saved.taskID) && typeof saved.createdAt === "string", `saveObject: ${show(saved)}`);
await client.waitForTask({ indexName: P, taskID: saved.taskID });
check(
  (await client.getObject({ indexName: P, objectID: saved.objectID })).brand === "Fairphone",
  "the saved object is not there",
);

// browse: a page and its cursor, the browseObjects loop, filters, GET, and no query.
const page = await client.browse({ indexName: P, browseParams: { hitsPerPage: 2 } });
check(page.hits.length === 2 && typeof page.cursor === "string", `browse page: ${show(page)}`);
const everything = ids(await browseAll(P, { hitsPerPage: 2 }));
check(same(everything, ["airpods", "galaxy", "iphone", saved.objectID].sort()), `browseObjects: ${everything}`);
const apple = ids(await browseAll(P, { filters: "brand:Apple AND price > 100" }));
check(same(apple, ["airpods", "iphone"]), `browseObjects with filters: ${apple}`);
const viaGet = await client.customGet({ path: `1/indexes/${P}/browse`, parameters: { filters: "brand:Samsung" } });
check(same(ids(viaGet.hits), ["galaxy"]) && viaGet.cursor === undefined, `GET browse: ${show(viaGet)}`);
await refused("browse with a query", () => client.browse({ indexName: P, browseParams: { query: "phone" } }), {
  status: 400,
  words: ["Penchant does not search"],
});

// Copy (everything, or some scopes), move, clear, delete.
const C = "surface_copy";
const S = "surface_settings_only";
const M = "surface_moved";
let op = await client.operationIndex({ indexName: P, operationIndexParams: { operation: "copy", destination: C } });
check(Number.isInteger(op.taskID) && typeof op.updatedAt === "string", `operationIndex: ${show(op)}`);
await client.waitForTask({ indexName: P, taskID: op.taskID });
check(same(ids(await browseAll(C)), everything), "copy: the records differ");
check(same((await client.getSettings({ indexName: C })).attributesForFaceting, facets), "copy: the settings differ");

op = await client.operationIndex({
  indexName: P,
  operationIndexParams: { operation: "copy", destination: S, scope: ["settings"] },
});
await client.waitForTask({ indexName: P, taskID: op.taskID });
check(await client.indexExists({ indexName: S }), "copy of the settings: no destination index");
check((await browseAll(S)).length === 0, "copy of the settings copied records");
check(
  same((await client.getSettings({ indexName: S })).attributesForFaceting, facets),
  "copy of the settings: not copied",
);
op = await client.operationIndex({
  indexName: P,
  operationIndexParams: { operation: "copy", destination: S, scope: ["rules", "synonyms"] },
});
await client.waitForTask({ indexName: P, taskID: op.taskID });
check(
  same((await client.getSettings({ indexName: S })).attributesForFaceting, facets),
  "a rules/synonyms copy changed the settings",
);

op = await client.operationIndex({ indexName: C, operationIndexParams: { operation: "move", destination: M } });
await client.waitForTask({ indexName: C, taskID: op.taskID });
check(!(await client.indexExists({ indexName: C })), "move: the source still exists");
check(same(ids(await browseAll(M)), everything), "move: the records differ");

task = await client.clearObjects({ indexName: M });
check(Number.isInteger(task.taskID) && typeof task.updatedAt === "string", `clearObjects: ${show(task)}`);
await client.waitForTask({ indexName: M, taskID: task.taskID });
check((await browseAll(M)).length === 0, "clearObjects left records");
check(await client.indexExists({ indexName: M }), "clearObjects deleted the index");
check(
  same((await client.getSettings({ indexName: M })).attributesForFaceting, facets),
  "clearObjects dropped the settings",
);

const deleted = await client.deleteIndex({ indexName: M });
check(Number.isInteger(deleted.taskID) && typeof deleted.deletedAt === "string", `deleteIndex: ${show(deleted)}`);
await client.waitForTask({ indexName: M, taskID: deleted.taskID });
check(!(await client.indexExists({ indexName: M })), "deleteIndex: the index still exists");
await client.deleteIndex({ indexName: S });

// replaceAllObjects: copy (settings, rules, synonyms) to a temporary index, batches there,
// copy again, move back; every task waited for on the temporary index.
const fresh = [
  { objectID: "iphone", brand: "Apple", category: "Phones", price: 949 },
  { objectID: "galaxy", brand: "Samsung", category: "Phones", price: 899 },
  { objectID: "airpods", brand: "Apple", category: "Audio", price: 179 },
  { objectID: "pixel", brand: "Google", category: "Phones", price: 599 },
];
const replaced = await client.replaceAllObjects({ indexName: P, objects: fresh, batchSize: 2 });
check(replaced.batchResponses.length === 2, `replaceAllObjects: ${show(replaced)}`);
check(same(ids(await browseAll(P)), ids(fresh)), "replaceAllObjects: the records were not replaced");
check((await client.getObject({ indexName: P, objectID: "iphone" })).price === 949, "replaceAllObjects: old record");
check(
  same((await client.getSettings({ indexName: P })).attributesForFaceting, facets),
  "replaceAllObjects dropped the settings",
);
// Into an index that does not exist yet (a first import): Algolia copies a missing index as an
// empty one.
const I = "surface_imported";
await client.replaceAllObjects({ indexName: I, objects: fresh });
check(same(ids(await browseAll(I)), ids(fresh)), "replaceAllObjects into a new index");

// Tasks: a made-up task ID is not found.
await refused("getTask of a made-up task", () => client.getTask({ indexName: P, taskID: 12345 }), {
  status: 404,
  words: ["Task does not exist"],
});
await refused("waitForTask of a made-up task", () => client.waitForTask({ indexName: P, taskID: 12345 }), {
  status: 404,
});

// Penchant does not search: a 4xx naming what to use instead.
const noSearch = { status: "4xx", words: ["Penchant does not search", "/rerank", "optionalFilters"] };
await refused(
  "searchSingleIndex",
  () => client.searchSingleIndex({ indexName: P, searchParams: { query: "phone" } }),
  noSearch,
);
await refused("search", () => client.search({ requests: [{ indexName: P, query: "phone" }] }), noSearch);
await refused(
  "searchForFacetValues",
  () =>
    client.searchForFacetValues({
      indexName: P,
      facetName: "category",
      searchForFacetValuesRequest: { facetQuery: "Pho" },
    }),
  noSearch,
);
// No rules, no synonyms.
const noRules = { status: "4xx", words: [/rule/i] };
const noSynonyms = { status: "4xx", words: [/synonym/i] };
await refused("getRule", () => client.getRule({ indexName: P, objectID: "r1" }), noRules);
await refused(
  "saveRule",
  () =>
    client.saveRule({
      indexName: P,
      objectID: "r1",
      rule: { objectID: "r1", consequence: { params: { filters: "brand:Apple" } } },
    }),
  noRules,
);
await refused("searchRules", () => client.searchRules({ indexName: P, searchRulesParams: { query: "" } }), noRules);
await refused("searchSynonyms", () => client.searchSynonyms({ indexName: P }), noSynonyms);
await refused(
  "saveSynonym",
  () =>
    client.saveSynonym({
      indexName: P,
      objectID: "s1",
      synonymHit: { objectID: "s1", type: "synonym", synonyms: ["phone", "mobile"] },
    }),
  noSynonyms,
);
// Any other unknown route: a 404 with a message.
await refused("an unknown route", () => client.customGet({ path: "1/surface/unknown" }), { status: 404 });

// API keys: any Algolia ACL; the admin key is not listed.
const acl = ["browse", "listIndexes", "settings"];
const { key } = await client.addApiKey({ acl, description: "surface e2e" });
const got = await client.getApiKey({ key });
check(
  same([...got.acl].sort(), acl) && got.description === "surface e2e" && Number.isInteger(got.createdAt),
  `getApiKey: ${show(got)}`,
);
const { keys } = await client.listApiKeys();
check(
  keys.some((k) => k.description === "surface e2e" && same([...k.acl].sort(), acl)),
  `listApiKeys: ${show(keys)}`,
);
check(
  keys.every((k) => typeof k.value === "string" && Number.isInteger(k.createdAt) && Array.isArray(k.acl)),
  `listApiKeys: ${show(keys)}`,
);
check(
  keys.every((k) => !k.acl.includes("admin") && !apiKey.startsWith(k.value.replace(/…$/, ""))),
  `the admin key is listed: ${show(keys)}`,
);
await client.deleteApiKey({ key });
await refused("getApiKey of a deleted key", () => client.getApiKey({ key }), {
  status: 404,
  words: ["Key does not exist"],
});

// A gzip-compressed write: the client compresses POST/PUT bodies over 750 bytes when asked.
const gz = algoliasearch(appId, apiKey, { hosts, compression: "gzip" });
const sent = [];
const requester = gz.transporter.requester;
const send = requester.send;
requester.send = (request) => {
  sent.push(request);
  return send.call(requester, request);
};
const G = "surface_bulk";
const bulk = Array.from({ length: 1200 }, (_, i) => ({
  objectID: `bulk-${i}`,
  brand: i % 2 ? "Apple" : "Samsung",
  rank: i,
}));
await gz.saveObjects({ indexName: G, objects: bulk, waitForTasks: true });
const batches = sent.filter((r) => r.url.includes(`/1/indexes/${G}/batch`));
check(
  batches.length === 2 && batches.every((r) => r.headers["content-encoding"] === "gzip"),
  "the batches were not gzip-compressed",
);
const pages = [];
await client.browseObjects({ indexName: G, aggregator: (r) => pages.push(r.hits.length) });
check(same(pages, [1000, 200]), `browseObjects of 1200 records: pages of ${pages}`);

// Every response has an x-request-id header, the request's own when it sent one.
const plain = await client.getSettingsWithHTTPInfo({ indexName: P });
check(plain.headers["x-request-id"], `no x-request-id: ${show(plain.headers)}`);
const mine = await client.getSettingsWithHTTPInfo({ indexName: P }, { headers: { "x-request-id": "surface-js-1" } });
check(mine.headers["x-request-id"] === "surface-js-1", `x-request-id not echoed: ${show(mine.headers)}`);

// Records one at a time.
task = await client.partialUpdateObject({ indexName: G, objectID: "bulk-1", attributesToUpdate: { rank: 0 } });
await client.waitForTask({ indexName: G, taskID: task.taskID });
check((await client.getObject({ indexName: G, objectID: "bulk-1" })).rank === 0, "partialUpdateObject");
task = await client.deleteObject({ indexName: G, objectID: "bulk-0" });
await client.waitForTask({ indexName: G, taskID: task.taskID });
await refused("getObject of a deleted record", () => client.getObject({ indexName: G, objectID: "bulk-0" }), {
  status: 404,
  words: ["ObjectID does not exist"],
});
task = await client.addOrUpdateObject({ indexName: G, objectID: "bulk-2", body: { brand: "Nokia", rank: 2 } });
await client.waitForTask({ indexName: G, taskID: task.taskID });
check((await client.getObject({ indexName: G, objectID: "bulk-2" })).brand === "Nokia", "addOrUpdateObject");
await client.partialUpdateObjects({ indexName: G, objects: [{ objectID: "bulk-3", rank: -3 }], waitForTasks: true });
check((await client.getObject({ indexName: G, objectID: "bulk-3" })).rank === -3, "partialUpdateObjects");
await client.deleteObjects({ indexName: G, objectIDs: ["bulk-4", "bulk-5"], waitForTasks: true });
const left = await client.getObjects({
  requests: ["bulk-4", "bulk-5", "bulk-6"].map((objectID) => ({ indexName: G, objectID })),
});
check(left.results[0] === null && left.results[1] === null && left.results[2] !== null, "deleteObjects");

// listIndices: every field the clients read; deleted and moved indexes gone, no temporary one.
const { items, nbPages } = await client.listIndices();
const byName = Object.fromEntries(items.map((i) => [i.name, i]));
check(same(Object.keys(byName).sort(), [G, I, P].sort()), `listIndices: ${show(items)}`);
check(nbPages === 1 && byName[P].entries === 4 && byName[G].entries === 1197, `listIndices: ${show(items)}`);
for (const i of items) {
  const ints = ["entries", "dataSize", "fileSize", "lastBuildTimeS", "numberOfPendingTasks"];
  check(typeof i.createdAt === "string" && typeof i.updatedAt === "string", `listIndices dates: ${show(i)}`);
  check(ints.every((f) => Number.isInteger(i[f])) && typeof i.pendingTask === "boolean", `listIndices: ${show(i)}`);
}

// Insights, Personalization and Recommend, each with its own hosts.
const strategy = {
  eventsScoring: [
    { eventName: "Product Viewed", eventType: "view", score: 10 },
    { eventName: "Product Purchased", eventType: "conversion", score: 50 },
  ],
  facetsScoring: [{ facetName: "brand", score: 100 }],
  personalizationImpact: 50,
};
await personalization.setPersonalizationStrategy(strategy);
check((await personalization.getPersonalizationStrategy()).personalizationImpact === 50, "getPersonalizationStrategy");
const pushed = await insights.pushEvents({
  events: [
    { eventType: "view", eventName: "Product Viewed", index: P, userToken: "alice", objectIDs: ["iphone"] },
    { eventType: "conversion", eventName: "Product Purchased", index: P, userToken: "alice", objectIDs: ["pixel"] },
  ],
});
check(pushed.status === 200, `pushEvents: ${show(pushed)}`);
// Bob's purchases make the galaxy the most bought, then pixel and iphone (sent before any
// Recommend answer: trending is cached for the strategy's TTL).
const bought = (objectIDs) => ({ eventType: "conversion", eventName: "Product Purchased", index: P, userToken: "bob", objectIDs });
await insights.pushEvents({ events: [bought(["galaxy"]), bought(["galaxy", "iphone"])] });
const profile = await personalization.getUserTokenProfile({ userToken: "alice" });
check(profile.scores.brand.Google === 20 && profile.scores.brand.Apple > 0, `profile: ${show(profile)}`);

// What to use instead of search: re-rank another engine's hits, or give it optionalFilters.
const reranked = await client.customPost({
  path: `1/indexes/${P}/rerank`,
  body: {
    userToken: "alice",
    hits: [{ objectID: "galaxy" }, { objectID: "iphone" }, { objectID: "pixel" }],
    personalizationImpact: 100,
  },
});
const order = reranked.hits.map((h) => h.objectID);
check(same(order, ["pixel", "iphone", "galaxy"]), `rerank: ${show(reranked)}`);
const filters = await client.customGet({ path: "1/profiles/personalization/alice/optionalFilters" });
check(filters.optionalFilters[0] === "brand:Google<score=20>", `optionalFilters: ${show(filters)}`);

const recommended = await recommend.getRecommendations({
  requests: [{ indexName: P, model: "trending-items", threshold: 0, maxRecommendations: 2 }],
});
check(recommended.results[0].hits[0].objectID === "galaxy", `getRecommendations: ${show(recommended)}`);

// Recommend's queryParameters: optionalFilters boost, hitsPerPage cuts, the profile re-ranks
// (its scores in _rankingInfo), and a parameter Recommend does not take is refused by name.
const ask = (queryParameters) =>
  recommend.getRecommendations({ requests: [{ indexName: P, model: "trending-items", threshold: 0, queryParameters }] });
const boosted = await ask({ optionalFilters: ["brand:Apple"], hitsPerPage: 1 });
check(same(boosted.results[0].hits.map((h) => h.objectID), ["iphone"]), `optionalFilters: ${show(boosted)}`);
const personal = await ask({ userToken: "alice", enablePersonalization: true, personalizationImpact: 100, getRankingInfo: true });
const [first, second] = personal.results[0].hits;
check(first.objectID === "pixel" && first._rankingInfo.personalization.filtersScore === 20, `personalized: ${show(personal)}`);
check(second.objectID === "iphone" && second._rankingInfo.personalization.filtersScore < 20, `personalized: ${show(personal)}`);
await refused("getRecommendations with page", () => ask({ page: 2 }), { status: 400, words: ["page"] });

const gone = await personalization.deleteUserProfile({ userToken: "alice" });
check(gone.userToken === "alice" && typeof gone.deletedUntil === "string", `deleteUserProfile: ${show(gone)}`);
const deletedProfile = () => personalization.getUserTokenProfile({ userToken: "alice" });
await refused("getUserTokenProfile after deleteUserProfile", deletedProfile, { status: 404 });
await insights.deleteUserToken({ userToken: "alice" });

// A key's maxQueriesPerIPPerHour: past it, a 429 with Retry-After and the x-ratelimit-* headers.
const { key: limited } = await client.addApiKey({ acl: ["search"], maxQueriesPerIPPerHour: 2 });
// The client waits Retry-After (to the end of the hour) and tries again, up to
// maxRateLimitRetries times (3); 0 makes it fail at once.
const limitedClient = algoliasearch(appId, limited, { hosts, maxRateLimitRetries: 0 });
const missing = () => limitedClient.getObject({ indexName: P, objectID: "nope" });
await refused("getObject under the limit", missing, { status: 404 });
await refused("getObject under the limit", missing, { status: 404 });
const tooMany = await refused("getObject past the limit", missing, { status: 429, words: ["Too many requests"] });
const limitHeaders = tooMany.stackTrace.at(-1).response.headers;
check(
  limitHeaders["x-ratelimit-limit"] === "2" && limitHeaders["x-ratelimit-remaining"] === "0" && Number(limitHeaders["retry-after"]) > 0,
  `rate-limit headers: ${show(limitHeaders)}`,
);
await client.deleteApiKey({ key: limited });

console.log("algoliasearch v5 e2e: ok");
