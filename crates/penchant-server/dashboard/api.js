// The API client: credentials kept in sessionStorage, every call to the same origin with
// Algolia's credential headers; an error answer becomes an ApiError with the API's message.

const STORAGE_KEY = 'penchant.dashboard.credentials';

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.body = body;
  }
}

export function credentials() {
  try {
    const raw = sessionStorage.getItem(STORAGE_KEY);
    const parsed = raw ? JSON.parse(raw) : null;
    return parsed && parsed.appID && parsed.apiKey ? parsed : null;
  } catch {
    return null;
  }
}

export function saveCredentials(appID, apiKey) {
  sessionStorage.setItem(STORAGE_KEY, JSON.stringify({ appID, apiKey }));
}

export function clearCredentials() {
  sessionStorage.removeItem(STORAGE_KEY);
}

// A path segment, percent-encoded (user tokens may hold `/`, `+` and `=`).
export function seg(text) {
  return encodeURIComponent(String(text));
}

// Call the API. `creds` defaults to the signed-in ones. Resolves to the parsed JSON (or null
// for an empty answer); rejects with an ApiError carrying the API's status and message.
export async function api(method, path, body, creds = credentials()) {
  const headers = { Accept: 'application/json' };
  if (creds) {
    headers['X-Algolia-Application-Id'] = creds.appID;
    headers['X-Algolia-API-Key'] = creds.apiKey;
  }
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, `the server did not answer ${method} ${path}: ${e.message}`);
  }
  const text = await response.text();
  let json = null;
  if (text) {
    try {
      json = JSON.parse(text);
    } catch {
      json = null;
    }
  }
  if (!response.ok) {
    const message = (json && json.message) || text || response.statusText;
    throw new ApiError(response.status, message, json);
  }
  return json;
}

// The same, with a 404 answered as null ("none yet") instead of an error.
export async function apiOrNull(method, path, body) {
  try {
    return await api(method, path, body);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}
