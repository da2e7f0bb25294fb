// search-insights (npm), unchanged, sending events to a Penchant server. Node's default
// requester mishandles a host with a port, so events go through a fetch-based requester that
// behaves like the browser's sendBeacon: a text/plain body, success only on status 200.
import { createInsightsClient } from "search-insights";

const [host, port, appId, apiKey] = process.argv.slice(2);
const base = `http://${host}:${port}`;
const sent = [];
const requestFn = async (url, data) => {
  sent.push(url);
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "text/plain;charset=UTF-8" },
    body: JSON.stringify(data),
  });
  return res.status === 200;
};
const aa = createInsightsClient(requestFn);
aa("init", { appId, apiKey, host: base, userToken: "carol" });

const ok = [
  await aa("viewedObjectIDs", { index: "products", eventName: "Product Viewed", objectIDs: ["iphone", "airpods"] }),
  await aa("clickedFilters", { index: "products", eventName: "Filter Clicked", filters: ["brand:Apple", "discount:10%"] }),
  await aa("convertedObjectIDs", { index: "products", eventName: "Product Purchased", objectIDs: ["pixel"] }),
];
if (!ok.every(Boolean)) throw new Error(`an event was refused: ${ok}`);
// Credentials travel in the query string, as search-insights sends them.
if (!sent.every((u) => u.includes("X-Algolia-Application-Id=") && u.includes("X-Algolia-API-Key="))) {
  throw new Error(`credentials not in the query string: ${sent}`);
}
// An invalid event is refused (a user token with a space).
const refused = await aa("viewedObjectIDs", { index: "products", eventName: "Product Viewed", objectIDs: ["x"], userToken: "not valid" });
if (refused) throw new Error("an invalid event was accepted");

// The events count at once in carol's profile.
const res = await fetch(`${base}/1/profiles/personalization/carol`, {
  headers: { "X-Algolia-Application-Id": appId, "X-Algolia-API-Key": apiKey },
});
const profile = await res.json();
if (res.status !== 200) throw new Error(`profile: ${res.status} ${JSON.stringify(profile)}`);
const brands = profile.scores.brand;
if (!(brands.Apple > 0 && brands.Google > 0)) throw new Error(`unexpected profile ${JSON.stringify(profile)}`);
if (profile.scores.discount?.["10%"] === undefined) throw new Error(`the filter was not decoded: ${JSON.stringify(profile)}`);
console.log("search-insights e2e: ok", JSON.stringify(profile.scores));
